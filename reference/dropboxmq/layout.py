"""Where a queue lives under a root (PROTOCOL.md §1, 1.2-compatible).  Pure path logic; a topic's
directories are ``topics.py``'s, every dropbox under a root (a walk) ``inventory.py``'s."""

from __future__ import annotations

from pathlib import Path

from .message import Queue
from .store import Dropbox

__all__ = ["DEFAULT_ROOT", "INTERNAL", "queue_box"]

DEFAULT_ROOT = "./var/dropbox"  # without --root / $DROPBOXMQ_ROOT
INTERNAL = "dropboxmq"


def queue_box(root: Path, queue: Queue) -> Dropbox:
    return Dropbox(Path(root) / queue.name / "incoming", root)
