"""Client-id registration with liveness (PROTOCOL.md §4: a dead owner is reclaimable).

``<root>/dropboxmq/clients/<enc(clientId)>`` is held with ``flock(LOCK_EX)`` for
as long as the connection is open.  The kernel drops the lock when the owning
process dies (kill -9 included), so "is the owner alive?" is "is the lock
held?" — no pid guessing, no stale locks after a crash (1.2's flaw).

The file also holds the owner's lease record, renewed while the connection is open
(leases.py): where flock does not cross mounts (sshfs, SMB, an unknown FUSE file system)
a free lock proves nothing about other hosts, and an owner is dead only once this process
has seen its record unchanged for longer than the lease's bound.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
import time
from pathlib import Path
from typing import Callable

from . import codec, leases
from .errors import InvalidClientIDError, StoreError
from .message import validate_name
from .store import NotARegularFile, ensure_plain_dir, file_system_type, open_regular

__all__ = [
    "clients_dir", "registration_path", "Registration", "liveness", "live_clients", "is_dead",
    "hold_path", "holds_claims", "hold_for_checkpoint", "release_hold", "flock_trusted", "settle_leases",
]

_trusted: dict[str, bool] = {}


def flock_trusted(root: Path) -> bool:
    """Does a free flock under ``root`` prove its owner dead on every host (leases.py)?  The
    verdict of ``dropboxmq doctor`` when the root has one ("supported": locks cross mounts;
    "supported with leases": they do not), else the file system's type."""
    from .doctor import SUPPORTED, verdict_for  # (the doctor imports the store, as this module does)

    key = str(root)
    trusted = _trusted.get(key)
    if trusted is None:
        verdict = verdict_for(Path(root))
        trusted = verdict.level == SUPPORTED if verdict is not None else \
            leases.flock_crosses_mounts(file_system_type(Path(root)))
        _trusted[key] = trusted
    return trusted


def _try_flock(fd: int, exclusive: bool) -> bool:
    """flock without waiting: True if taken (False: some process of this host holds it)."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _read_from(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 4096)


def _read_record(path: Path) -> bytes | None:
    """The lease record at ``path`` (a fresh open: what the server has now), None if gone."""
    try:
        fd = open_regular(path)
    except (FileNotFoundError, NotARegularFile):
        return None
    try:
        return _read_from(fd)
    finally:
        os.close(fd)


#: how the registration waits for another host's lease to run out (tests replace it)
sleep: Callable[[float], None] = time.sleep


def clients_dir(root: Path) -> Path:
    return Path(root) / "dropboxmq" / "clients"


def registration_path(root: Path, client_id: str) -> Path:
    return clients_dir(root) / codec.encode_field(client_id)


class Registration:
    """An exclusive, crash-safe hold on a client id, with its lease (leases.py)."""

    def __init__(self, root: Path, client_id: str, lease: float = leases.DEFAULT_LEASE,
                 clock: Callable[[], float] | None = None, renew_in_background: bool = True):
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
            if not _try_flock(fd, exclusive=True):
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
        # where a free lock proves death on every host, nobody reads the lease: no renewals and
        # no fencing (a process stopped for a while, a laptop asleep, keeps its messages)
        self.leased = not flock_trusted(self.root)
        try:
            if self.leased:
                self._wait_for_other_hosts(fd)
            self._fd: int | None = fd
            self._write_lock = threading.Lock()
            self._renewer = leases.Renewer(self._write_record, lease, clock or time.monotonic)
            self._write_record(leases.record(lease, 0))
        except OSError as exc:  # ENOSPC, EFBIG...: give the lock back, or the id stays "in use" for good
            os.close(fd)
            raise StoreError(f"cannot register client id {client_id!r}: {exc.strerror or exc}") from None
        except BaseException:
            os.close(fd)
            raise
        if renew_in_background and self.leased:
            self._renewer.start()

    def _wait_for_other_hosts(self, fd: int) -> None:
        """Our flock proves nothing about other hosts here: if the file holds a lease record,
        take the id over only once that record has stayed unchanged past its bound (the owner
        died, or was fenced); InvalidClientIDError if it is renewed meanwhile."""
        first = _read_from(fd)
        if not first.strip():
            return  # a new file, or one a crash left empty: no owner ever wrote a lease in it
        key = (str(self.root), self.client_id)
        while not leases.OBSERVER.expired(key, first):
            data = _read_record(self.path)
            if data is None or not data.strip():
                return  # its owner closed cleanly meanwhile
            if data != first:
                raise InvalidClientIDError(
                    f"client id {self.client_id!r} is in use by a live connection on another host "
                    "(its lease was renewed)")
            at = leases.OBSERVER.decided_at(key)
            sleep(max(0.05, min(leases.RENEW_EVERY * leases.record_lease(first) / 2,  # (past the bound, not at it)
                                (at or 0.0) - leases.OBSERVER.clock() + 0.01)))
        leases.OBSERVER.forget(key)

    def _write_record(self, data: bytes) -> None:
        with self._write_lock:  # never after release() closed the fd (its number may be reused)
            fd = self._fd
            if fd is None:
                raise OSError(errno.EBADF, "the registration is released")
            os.lseek(fd, 0, os.SEEK_SET)  # (not pwrite: pyfakefs, used by tests, has none)
            os.write(fd, data)
            os.ftruncate(fd, len(data))
            os.fsync(fd)  # other hosts see it when it is on the server, not in our cache

    def renew(self) -> bool:
        """Renew the lease now (the background thread does it every lease/3)."""
        return self._renewer.renew()

    def check(self, what: str) -> None:
        """LeaseExpiredError if this registration's lease ran out (leases.py: fenced)."""
        if self.leased:
            self._renewer.check(what)

    def release(self) -> None:
        if self._fd is None:
            return
        self._renewer.stop()
        if not _owns_pending_logs(self.root, self.client_id):
            try:
                os.unlink(self.path)  # while still holding the lock: see the inode check above
            except FileNotFoundError:
                pass
        # else keep the file: with the lock gone the owner reads as dead, so recovery
        # finishes the transaction (e.g. a commit that failed past its point of no return)
        with self._write_lock:
            fd, self._fd = self._fd, None
            os.close(fd)


