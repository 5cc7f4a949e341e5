"""Client-id registration (PROTOCOL.md §4): ``dropboxmq/clients/<enc(clientId)>`` is flocked while
the connection is open, so the kernel drops it when the process dies (1.2 left stale locks).  Where
flock does not cross mounts its record is a lease (leases.py).  What recovery asks is liveness.py.
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

from . import codec, filesystems
from .dirs import ensure_plain_dir, owns_pending_logs
from .errors import InvalidClientIDError, StoreError
from .message import validate_name
from .store import NotARegularFile, open_regular

if TYPE_CHECKING:
    from . import leases

__all__ = ["clients_dir", "registration_path", "Registration", "DEFAULT_LEASE"]

#: seconds: the default lease (Settings.lease)
DEFAULT_LEASE = 10.0


def clients_dir(root: Path) -> Path:
    return Path(root) / "dropboxmq" / "clients"


def registration_path(root: Path, client_id: str) -> Path:
    return clients_dir(root) / codec.encode_field(client_id)


class Registration:
    """An exclusive, crash-safe hold on a client id, with its lease where one is needed."""

    def __init__(self, root: Path, client_id: str, lease: float = DEFAULT_LEASE,
                 clock: Callable[[], float] | None = None, renew_in_background: bool = True):
        try:
            validate_name("client id", client_id)
        except Exception as exc:
            raise InvalidClientIDError(str(exc)) from None
        self.client_id, self.root, self.lease = client_id, Path(root), lease
        self.path = registration_path(root, client_id)
        fd = self._lock()
        self._fd: int | None = fd
        self._write_lock = threading.Lock()
        self._renewer: "leases.Renewer | None" = None
        try:
            # where a free lock proves death on every host, nobody reads the lease: no renewals and
            # no fencing (a process stopped for a while, a laptop asleep, keeps its messages)
            if not filesystems.flock_trusted(self.root):
                from . import leases

                self._renewer = leases.take_over((str(self.root), client_id), self.path, fd, self._write_beat,
                                                 lease, DEFAULT_LEASE, clock or time.monotonic)
            self._write_beat(0)
        except OSError as exc:  # ENOSPC, EFBIG...: give the lock back, or the id stays "in use" for good
            os.close(fd)
            raise StoreError(f"cannot register client id {client_id!r}: {exc.strerror or exc}") from None
        except BaseException:
            os.close(fd)
            raise
        self.leased = self._renewer is not None  # else check() does nothing: send, receive and ack skip it
        if renew_in_background and self._renewer is not None:
            self._renewer.start()

    def _lock(self) -> int:
        """Open and flock the registration file: the fd.  InvalidClientIDError if it is held."""
        while True:
            try:
                ensure_plain_dir(self.root, self.path.parent)
                fd = open_regular(self.path, os.O_RDWR | os.O_CREAT)
            except NotARegularFile:
                raise InvalidClientIDError(f"cannot register client id {self.client_id!r}: "
                                           f"{self.path} is not a regular file") from None
            except OSError as exc:
                raise StoreError(f"cannot register client id {self.client_id!r}: {exc.strerror or exc}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise InvalidClientIDError(f"client id {self.client_id!r} is in use by a live connection") from None
            # The file we locked may have been unlinked by its previous owner's close() between our
            # open and our flock: only the linked one counts.
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
                return fd
            os.close(fd)

    def _write_beat(self, beat: int) -> None:
        import socket

        # the record (xa.py reads its pid= and host=, leases.py its lease= and beat=)
        data = f"pid={os.getpid()} host={socket.gethostname()} lease={self.lease:g} beat={beat}\n".encode()
        with self._write_lock:  # never after release() closed the fd (its number may be reused)
            fd = self._fd
            if fd is None:
                raise OSError(errno.EBADF, "the registration is released")
            os.lseek(fd, 0, os.SEEK_SET)  # (not pwrite: pyfakefs, used by tests, has none)
            os.write(fd, data)
            os.ftruncate(fd, len(data))
            os.fsync(fd)  # other hosts see it when it is on the server, not in our cache

    def renew(self) -> bool:
        """Renew the lease now (the background thread does it every lease/3); True without one."""
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
        if not owns_pending_logs(self.root, self.client_id):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)  # while still holding the lock: see the inode check in _lock
        # else keep the file: with the lock gone the owner reads as dead, so recovery
        # finishes the transaction (e.g. a commit that failed past its point of no return)
        with self._write_lock:
            fd, self._fd = self._fd, None
            os.close(fd)
