"""The checks: an id, a one-line rule, the PROTOCOL.md rules it enforces, and a result.

A result is ``pass``, ``fail`` (with evidence: files, a trace excerpt, a
counterexample timeline) or ``inconclusive`` (the suite could not decide, and
says why).  ``skipped`` means the check does not apply: the manifest does not
play the role it needs (e.g. session checks without an adapter) or does not
promise the property (order without ``ordered = true``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import protocol

PASS, FAIL, INCONCLUSIVE, SKIPPED = "pass", "fail", "inconclusive", "skipped"
#: graded results (Autobahn|Testsuite's levels): a broken SHOULD is NON_STRICT (a pass, with the
#: rule and the evidence), a broken MAY (an optional feature absent) INFORMATIONAL
NON_STRICT, INFORMATIONAL = "non-strict", "informational"
_RANK = {FAIL: 3, INCONCLUSIVE: 2, NON_STRICT: 1, INFORMATIONAL: 1, PASS: 1, SKIPPED: 0}
#: an implementation's level in a profile
OK_LEVEL, NON_STRICT_LEVEL, FAILED_LEVEL = "OK", "NON-STRICT", "FAILED"
#: the status a broken rule of each level gets
_BROKEN = {protocol.MUST: FAIL, protocol.SHOULD: NON_STRICT, protocol.MAY: INFORMATIONAL}


@dataclass(frozen=True)
class Check:
    id: str
    role: str  # produce | consume | publish | subscribe | adapter | model
    rule: str
    #: the PROTOCOL.md rules it enforces; the first one's level is the check's level
    rules: tuple[str, ...]

    @property
    def ref(self) -> str:
        """The rules it enforces, with their levels (default profile; strict where it differs)."""
        table = protocol.rules()
        out = []
        for rid in self.rules:
            r = table.get(rid)
            if r is None:
                out.append(f"{rid} (not in PROTOCOL.md)")
            elif r.strict_level != r.level:
                out.append(f"{rid} ({r.level}; strict: {r.strict_level})")
            else:
                out.append(f"{rid} ({r.level})")
        return "PROTOCOL.md " + ", ".join(out)

    def level(self, profile: str = protocol.DEFAULT) -> str:
        return protocol.level(self.rules[:1], profile)


CHECKS: list[Check] = [
    # ---------------------------------------------------------------- producer
    Check("producer.exit-clean", "produce", "The producer exits with status 0 within the time limit.", ("M-1",)),
    Check("producer.enter-by-rename", "produce",
          "Every message enters target/ only by a rename from working/ of the same dropbox.", ("P-1", "S-1", "S-3")),
    Check("producer.closed-before-rename", "produce",
          "A message file is closed after writing in working/ before it is renamed into target/, and never "
          "written after (whether it was fsynced is not observable: P-7 is not checked).", ("P-3",)),
    Check("producer.no-direct-write", "produce", "Nothing is created or written directly in target/.",
          ("P-2", "S-5")),
    Check("producer.names-decode", "produce",
          "Names are unique, at most 255 bytes, and follow the name grammar (priority.id.class...).",
          ("N-1", "N-3", "N-4")),
    Check("producer.ids-in-send-order", "produce",
          "The names' order key (priority, then the id's numeric prefix) increases in send order, so a consumer "
          "delivers the messages FIFO; ids have the form <epochMillis><3-digit counter>-<digits>.", ("N-6", "N-5")),
    Check("producer.id-form", "produce",
          "Message ids have the form <epochMillis><3-digit counter>-<digits> (the form that carries the send "
          "time and gives FIFO order by construction).", ("N-5",)),
    Check("producer.bodies-complete", "produce",
          "target/ holds exactly the bodies that were asked for, byte for byte, one message each.", ("P-4",)),
    Check("producer.metadata", "produce", "Each message carries the JMSPriority that was asked for.",
          ("P-5", "N-2")),
    Check("producer.working-clean", "produce", "Nothing is left behind in working/ after a clean exit.",
          ("P-6",)),
    # ---------------------------------------------------------------- consumer
    Check("consumer.exit-clean", "consume", "The consumer exits cleanly within the time limit when target/ is drained.",
          ("M-1",)),
    Check("consumer.claims-by-rename", "consume",
          "A message leaves target/ only by a rename into processing/ (or expired/); nothing is copied "
          "into processing/ and nothing is deleted from target/.", ("C-1", "S-4", "S-5")),
    Check("consumer.claims-name-owner", "consume",
          "A claim names its owner: processing/<clientId>~<name>, so a recoverer can tell a dead consumer's "
          "messages from a live one's.", ("C-3", "N-9")),
    Check("consumer.acked-processed", "consume",
          "Every delivered message ends in processed/ (or is removed, if the manifest says ack_removes); "
          "nothing stays in processing/.", ("C-5",)),
    Check("consumer.delivers-all", "consume", "Every waiting message is delivered exactly once by a lone consumer.",
          ("C-4",)),
    Check("consumer.junk-tolerant", "consume",
          "Garbage names, empty files, dot-files, directories and symlinks in target/ neither crash nor "
          "block the consumer; a dot-file is an ordinary entry (it may be claimed, as 1.2 does), never lost.",
          ("C-7",)),
    Check("consumer.expired-not-delivered", "consume", "A message whose expiration has passed is never delivered.",
          ("C-6",)),
    Check("consumer.order", "consume",
          "Messages are delivered by priority (highest first), FIFO within a priority.", ("C-8", "N-6")),
    Check("consumer.late-priority", "consume",
          "A message of higher priority than the whole backlog, arriving while the consumer works, is among "
          "its next 3 claims once its listing is 1 s old: a listing may be kept for 1 s, not for the backlog.",
          ("C-9",)),
    Check("consumer.contention-exactly-once", "consume",
          "Competing with the reference's own consumers, no message is processed twice and none is lost.",
          ("C-2", "C-4")),
    Check("consumer.lost-race", "consume",
          "A consumer whose claim failed (ENOENT: another consumer won) does not process that message.", ("C-2",)),
    Check("consumer.kill9-recovery", "consume",
          "After kill -9 of the consumer, its in-flight messages come back to target/ and are delivered again; "
          "none is lost.", ("R-1",)),
    Check("consumer.kill9-redelivered", "consume",
          "The in-flight messages that came back after kill -9 carry their delivery count "
          "(JMSXDeliveryCountI=<n> in the name), so their next delivery is flagged redelivered.", ("R-2", "N-7")),
    # ---------------------------------------------------------------- publisher (topics)
    Check("publisher.exit-clean", "publish", "The publisher exits with status 0 within the time limit, at each run.",
          ("M-1",)),
    Check("publisher.every-subscription-once", "publish",
          "Every subscription of the topic existing at publish time receives every message exactly once, byte for byte.",
          ("T-1", "L-3")),
    Check("publisher.ancestors", "publish",
          "Subscriptions of ancestor topics receive every message (a.b.c reaches a.b and a); those of sibling and "
          "descendant topics receive none.", ("T-2",)),
    Check("publisher.late-subscription", "publish",
          "A subscription created after a publish receives none of the messages published before it existed.",
          ("T-3",)),
    Check("publisher.copies-by-rename", "publish",
          "Each copy enters its subscription's target/ (or the topic's .incoming/target/) only by a rename from the "
          "same dropbox's working/; nothing is written in target/.", ("T-4", "P-1", "P-2")),
    # ---------------------------------------------------------------- subscriber (topics)
    Check("subscriber.exit-clean", "subscribe", "The subscriber exits cleanly when its subscription's target/ is drained.",
          ("M-1",)),
    Check("subscriber.durable-keeps", "subscribe",
          "A durable subscription keeps the messages published while no subscriber ran; the subscriber delivers "
          "each exactly once.", ("U-2", "L-3")),
    Check("subscriber.own-subscription", "subscribe",
          "The subscriber consumes only its own subscription's directory; other subscriptions' copies are left alone.",
          ("U-1",)),
    Check("subscriber.claims-by-rename", "subscribe",
          "A message leaves the subscription's target/ only by a rename into processing/ (or expired/).",
          ("C-1", "U-1")),
    Check("subscriber.acked-processed", "subscribe",
          "Every delivered message ends in the subscription's processed/ (or is removed, with ack_removes).",
          ("C-5", "U-1")),
    Check("subscriber.kill9-recovery", "subscribe",
          "After kill -9 of the subscriber, its in-flight messages come back to the subscription's target/ and are "
          "delivered again; none is lost.", ("R-1", "U-1")),
    Check("subscriber.kill9-redelivered", "subscribe",
          "The in-flight messages that came back after kill -9 of the subscriber carry their delivery count, so "
          "their next delivery is flagged redelivered.", ("R-2", "N-7")),
    # ---------------------------------------------------------------- session (adapter)
    Check("session.auto-ack", "adapter", "AUTO_ACKNOWLEDGE: a message is acknowledged (processed/) when receive returns.",
          ("J-1",)),
    Check("session.client-ack-all", "adapter",
          "CLIENT_ACKNOWLEDGE: acknowledge() acknowledges every message the session consumed.", ("J-2",)),
    Check("session.client-ack-earlier", "adapter",
          "CLIENT_ACKNOWLEDGE: acknowledge() called on the first of three consumed messages acknowledges all three.",
          ("J-2",)),
    Check("session.listener-throws", "adapter",
          "A MessageListener that throws on its first message, in each acknowledge mode: the message is not lost "
          "(AUTO and DUPS_OK: delivered again, flagged redelivered, at once); the session keeps delivering.",
          ("J-10", "J-11")),
    Check("session.listener-serial", "adapter",
          "Two consumers of one AUTO_ACKNOWLEDGE session, each with a listener that works 100 ms per message: "
          "the session never runs two onMessage calls at once, and delivers every message.", ("J-12",)),
    Check("session.recover", "adapter",
          "recover() redelivers every unacknowledged message, oldest first, with JMSRedelivered and "
          "JMSXDeliveryCount >= 2.", ("J-3", "R-2")),
    Check("session.transacted-send", "adapter", "A transacted send is invisible until commit; rollback destroys it.",
          ("J-4",)),
    Check("session.transacted-receive", "adapter",
          "A transacted receive is acknowledged by commit; rollback redelivers it (redelivered).", ("J-5",)),
    Check("session.close-rolls-back", "adapter", "Closing a transacted session rolls back its open transaction.",
          ("J-6",)),
    Check("session.durable-subscription", "adapter",
          "A durable subscription keeps messages while inactive, allows one active consumer, and unsubscribe "
          "fails while active or for an unknown name.", ("J-7",)),
    Check("session.shared-subscription", "adapter",
          "Consumers of a shared subscription compete: each message goes to exactly one of them.", ("J-8",)),
    Check("session.selector", "adapter",
          "A selector delivers only matching messages and a bad selector is rejected when the consumer is created.",
          ("J-9",)),
    # ---------------------------------------------------------------- model
    Check("model.trace-complete", "model",
          "The watcher saw every event: no inotify queue overflow, no difference at the final rescan.", ("M-2",)),
    Check("model.replay", "model",
          "Every recorded trace replays against the table of legal moves: no illegal move, no rename replacing a "
          "name, no message leaving its dropbox, no delete of a message by a producer or consumer, a recovery "
          "takes only a dead consumer's claims, delivery counts in names exact.  A helper's illegal move is "
          "named, never charged.  An alias claim never goes back to target/ under its alias name.",
          ("S-1", "S-2", "S-3", "S-4", "N-9", "N-11", "R-3", "R-4", "T-5")),
    Check("model.tlc", "model", "Small traces are accepted by TLC trace validation against the TLA+ model "
          "(spec/Dropbox.tla), the formal form of the same moves.", ("S-1", "S-2", "R-4")),
]

BY_ID: dict[str, Check] = {c.id: c for c in CHECKS}


@dataclass
class Result:
    check: str
    status: str
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)  # files, trace, text, timeline, scenario

    def as_dict(self) -> dict:
        return {"check": self.check, "status": self.status, "summary": self.summary, "evidence": self.evidence}


def passed(check: str, summary: str, **evidence) -> Result:
    return Result(check, PASS, summary, evidence)


def failed(check: str, summary: str, **evidence) -> Result:
    return Result(check, FAIL, summary, evidence)


def inconclusive(check: str, summary: str, **evidence) -> Result:
    return Result(check, INCONCLUSIVE, summary, evidence)


def skipped(check: str, summary: str) -> Result:
    return Result(check, SKIPPED, summary)


def combine(check: str, results: list[Result]) -> Result:
    """One result from several scenarios' results of the same check: the worst wins."""
    if not results:
        return skipped(check, "not evaluated")
    worst = max(results, key=lambda r: _RANK[r.status])
    if len(results) == 1:
        return worst
    same = [r for r in results if r.status == worst.status]
    summary = worst.summary if len(same) == 1 else "; ".join(dict.fromkeys(r.summary for r in same))
    return Result(check, worst.status, summary, worst.evidence)