def _owns_pending_logs(root: Path, client_id: str) -> bool:
    from .transaction import log_owner, pending_logs

    try:
        return any(log_owner(path.name) == client_id for _, path in pending_logs(root))
    except OSError:
        return True  # cannot tell: keep the registration, the safe side


def liveness(root: Path, client_id: str) -> str:
    """'alive', 'dead' (registered, lock free, and -- where flock does not cross mounts -- its
    lease record unchanged past its bound, as this process saw it) or 'unknown' (never
    registered here: a foreign or 1.2 client, which recovery leaves alone unless told otherwise)."""
    return _liveness(root, client_id)[0]


def _liveness(root: Path, client_id: str) -> tuple[str, bool]:
    """liveness(), and whether the lease decided it (False: the lock, or no registration)."""
    path = registration_path(root, client_id)
    try:
        fd = open_regular(path)
    except (FileNotFoundError, NotARegularFile):
        return "unknown", False  # a FIFO or symlink is no registration of ours
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return "unknown", False  # a foreign name's "owner" that no registration can be named after
        raise
    try:
        if not _try_flock(fd, exclusive=False):
            return "alive", False
        if flock_trusted(Path(root)):
            return "dead", False
        data = _read_from(fd)
    finally:
        os.close(fd)
    return ("dead" if leases.OBSERVER.expired((str(root), client_id), data) else "alive"), True


def settle_leases(root: Path, timeout: float | None = None) -> None:
    """Watch every registration whose lock is free until its lease is decided (renewed: alive;
    unchanged past its bound: dead), so that a one-shot recovery (``dropboxmq recover``) can
    tell a dead client from a live one on another host.  Returns at once where flock crosses
    mounts; else waits up to the longest bound (``timeout`` caps it)."""
    if flock_trusted(Path(root)):
        return
    clock = leases.OBSERVER.clock
    started = clock()
    pending = set(_registered(root))
    while pending:
        for client_id in list(pending):
            key = (str(root), client_id)
            before = leases.OBSERVER.decided_at(key)
            state, by_lease = _liveness(root, client_id)
            if state != "alive" or not by_lease or (before is not None and leases.OBSERVER.decided_at(key) != before):
                pending.discard(client_id)  # dead, gone, locked by this host, or renewed since: decided
        ats = [leases.OBSERVER.decided_at((str(root), c)) for c in pending]
        wake = min((a for a in ats if a is not None), default=clock())
        if not pending or (timeout is not None and clock() - started >= timeout):
            return
        sleep(max(0.05, min(wake - clock() + 0.01, 1.0)))


def _registered(root: Path) -> list[str]:
    try:
        names = os.listdir(clients_dir(root))
    except FileNotFoundError:
        return []
    return [codec.decode_field(n) for n in names if not n.startswith(".")]


def live_clients(root: Path) -> list[str]:
    """Every client id whose registration is held right now."""
    return [c for c in _registered(root) if liveness(root, c) == "alive"]


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
