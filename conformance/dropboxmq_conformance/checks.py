"""The checks: an id, a one-line rule, the seed/spec rule it enforces, and a result.

A result is ``pass``, ``fail`` (with evidence: files, a trace excerpt, a
counterexample timeline) or ``inconclusive`` (the suite could not decide, and
says why).  ``skipped`` means the check does not apply: the manifest does not
play the role it needs (e.g. session checks without an adapter) or does not
promise the property (order without ``ordered = true``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PASS, FAIL, INCONCLUSIVE, SKIPPED = "pass", "fail", "inconclusive", "skipped"
_RANK = {FAIL: 3, INCONCLUSIVE: 2, PASS: 1, SKIPPED: 0}


@dataclass(frozen=True)
class Check:
    id: str
    role: str  # produce | consume | publish | subscribe | adapter | model
    rule: str
    ref: str


CHECKS: list[Check] = [
    # ---------------------------------------------------------------- producer
    Check("producer.exit-clean", "produce", "The producer exits with status 0 within the time limit.",
          "seed 000 'A Dropbox Message Producer'"),
    Check("producer.enter-by-rename", "produce",
          "Every message enters target/ only by a rename from working/ of the same dropbox.",
          "seed 000 (move, not copy); PROTOCOL.md §2 NEW 'entered by rename'; lifecycle SEND"),
    Check("producer.closed-before-rename", "produce",
          "A message file is closed after writing in working/ before it is renamed into target/.",
          "PROTOCOL.md §6 (write fully, fsync, then rename); spec Dropbox.tla File.ok / Send"),
    Check("producer.no-direct-write", "produce",
          "Nothing is created or written directly in target/.",
          "seed 000 NOTE (never create in target); lifecycle: ABSENT has only CREATE -> working"),
    Check("producer.names-decode", "produce",
          "Names are unique, at most 255 bytes, and parse with the 1.2 codec (priority.id.class...).",
          "PROTOCOL.md §3; codec.decode_name"),
    Check("producer.bodies-complete", "produce",
          "target/ holds exactly the bodies that were asked for, byte for byte, one message each.",
          "seed 000 (a consumer must never read an incomplete message)"),
    Check("producer.metadata", "produce", "Each message carries the JMSPriority that was asked for.",
          "PROTOCOL.md §3 (priority field)"),
    Check("producer.working-clean", "produce", "Nothing is left behind in working/ after a clean exit.",
          "PROTOCOL.md §2 NOT_COMMITTED; lifecycle SEND/DISCARD"),
    # ---------------------------------------------------------------- consumer
    Check("consumer.exit-clean", "consume", "The consumer exits cleanly within the time limit when target/ is drained.",
          "seed 000 'Dropbox Message Consumers'"),
    Check("consumer.claims-by-rename", "consume",
          "A message leaves target/ only by a rename into processing/ (or expired/); nothing is copied "
          "into processing/ and nothing is deleted from target/.",
          "seed 000 (only one consumer's move succeeds); PROTOCOL.md §2 CLAIM"),
    Check("consumer.acked-processed", "consume",
          "Every delivered message ends in processed/ (or is removed, if the manifest says ack_removes); "
          "nothing stays in processing/.",
          "seed 000; PROTOCOL.md §2 ACK"),
    Check("consumer.delivers-all", "consume", "Every waiting message is delivered exactly once by a lone consumer.",
          "JMS guaranteed delivery (seed 001); PROTOCOL.md §2"),
    Check("consumer.junk-tolerant", "consume",
          "Garbage names, empty files, dot-files, directories and symlinks in target/ neither crash nor "
          "block the consumer; a dot-file is an ordinary entry (it may be claimed, as 1.2 does), never lost.",
          "PROTOCOL.md §3 (foreign files consumable), §2 error/"),
    Check("consumer.expired-not-delivered", "consume", "A message whose expiration has passed is never delivered.",
          "PROTOCOL.md §4 (expired messages are never delivered); lifecycle EXPIRE"),
    Check("consumer.order", "consume",
          "Messages are delivered by priority (highest first), FIFO within a priority.",
          "PROTOCOL.md §4 priority; seed 002 (order, priority); codec.sort_key"),
    Check("consumer.late-priority", "consume",
          "A message of higher priority than the whole backlog, arriving while the consumer works, is among "
          "its next 3 claims once its listing is 1 s old: a listing may be kept for 1 s, not for the backlog.",
          "PROTOCOL.md §4 priority; seed 002 (priority); Settings.scan_interval (the reference: 0.25 s)"),
    Check("consumer.contention-exactly-once", "consume",
          "Competing with the reference's own consumers, no message is processed twice and none is lost.",
          "seed 000 (contention resolved by rename); PROTOCOL.md §2 CLAIM"),
    Check("consumer.lost-race", "consume",
          "A consumer whose claim failed (ENOENT: another consumer won) does not process that message.",
          "PROTOCOL.md §2 CLAIM ('ENOENT = lost the race, move on')"),
    Check("consumer.kill9-recovery", "consume",
          "After kill -9 of the consumer, its in-flight messages come back to target/ as redelivered and are "
          "delivered again; none is lost.",
          "PROTOCOL.md §4 (orphans in processing/), §3 JMSXDeliveryCount; lifecycle REDELIVER"),
    # ---------------------------------------------------------------- publisher (topics)
    Check("publisher.exit-clean", "publish", "The publisher exits with status 0 within the time limit, at each run.",
          "seed 000 'A Dropbox Message Producer' (topics)"),
    Check("publisher.every-subscription-once", "publish",
          "Every subscription of the topic existing at publish time receives every message exactly once, byte for byte.",
          "PROTOCOL.md §1 (a copy to every subscription); seed 001 ('delivers a copy of a message to each of the subscribers')"),
    Check("publisher.ancestors", "publish",
          "Subscriptions of ancestor topics receive every message (a.b.c reaches a.b and a); those of sibling and "
          "descendant topics receive none.",
          "PROTOCOL.md §1 (fan-out to every ancestor topic, 1.2's hierarchy)"),
    Check("publisher.late-subscription", "publish",
          "A subscription created after a publish receives none of the messages published before it existed.",
          "seed 001 (a copy goes to the subscribers known when the message is published); PROTOCOL.md §1"),
    Check("publisher.copies-by-rename", "publish",
          "Each copy enters its subscription's target/ (or the topic's .incoming/target/) only by a rename from the "
          "same dropbox's working/; nothing is written in target/.",
          "PROTOCOL.md §1-2 (a copy goes through working/ -> target/ exactly as a queue send); seed 000 (move, not copy)"),
    # ---------------------------------------------------------------- subscriber (topics)
    Check("subscriber.exit-clean", "subscribe", "The subscriber exits cleanly when its subscription's target/ is drained.",
          "seed 000 'Dropbox Message Consumers' (a subscription is consumed like a queue)"),
    Check("subscriber.durable-keeps", "subscribe",
          "A durable subscription keeps the messages published while no subscriber ran; the subscriber delivers "
          "each exactly once.",
          "seed 001 (a durable subscription's messages are held until the subscriber becomes available); seed 004"),
    Check("subscriber.own-subscription", "subscribe",
          "The subscriber consumes only its own subscription's directory; other subscriptions' copies are left alone.",
          "PROTOCOL.md §1 (each subscription is its own dropbox .subscriptions/<subId>/)"),
    Check("subscriber.claims-by-rename", "subscribe",
          "A message leaves the subscription's target/ only by a rename into processing/ (or expired/).",
          "seed 000; PROTOCOL.md §2 CLAIM (as for queues)"),
    Check("subscriber.acked-processed", "subscribe",
          "Every delivered message ends in the subscription's processed/ (or is removed, with ack_removes).",
          "seed 000; PROTOCOL.md §2 ACK (as for queues)"),
    Check("subscriber.kill9-recovery", "subscribe",
          "After kill -9 of the subscriber, its in-flight messages come back to the subscription's target/ as "
          "redelivered and are delivered again; none is lost.",
          "PROTOCOL.md §4 (orphans in processing/), §3 JMSXDeliveryCount; lifecycle REDELIVER (as for queues)"),
    # ---------------------------------------------------------------- session (adapter)
    Check("session.auto-ack", "adapter", "AUTO_ACKNOWLEDGE: a message is acknowledged (processed/) when receive returns.",
          "PROTOCOL.md §4 AUTO ack; JMS §8.7 (seed 001)"),
    Check("session.client-ack-all", "adapter",
          "CLIENT_ACKNOWLEDGE: acknowledge() acknowledges every message the session consumed.",
          "PROTOCOL.md §4 CLIENT ack"),
    Check("session.recover", "adapter",
          "recover() redelivers every unacknowledged message, oldest first, with JMSRedelivered and "
          "JMSXDeliveryCount >= 2.",
          "PROTOCOL.md §4 recover/rollback"),
    Check("session.transacted-send", "adapter",
          "A transacted send is invisible until commit; rollback destroys it.",
          "PROTOCOL.md §4-5 (transactions)"),
    Check("session.transacted-receive", "adapter",
          "A transacted receive is acknowledged by commit; rollback redelivers it (redelivered).",
          "PROTOCOL.md §4-5"),
    Check("session.close-rolls-back", "adapter", "Closing a transacted session rolls back its open transaction.",
          "PROTOCOL.md §4 (session close rolls back)"),
    Check("session.durable-subscription", "adapter",
          "A durable subscription keeps messages while inactive, allows one active consumer, and unsubscribe "
          "fails while active or for an unknown name.",
          "PROTOCOL.md §4; seed 004 (durable subscriptions)"),
    Check("session.shared-subscription", "adapter",
          "Consumers of a shared subscription compete: each message goes to exactly one of them.",
          "PROTOCOL.md §1, §4; seed 004 (shared subscriptions)"),
    Check("session.selector", "adapter",
          "A selector delivers only matching messages and a bad selector is rejected when the consumer is created.",
          "PROTOCOL.md §4 (selectors)"),
    # ---------------------------------------------------------------- model
    Check("model.trace-complete", "model",
          "The watcher saw every event: no inotify queue overflow, no difference at the final rescan.",
          "DESIGN.md principle 4 (a run whose trace overflowed is inconclusive)"),
    Check("model.replay", "model",
          "Every recorded trace replays against the lifecycle table (lifecycle.TRANSITIONS, COUNT_RULES): "
          "no illegal move, no rename replacing a name, no delete of a message by a producer or consumer, "
          "delivery counts in names exact.  A helper's illegal move is named, never charged.",
          "reference/dropboxmq/lifecycle.py TRANSITIONS; spec/Dropbox.tla actions"),
    Check("model.tlc", "model", "Small traces are accepted by TLC trace validation against spec/.",
          "spec/ trace validation (dropboxmq.spec_traces)"),
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
