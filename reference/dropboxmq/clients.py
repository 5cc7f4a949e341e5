"""Client-id registration with liveness (PROTOCOL.md §4: a dead owner is reclaimable).

``<root>/dropboxmq/clients/<enc(clientId)>`` is held with ``flock(LOCK_EX)`` for
as long as the connection is open.  The kernel drops the lock when the owning
process dies (kill -9 included), so "is the owner alive?" is "is the lock
held?" — no pid guessing, no stale locks after a crash (1.2's flaw).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
from pathlib import Path

from . import codec
from .errors import InvalidClientIDError, StoreError
from .message import validate_name
from .store import NotARegularFile, ensure_plain_dir, open_regular

__all__ = [
    "clients_dir", "registration_path", "Registration", "liveness", "live_clients", "is_dead",
    "hold_path", "holds_claims", "hold_for_checkpoint", "release_hold",
]


def clients_dir(root: Path) -> Path:
    return Path(root) / "dropboxmq" / "clients"


def registration_path(root: Path, client_id: str) -> Path:
    return clients_dir(root) / codec.encode_field(client_id)


class Registration:
    """An exclusive, crash-safe hold on a client id."""

    def __init__(self, root: Path, client_id: str):
        try:
            validate_name("client id", client_id)
        except Exception as exc:
            raise InvalidClientIDError(str(exc)) from None
        self.client_id = client_id
        self.root = Path(root)
        self.path = registration_path(root, client_id)
        while True:
            try:
                ensure_plain_dir(self.root, self.path.parent)
                fd = open_regular(self.path, os.O_RDWR | os.O_CREAT)
            except NotARegularFile:
                raise InvalidClientIDError(
                    f"cannot register client id {client_id!r}: {self.path} is not a regular file") from None
            except OSError as exc:
                raise StoreError(f"cannot register client id {client_id!r}: {exc.strerror or exc}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise InvalidClientIDError(
                    f"client id {client_id!r} is in use by a live connection"
                ) from None
            # The file we locked may have been unlinked by its previous owner's
            # close() between our open and our flock: only the linked one counts.
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same and os.fstat(fd).st_nlink > 1:
                # a hard link to some other file: truncating it would change that file
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
                same = False
            if same:
                break
            os.close(fd)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"pid={os.getpid()} host={socket.gethostname()}\n".encode())
        except OSError as exc:  # ENOSPC, EFBIG...: give the lock back, or the id stays "in use" for good
            os.close(fd)
            raise StoreError(f"cannot register client id {client_id!r}: {exc.strerror or exc}") from None
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is None:
            return
        if not _owns_pending_logs(self.root, self.client_id):
            try:
                os.unlink(self.path)  # while still holding the lock: see the inode check above
            except FileNotFoundError:
                pass
        # else keep the file: with the lock gone the owner reads as dead, so recovery
        # finishes the transaction (e.g. a commit that failed past its point of no return)
        os.close(self._fd)
        self._fd = None


def _owns_pending_logs(root: Path, client_id: str) -> bool:
    from .transaction import log_owner, pending_logs

    try:
        return any(log_owner(path.name) == client_id for _, path in pending_logs(root))
    except OSError:
        return True  # cannot tell: keep the registration, the safe side


def liveness(root: Path, client_id: str) -> str:
    """'alive', 'dead' (registered, lock free) or 'unknown' (never registered here:
    a foreign or 1.2 client, which recovery leaves alone unless told otherwise)."""
    path = registration_path(root, client_id)
    try:
        fd = open_regular(path)
    except (FileNotFoundError, NotARegularFile):
        return "unknown"  # a FIFO or symlink is no registration of ours
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return "unknown"  # a foreign name's "owner" that no registration can be named after
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return "alive"
    finally:
        os.close(fd)
    return "dead"


def live_clients(root: Path) -> list[str]:
    """Every client id whose registration is held right now."""
    try:
        names = os.listdir(clients_dir(root))
    except FileNotFoundError:
        return []
    ids = [codec.decode_field(n) for n in names if not n.startswith(".")]
    return [c for c in ids if liveness(root, c) == "alive"]


def is_dead(root: Path, client_id: str, assume_unknown_dead: bool = False) -> bool:
    state = liveness(root, client_id)
    checkpoint = _hold(root, client_id)
    if checkpoint is not None and state != "alive":  # a known client whose claims a checkpoint may own
        return not _checkpoint_exists(checkpoint)
    return state == "dead" or (state == "unknown" and assume_unknown_dead)


# ---- checkpoint holds: claims owned by a durable commit log, not by a process
#
# A consumer whose acknowledgement is decided by an external commit log (a Spark query's
# checkpoint) may commit a batch after any number of restarts, so its claims must outlive its
# process: while its checkpoint exists it is never dead to recoverers.  Deleting the checkpoint,
# or ``dropboxmq recover --release CLIENT`` (which empties the hold), makes it a dead owner.


def hold_path(root: Path, client_id: str) -> Path:
    return Path(root) / "dropboxmq" / "holds" / codec.encode_field(client_id)


def _write_hold(path: Path, checkpoint: str) -> None:
    os.makedirs(path.parent, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(checkpoint)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _hold(root: Path, client_id: str) -> str | None:
    """The checkpoint holding ``client_id``'s claims ('' once released), or None: no hold."""
    try:
        return hold_path(root, client_id).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None


def _checkpoint_exists(checkpoint: str) -> bool:
    """A checkpoint on a non-local file system (``scheme://...``) cannot be checked here: it
    holds until released."""
    if not checkpoint:
        return False
    if checkpoint.startswith("file:"):
        checkpoint = checkpoint[len("file:"):]
    elif "://" in checkpoint:
        return True
    return os.path.exists(checkpoint)


def holds_claims(root: Path, client_id: str) -> bool:
    """Does a checkpoint (that still exists) own ``client_id``'s claims, whatever its process?"""
    checkpoint = _hold(root, client_id)
    return checkpoint is not None and _checkpoint_exists(checkpoint)


def hold_for_checkpoint(root: Path, client_id: str, checkpoint: str) -> None:
    """Record (durably) that ``client_id``'s claims belong to ``checkpoint`` (a path or URI)."""
    if _hold(root, client_id) != checkpoint:
        _write_hold(hold_path(root, client_id), checkpoint)


def release_hold(root: Path, client_id: str) -> bool:
    """The operator's word that the query is gone for good: its claims become a dead owner's.
    Returns whether a hold existed."""
    if _hold(root, client_id) is None:
        return False
    _write_hold(hold_path(root, client_id), "")
    return True
