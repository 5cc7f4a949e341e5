"""Who is alive: what recovery asks of a client id's registration (clients.py), and the
checkpoint holds that make a client's claims outlive its process.

A registration's lock is held while its connection is open; where flock does not cross mounts,
its lease record decides (leases.py).  Only recovery, ``dropboxmq recover`` and the integrations
ask: a send, a receive or an acknowledge never does.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import time
from pathlib import Path
from typing import Callable

from . import clients, codec, filesystems, leases
from .store import NotARegularFile, open_regular, read_record

log = logging.getLogger("dropboxmq")

__all__ = [
    "liveness", "settle_leases", "live_clients", "is_dead", "hold_path", "holds_claims", "hold_for_checkpoint",
    "release_hold",
]

#: how settle_leases waits for a lease to be decided (tests replace it)
sleep: Callable[[float], None] = time.sleep


def liveness(root: Path, client_id: str) -> str:
    """'alive', 'dead' (registered, lock free, and -- where flock does not cross mounts -- its
    lease record unchanged past its bound, as this process saw it) or 'unknown' (never
    registered here: a foreign or 1.2 client, which recovery leaves alone unless told otherwise)."""
    return _liveness(root, client_id)[0]


def _liveness(root: Path, client_id: str) -> tuple[str, bool]:
    """liveness(), and whether the lease decided it (False: the lock, or no registration)."""
    path = clients.registration_path(root, client_id)
    try:
        fd = open_regular(path)
    except (FileNotFoundError, NotARegularFile):
        return "unknown", False  # a FIFO or symlink is no registration of ours
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return "unknown", False  # a foreign name's "owner" that no registration can be named after
        raise
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return "alive", False  # its owner holds it exclusive
        if filesystems.flock_trusted(Path(root)):
            return "dead", False
        data = leases.read_from(fd)
    finally:
        os.close(fd)
    if not leases.OBSERVER.expired((str(root), client_id), data, leases.record_lease(data, clients.DEFAULT_LEASE)):
        return "alive", True
    log.info("client %r of %s is dead: its lease record %r stayed unchanged past its bound", client_id, root, data)
    return "dead", True


def settle_leases(root: Path, timeout: float | None = None) -> None:
    """Watch every registration whose lock is free until its lease is decided (renewed: alive;
    unchanged past its bound: dead), so that a one-shot recovery (``dropboxmq recover``) can
    tell a dead client from a live one on another host.  Returns at once where flock crosses
    mounts; else waits up to the longest bound (``timeout`` caps it)."""
    if filesystems.flock_trusted(Path(root)):
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
        names = os.listdir(clients.clients_dir(root))
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
        return read_record(hold_path(root, client_id)).decode("utf-8").strip()
    except FileNotFoundError:
        return None
    except (NotARegularFile, ValueError):  # a FIFO, a symlink, a huge or undecodable file: no hold of ours
        return None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return None  # a foreign name's "owner" that no hold can be named after
        raise


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
