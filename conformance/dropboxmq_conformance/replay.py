"""Model check of a recorded trace.

Fast replay (always): every file event under a dropbox's state directories is
turned into a move of ``dropboxmq.lifecycle`` and checked against its
``TRANSITIONS`` table with ``move_between`` -- the rules are never re-encoded
here.  A message is followed from path to path across renames; its state is
the directory holding it (``state_of_directory``).

* ``create`` of a file in a state directory: ABSENT -> that state (only
  CREATE into working/ is legal).
* ``rename``: state of the source directory -> state of the destination
  directory, inside one dropbox.
* ``delete``: state -> ABSENT (DISCARD from working/, PURGE from target/ and the
  terminal directories; with the manifest flag ``ack_removes`` a delete from
  processing/ is ACK then PURGE).
* ``close_write`` moves nothing.
* The delivery count in the names must follow ``trace_rules.COUNT_RULES`` (the
  family of correct ways to keep JMSRedelivered / JMSXDeliveryCount exact:
  stamped at claim, at ack, or at redelivery); a message whose history was not
  fully observed is not judged on its count.
* A rename onto a name that already holds a message replaces (loses) it: a
  violation, whatever the directories.
* With ``purge=False`` (the role under test is a producer or a consumer, not an
  operator) a delete of a message outside working/ is a violation; with
  ``ack_removes`` a delete from processing/ is still ACK then PURGE.

Every record may carry ``actor`` (who made the move, when the suite knows: its
own planting, racing or fallback recovery); a violation names its actor, so a
helper's illegal move is never charged to the implementation.

Deaths: the suite records every process it kills (a ``kill`` record with the
client id, ``dropboxmq_spec.trace``), and marks ``"recovery": true`` the moves a
recovery process made.  A recovery that takes a message out of
``processing/<client>~`` of a client the trace does not record as dead (a sweep
of a live holder) is a violation; a claim under a dead client's id restarts it.

Entries, messages or not: every entry directly in a state directory, dot-files
and directories included (1.2 claims both; a directory ends in error/).  Not
entries: anything under ``dropboxmq/`` (client registrations,
transaction logs) and files of a dropbox whose own directory is a dot-name
other than ``.incoming`` (a subscription being created or being deleted: a
subscription removed with its messages is the end of a destination, not a
message move).  Records the watcher synthesized from a scan (``synthetic``)
establish a state without judging how it was reached.

TLC validation (when the trace is small enough): :func:`tlc_job` writes a
one-dropbox excerpt of the trace, and :func:`run_tlc_jobs` hands a whole
batch of them to the spec's trace validation (``dropboxmq_spec.tlc_traces``) at
once, so that TLC's start-up is paid per group of traces, not per trace.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from dropboxmq_spec import tlc_traces
from dropboxmq.lifecycle import IllegalMove, Move, State, next_state
from dropboxmq.trace_rules import COUNT_RULES, count_ok, move_between
from dropboxmq_spec import grammar
from dropboxmq_spec.grammar import KILL, Loc, is_alias, leaf, locate, locate_log, owner_of

#: the ops of a trace record that concern a file
FILE_OPS = ("create", "close_write", "rename", "delete")
#: PROTOCOL.md S-1's Record move (T-5): a publisher's record copy, working/ -> processed/ of a
#: topic's .incoming/ (1.2 files one per publish); not in the reference's lifecycle table
RECORD = "Record"


def original_name(name: str) -> str:
    """The name as sent: a claimed name without its <client>~ prefix (N-9)."""
    return grammar.split_claimed(name)[1]


def message_id(name: str) -> str:
    """The JMSMessageID a (claimed) name stands for."""
    return grammar.message_id(name)


def count_of(name: str) -> int:
    """The delivery count a name carries (0: none), N-7."""
    return grammar.delivery_count(leaf(name))


def by_recovery(rec: dict) -> bool:
    """The suite knows a recovery process made this move (not the file's holder)."""
    return bool(rec.get("recovery"))


@dataclass(frozen=True)
class Death:
    clients: tuple[str, ...]  # the client ids the dead process ran under, as far as the suite knows


def death_of(rec: dict) -> Death | None:
    """The process death a ``kill`` record states (``client``: one id, or ``clients``: a list)."""
    if rec.get("op") != KILL:
        return None
    ids = rec.get("clients") or ([rec["client"]] if rec.get("client") else [])
    return Death(tuple(str(c) for c in ids))


def _is_record_copy(source: State, destination: State, path: str | None) -> bool:
    loc = locate(path)
    return (source is State.NOT_COMMITTED and destination is State.ACKNOWLEDGED and loc is not None
            and loc.box.endswith("/.incoming"))

__all__ = ["IMPLEMENTATION", "TLC_MAX_EVENTS", "Loc", "ReplayResult", "Step", "TlcJob", "TlcOutcome", "Track",
           "Violation", "actor_of", "locate", "log_boxes", "message_excerpt", "replay", "run_tlc_jobs",
           "timeline_until", "tlc_job", "trace_boxes"]

#: Traces with at most this many message events are handed to TLC.
TLC_MAX_EVENTS = 400

#: The actor of a record that does not name one: the implementation under test.
IMPLEMENTATION = "implementation"


def actor_of(rec: dict) -> str:
    """Who made the move a record shows (the suite tags its own helpers' moves)."""
    return rec.get("actor") or IMPLEMENTATION


@dataclass
class Step:
    seq: int
    t: float
    op: str
    state: str  # state after the step
    move: str | None  # lifecycle move, None for close_write / observed-only steps
    path: str | None
    note: str = ""
    actor: str = IMPLEMENTATION

    def as_dict(self) -> dict:
        return {"seq": self.seq, "t": self.t, "op": self.op, "state": self.state, "move": self.move,
                "path": self.path, "note": self.note, "actor": self.actor}


@dataclass
class Track:
    key: str
    name: str
    state: State
    steps: list[Step] = field(default_factory=list)
    partial: bool = False  # some of its history was not observed
    deliveries: int | None = None  # deliveries attempted so far (None: unknown, history not seen)


@dataclass
class Violation:
    seq: int
    record: dict
    reason: str
    message: str  # track key
    timeline: list[dict]
    actor: str = IMPLEMENTATION  # who made the illegal move

    @property
    def by_helper(self) -> bool:
        """The suite's own helper made it: not the implementation's fault."""
        return self.actor != IMPLEMENTATION

    def as_dict(self) -> dict:
        return {"seq": self.seq, "record": self.record, "reason": self.reason, "message": self.message,
                "timeline": self.timeline, "actor": self.actor}


@dataclass
class ReplayResult:
    events: int = 0  # message events judged
    violation: Violation | None = None
    tracks: dict[str, Track] = field(default_factory=dict)
    partial: int = 0
    overflowed: bool = False

    @property
    def ok(self) -> bool:
        return self.violation is None


def _life_of(tracks: Iterable[Track], mid: str) -> list[Step]:
    """The steps of every file that carried message ``mid`` (a copy is a new file, but the
    same message), in trace order; an ILLEGAL step after the others of its event."""
    steps = [st for tr in tracks if message_id(tr.name) == mid for st in tr.steps]
    steps.sort(key=lambda st: (st.seq, st.state == "ILLEGAL"))
    return steps


def replay(records: list[dict], *, ack_removes: bool = False, purge: bool = True) -> ReplayResult:
    """Replay ``records`` against lifecycle.TRANSITIONS and COUNT_RULES; stop at the first
    illegal move.  ``purge=False``: the implementation under test may not delete messages
    (only an operator purges)."""
    res = ReplayResult()
    at: dict[str, Track] = {}  # current path -> track
    dead: set[str] = set()  # client ids the trace records as killed (and not restarted since)
    counter = 0

    def new_track(name: str, state: State, deliveries: int | None = None) -> Track:
        nonlocal counter
        counter += 1
        tr = Track(f"m{counter}", original_name(name), state, deliveries=deliveries)
        res.tracks[tr.key] = tr
        return tr

    def step(rec: dict, state: str, move: str | None, path: str | None, note: str = "") -> Step:
        return Step(rec.get("seq", -1), rec.get("t", 0.0), rec["op"], state, move, path, note, actor_of(rec))

    def fail(rec: dict, tr: Track, reason: str, path: str | None) -> ReplayResult:
        tr.steps.append(step(rec, "ILLEGAL", None, path, reason))
        # The counterexample is the life of the *message*: every file that carried its id
        # (a copy is a new file, but the same message).
        steps = _life_of(res.tracks.values(), message_id(tr.name))
        res.violation = Violation(rec.get("seq", -1), rec, reason, tr.key, [s.as_dict() for s in steps],
                                  actor_of(rec))
        return res

    def apply(tr: Track, dest: State, rec: dict, path: str | None, src: str | None = None) -> bool:
        if _is_record_copy(tr.state, dest, path):  # T-5: legal, and no delivery: nothing to count
            tr.state = dest
            tr.steps.append(step(rec, dest.name, RECORD, path))
            return True
        try:
            if dest is State.ABSENT and tr.state is State.DELIVERED and ack_removes:
                mid = next_state(tr.state, Move.ACK)
                moves = [Move.ACK, move_between(mid, dest)]
            else:
                moves = [move_between(tr.state, dest)]
        except IllegalMove as exc:
            fail(rec, tr, f"{exc} ({tr.state.value or 'absent'} -> {dest.value or 'absent'})", path)
            return False
        if moves == [Move.PURGE] and not purge and actor_of(rec) == IMPLEMENTATION:  # (ack_removes: ACK+PURGE)
            fail(rec, tr, f"deleted a message from {tr.state.value}/: a producer or consumer never deletes "
                 "messages (Purge is an operator's action)", path)
            return False
        if src is not None and by_recovery(rec):
            holder = owner_of(locate(src))
            if holder is not None and holder not in dead:
                fail(rec, tr, f"a recovery took it from {holder!r}, which the trace does not record as dead "
                     "(no kill before it): only a dead holder's messages may be recovered", path)
                return False
        if moves[0] is Move.CLAIM:
            dead.discard(owner_of(locate(path)) or "")  # a claim under a dead client's id: restarted
            if tr.deliveries is not None:
                tr.deliveries += 1
        # an alias claim's name carries no count (N-10: the claim register holds it): not judged
        if src is not None and path is not None and tr.deliveries is not None and not (is_alias(src) or is_alias(path)):
            before, after = count_of(src), count_of(path)
            # R-4: a Redeliver that writes no count is legal (R-2, a SHOULD, is the kill9 checks' job)
            silent_redelivery = moves[0] is Move.REDELIVER and after == 0
            if silent_redelivery:
                # the name no longer says how often it was delivered: later counts are not judged
                tr.deliveries = None
            elif not count_ok(moves[0], before, after, tr.deliveries):
                fail(rec, tr, f"{moves[0].name} changed the name's JMSXDeliveryCount {before} -> {after} "
                     f"after {tr.deliveries} delivery(ies); it must leave {COUNT_RULES[moves[0]].value}", path)
                return False
        tr.state = dest
        tr.steps.append(step(rec, dest.name, "+".join(m.value for m in moves), path))
        return True

    tr: Track | None
    for rec in records:
        op = rec.get("op")
        if op == "overflow":
            res.overflowed = True
            continue
        death = death_of(rec)
        if death is not None:
            dead.update(death.clients)
            continue
        if rec.get("kind") == "dir" and op == "rename":  # a whole directory moved: carry its messages along
            src, dst = rec["src"] + "/", rec["dst"] + "/"
            for p in [p for p in at if p.startswith(src)]:
                tr = at.pop(p)
                np = dst + p[len(src):]
                if locate(np) is None:  # its destination was removed (trash dir)
                    tr.steps.append(step(rec, "ABSENT", None, np, "destination removed"))
                    tr.state = State.ABSENT
                else:
                    at[np] = tr
        synthetic = bool(rec.get("synthetic")) or rec.get("moved_in") or rec.get("moved_out")
        if op == "create":
            loc = locate(rec["path"])
            if loc is None:
                continue
            res.events += 1
            tr = new_track(loc.name, State.ABSENT, count_of(loc.name))
            at[rec["path"]] = tr
            if synthetic:
                tr.partial = True
                tr.deliveries = None if loc.state is not State.NEW else tr.deliveries
                tr.state = loc.state
                tr.steps.append(step(rec, loc.state.name, None, rec["path"],
                                     f"observed ({rec.get('synthetic') or 'moved in'})"))
                continue
            if not apply(tr, loc.state, rec, rec["path"]):
                return res
        elif op == "close_write":
            loc = locate(rec["path"])
            if loc is None or rec.get("unlinked"):
                continue
            tr = at.get(rec["path"])
            if tr is None:
                tr = new_track(loc.name, loc.state)
                tr.partial = True
                at[rec["path"]] = tr
            tr.steps.append(step(rec, tr.state.name, None, rec["path"], "closed after writing"))
        elif op == "rename":
            sloc, dloc = locate(rec["src"]), locate(rec["dst"])
            if sloc is None and dloc is None:
                continue
            res.events += 1
            tr = at.pop(rec["src"], None)
            if tr is None:
                known = dloc.state is State.NEW and sloc is None  # type: ignore[union-attr]
                tr = new_track((sloc or dloc).name, sloc.state if sloc else State.ABSENT,  # type: ignore[union-attr]
                               count_of((sloc or dloc).name) if known else None)  # type: ignore[union-attr]
                tr.partial = sloc is not None
            if dloc is None:  # renamed out of the message places (e.g. to a dot-name): gone
                if not apply(tr, State.ABSENT, rec, rec["dst"]):
                    return res
                continue
            gone = at.get(rec["dst"])
            if gone is not None and gone.state is not State.ABSENT:
                at[rec["dst"]] = tr
                fail(rec, tr, f"renamed onto {dloc.name!r}, which already held a message: the rename replaced "
                     f"(lost) it; a move never replaces an existing name", rec["dst"])
                return res
            at[rec["dst"]] = tr
            if sloc is not None and sloc.box != dloc.box:
                fail(rec, tr, f"moved between dropboxes ({sloc.box} -> {dloc.box}); a message never leaves "
                     "its dropbox", rec["dst"])
                return res
            if dloc.state is State.NEW and is_alias(dloc.name):
                fail(rec, tr, f"went back to target/ under the alias name {dloc.name!r}: an alias claim returns "
                     "under its claim register entry's name, or is dead-lettered (N-11); as #<inode> it is a "
                     "new message id", rec["dst"])
                return res
            if not apply(tr, dloc.state, rec, rec["dst"], rec["src"] if sloc is not None else None):
                return res
        elif op == "delete":
            loc = locate(rec["path"])
            if loc is None:
                continue
            res.events += 1
            tr = at.pop(rec["path"], None)
            if tr is None:
                tr = new_track(loc.name, loc.state)
                tr.partial = True
            if synthetic:
                tr.state = State.ABSENT
                tr.partial = True
                tr.steps.append(step(rec, "ABSENT", None, rec["path"], "vanished unobserved"))
                continue
            if not apply(tr, State.ABSENT, rec, rec["path"]):
                return res
    res.partial = sum(1 for t in res.tracks.values() if t.partial)
    return res


# ------------------------------------------------------------------ TLC


@dataclass
class TlcOutcome:
    status: str  # "pass" | "fail" | "inconclusive" | "too-large" | "empty" (nothing to validate)
    detail: str
    first_bad: dict | None = None  # the trace record no Dropbox step matches
    context: list[dict] = field(default_factory=list)  # the records around it
    timeline: list[dict] = field(default_factory=list)  # its message's states up to it
    unavailable: bool = False  # TLC could not decide (missing, crashed, timed out)
    rule: str | None = None  # the PROTOCOL.md rule the rejected event breaks, when it is known


@dataclass
class TlcJob:
    """A one-dropbox excerpt of a trace, written out for TLC."""

    key: Any
    path: Path
    records: list[dict]


def log_boxes(records: list[dict]) -> dict[str, set[str]]:
    """The dropboxes each transaction log (by name) is about: those its content names (the
    reference's JSON lines); a log whose content the watcher never read is about the dropbox
    of the message event next to its creation -- the working/ file created right after it
    (a send is logged before its file is created), else the claim right before it (a
    receive is logged right after its claim)."""
    boxes: dict[str, set[str]] = {}
    records = [rec for _, rec in tlc_traces.in_event_order(records)]   # a scan's late report, in its place
    for k, rec in enumerate(records):
        for path in (rec.get("path"), rec.get("src"), rec.get("dst")):
            log = locate_log(path)
            if log is None:
                continue
            named = boxes.setdefault(log[1], set())
            for line in str(rec.get("content") or "").splitlines():
                try:
                    named.add(str(json.loads(line)["box"]))
                except (ValueError, KeyError, TypeError):
                    pass
            if rec.get("op") == "create" and path == rec.get("path"):
                near = _box_next_to(records, k)
                if near is not None:
                    boxes.setdefault("?" + log[1], set()).add(near)
    for name in [n for n in boxes if not n.startswith("?")]:
        guess = boxes.pop("?" + name, set())
        if not boxes[name]:
            boxes[name] = guess
    return {n: b for n, b in boxes.items() if not n.startswith("?")}


def _box_next_to(records: list[dict], k: int) -> str | None:
    """The dropbox of the log created at record ``k``, from the message events next to it: the
    working/ file created after it while the log is still open (before the log's own next
    record), else its owner's claim right before it (``<client>~`` of the log's name) whose file
    has not moved since."""
    name = leaf(records[k]["path"])
    for rec in records[k + 1:]:
        if any(p and locate_log(p) is not None and leaf(p) == name for p in (rec.get("path"), rec.get("src"))):
            break   # the log's own next record: nothing was logged before it that the trace shows
        loc = locate(rec.get("path") if rec.get("op") != "rename" else rec.get("src"))
        if rec.get("kind") == "dir" or rec.get("op") not in FILE_OPS or loc is None:
            continue
        if rec["op"] == "create" and loc.state is State.NOT_COMMITTED:
            return loc.box
        break
    owner = name.partition("~")[0]
    moved: set[str] = set()
    for rec in reversed(records[:k]):
        if rec.get("op") == "rename":
            dst = locate(rec.get("dst"))
            if dst is not None and dst.state is State.DELIVERED and rec["dst"] not in moved \
                    and owner_of(dst) is not None and tlc_traces.same_client(owner, owner_of(dst) or ""):
                return dst.box
            moved.add(rec.get("src") or "")
    return None


def trace_boxes(records: list[dict]) -> list[str]:
    """Every dropbox a message file of the trace lies in, in the order they appear."""
    boxes: dict[str, None] = {}
    for rec in records:
        if rec.get("kind") == "dir":
            continue
        for path in (rec.get("path"), rec.get("src"), rec.get("dst")):
            loc = locate(path)
            if loc is not None:
                boxes.setdefault(loc.box)
    return list(boxes)


def message_excerpt(records: list[dict], box: str, purge: bool = False) -> list[dict]:
    """The agreed-format records of one dropbox's message files, of the transaction logs about
    it (``log_boxes``), and every death (for TLC).  A delete by the implementation is marked
    ``purge: False`` unless ``purge`` (only an operator purges)."""
    out = []
    logs = log_boxes(records)
    aliases: set[str] = set()  # alias claims (N-10) of messages kept: their moves are the message's
    for rec in records:
        if death_of(rec) is not None:  # a death concerns every dropbox
            out.append(_with_unnamed_owner(rec))
            continue
        if rec.get("kind") == "dir" or rec.get("op") not in FILE_OPS:
            continue
        log = locate_log(rec.get("path") or rec.get("src"))
        if log is not None:
            if box in logs.get(log[1], ()):
                out.append(rec)
            continue
        paths = [rec.get("path"), rec.get("src"), rec.get("dst")]
        locs = [locate(p) for p in paths if p]
        src = paths[1] or ""
        kept = src in aliases if is_alias(src) else _is_message(paths[0] or src)
        if any(loc is not None and loc.box == box for loc in locs) and kept:
            if is_alias(paths[2] or ""):
                aliases.add(paths[2])  # type: ignore[arg-type]
            if rec["op"] == "delete" and not purge and actor_of(rec) == IMPLEMENTATION:
                rec = dict(rec, purge=False)
            out.append(_with_unnamed_owner(rec))
    return out


#: the owner TLC's model is given for a bare claim (processing/NAME, which N-9 allows): the
#: model's consumers all have names, and the file system does not say whose claim it is
UNNAMED_OWNER = "unnamed-consumer"


def _with_unnamed_owner(rec: dict) -> dict:
    """``rec`` with every bare processing/ name read as UNNAMED_OWNER's claim, and a consumer's
    death as that owner's too (the process that made bare claims is the only one that can
    have made them, as far as the trace shows)."""
    death = death_of(rec)
    if death is not None:
        if rec.get("role") in ("consume", "subscribe") and UNNAMED_OWNER not in death.clients:
            return dict(rec, clients=[*death.clients, UNNAMED_OWNER])
        return rec
    changed = {}
    for key in ("path", "src", "dst"):
        loc = locate(rec.get(key))
        if loc is not None and loc.state is State.DELIVERED and owner_of(loc) is None:
            changed[key] = f"{loc.box}/{loc.state.value}/{grammar.claimed_name(UNNAMED_OWNER, loc.name)}"
    return dict(rec, **changed) if changed else rec


def _is_message(path: str) -> bool:
    """A 1.2-format message name: junk the suite itself planted (garbage names, symlinks,
    directories) is judged by the junk checks, not replayed in TLC, whose model has no junk."""
    name = original_name(leaf(path)) if "/processing/" in path or "/processed/" in path else leaf(path)
    return message_id(name) != "ID:" + name


def tlc_job(key: Any, records: list[dict], workdir: Path, box: str = "Q1/incoming",
            max_events: int = TLC_MAX_EVENTS) -> TlcJob | TlcOutcome:
    """The TLC job for one trace, or the outcome already known (nothing to validate, too large)."""
    excerpt = message_excerpt(records, box)
    events = sum(1 for rec in excerpt if death_of(rec) is None)
    if not events:
        return TlcOutcome("empty", f"no message events of {box} to validate")
    if events > max_events:
        return TlcOutcome("too-large", f"{events} message events, over the TLC limit of {max_events} "
                          "(the fast replay judged it)")
    path = Path(workdir) / f"tlc-{box.replace('/', '_')}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for rec in excerpt:
            f.write(json.dumps(rec) + "\n")
    return TlcJob(key, path, excerpt)


def run_tlc_jobs(jobs: list[TlcJob], parallel: int = 2, timeout: float = 300) -> dict[Any, TlcOutcome]:
    """One batch of TLC trace validations (tlc_traces.validate_traces) for all the jobs."""
    if not jobs:
        return {}
    try:
        verdicts = tlc_traces.validate_traces([j.path for j in jobs], jobs=parallel, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:  # no java, no tla2tools.jar, no spec/
        return {j.key: TlcOutcome("inconclusive", f"TLC could not run: {exc}", unavailable=True) for j in jobs}
    out: dict[Any, TlcOutcome] = {}
    for job, v in zip(jobs, verdicts, strict=True):
        if v.accepted:
            out[job.key] = TlcOutcome("pass", f"TLC accepted all {len(job.records)} message events")
        elif not v.decided:
            out[job.key] = TlcOutcome("inconclusive", v.reason, unavailable=True)
        else:
            bad = job.records[v.first_bad] if v.first_bad is not None and v.first_bad < len(job.records) else None
            where = f"event #{bad.get('seq')}" if bad else "the trace"
            k = v.first_bad or 0
            helper = None if bad is None or actor_of(bad) == IMPLEMENTATION else actor_of(bad)
            if helper:  # the suite's own move: named, never charged to the implementation
                where += f" (made by {helper}, the suite's own helper)"
            rule = None
            if bad is not None and _silent_redelivery(bad):  # the model stamps every Redeliver (strict R-2)
                rule = "R-2"
                where += " (a Redeliver without a delivery count in the name, PROTOCOL.md R-2)"
            # a message the watcher only found by scanning a directory it watched late: the moves
            # that brought it there are missing from the trace (and their queued events may still
            # follow the scan), so a rejection at it proves nothing
            late_scan = bad is not None and _scanned_before(job.records, k)
            if late_scan:
                where += " (found by a late scan: the moves before it are missing from the trace)"
            out[job.key] = TlcOutcome("inconclusive" if helper or late_scan else "fail",
                                      f"TLC rejected {where}: {v.reason}", bad,
                                      job.records[max(0, k - 4):k + 3],
                                      timeline_until(job.records, k, "REJECTED by TLC") if bad else [], rule=rule)
    return out


def _scanned_before(records: list[dict], k: int) -> bool:
    """Did the watcher report record ``k``'s message from a late scan, at ``k`` or before?"""
    mid = grammar.message_id(leaf(_path_of(records[k])))
    return any(rec.get("synthetic") == "scan" and grammar.message_id(leaf(_path_of(rec))) == mid
               for rec in records[:k + 1])


def _path_of(rec: dict) -> str:
    return rec.get("src") or rec.get("path") or ""


def _silent_redelivery(rec: dict) -> bool:
    """A processing/ -> target/ rename whose new name carries no delivery count."""
    if rec.get("op") != "rename":
        return False
    s, d = locate(rec.get("src")), locate(rec.get("dst"))
    return (s is not None and d is not None and s.state is State.DELIVERED and d.state is State.NEW
            and count_of(d.name) == 0)


def timeline_until(records: list[dict], k: int, verdict: str) -> list[dict]:
    """The states of the message that record ``k`` moves, as the replay saw them up to it,
    then ``verdict`` (a counterexample timeline for a rejection the replay did not find)."""
    bad = records[k]
    path = _path_of(bad)
    steps = _life_of(replay(records[:k]).tracks.values(), message_id(leaf(path)))
    steps.append(Step(bad.get("seq", -1), bad.get("t", 0.0), bad.get("op", "?"), verdict, None, path))
    return [st.as_dict() for st in steps]
