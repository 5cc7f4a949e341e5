"""Group commit: make a batch of new files durable together, the fastest way the machine
allows (a speed heuristic, kept out of the store).  ``sync_files`` picks, per batch, one
syncfs(2) of the whole file system when little else is waiting to be written (one journal
commit for the batch), or parallel fsyncs of the batch's own files when another program's
unwritten data would make a syncfs wait for it (/proc/meminfo's Dirty + Writeback).
``fsync_each`` is the plain version: one fsync per file, in order.  Both leave the same files
durable (tests/test_store_faults.py checks that they agree)."""

from __future__ import annotations

import ctypes
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .errors import store_error

__all__ = [
    "sync_file_system", "unwritten_bytes", "SYNCFS_OTHERS_BYTES_PER_FILE", "group_sync_method", "fsync_files",
    "sync_files", "sync_by_method", "fsync_each",
]

_libc = ctypes.CDLL(None, use_errno=True)  # libc's symbols, without find_library's ldconfig subprocess

_syncfs = getattr(_libc, "syncfs", None)


def sync_file_system(path: Path | str) -> None:
    """Make everything written to ``path``'s file system durable in one go: the group
    commit of a batch (one journal commit instead of one fsync per file).  syncfs(2)
    where the C library has it, else sync(2)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if _syncfs is not None:
            _syncfs.argtypes = [ctypes.c_int]
            if _syncfs(fd) == 0:
                return
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), str(path))
        os.sync()
    finally:
        os.close(fd)


def unwritten_bytes() -> int | None:
    """Data written by anyone and not yet on disk, system-wide: Dirty + Writeback of
    /proc/meminfo (None where there is no such file)."""
    total = 0
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith((b"Dirty:", b"Writeback:")):
                    total += int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return total


#: syncfs(2) writes every unwritten page of the file system, not only the batch's: another
#: program's gigabyte would be the batch's wait.  Past this much unwritten data that is not the
#: batch's, per file of the batch, fsyncing the batch's own files side by side is cheaper (on the
#: 2-core ext4 machine, batches of 100 small files, medians: syncfs 43-55 µs a message on a quiet
#: file system, 410-470 µs with 3,000 small files of another writer unwritten; 16 parallel
#: fsyncs 81-102 µs either way: break-even near 13 KiB of others' data a file).
SYNCFS_OTHERS_BYTES_PER_FILE = 12 * 1024
_PAGE = 4096


def group_sync_method(unwritten: int | None, own_bytes: int, files: int) -> str:
    """"syncfs" or "fsync" (each file): how to make a batch of ``files`` new files holding
    ``own_bytes`` durable when ``unwritten`` bytes await writing system-wide (None: unknown)."""
    if unwritten is None:
        return "syncfs"
    own = own_bytes + _PAGE * files  # each file's last page is whole on disk
    return "syncfs" if unwritten - own <= SYNCFS_OTHERS_BYTES_PER_FILE * files else "fsync"


_fsync_pool: tuple[int, ThreadPoolExecutor] | None = None
_fsync_pool_lock = threading.Lock()
_FSYNC_THREADS = 16  # enough fsyncs in flight for the journal to commit them together (8: ~1.5x slower)


def _pool() -> ThreadPoolExecutor:
    """The fsync threads of this process (a forked child makes its own: threads do not fork)."""
    global _fsync_pool
    with _fsync_pool_lock:
        if _fsync_pool is None or _fsync_pool[0] != os.getpid():
            _fsync_pool = (os.getpid(), ThreadPoolExecutor(_FSYNC_THREADS, thread_name_prefix="dropboxmq-fsync"))
        return _fsync_pool[1]


def _fsync_path(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # gone (a subscription removed meanwhile): nothing of it to make durable
    try:
        os.fsync(fd)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, path) from exc  # which file of the batch
    finally:
        os.close(fd)


def fsync_files(paths: list[str]) -> None:
    """fsync every file (or directory) in ``paths``, several at a time: a journaling file system
    commits the fsyncs in flight together, so the batch costs a few journal commits, not one a
    file.  A path gone meanwhile is skipped; the first failure (OSError) is raised once all have
    finished."""
    if len(paths) == 1:
        _fsync_path(paths[0])
        return
    pool = _pool()
    futures = [pool.submit(_fsync_path, p) for p in paths]
    errors = [e for e in (f.exception() for f in futures) if e is not None]
    if errors:
        raise errors[0]


def sync_files(root: Path | str, paths: list[str], own_bytes: int) -> str:
    """Make ``paths`` (files just written under ``root``, ``own_bytes`` of data in all)
    durable as one group commit: one syncfs of ``root``'s file system while little else is
    unwritten, else fsync each file (:func:`group_sync_method`).  Returns which was done."""
    method = group_sync_method(unwritten_bytes(), own_bytes, len(paths))
    try:
        _sync_by(method, root, paths)
    except OSError as exc:
        raise store_error(method, exc.filename or str(root), exc) from exc
    return method


def sync_by_method(root: Path | str, paths: list[str]) -> None:
    """Make ``paths`` (e.g. directories after renames into them) durable the way
    :func:`group_sync_method` picks for them (no data of their own)."""
    _sync_by(group_sync_method(unwritten_bytes(), 0, len(paths)), root, paths)


def _sync_by(method: str, root: Path | str, paths: list[str]) -> None:
    """Carry out :func:`group_sync_method`'s choice for ``paths`` on ``root``'s file system."""
    if method == "syncfs":
        sync_file_system(root)
    else:
        fsync_files(paths)


def fsync_each(paths: list[str]) -> None:
    """The plain version of :func:`sync_files`: fsync each file in turn (a path gone meanwhile
    is skipped, the first failure raised).  As durable as the group commit, one journal
    commit a file slower."""
    for path in paths:
        _fsync_path(path)

