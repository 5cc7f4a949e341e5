"""Every dropbox under a root, with the name the CLI shows for it (``orders``,
``topic:a.b``, ``topic:a.b!sub``): what ``dropboxmq stat``, ``prune`` and ``recover``, recovery
and the did-you-mean of a missing queue walk.  Where one destination lives is ``layout.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

from .layout import INTERNAL, TOPIC_ROOT
from .store import Dropbox, is_real_dir

__all__ = ["all_dropboxes", "display_name"]


def all_dropboxes(root: Path) -> Iterator[tuple[str, Dropbox]]:
    """Every dropbox under ``root`` with a display name: queues, then each topic's
    ``.incoming`` and subscriptions (``topic/a.b!sub``)."""
    root = Path(root)
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith(".") or name in (TOPIC_ROOT, INTERNAL):
            continue
        box = Dropbox(root / name / "incoming")
        if is_real_dir(root / name) and box.exists():  # a symlinked queue may lead out of the root
            yield name, box
    top = root / TOPIC_ROOT
    for dirpath, dirnames, _ in os.walk(top):
        rel = os.path.relpath(dirpath, top)
        dirnames.sort()
        if rel == "." or os.path.basename(dirpath).startswith("."):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            continue
        topic_name = rel.replace(os.sep, ".")
        incoming = Dropbox(Path(dirpath) / ".incoming")
        if incoming.exists():
            yield f"topic:{topic_name}", incoming
        subs = Path(dirpath) / ".subscriptions"
        if is_real_dir(subs):
            for sub in sorted(os.listdir(subs)):
                box = Dropbox(subs / sub)
                if box.exists():
                    yield f"topic:{topic_name}!{sub}", box
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]


def display_name(root: Path, box_path: Path) -> str:
    """The name all_dropboxes gives the dropbox at ``box_path``."""
    parts = Path(os.path.relpath(box_path, root)).parts
    if parts[:1] != (TOPIC_ROOT,):
        return parts[0]
    if ".subscriptions" in parts:
        at = parts.index(".subscriptions")
        return f"topic:{'.'.join(parts[1:at])}!{parts[at + 1]}"
    return f"topic:{'.'.join(parts[1:-1])}"
