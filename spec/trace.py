"""A recorded file-system trace, read once: the format both of its judges share.

The conformance suite's watcher records one JSON object per line (``create``,
``close_write``, ``rename``, ``delete``; spec/README.md "Trace validation"); the
conformance replay (``dropboxmq_conformance.replay``: the lifecycle table) and
TLC's trace validation (``tlc_traces``: the spec) judge it.  This module is the
one place that reads it:

* where a path lies and who holds a file of processing/: ``grammar.locate``,
  ``grammar.locate_log`` and ``grammar.owner_of`` (the one reading of paths and names,
  from PROTOCOL.md); the delivery count a name carries (``count_of``);
* which move a record makes (``move_of``) and which process makes it
  (``trace_rules.ACTORS``, resolved by ``mover``);
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
from .grammar import KILL, Loc, leaf
from dropboxmq.lifecycle import IllegalMove, Move, State
from dropboxmq.trace_rules import ACTORS, Actor, move_between

__all__ = [
    "FILE_OPS", "OPS", "PRODUCER_ROLES", "TraceError", "original_name", "message_id", "count_of", "move_of", "mover",
    "by_recovery", "Death", "death_of", "check_record", "load_trace",
]

#: the ops a trace line may carry: file events, and a process death
FILE_OPS = ("create", "close_write", "rename", "delete")
OPS = FILE_OPS + (KILL,)

#: the roles whose process is the producer of the spec (the others are consumers)
PRODUCER_ROLES = frozenset({"produce", "publish"})

class TraceError(ValueError):
    """A trace line that is not an event of the documented format."""


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
    if ACTORS[move] is Actor.HOLDER and (source is None or source.state is not State.DELIVERED):
        return Actor.ANYONE
    return ACTORS[move]


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
