"""Retention: PURGE messages that have sat in a terminal state (processed/, expired/, error/)
longer than a given age.  Used by ``dropboxmq prune`` and by consumers with a retention
setting.  Safe beside running consumers: nobody moves a message out of a terminal state, so
the only race is two pruners deleting the same file, and the loser's PURGE is a no-op."""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import lifecycle
from .lifecycle import Move, State
from .store import Dropbox

__all__ = ["TERMINAL", "parse_age", "PruneResult", "prune"]

#: The terminal state directories retention may empty, by directory name (lifecycle order).
TERMINAL: dict[str, State] = {s.value: s for s in State if s in lifecycle.TERMINAL}

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """'90s', '15m', '12h', '7d', '2w' or plain seconds -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([smhdw]?)\s*", text)
    if not m:
        raise ValueError(f"{text!r} is not an age: use a number with s, m, h, d or w (e.g. 7d)")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


@dataclass
class PruneResult:
    matched: int = 0  # files older than the age
    removed: int = 0  # of which this call deleted (dry runs delete none)
    bytes: int = 0
    per_state: dict[str, int] = field(default_factory=dict)


def prune(box: Dropbox, states: list[str], older_than: float, dry_run: bool = False,
          now: float | None = None, result: PruneResult | None = None, root: Path | None = None) -> PruneResult:
    """PURGE the files of ``states`` (names from TERMINAL) that entered that state more than
    ``older_than`` seconds ago (the file's change time: a rename sets it).  With ``root``,
    what is removed is tallied for the monotonic counters (operations.record_removed)."""
    cutoff = (time.time() if now is None else now) - older_than
    result = result or PruneResult()
    removed_here: dict[str, int] = {}
    for d in states:
        state = TERMINAL[d]
        try:
            entries = list(os.scandir(box.dir(state)))
        except (FileNotFoundError, NotADirectoryError):
            continue  # (a hostile root's file where the directory belongs holds no message)
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # pruned by someone else meanwhile
            if st.st_ctime > cutoff or not stat.S_ISREG(st.st_mode):
                continue  # young, or no message (a directory or FIFO quarantined there): left alone
            result.matched += 1
            result.per_state[d] = result.per_state.get(d, 0) + 1
            result.bytes += st.st_size
            if not dry_run and box.move(Move.PURGE, state, entry.name):
                result.removed += 1
                removed_here[d] = removed_here.get(d, 0) + 1
    if root is not None and removed_here:
        from .inventory import display_name
        from .operations import record_removed

        record_removed(root, display_name(root, box.path), removed_here)
    return result