def grade(r: Result, profile: str = protocol.DEFAULT) -> Result:
    """The result at its rule's level in ``profile``: a failure of a SHOULD check is non-strict,
    of a MAY check informational; every other result is unchanged."""
    if r.status != FAIL or r.check not in BY_ID:
        return r
    chk = BY_ID[r.check]
    rule = r.evidence.get("rule") or chk.rules[0]  # a result may name the rule it breaks
    lv = protocol.level((rule,), profile)
    ev = dict(r.evidence, rule=rule, level=lv, profile=profile)
    return Result(r.check, _BROKEN[lv], r.summary, ev)


def level_of(graded: list[Result]) -> str:
    """An implementation's level from its graded results: FAILED if a MUST broke, NON-STRICT if
    a SHOULD broke, else OK (inconclusive results are reported beside it, never as passed)."""
    statuses = {r.status for r in graded}
    if FAIL in statuses:
        return FAILED_LEVEL
    if NON_STRICT in statuses:
        return NON_STRICT_LEVEL
    return OK_LEVEL


#: one line a newcomer can act on: what to change in an implementation that breaks the check
FIX: dict[str, str] = {
    "producer.exit-clean": "Exit with status 0 once every message is in target/ (and within the manifest's timeout).",
    "producer.enter-by-rename": "Write each message in working/, then rename(2) it into target/ of the same dropbox.",
    "producer.closed-before-rename": "Close the file (all bytes written) before the rename into target/; never "
                                     "write to it afterwards.",
    "producer.no-direct-write": "Never create or write a file in target/: write in working/ and rename.",
    "producer.names-decode": "Name files priority.id.class[...] (at most 255 bytes), a new id per message.",
    "producer.ids-in-send-order": "Make ids increase in send order: <epochMillis><3-digit counter>-<digits>, the "
                                  "counter counting the sends within one millisecond.",
    "producer.id-form": "Use ids of the form <epochMillis><3-digit counter>-<digits> (e.g. 1700000000123000-0123456789).",
    "producer.bodies-complete": "Write each body completely (loop on short writes) before the rename; one file per "
                                "message.",
    "producer.metadata": "Put the requested JMSPriority in the name's first field.",
    "producer.working-clean": "Rename (or remove, if not sent) every file you created in working/ before exiting.",
    "consumer.exit-clean": "Exit with status 0 once a listing of target/ yields nothing to claim.",
    "consumer.claims-by-rename": "Take a message only by rename(2) target/NAME -> processing/<clientId>~NAME; never "
                                 "copy it or delete it from target/.",
    "consumer.claims-name-owner": "Claim as processing/<clientId>~<name> (client id escaped), so recovery can tell "
                                  "whose claim it is.",
    "consumer.acked-processed": "Acknowledge by renaming processing/... -> processed/...; leave nothing in processing/.",
    "consumer.delivers-all": "Deliver every message of target/ once: keep listing until a listing yields no claim.",
    "consumer.junk-tolerant": "Skip (or dead-letter) entries you cannot read: directories, symlinks, empty files, "
                              "foreign names; keep going.",
    "consumer.expired-not-delivered": "Compare the name's expiration field with the clock before delivering; move "
                                      "expired messages to expired/.",
    "consumer.order": "Sort each listing by priority (highest first), then the id's numeric prefix, then the name.",
    "consumer.late-priority": "List target/ again at least every second (or after each claim), not once per backlog.",
    "consumer.contention-exactly-once": "Treat a failed claim rename (ENOENT) as a lost race: skip that message.",
    "consumer.lost-race": "When the claim rename fails with ENOENT, do not deliver that message; go on to the next.",
    "consumer.kill9-recovery": "Provide a recover command (or leave claims recoverable) that renames a dead "
                               "consumer's processing/ files back to target/.",
    "consumer.kill9-redelivered": "When returning a message to target/, write JMSXDeliveryCountI=<deliveries so far> "
                                  "in its properties field; when acknowledging, keep or raise that count.",
    "publisher.exit-clean": "Exit with status 0 once every copy is in its subscription's target/.",
    "publisher.every-subscription-once": "List .subscriptions/ of the topic at each publish and write one copy "
                                         "into each subscription.",
    "publisher.ancestors": "Also write copies into the subscriptions of every ancestor topic (a.b.c -> a.b, a), "
                           "and none into sibling or child topics.",
    "publisher.late-subscription": "Write copies only into the subscriptions that exist when you publish.",
    "publisher.copies-by-rename": "Write each copy in the subscription's working/ and rename it into its target/.",
    "subscriber.exit-clean": "Exit with status 0 once the subscription's target/ has nothing left to claim.",
    "subscriber.durable-keeps": "Consume .subscriptions/<enc(name)>.<enc(clientId)>/ completely, messages published "
                                "while you were away included.",
    "subscriber.own-subscription": "Consume only .subscriptions/<enc(name)>.<enc(clientId)>/; never another "
                                   "subscription's directory.",
    "subscriber.claims-by-rename": "Take a message only by rename(2) target/ -> processing/ in the subscription.",
    "subscriber.acked-processed": "Acknowledge by renaming processing/... -> processed/... in the subscription.",
    "subscriber.kill9-recovery": "Return a dead subscriber's processing/ files to the subscription's target/.",
    "subscriber.kill9-redelivered": "When returning a message to target/, write JMSXDeliveryCountI=<deliveries so far>.",
    "session.auto-ack": "In AUTO_ACKNOWLEDGE, acknowledge a message when receive() returns it.",
    "session.client-ack-all": "Make acknowledge() acknowledge every message the session has consumed.",
    "session.client-ack-earlier": "Make Message.acknowledge() on any consumed message acknowledge all the session "
                                  "consumed (JMS 1.1 §4.5.2), not only up to that message.",
    "session.listener-throws": "When onMessage throws: in AUTO/DUPS_OK put the message back (redelivered) at once; "
                               "in every mode go on delivering the session's next messages.",
    "session.listener-serial": "Deliver to all the listeners of a session from one thread, one onMessage at a "
                               "time (JMS 1.1 §4.4.14), not one thread per consumer.",
    "session.recover": "Make recover() put every unacknowledged message back, flagged redelivered, oldest first.",
    "session.transacted-send": "Keep transacted sends in working/ until commit; delete them on rollback.",
    "session.transacted-receive": "Acknowledge transacted receives at commit; return them (redelivered) on rollback.",
    "session.close-rolls-back": "Roll back the open transaction when a transacted session is closed.",
    "session.durable-subscription": "Keep a durable subscription's messages while inactive; allow one consumer; "
                                    "make unsubscribe fail while active or for an unknown name.",
    "session.shared-subscription": "Let the consumers of a shared subscription compete on its target/.",
    "session.selector": "Deliver only messages matching the selector; reject a bad selector at consumer creation.",
    "model.trace-complete": "Nothing to change in the implementation: rerun on a less loaded machine (events were lost).",
    "model.replay": "Move messages only by the renames of PROTOCOL.md S-1 (see the timeline); never rename onto an "
                    "existing name or delete a message.",
    "model.tlc": "Move messages only by the renames of PROTOCOL.md S-1; the timeline shows the first move the model "
                 "rejects.",
}
