"""A recorded file-system trace, read once: the format both of its judges share.

The conformance suite's watcher records one JSON object per line (``create``,
``close_write``, ``rename``, ``delete``; spec/README.md "Trace validation"); the
conformance replay (``dropboxmq_conformance.replay``: the lifecycle table) and
TLC's trace validation (``tlc_traces``: the spec) judge it.  This module is the
one place that reads it:

* where a path lies: a message file's (dropbox, state, name) -- ``locate`` -- or a
  transaction log's (log directory, name) -- ``locate_log``;
* who holds a file of processing/ (``owner_of``) and the delivery count a name
  carries (``count_of``);
* which move a record makes (``move_of``) and which process makes it
  (``lifecycle.Move.actor``, resolved by ``mover``);
* deaths: a ``kill`` record (the suite killed a process; ``clients`` are its client
  ids, ``role`` what it ran) -- the only way a process dies in a trace, so a
  recovery may take a message from its holder only after one; a record with
  ``"recovery": true`` was made by a recovery process, never by the holder.

Nothing here touches the file system but ``load_trace``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from . import grammar
from dropboxmq.lifecycle import STATE_DIRS, Actor, IllegalMove, Move, State, move_between, state_of_directory

__all__ = [
    "FILE_OPS", "KILL", "OPS", "PRODUCER_ROLES", "LOG_DIRS", "TraceError", "Loc", "locate",
    "locate_log", "leaf", "owner_of", "original_name", "message_id", "count_of", "move_of", "mover",
    "by_recovery", "Death", "death_of", "check_record", "load_trace",
]

#: the ops a trace line may carry: file events, and a process death
FILE_OPS = ("create", "close_write", "rename", "delete")
KILL = "kill"
OPS = FILE_OPS + (KILL,)

#: the roles whose process is the producer of the spec (the others are consumers)
PRODUCER_ROLES = frozenset({"produce", "publish"})

#: the directories of a transaction log (under ``.../transaction/``)
LOG_DIRS = ("associated", "committing", "rolling-back")


class TraceError(ValueError):
    """A trace line that is not an event of the documented format."""


@dataclass(frozen=True)
class Loc:
    box: str  # the dropbox directory, relative to the root ("Q1/incoming")
    state: State
    name: str


def locate(rel: str | None) -> Loc | None:
    """The (dropbox, state, name) a path stands for, or None if it is not a message file's place:
    anything under ``dropboxmq/`` (registrations, transaction logs) and the files of a dropbox
    whose own directory is a dot-name other than ``.incoming`` (a subscription being created or
    deleted) are not."""
    if not rel:
        return None
    parts = rel.split("/")
    if len(parts) < 3 or parts[0] == "dropboxmq":
        return None
    state_dir, name = parts[-2], parts[-1]
    if state_dir not in STATE_DIRS:
        return None
    if parts[-3].startswith(".") and parts[-3] != ".incoming":
        return None
    if any(p.startswith(".") and p not in (".incoming", ".subscriptions") for p in parts[:-3]):
        return None
    return Loc("/".join(parts[:-2]), state_of_directory(parts[-2]), name)


def locate_log(rel: str | None) -> tuple[str, str] | None:
    """(log directory, log name) of a transaction log's path, or None."""
    parts = [p for p in (rel or "").split("/") if p]
    if len(parts) >= 3 and parts[-2] in LOG_DIRS and "transaction" in parts[:-2]:
        return parts[-2], parts[-1]
    return None


def leaf(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def owner_of(loc: Loc | None) -> str | None:
    """The client id a processing/ name carries (None: not in processing/, or claimed bare)."""
    if loc is None or loc.state is not State.DELIVERED:
        return None
    return grammar.split_claimed(loc.name)[0]


def original_name(name: str) -> str:
    """The name as sent: a processing/ name without its ``<client>~`` prefix."""
    return grammar.split_claimed(name)[1]


def message_id(name: str) -> str:
    """The JMSMessageID a (processing/) name stands for."""
    return grammar.message_id(name)


def count_of(name: str) -> int:
    """The delivery count a name carries (0: none)."""
    return grammar.delivery_count(leaf(name))


def move_of(source: State, destination: State) -> Move | None:
    """The lifecycle move between two states (ABSENT for no file), None if the table has none."""
    try:
        return move_between(source, destination)
    except IllegalMove:
        return None


def mover(move: Move, source: Loc | None, destination: Loc | None) -> Actor:
    """Who made ``move`` of a file from ``source`` to ``destination``: its Actor, with HOLDER
    read as ANYONE when the source is no processing/ file (EXPIRE out of target/)."""
    if move.actor is Actor.HOLDER and (source is None or source.state is not State.DELIVERED):
        return Actor.ANYONE
    return move.actor


def by_recovery(rec: dict) -> bool:
    """The suite knows a recovery process made this move (not the file's holder)."""
    return bool(rec.get("recovery"))


@dataclass(frozen=True)
class Death:
    clients: tuple[str, ...]  # the client ids the dead process ran under, as far as the suite knows
    producer: bool            # it was a producer (or publisher), not a consumer


def death_of(rec: dict) -> Death | None:
    """The process death a ``kill`` record states (``client``: one id, or ``clients``: a
    list), None for any other record."""
    if rec.get("op") != KILL:
        return None
    ids = rec.get("clients") or ([rec["client"]] if rec.get("client") else [])
    return Death(tuple(str(c) for c in ids), rec.get("role") in PRODUCER_ROLES)


def check_record(rec: object, where: str) -> dict:
    """``rec`` if it is an event of the documented format, else TraceError naming ``where``."""
    if not isinstance(rec, dict):
        raise TraceError(f"{where}: not a JSON object")
    op = rec.get("op")
    if op not in OPS:
        raise TraceError(f"{where}: unknown op {op!r}")
    if op == "rename" and not ("src" in rec and "dst" in rec):
        raise TraceError(f"{where}: rename needs src and dst")
    if op in ("create", "close_write", "delete") and "path" not in rec:
        raise TraceError(f"{where}: {op} needs path")
    return rec


def load_trace(path: str | Path) -> list[dict]:
    """The records of a JSONL trace file; TraceError at the first line that is not one."""
    events = []
    for n, line in enumerate(Path(path).read_text().splitlines()):
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path}:{n + 1}: not JSON: {exc}") from None
        events.append(check_record(rec, f"{path}:{n + 1}"))
    return events
