"""What the store does where the file system lacks what a local disk has (issue 28): renames
without renameat2(RENAME_NOREPLACE), and creates or links whose refusal may not mean what it
says.  Every network file system measured answers EINVAL to renameat2 (``store`` notices it at
the first move and comes here from then on); a local disk never does, so a send, a receive and
an acknowledge there never import this module.

Directory fds are given as ``os`` takes them (``AT_FDCWD``: the names are paths).
"""

from __future__ import annotations

import contextlib
import errno
import os
from typing import NoReturn

__all__ = ["AT_FDCWD", "exists", "link_rename", "checked_rename", "open_refused"]

AT_FDCWD = -100  # (Linux) os's default dir_fd: a name is a path


def exists(path: str, dir_fd: int) -> bool:
    try:
        os.lstat(path, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True


def link_rename(src: str, dst: str, src_dir_fd: int, dst_dir_fd: int) -> None:
    """``store.rename_noreplace`` without renameat2, for a source nobody else moves: link() +
    unlink().  Never replaces either, and a crash between the two leaves both names on one
    inode, which recovery resolves (same inode in working/ and target/ = sent).  The unlink is
    synced (the source directory fsynced): a rename is one atomic step, two calls are not, and a
    power loss must not keep a later move while undoing this unlink (one message under two names
    in two states; PROTOCOL.md Durability D5).

    A losing link() may answer EPERM (sshfs; SMB always does), and GlusterFS may answer EEXIST
    with no file there; only a destination seen to exist is FileExistsError, and where link()
    is refused outright the source is renamed after a check (:func:`checked_rename`).  If the
    source vanished between the link and the unlink (someone else moved it), the link is
    undone: a second name for one file is never left behind.  A link() answered ENOENT while
    its source and the destination's directory are there was made: sshfs makes the link, then
    looks the new name up, gone if another host claimed it meanwhile (link(2) has no other
    ENOENT in that state); taking it for a failure made the producer send it again.
    """
    for attempt in range(3):
        try:
            os.link(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd, follow_symlinks=False)
            break
        except (FileExistsError, PermissionError, FileNotFoundError) as exc:
            if exists(dst, dst_dir_fd):
                _taken(src, dst, src_dir_fd)
            if not exists(src, src_dir_fd):
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), src) from None
            if exc.errno == errno.ENOENT:
                if not _dir_there(dst, dst_dir_fd):
                    raise
                break  # made, and its new name moved on: the send happened (issue 28's sshfs duplicates)
            if exc.errno == errno.EPERM or attempt == 2:
                checked_rename(src, dst, src_dir_fd, dst_dir_fd)  # no link() here (SMB): check, rename
                return
            # EEXIST with no file there (GlusterFS under a race): try again
    try:
        os.unlink(src, dir_fd=src_dir_fd)
    except FileNotFoundError:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(dst, dir_fd=dst_dir_fd)  # someone moved the source: ours is a second name
        raise
    fd = src_dir_fd if src_dir_fd != AT_FDCWD else \
        os.open(os.path.dirname(os.fsdecode(src)) or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        if fd != src_dir_fd:
            os.close(fd)


def _dir_there(dst: str, dir_fd: int) -> bool:
    try:  # (a removed directory has no links left)
        return (os.fstat(dir_fd) if dir_fd != AT_FDCWD else os.stat(os.path.dirname(dst) or ".")).st_nlink > 0
    except OSError:
        return False


def checked_rename(src: str, dst: str, src_dir_fd: int, dst_dir_fd: int) -> None:
    """rename() after checking that ``dst`` is free: FileExistsError if it is not.

    ``store.rename_noreplace(shared=True)`` without renameat2 (a source other processes may be moving too):
    the source vanishing in one step is the exclusivity.  Never link() + unlink(): two movers
    can each link the same file under their own names, and the loser's second name (same
    inode) is a stale copy that recovery would later deliver again (the MooseFS duplicates of
    issue 28).  The check and the rename are two steps: a destination created between them is
    replaced, which a claim or an ACK cannot meet (their destination names the owner, who alone
    makes it) and a REDELIVER only if a foreign producer drops the very same name into target/
    in that instant.
    """
    if exists(dst, dst_dir_fd):
        _taken(src, dst, src_dir_fd)
    os.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)


def _taken(src: str, dst: str, src_dir_fd: int) -> NoReturn:
    """``dst`` was seen to exist: FileExistsError, or FileNotFoundError if ``src`` is gone too, as
    renameat2 answers (ENOENT before EEXIST): a lost race, not a name taken.  A consumer whose
    claim lost to another of its connection's sessions finds its own processing/ name made by
    the winner.  ``src`` is looked at after ``dst``: a mover that took it made ``dst`` first."""
    if not exists(src, src_dir_fd):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), src) from None
    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), src, None, dst) from None


def open_refused(path: str, dir_fd: int, flags: int, exc: OSError) -> int:
    """An open(O_CREAT|O_EXCL) of ``path`` answered ``exc`` (EEXIST or EPERM), where an EEXIST
    must be a file that exists: GlusterFS answered EEXIST to both of two racing creates and left
    no file, so a phantom EEXIST is tried again (three opens in all); a losing create's EPERM
    (sshfs) is the EEXIST it means.  The fd when a retry succeeds; else raises."""
    for attempt in range(1, 4):
        there = exists(path, dir_fd)
        if there and exc.errno == errno.EPERM:
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path) from None
        if there or exc.errno == errno.EPERM or attempt == 3:
            raise exc
        try:
            return os.open(path, flags, 0o644, dir_fd=dir_fd)
        except (FileExistsError, PermissionError) as again:
            exc = again
    raise AssertionError("unreachable")
