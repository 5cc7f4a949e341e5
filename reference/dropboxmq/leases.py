"""Leases: is a client alive, seen from another host, where flock does not cross mounts?

A client's registration file (``<root>/dropboxmq/clients/<enc(clientId)>``, clients.py) holds
its *lease record*, one line: ``pid=<pid> host=<host> lease=<L seconds> beat=<n>``.  The owner
rewrites it (``beat`` + 1, then fsync) every ``L/3`` while its connection is open, and a clean
close removes the file.

Nobody ever compares clocks across hosts.  The two sides each use their own monotonic clock:

* the **owner** counts a renewal only if it finished within ``L/3`` of its start, and fences
  itself (every later acknowledge, commit, send and receive fails with ``LeaseExpiredError``;
  for good: the connection must be closed and opened again) once ``FENCE_AFTER = 0.8 L`` have
  passed since the start of its last renewal that counted;
* an **observer** declares the owner dead only once *it* has seen the record unchanged for
  longer than ``DEAD_AFTER = 1.5 L`` (the record's own ``L``), timed from the first time it
  saw that content.

The gap between the two, ``0.7 L`` (7 s with the default ``L`` = 10 s), is the skew bound: it
absorbs the difference in rate between the two monotonic clocks (safe while each is within
30 % of real time: ``0.8 L / (1 - r) < 1.5 L / (1 + r)`` for ``r < 0.30``; NTP-disciplined
clocks are within 0.01 %), plus the visibility delay of a renewal (a renewal counts only if it
was durable within ``L/3``, so it is visible before ``1.5 L`` have passed).  A stalled owner
whose acknowledgement was already in flight when it was fenced is caught by construction:
recovery renames its ``processing/<owner>~NAME`` away, so the late ACK finds no source and
fails (session.py).

Where flock does cross mounts (local disks, GlusterFS, MooseFS) a free lock still means dead
at once (the fast path, ``filesystems.flock_trusted``): no lease is renewed and this
module is never imported; elsewhere (sshfs, SMB, NFS without lockd, an unknown FUSE file system)
the lease decides.

Pure core: ``Observer`` and ``Renewer`` take their clock; the record's format is the registration's
(``clients.Registration``), its I/O ``Renewer``'s ``write`` callable.  :func:`take_over` is what a
registration does where its flock proves nothing about other hosts.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable

from .errors import IllegalStateError, InvalidClientIDError
from .store import NotARegularFile, open_regular

__all__ = ["FENCE_AFTER", "DEAD_AFTER", "RENEW_EVERY", "Observer", "Renewer", "OBSERVER", "wait_for_other_hosts",
           "read_from", "record_lease", "take_over", "LeaseExpiredError"]


class LeaseExpiredError(IllegalStateError):
    """This connection could not renew its lease in time (leases.py): another host may already
    have declared it dead and given its messages to other consumers, so it is fenced: every
    acknowledge, commit, send and receive fails.  Close the connection and connect again."""


#: fractions of the lease: the owner renews every RENEW_EVERY, fences itself FENCE_AFTER after the
#: start of its last renewal that counted; an observer declares it dead past DEAD_AFTER unchanged
RENEW_EVERY = 1 / 3
FENCE_AFTER = 0.8
DEAD_AFTER = 1.5

class Observer:
    """What this process has seen of other clients' lease records: for each (root, client), the
    record's content and when (on this process's monotonic clock) that content was first seen."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._seen: dict[tuple[str, str], tuple[bytes, float, float]] = {}  # record, first seen, its lease
        self._lock = threading.Lock()

    def expired(self, key: tuple[str, str], data: bytes, lease: float) -> bool:
        """Has ``data`` (declaring ``lease``: :func:`record_lease`) been the record of ``key``
        for longer than DEAD_AFTER its lease?  A first sight or a change starts the timer again
        (the owner renewed: alive)."""
        now = self.clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is None or seen[0] != data:
                self._seen[key] = (data, now, lease)
                return False
            return now - seen[1] > DEAD_AFTER * lease

    def decided_at(self, key: tuple[str, str]) -> float | None:
        """When (this clock) the record now seen for ``key`` would expire, unless it changes."""
        with self._lock:
            seen = self._seen.get(key)
        return None if seen is None else seen[1] + DEAD_AFTER * seen[2]

    def forget(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._seen.pop(key, None)


#: the process's observer: every liveness question of this process goes through it
OBSERVER = Observer()


def read_from(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 4096)


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


def record_lease(data: bytes, default: float) -> float:
    """The lease a record declares (``default`` for a record without one: a 1.2 or older file)."""
    for field in data.split():
        if field.startswith(b"lease="):
            try:
                value = float(field[6:])
            except ValueError:
                break
            if 0 < value < 1e6:
                return value
    return default


def take_over(key: tuple[str, str], path: Path, fd: int, write: Callable[[int], None], lease: float,
              default: float, clock: Callable[[], float]) -> "Renewer":
    """A registration just locked ``fd`` (the file at ``path``), where the lock proves nothing about
    other hosts: take the id ``key`` over only once the record found in it stayed unchanged past its
    bound (:func:`wait_for_other_hosts`), then the renewer of the new owner's lease."""
    first = read_from(fd)  # empty: a new file, or one a crash left empty (no lease in it)
    if first.strip() and not wait_for_other_hosts(key, first, record_lease(first, default),
                                                  lambda: _read_record(path)):
        raise InvalidClientIDError(f"client id {key[1]!r} is in use by a live connection on another host "
                                   "(its lease was renewed)")
    return Renewer(write, lease, clock)


#: how a registration waits for another host's lease to run out (tests replace it)
sleep: Callable[[float], None] = time.sleep


def wait_for_other_hosts(key: tuple[str, str], first: bytes, lease: float, read: Callable[[], bytes | None]) -> bool:
    """A registration whose flock proves nothing about other hosts found the record ``first``
    (declaring ``lease``) in its file: take the id over only once that record has stayed
    unchanged past its bound (the owner died, or was fenced).  ``read()`` reads the record again
    (None: gone).  False if it was renewed meanwhile: the id is in use on another host."""
    while not OBSERVER.expired(key, first, lease):
        data = read()
        if data is None or not data.strip():
            return True  # its owner closed cleanly meanwhile
        if data != first:
            return False
        at = OBSERVER.decided_at(key)
        sleep(max(0.05, min(RENEW_EVERY * lease / 2,  # (past the bound, not at it)
                            (at or 0.0) - OBSERVER.clock() + 0.01)))
    OBSERVER.forget(key)
    return True


class Renewer:
    """The owner's side of a lease.  ``write(beat)`` makes the record with that beat durable
    (raises OSError when it cannot); ``start()`` runs the renewals on a daemon thread, tests call
    ``renew()``."""

    def __init__(self, write: Callable[[int], None], lease: float, clock: Callable[[], float] = time.monotonic):
        if not lease > 0:
            raise ValueError(f"a lease is a positive number of seconds, not {lease!r}")
        self.lease = lease
        self.clock = clock
        self._write = write
        self.beat = 0
        self._valid_from = clock()  # the registration's own write (the caller's) counts as a renewal
        self._fenced = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def renew(self) -> bool:
        """Write the next record; True if it counts.  Never after being fenced: the owner may no
        longer look alive once it may have been declared dead."""
        started = self.clock()
        if self.fenced():
            return False
        self.beat += 1
        try:
            self._write(self.beat)
        except OSError:
            return False  # the server is gone, the disk full...: the lease runs out, then fenced
        if self.clock() - started > RENEW_EVERY * self.lease:
            return False  # durable too late to be sure observers saw it in time
        self._valid_from = started
        return True

    def fenced(self) -> bool:
        if not self._fenced and self.clock() - self._valid_from > FENCE_AFTER * self.lease:
            self._fenced = True  # for good: a later renewal would not undo a recovery
        return self._fenced

    def check(self, what: str) -> None:
        if self.fenced():
            raise LeaseExpiredError(
                f"cannot {what}: this connection could not renew its lease within {FENCE_AFTER * self.lease:g} s, "
                "so other hosts may have taken its messages (it is fenced); close it and connect again")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="dropboxmq-lease", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(RENEW_EVERY * self.lease):
            self.renew()
            if self._fenced:
                return

    def stop(self) -> None:
        """No renewal after this (one in flight may still be writing: ``write`` must refuse once
        its file is closed)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(1.0)  # a write hung on a dead server must not hang close()
