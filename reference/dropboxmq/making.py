"""What is made under a root off the message path: a dropbox's state directories (``init``,
``create_queue``, a connection with ``create=True``, a subscription), and small files replaced
durably (a claim register entry, a staged log, a manifest)."""

from __future__ import annotations

import os
from pathlib import Path

from .dirs import ensure_dir, ensure_plain_dir
from .lifecycle import STATE_DIRS
from .store import Dropbox, write_all

__all__ = ["ensure_dropbox", "replace_durably"]


def ensure_dropbox(box: Dropbox) -> Dropbox:
    """Make the six state directories of ``box`` (inside its root, if it knows it)."""
    for d in STATE_DIRS:
        if box.root is None:
            ensure_dir(box.path / d)
        else:
            ensure_plain_dir(box.root, box.path / d)
    return box


def replace_durably(path: str | Path, data: bytes, tmp: str | Path) -> None:
    """Write ``data`` to ``tmp`` (created anew), fsync it and rename it over ``path``: a reader
    sees the whole file or none of it, never half (fsync ``path``'s directory to keep the name)."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
