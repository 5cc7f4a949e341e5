"""Client-id registration with liveness (PROTOCOL.md §4: a dead owner is reclaimable).

``<root>/dropboxmq/clients/<enc(clientId)>`` is held with ``flock(LOCK_EX)`` for
as long as the connection is open.  The kernel drops the lock when the owning
process dies (kill -9 included), so "is the owner alive?" is "is the lock
held?" — no pid guessing, no stale locks after a crash (1.2's flaw).

The file also holds the owner's record (``pid=<pid> host=<host> lease=<L> beat=<n>``: xa.py reads
who holds the id).  Where flock does not cross mounts (sshfs, SMB, an unknown FUSE file system)
a free lock proves nothing about other hosts: the record is a lease, renewed while the connection
is open (leases.py, imported only then), and an owner is dead only once this process has seen
its record unchanged for longer than the lease's bound.  What recovery asks of a
registration (is its owner alive?) is liveness.py.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from . import codec
from .errors import InvalidClientIDError, StoreError
from .message import validate_name
from .store import NotARegularFile, ensure_plain_dir, open_regular

if TYPE_CHECKING:
    from . import leases

__all__ = [
    "clients_dir", "registration_path", "Registration", "flock_trusted", "try_flock", "read_from", "DEFAULT_LEASE",
    "record", "record_lease",
]

#: seconds: the default lease (Settings.lease)
DEFAULT_LEASE = 10.0

_trusted: dict[str, bool] = {}


def flock_trusted(root: Path) -> bool:
    """Does a free flock under ``root`` prove its owner dead on every host (leases.py)?  The
    verdict of ``dropboxmq doctor`` when the root has one ("supported": locks cross mounts;
    "supported with leases": they do not), else the file system's type."""
    from .doctor import SUPPORTED, verdict_for  # (the doctor imports the store, as this module does)
    from .filesystems import file_system_type, flock_crosses_mounts  # (once per root, when a connection registers)

    key = str(root)
    trusted = _trusted.get(key)
    if trusted is None:
        verdict = verdict_for(Path(root))
        trusted = verdict.level == SUPPORTED if verdict is not None else \
            flock_crosses_mounts(file_system_type(Path(root)))
        _trusted[key] = trusted
    return trusted


def try_flock(fd: int, exclusive: bool) -> bool:
    """flock without waiting: True if taken (False: some process of this host holds it)."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def read_from(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 4096)


def record(lease: float, beat: int) -> bytes:
    """The record a registration holds (xa.py reads its ``pid=`` and ``host=``)."""
    import socket

    return f"pid={os.getpid()} host={socket.gethostname()} lease={lease:g} beat={beat}\n".encode()


def record_lease(data: bytes) -> float:
    """The lease a record declares (the default for a record without one: a 1.2 or older file)."""
    for field in data.split():
        if field.startswith(b"lease="):
            try:
                value = float(field[6:])
            except ValueError:
                break
            if 0 < value < 1e6:
                return value
    return DEFAULT_LEASE


def _read_record(path: Path) -> bytes | None:
    """The lease record at ``path`` (a fresh open: what the server has now), None if gone."""
    try:
        fd = open_regular(path)
    except (FileNotFoundError, NotARegularFile):
        return None
    try:
        return read_from(fd)
    finally:
        os.close(fd)


def clients_dir(root: Path) -> Path:
    return Path(root) / "dropboxmq" / "clients"


def registration_path(root: Path, client_id: str) -> Path:
    return clients_dir(root) / codec.encode_field(client_id)


class Registration:
    """An exclusive, crash-safe hold on a client id, with its lease (leases.py)."""

    def __init__(self, root: Path, client_id: str, lease: float = DEFAULT_LEASE,
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
            if not try_flock(fd, exclusive=True):
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
        self.lease = lease
        self._renewer: "leases.Renewer | None" = None
        try:
            if self.leased:
                from . import leases  # (only where a free flock proves nothing)

                first = read_from(fd)  # empty: a new file, or one a crash left empty (no lease in it)
                if first.strip() and not leases.wait_for_other_hosts(
                        (str(self.root), client_id), first, record_lease(first), lambda: _read_record(self.path)):
                    raise InvalidClientIDError(
                        f"client id {client_id!r} is in use by a live connection on another host "
                        "(its lease was renewed)")
                self._renewer = leases.Renewer(self._write_beat, lease, clock or time.monotonic)
            self._fd: int | None = fd
            self._write_lock = threading.Lock()
            self._write_beat(0)
        except OSError as exc:  # ENOSPC, EFBIG...: give the lock back, or the id stays "in use" for good
            os.close(fd)
            raise StoreError(f"cannot register client id {client_id!r}: {exc.strerror or exc}") from None
        except BaseException:
            os.close(fd)
            raise
        if renew_in_background and self._renewer is not None:
            self._renewer.start()

    def _write_beat(self, beat: int) -> None:
        data = record(self.lease, beat)
        with self._write_lock:  # never after release() closed the fd (its number may be reused)
            fd = self._fd
            if fd is None:
                raise OSError(errno.EBADF, "the registration is released")
            os.lseek(fd, 0, os.SEEK_SET)  # (not pwrite: pyfakefs, used by tests, has none)
            os.write(fd, data)
            os.ftruncate(fd, len(data))
            os.fsync(fd)  # other hosts see it when it is on the server, not in our cache

    def renew(self) -> bool:
        """Renew the lease now (the background thread does it every lease/3); True without a
        lease (nothing to renew)."""
        return self._renewer is None or self._renewer.renew()

    def check(self, what: str) -> None:
        """LeaseExpiredError if this registration's lease ran out (leases.py: fenced)."""
        if self._renewer is not None:
            self._renewer.check(what)

    def release(self) -> None:
        if self._fd is None:
            return
        if self._renewer is not None:
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
