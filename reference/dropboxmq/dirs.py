"""Directories under a root, made durably and never through a symlink (one could lead out of the
root): the root's internal ones (the clients' registrations, the transaction logs: ``ensure_layout``
at every connect), and the listing of the logs' directories (``pending_logs``: read at every close;
transaction.py only when there is a log).  A dropbox's own directories: making.py.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterator

from .errors import StoreError
from .layout import LOG_DIRS, PENDING_LOG_DIRS, log_owner, transaction_dir
from .store import fsync_dir

__all__ = ["ensure_dir", "is_plain_path", "ensure_plain_dir", "ensure_layout", "log_names", "pending_logs",
           "owns_pending_logs"]


def ensure_dir(path: str | Path) -> None:
    """``os.makedirs(path, exist_ok=True)``, with one clear StoreError when something else (a file, a
    FIFO, a dangling link) is in the way.  Each directory made is durable when it returns: its
    parent is fsynced (PROTOCOL.md D10: else a power loss could take a new queue and its message)."""
    try:
        _make_dirs_durably(os.path.normpath(os.fspath(path)))
    except OSError as exc:
        why = "something that is not a directory is in the way" if isinstance(
            exc, (FileExistsError, NotADirectoryError)) else exc.strerror or str(exc)
        raise StoreError(f"cannot create the directory {path}: {why}") from None


def _make_dirs_durably(path: str) -> None:
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path) or "."
    if parent != path and not os.path.isdir(parent):
        _make_dirs_durably(parent)
    try:
        os.mkdir(path)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
    fsync_dir(parent)  # also when another process made it first: it may not have synced yet


def is_plain_path(root: str | Path, path: str | Path) -> bool:
    """No symlink between ``root`` and ``path`` (one could lead out of the root, or make
    rolling-back/ the committing/ directory)."""
    return os.path.realpath(path) == os.path.join(os.path.realpath(root), os.path.relpath(path, root))


def ensure_plain_dir(root: str | Path, path: str | Path) -> None:
    """:func:`ensure_dir`, but StoreError when the directory is not plainly inside ``root``:
    every component below ``root`` is checked *before* anything is created under it, so a
    symlink on the way (``<root>/q -> /elsewhere``) never gets directories made through it."""
    rel = os.path.relpath(path, root)
    if rel.startswith(".."):
        raise StoreError(f"{path} is not inside {root}")
    here = Path(root)
    for part in () if rel == "." else Path(rel).parts:
        here = here / part
        try:
            mode = os.lstat(here).st_mode
        except FileNotFoundError:
            ensure_dir(here)
            mode = os.lstat(here).st_mode
        if stat.S_ISLNK(mode):
            raise StoreError(f"{path} is reached through a symlink ({here}): the library keeps its own "
                             "files only in plain directories of the root")
        if not stat.S_ISDIR(mode):
            raise StoreError(f"cannot create the directory {path}: {here} is not a directory")
    ensure_dir(path)  # the root itself (and a clear error when something else is in the way)
    if not is_plain_path(root, path):
        raise StoreError(f"{path} is reached through a symlink: the library keeps its own files "
                         "only in plain directories of the root")


# ---------------------------------------------------------------- the transaction logs' directories


def ensure_layout(root: Path) -> None:
    """The root's internal directories: one per log state."""
    for d in LOG_DIRS:
        ensure_plain_dir(root, transaction_dir(root) / d)


def log_names(root: Path, where: str) -> list[str]:
    """The logs in the log directory ``where``, sorted ([] when it is missing, not a directory,
    or a symlink: a symlinked log directory holds no log of ours -- never follow it)."""
    d = transaction_dir(root) / where
    if not is_plain_path(root, d):
        return []
    try:
        return sorted(os.listdir(d))
    except (FileNotFoundError, NotADirectoryError):
        return []


def pending_logs(root: Path, wheres: tuple[str, ...] = PENDING_LOG_DIRS) -> Iterator[tuple[str, Path]]:
    """(directory, path) of every log still on disk in the log directories ``wheres``."""
    for where in wheres:
        for name in log_names(root, where):
            yield where, transaction_dir(root) / where / name


def owns_pending_logs(root: Path, client_id: str) -> bool:
    """Does ``client_id`` own a log still to finish?  Then its registration stays when it closes:
    with the lock gone the owner reads as dead, and recovery finishes the transaction."""
    try:
        return any(log_owner(path.name) == client_id for _, path in pending_logs(root))
    except OSError:
        return True  # cannot tell: keep the registration, the safe side
