"""The did-you-mean of a name that does not exist: a dropbox root, a queue (the library's
``RootNotFoundError`` and ``QueueNotFoundError``, the CLI's unknown destinations).  Imported
when such an error is raised, never on the way of a name that exists."""

from __future__ import annotations

import difflib
from pathlib import Path

from . import inventory
from .errors import QueueNotFoundError, RootNotFoundError
from .message import Queue

__all__ = ["did_you_mean", "root_not_found", "missing_queue"]


def did_you_mean(name: str, known: list[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``known``, or ``""``."""
    close = difflib.get_close_matches(name, known, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def root_not_found(root: Path) -> RootNotFoundError:
    """The error for a ``root`` that is no directory, with a did-you-mean among its siblings."""
    if root.exists() or root.is_symlink():
        return RootNotFoundError(f"dropbox root {str(root)!r} is not a directory")
    try:
        siblings = [p.name for p in root.parent.iterdir() if p.is_dir()]
    except OSError:
        siblings = []
    hint = did_you_mean(root.name, siblings)
    return RootNotFoundError(f"no dropbox root at {str(root)!r}{hint} (create one with Connection(root, create=True) "
                             "or 'dropboxmq --root ROOT init QUEUE')")


def missing_queue(root: Path, queue: Queue) -> QueueNotFoundError:
    """The error for a queue that does not exist under ``root``, with a did-you-mean."""
    known = [n for n, _ in inventory.all_dropboxes(root) if not n.startswith("topic:")]
    return QueueNotFoundError(f"no queue {queue.name!r} under {root}{did_you_mean(queue.name, known)} (create it "
                              f"with connection.create_queue({queue.name!r}) or 'dropboxmq init {queue.name}')")
