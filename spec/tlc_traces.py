"""Trace validation with TLC: is a recorded file-system trace a behaviour of spec/Dropbox.tla?

``dropboxmq spec validate-trace TRACE.jsonl...`` renders each recorded trace
(read through ``dropboxmq_spec.trace``, the module the conformance replay reads it
with too) into a generated TLA+ module -- the template
``spec/traces/TraceCheck.tla.in`` -- that constrains Dropbox to follow it event
by event, runs TLC once for all traces sharing the model's constants, and
reports per trace the first event that no Dropbox step can match (see
spec/README.md for the trace format).  A process dies in the model only where
the trace records its death.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import tempfile
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable, Sequence

from dropboxmq.lifecycle import Move, State
from dropboxmq.trace_rules import ACTORS, PURGEABLE, Actor, count_ok, state_of_directory
from .tlc import EXIT_OK, run_tlc, spec_dir
from .grammar import is_alias, leaf, locate, locate_log, owner_of
from .trace import TraceError, by_recovery, count_of, death_of, load_trace, move_of, original_name

__all__ = ["DELIVERY_TIME_PROPERTY", "NO_MODEL_COUNT", "TRACE_TEMPLATE", "NameTimes", "RenderedTrace", "TraceError",
           "TraceVerdict", "in_event_order", "load_trace", "name_times", "render_trace", "same_client",
           "validate_traces", "write_trace_model"]


# ------------------------------------------------------------------ what a name says about time

#: the property that carries a message's delivery time (ms since the epoch; delivery delay)
DELIVERY_TIME_PROPERTY = "JMS_DropboxMQ_DeliveryTime"


@dataclasses.dataclass(frozen=True)
class NameTimes:
    """The two times a message name carries (ms since the epoch; 0: none)."""

    expiration: int = 0     # the 4th field: after it the message expires (0 or empty: never)
    delivery_time: int = 0  # the property JMS_DropboxMQ_DeliveryTime (L): not to be delivered before it


def _field(text: str) -> str:
    """One field of a name as 1.2 escapes it (Java's URLEncoder, ``.`` as ``%2E``), decoded."""
    return urllib.parse.unquote_plus(text)


def same_client(log_prefix: str, client_id: str) -> bool:
    """Does the first part of a log's name (``<enc(clientId)>~...``) name ``client_id``?"""
    return _field(log_prefix) == client_id


def _long(text: str) -> int:
    return int(text) if re.fullmatch(r"[+-]?[0-9]{1,19}", text) else 0


def name_times(name: str) -> NameTimes:
    """The expiration and the delivery time a message name carries (a ``<client>~`` prefix
    of processing/ and processed/ names is allowed): 1.2's grammar is
    ``priority.messageId.class[.expiration[.correlationId[.replyTo[.JMSType[.properties]]]]]``
    with the properties ``enc(name)<letter>=enc(value)`` joined by ``&``.  A name outside
    that grammar carries neither (it is read as a message that never expires)."""
    fields = original_name(leaf(name)).split(".")
    if not 3 <= len(fields) <= 8 or not fields[1] or re.fullmatch(r"[+-]?[0-9]{1,12}", fields[0]) is None:
        return NameTimes()
    expiration = _long(fields[3]) if len(fields) > 3 else 0
    delivery = 0
    if len(fields) == 8:
        for pair in fields[7].split("&"):
            key, eq, value = pair.partition("=")
            if eq and _field(key) == DELIVERY_TIME_PROPERTY + "L":
                delivery = _long(_field(value))
    return NameTimes(max(expiration, 0), max(delivery, 0))


def _early(ev: dict, due_ms: int) -> bool:
    """The event's recorded wall-clock time (``wall``: seconds since the epoch, when the
    watcher saw it -- never before it happened) is before ``due_ms``: it happened early."""
    wall = ev.get("wall")
    return bool(due_ms) and isinstance(wall, (int, float)) and wall * 1000 < due_ms


@dataclasses.dataclass
class RenderedTrace:
    """A trace as TLA+ events, with the JSONL line number of each event."""

    path: str
    events: list[dict]          # TLA+ record fields (strings already TLA+-quoted)
    lines: list[int]            # index (0-based) of the JSONL event each one came from
    raw_count: int
    error: tuple[int, str] | None = None   # an event rejected before TLC (index, reason)


def _split(rel: str) -> tuple[str, str, str] | None:
    """("log" or "msg", directory, name) of a transaction log or a message file; None to ignore."""
    log = locate_log(rel)
    if log is not None:
        return "log", log[0], log[1]
    loc = locate(rel)
    return None if loc is None else ("msg", loc.state.value or "", loc.name)


#: a log renamed into these directories: the step of Dropbox that does it
_LOG_RENAME_ACT = {"committing": '"EnterCommitting"', "rolling-back": '"AbortCommit"'}


def _action(src: str | None, dst: str | None) -> str:
    """The Dropbox action a message event must be, as a TLA+ string: the lifecycle
    table's move between the two directories (None: no file).  "Next" (any step)
    for a move the table does not have, so that TLC is the one to reject it."""
    move = _move(src, dst)
    return '"Next"' if move is None else f'"{move.value}"'


def _move(src: str | None, dst: str | None) -> Move | None:
    a, b = (state_of_directory(d) if d else State.ABSENT for d in (src, dst))
    return move_of(a, b)


#: the field of a rendered event that names each Actor's process (None: nobody's in particular)
_ACTOR_FIELD = {Actor.PRODUCER: "Prod", Actor.TAKER: "c", Actor.HOLDER: "sc", Actor.ANYONE: None}

#: the events that are no lifecycle move: closing a message file is the producer's step;
#: a death lets nobody act before it
_EVENT_ACTORS = {"CloseWrite": Actor.PRODUCER, "Crash": Actor.ANYONE}


def _actors(rec: dict) -> str:
    """The processes whose private steps (listener runs, restarts...) may come right
    before this event, as a TLA+ set: the one that makes its move (trace_rules.ACTORS), or
    every process when the trace does not say who (log events, moves the table lacks)."""
    act = rec["act"].strip('"')
    if act in _EVENT_ACTORS:
        actor = _EVENT_ACTORS[act]
    else:
        try:
            actor = ACTORS[Move(act)]
        except ValueError:
            return "Proc"
    field = _ACTOR_FIELD[actor]
    if field == "Prod":
        return "{Prod}"
    if field is None or rec.get(field, "NoOne") == "NoOne":
        return "{}"
    return "{" + rec[field] + "}"


#: File.n of a name no model state stands for (past any MaxDel; TLA+ has no -1 here)
NO_MODEL_COUNT = 999_999


def _model_count(src: str, dst: str, prev_n: int, prev_k: int, cnt: int) -> int:
    """The model's n (File.n: the count a name in target/ carries) of a message renamed
    ``src`` -> ``dst`` whose name now carries ``cnt`` (before: ``prev_k``; model: ``prev_n``).

    In target/ the name carries n itself (TLC checks Send and Redeliver against it).  Out
    of target/ the model keeps n (deliveries so far = n + 1) and the name may keep its
    count or be stamped (trace_rules.COUNT_RULES, the same table the replay uses); a name
    outside that family stands for no state of the model (NO_MODEL_COUNT), so TLC rejects
    the step."""
    if dst == "target":
        return cnt
    move = _move(src, dst)
    if move is None:
        return cnt
    deliveries = prev_n + 1 if move is Move.CLAIM or src == "processing" else prev_n
    return prev_n if count_ok(move, prev_k, cnt, deliveries) else NO_MODEL_COUNT


def _log_members(content: str, ids: dict[tuple[str, str], str]) -> tuple[set[str], set[str]] | None:
    """The sends and the receives a transaction log lists (the reference's JSON lines:
    a send names the working/ file, a receive the processing/ file), as trace ids; None
    when the content is not in that format or names a file the trace does not know."""
    listed: dict[str, set[str]] = {"send": set(), "receive": set()}
    for line in content.splitlines():
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            where = {"send": "working", "receive": "processing"}[entry["kind"]]
            ident = ids.get(("msg", f"{entry['box']}/{where}/{entry['name']}"))
        except (ValueError, KeyError, TypeError):
            return None
        if ident is None:
            return None
        listed[entry["kind"]].add(ident)
    return listed["send"], listed["receive"]


def _record_log(lg: dict | None, ev: dict, ids: dict[tuple[str, str], str]) -> dict:
    """A log event that carries the log's content (the watcher reads it at close_write
    and at the rename into committing/): the transaction is what the log lists, not
    what the trace then did, so a commit that applied only part of it is rejected.
    Without the content (the watcher read it too late, or another format), a close
    lists what the trace shows the log's process recorded while it was open (see
    ``_log_kind``).  Returns the TLA+ field the model's logset is checked against."""
    if lg is None:
        return {}
    members = _log_members(ev["content"], ids) if "content" in ev else None
    if members is None:
        if ev.get("op") != "close_write" or lg["listed"] is not None or lg["kind"] is None:
            return {}
        members = (set(lg["sends"]), set(lg["receives"]))   # the reference's order of records
    sends, receives = members
    lg["listed"] = sends | receives
    lg["sends"] = set(sends)
    return {"lset": _tla_set(sorted(lg["listed"]))}


def in_event_order(events: Sequence[dict]) -> list[tuple[int, dict]]:
    """The events with their indices, in the order they happened as far as the trace can
    tell: a create the watcher made up from a scan (``synthetic``: a file found in a
    directory watched too late) is reported when the watcher found it, before the events
    it had already queued; a log created right after it in the trace may have come first
    (the reference records a transacted send in its log before it creates the file), so
    the made-up create goes after the log creates that directly follow it."""
    out = list(enumerate(events))
    i = 0
    while i < len(out) - 1:
        ev = out[i][1]
        j = i
        if ev.get("op") == "create" and ev.get("synthetic"):
            while j + 1 < len(out) and out[j + 1][1].get("op") == "create" \
                    and locate_log(out[j + 1][1].get("path")) is not None:
                j += 1
        if j > i:
            out[i:j + 1] = out[i + 1:j + 1] + [out[i]]
            i = j
        i += 1
    return out


def _log_kind(events: Sequence[dict], k: int, log_name: str) -> tuple[str | None, str | None]:
    """Whose log the one created at event ``k`` is, read from the reference's order of
    records (transaction.TransactionLog.record): a send's line is written *before* its
    working/ file is created, a receive's *after* its claim.  So the log of a producer is
    followed by a create in working/; otherwise it is the receiving log of the client its
    name starts with (``<enc(clientId)>~<session>~<seq>``).  ("send"/"receive", client)."""
    for ev in events[k + 1:]:
        if death_of(ev) is not None or ev.get("kind") == "dir":
            continue
        path = ev.get("path") if ev.get("op") in ("create", "close_write", "delete") else ev.get("src")
        loc = locate(path)
        if path is None or locate_log(path) is not None or loc is None:
            continue
        if ev["op"] == "create" and loc.state is State.NOT_COMMITTED:
            return "send", None
        break
    head, sep, _ = log_name.partition("~")
    return ("receive", _field(head)) if sep else (None, None)


def render_trace(events: Sequence[dict], path: str = "<trace>") -> tuple[RenderedTrace, dict]:
    """Map file events to TLA+ events; identities follow renames.

    Returns the rendered trace and the facts the model constants need:
    messages, consumers (client names), transactions, MaxDel.
    """
    ids: dict[tuple[str, str], str] = {}     # (kind, relpath) -> id
    clients: dict[str, str] = {}
    out: list[dict] = []
    lines: list[int] = []
    nmsg = 0
    nlog = 0
    max_n = 0
    log_open: dict[int, dict] = {}           # log id -> {"sends": set, "acks": bool}
    txs: list[set[str]] = []
    err: tuple[int, str] | None = None
    discarded_plain: list[str] = []
    dead_n: list[int] = []
    purgeable: set[str] = set()
    kills = 0                                # recorded deaths of the model's processes
    # the model's n of each message (File.n: the count a name in target/ carries),
    # and the count its current name carries; they differ in processing/ and
    # after: 1.2's claim writes the *current* delivery count (n + 1) into the name
    model_n: dict[str, int] = {}
    name_n: dict[str, int] = {}
    holding: dict[str, set[str]] = {}        # client -> its files in processing/ now
    last_claim: dict[str, str] = {}          # client -> the message it claimed last
    times: dict[str, NameTimes] = {}         # message -> the times its name carries
    max_holding: dict[str, int] = {}
    acked_by: set[str] = set()               # clients whose files were acked

    def client(name: str) -> str:
        if name not in clients:
            clients[name] = f"c{len(clients) + 1}"
        return clients[name]

    def emit(k: int, **rec: str) -> None:
        rec["who"] = _actors(rec)
        out.append(rec)
        lines.append(k)

    order = in_event_order(events)
    for pos, (k, ev) in enumerate(order):
        op = ev["op"]
        if ev.get("kind") == "dir":
            continue   # a directory is never a message of the model (junk is judged by the replay)
        death = death_of(ev)
        if death is not None:
            # the model's Crash of that process; a consumer that held nothing of this
            # dropbox so far is none of the model's (its death changes nothing here)
            dying = ["Prod"] if death.producer else [clients[c] for c in death.clients if c in clients]
            for p in dying:
                kills += 1
                emit(k, op='"kill"', act='"Crash"', p=p)
            continue
        if op == "rename":
            s, d = _split(ev["src"]), _split(ev["dst"])
            if s is None and d is None:
                continue
            if s is None or d is None or s[0] != d[0]:
                err = err or (k, "rename between a dropbox and a foreign place")
                break
            key = (s[0], ev["src"])
            if key not in ids:
                err = err or (k, f"rename of an unknown file {ev['src']}")
                break
            ident = ids.pop(key)
            gone = ids.get((d[0], ev["dst"]))
            ids[(d[0], ev["dst"])] = ident
            if s[0] == "log":
                listed = _record_log(log_open.get(int(ident)), ev, ids)
                if int(ident) in log_open:
                    log_open[int(ident)]["state"] = d[1]
                emit(k, op='"logrename"', act=_LOG_RENAME_ACT.get(d[1], '"Next"'), lg=ident, to=f'"{d[1]}"',
                     **listed)
                continue
            owner = owner_of(locate(ev["dst"]))
            t_was, t_now = times.get(ident, NameTimes()), name_times(d[2])
            times[ident] = NameTimes(t_was.expiration or t_now.expiration,
                                     t_was.delivery_time or t_now.delivery_time)
            early = {}
            if (s[1], d[1]) == ("target", "processing") and _early(ev, times[ident].delivery_time):
                early = {"early": "TRUE"}      # claimed before its delivery time
            if d[1] == "expired" and _early(ev, times[ident].expiration):
                early = {"early": "TRUE"}      # expired before its expiration
            cnt = count_of(d[2])
            prev_k = name_n.get(ident, count_of(s[2]))
            prev_n = model_n.get(ident, prev_k)
            if is_alias(s[2]) or is_alias(d[2]):
                # N-10: an alias's count is in the claim register, which the trace does not show:
                # taken as exact, so a Redeliver out of an alias carries the deliveries so far
                n = prev_n + 1 if d[1] == "target" else prev_n
                cnt = n if d[1] == "target" else prev_k
            else:
                n = _model_count(s[1], d[1], prev_n, prev_k, cnt)
            model_n[ident], name_n[ident] = n, cnt
            max_n = max(max_n, n if n != NO_MODEL_COUNT else 0)
            if s[1] == "processing" and d[1] == "error":
                dead_n.append(n)
            src_owner = owner_of(locate(ev["src"]))
            if src_owner:
                holding.get(client(src_owner), set()).discard(ident)
                if d[1] == "processed":
                    acked_by.add(client(src_owner))
            if owner and s[1] == "target":
                last_claim[owner] = ident
                for lg in log_open.values():   # a later receive of an open receiving log
                    if lg["kind"] == "receive" and lg["owner"] == owner and lg["listed"] is None \
                            and not lg["closed"]:
                        lg["receives"].add(ident)
            if owner:
                held_now = holding.setdefault(client(owner), set())
                held_now.add(ident)
                max_holding[client(owner)] = max(max_holding.get(client(owner), 0), len(held_now))
            if gone is not None:
                # a rename onto an existing name: this message moves and that one vanishes
                # in one step, which no action of Dropbox does (a rename never replaces)
                emit(k, op='"replace"', act='"Next"', m=ident, gone=gone, src=f'"{s[1]}"', dst=f'"{d[1]}"',
                     c=client(owner) if owner else "NoOne",
                     sc=client(src_owner) if src_owner else "NoOne", n=str(n))
                continue
            swept = {"rcv": "TRUE"} if src_owner and by_recovery(ev) else {}
            emit(k, op='"rename"', act=_action(s[1], d[1]), m=ident, src=f'"{s[1]}"', dst=f'"{d[1]}"',
                 c=client(owner) if owner else "NoOne",
                 sc=client(src_owner) if src_owner else "NoOne", n=str(n), **swept, **early)
            if s[1] == "working" and d[1] == "target":
                for lg in log_open.values():
                    if lg["state"] == "committing" and lg["listed"] is None:
                        lg["sends"].add(ident)
            continue
        sp = _split(ev["path"])
        if sp is None:
            continue
        key = (sp[0], ev["path"])
        if op == "create":
            if key in ids:
                err = err or (k, f"create of an existing file {ev['path']}")
                break
            if sp[0] == "log":
                nlog += 1
                ident = str(nlog)
                kind, owner = _log_kind([e for _, e in order], pos, sp[2])
                first = last_claim.get(owner or "")
                log_open[nlog] = {"state": sp[1], "sends": set(), "listed": None, "kind": kind, "owner": owner,
                                  "closed": False,
                                  # a receive is recorded right after its claim: the owner's last one
                                  "receives": {first} if kind == "receive" and first is not None
                                  and owner in clients and first in holding.get(clients[owner], set())
                                  else set()}
                emit(k, op='"logcreate"', act='"WriteLog"', lg=ident, to=f'"{sp[1]}"')
            else:
                if sp[1] != "working":
                    # foreign files dropped straight into target/ are not a
                    # behaviour of Dropbox (no Create there): let TLC reject it
                    pass
                nmsg += 1
                ident = f"m{nmsg}"
                times[ident] = name_times(sp[2])
                if sp[1] == "working":
                    for lg in log_open.values():   # recorded in the producer's open log first
                        if lg["kind"] == "send" and lg["listed"] is None and not lg["closed"]:
                            lg["sends"].add(ident)
                            break
                if ev.get("synthetic") and sp[1] in ("working", "target"):
                    # found by a scan of a directory watched too late: created, written (its
                    # close_write came before the watch) and, found in target/, sent
                    emit(k, op='"create"', act=_action(None, "working"), m=ident, dst='"working"')
                    emit(k, op='"close"', act='"CloseWrite"', m=ident)
                    if sp[1] == "target":
                        emit(k, op='"rename"', act=_action("working", "target"), m=ident, src='"working"',
                             dst='"target"', c="NoOne", sc="NoOne", n=str(count_of(sp[2])))
                else:
                    emit(k, op='"create"', act=_action(None, sp[1]), m=ident, dst=f'"{sp[1]}"')
            ids[key] = ident
        elif op == "close_write":
            if key not in ids:
                continue   # a write to a file created before the trace began
            ident = ids[key]
            if sp[0] == "log":
                closing = log_open.get(int(ident))
                listed = _record_log(closing, ev, ids)
                if closing is not None:
                    closing["closed"] = True
                emit(k, op='"logclose"', act='"CloseLog"', lg=ident, **listed)
            else:
                emit(k, op='"close"', act='"CloseWrite"', m=ident)
        elif op == "delete":
            if key not in ids:
                continue
            ident = ids.pop(key)
            if sp[0] == "log":
                unlinked = log_open.pop(int(ident), {})
                if unlinked.get("sends"):
                    txs.append(unlinked["sends"])
                emit(k, op='"logdelete"', act='"DeleteLog"', lg=ident)
            else:
                if state_of_directory(sp[1]) in PURGEABLE and ev.get("purge", True):
                    purgeable.add(ident)   # (purge False: a role that may not delete did: TLC rejects)
                if sp[1] == "working":
                    # a discarded send: rolled back with its transaction's log,
                    # or by a transaction that never wrote one
                    for lg in log_open.values():
                        if lg["state"] in ("associated", "rolling-back") and lg["listed"] is None:
                            lg["sends"].add(ident)
                            break
                    else:
                        discarded_plain.append(ident)
                emit(k, op='"delete"', act=_action(sp[1], None), m=ident, src=f'"{sp[1]}"')
    for lg in log_open.values():          # logs still present at the end
        if lg["sends"]:
            txs.append(lg["sends"])
    for m in discarded_plain:             # rolled back before any log
        if not any(m in t for t in txs):
            txs.append({m})
    return RenderedTrace(path, out, lines, len(events), err), {
        "msgs": [f"m{i}" for i in range(1, nmsg + 1)],
        "clients": list(clients.values()),
        # the acknowledge modes each consumer can have run with (the trace does not say;
        # fewer candidates, fewer states).  Only modes the trace rules out are dropped:
        # AUTO holds one claimed file at a time (Claim needs the idle listener loop,
        # Restart an empty processing/), and a TRANSACTED ack needs a transaction log.
        "modes": {c: [md for md in ("AUTO", "CLIENT", "TRANSACTED")
                      if not (md == "AUTO" and max_holding.get(c, 0) > 1)
                      and not (md == "TRANSACTED" and c in acked_by and nlog == 0)]
                  for c in clients.values()},
        "txs": txs,
        "max_n": max_n,
        # the redelivery limit: a dead-letter at count n+1 says MaxDel = n;
        # without one, just high enough for every delivery seen
        "maxdel": min(dead_n) if dead_n else max_n + 1,
        # which messages may expire, and which carry a delivery time: what their names say
        "expiring": sorted(m for m, tm in times.items() if tm.expiration),
        "delayed": sorted(m for m, tm in times.items() if tm.delivery_time),
        "purgeable": sorted(purgeable),
        "kills": kills,
    }


#: the template of the generated module (spec/traces/TraceCheck.tla.in; its @field@s are filled in)
TRACE_TEMPLATE = "traces/TraceCheck.tla.in"


def _tla_record(ev: dict) -> str:
    return "[" + ", ".join(f"{k} |-> {v}" for k, v in ev.items()) + "]"


@dataclasses.dataclass
class TraceVerdict:
    path: str
    accepted: bool
    first_bad: int | None       # index (0-based) of the first JSONL event not matched
    reason: str = ""
    decided: bool = True        # False: TLC failed or timed out, the trace is not judged


def _tla_set(xs: Iterable[str]) -> str:
    return "{" + ", ".join(sorted(xs)) + "}"


def validate_traces(paths: Sequence[str | Path], *, timeout: float = 600,
                    workers: str = "1", jobs: int = 1) -> list[TraceVerdict]:
    """Check with TLC that each trace is a behaviour of Dropbox.

    Traces that share the model's constants (transactions, redelivery limit) go
    to one TLC run; ``jobs`` runs at a time.  A process dies only where its trace
    records a death (``kill``): MaxCrashes is what the traces record.
    """
    verdicts: dict[int, TraceVerdict] = {}
    groups: dict[tuple, list[tuple[int, RenderedTrace, dict]]] = {}
    for idx, p in enumerate(paths):
        try:
            events = load_trace(p)
        except TraceError as exc:
            verdicts[idx] = TraceVerdict(str(p), False, 0, str(exc))
            continue
        rt, facts = render_trace(events, str(p))
        if not rt.events and rt.error is None:
            verdicts[idx] = TraceVerdict(str(p), True, None, "no dropbox events")
            continue
        key = (tuple(sorted(tuple(sorted(t)) for t in facts["txs"])), max(1, facts["maxdel"]))
        groups.setdefault(key, []).append((idx, rt, facts))

    runs = _balanced(groups, jobs)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for verdict_of in pool.map(lambda run: _run_trace_group(run[0][0], run[0][1], run[1], timeout, workers),
                                   runs):
            verdicts.update(verdict_of)
    return [verdicts[i] for i in sorted(verdicts)]


def _balanced(groups: dict[tuple, list], jobs: int) -> list[tuple[tuple, list]]:
    """The TLC runs for these groups: the largest split in two (by events) while
    there are fewer runs than ``jobs`` (a TLC start-up costs ~2 s: no more runs)."""
    runs = [(k, list(ms)) for k, ms in groups.items()]
    size = lambda run: sum(len(m[1].events) for m in run[1])  # noqa: E731
    while runs and len(runs) < jobs:
        runs.sort(key=size)
        key, members = runs[-1]
        if len(members) < 2:
            break
        members.sort(key=lambda m: len(m[1].events))
        runs[-1] = (key, members[0::2])
        runs.append((key, members[1::2]))
    return runs


def write_trace_model(tmpd: Path, txs: tuple, maxdel: int, members: list) -> tuple[Path, Path]:
    """Write the spec and a TraceCheck module + config for ``members`` into ``tmpd``."""
    msgs = sorted({m for _, _, f in members for m in f["msgs"]}, key=lambda x: int(x[1:]))
    ncli = max([len(f["clients"]) for _, _, f in members] + [1])
    clients = [f"c{i}" for i in range(1, ncli + 1)]
    for f in spec_dir().glob("*.tla"):
        shutil.copy(f, tmpd / f.name)
    name = "TraceCheck"
    traces_tla = ",\n    ".join(
        "<< " + ", ".join(_tla_record(e) for e in rt.events) + " >>" for _, rt, _ in members
    )
    # a consumer that does not occur in a trace never acts there: one mode is enough
    absent = ("CLIENT",)
    modes_tla = ",\n    ".join(
        "[c \\in Consumer |-> CASE " + " [] ".join(
            f"c = {c} -> " + _tla_set(f'"{md}"' for md in f["modes"].get(c, absent)) for c in clients) + "]"
        for _, _, f in members)
    per_trace = {key: ", ".join(_tla_set(f[key]) for _, _, f in members)
                 for key in ("expiring", "delayed", "purgeable")}
    fields = {"name": name, "model_values": ", ".join(msgs + clients), "traces": traces_tla, "modes": modes_tla,
              **per_trace}
    text = (spec_dir() / TRACE_TEMPLATE).read_text()
    (tmpd / f"{name}.tla").write_text(re.sub(r"@(\w+)@", lambda m: fields[m.group(1)], text))
    txs_tla = "{" + ", ".join(_tla_set(t) for t in txs) + "}"
    cfg = "\n".join([
        "INIT TInit", "NEXT TNext", "CONSTANTS",
        *[f"    {v} = {v}" for v in msgs + clients],
        f"    Msg = {_tla_set(msgs)}",
        f"    Consumer = {_tla_set(clients)}",
        "    Prod = p", "    NoOne = none", "    NoMsg = nomsg",
        f"    Txs = {txs_tla}",
        f"    MaxDel = {maxdel}",
        f"    Expiring = {_tla_set(m for _, _, f in members for m in f['expiring'])}",
        f"    Delayed = {_tla_set(m for _, _, f in members for m in f['delayed'])}",
        f"    Purgeable = {_tla_set(m for _, _, f in members for m in f['purgeable'])}",
        f"    MaxCrashes = {max(f['kills'] for _, _, f in members)}",
        "    Modes <- AnyTraceMode", "",
    ])
    (tmpd / f"{name}.cfg").write_text(cfg)
    return tmpd / f"{name}.tla", tmpd / f"{name}.cfg"


_RE_REACHED = re.compile(r'<<"reached", (\d+), (\d+)>>')


def _run_trace_group(txs: tuple, maxdel: int, members: list,
                     timeout: float, workers: str) -> dict[int, TraceVerdict]:
    """One TLC run for traces sharing the transaction and limit constants."""
    verdicts: dict[int, TraceVerdict] = {}
    with tempfile.TemporaryDirectory(prefix="dropboxmq-trace-") as tmp:
        module, cfg = write_trace_model(Path(tmp), txs, maxdel, members)
        res = run_tlc(module, cfg, workers=workers, timeout=timeout)
    reached: dict[int, int] = {}
    for k, n in _RE_REACHED.findall(res.output):
        reached[int(k)] = max(reached.get(int(k), 0), int(n))
    for pos, (idx, rt, _) in enumerate(members, start=1):
        if res.exit_code != EXIT_OK:
            errs = [ln for ln in res.output.splitlines() if ln.startswith("Error")]
            why = f"TLC timed out after {timeout:.0f} s" if res.timed_out else \
                "TLC failed: " + ("; ".join(errs[:3]) or res.output[-500:])
            verdicts[idx] = TraceVerdict(rt.path, False, None, why, decided=False)
            continue
        got = reached.get(pos, 0)
        if got >= len(rt.events) and rt.error is None:
            verdicts[idx] = TraceVerdict(rt.path, True, None)
        elif got >= len(rt.events) and rt.error is not None:
            verdicts[idx] = TraceVerdict(rt.path, False, rt.error[0], rt.error[1])
        else:
            verdicts[idx] = TraceVerdict(rt.path, False, rt.lines[got],
                                         "no Dropbox step matches this event")
    return verdicts
