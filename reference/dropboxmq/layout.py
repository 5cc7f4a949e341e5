"""Where a queue and the transaction logs live under a root (PROTOCOL.md §1, 1.2-compatible).  Pure
path logic; a topic's directories below ``TOPIC_ROOT`` are ``topics.py``'s, every dropbox under a
root (a walk) ``inventory.py``'s, making and listing the logs' directories ``dirs.py``'s."""

from __future__ import annotations

from pathlib import Path

from .codec import decode_field
from .message import Queue
from .store import Dropbox

__all__ = ["INTERNAL", "TOPIC_ROOT", "LOG_DIRS", "PENDING_LOG_DIRS", "queue_box", "transaction_dir", "log_owner"]

INTERNAL = "dropboxmq"
TOPIC_ROOT = "topic-root"  # L-2: topic a.b.c is <root>/topic-root/a/b/c/
#: The directories of ``transaction_dir`` every root has: the log states' (``log_lifecycle.LogState``,
#: whose values they are; the two-phase ones are made by the first XA session) and 1.2's rolled-back/
LOG_DIRS = ("associated", "committing", "rolling-back", "committed", "rolled-back")
#: Where a log a crash left behind waits to be finished, in the order recovery finishes them
PENDING_LOG_DIRS = ("committing", "associated", "rolling-back")


def queue_box(root: Path, queue: Queue) -> Dropbox:
    return Dropbox(Path(root) / queue.name / "incoming", root)


def transaction_dir(root: Path) -> Path:
    """Where the transaction logs are: one directory per log state (``LOG_DIRS``)."""
    return Path(root) / INTERNAL / "transaction"


def log_owner(log_name: str) -> str:
    """The client id that owns a log named ``<enc(clientId)>~<session>~<seq>``."""
    return decode_field(log_name.split("~", 1)[0])
