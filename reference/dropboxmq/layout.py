"""Where destinations live under a root (PROTOCOL.md §1, 1.2-compatible). Pure path logic.
Every dropbox under a root, found by walking it, is ``inventory.py``'s."""

from __future__ import annotations

from pathlib import Path

from .message import Queue, Topic
from .store import Dropbox

__all__ = ["DEFAULT_ROOT", "TOPIC_ROOT", "INTERNAL", "queue_box", "topic_dir", "topic_incoming", "subscriptions_dir"]

DEFAULT_ROOT = "./var/dropbox"  # without --root / $DROPBOXMQ_ROOT
TOPIC_ROOT = "topic-root"
INTERNAL = "dropboxmq"


def queue_box(root: Path, queue: Queue) -> Dropbox:
    return Dropbox(Path(root) / queue.name / "incoming", root)


def topic_dir(root: Path, topic: Topic) -> Path:
    return Path(root).joinpath(TOPIC_ROOT, *topic.levels)


def topic_incoming(root: Path, topic: Topic) -> Dropbox:
    return Dropbox(topic_dir(root, topic) / ".incoming", root)


def subscriptions_dir(root: Path, topic: Topic) -> Path:
    return topic_dir(root, topic) / ".subscriptions"
