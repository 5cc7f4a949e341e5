"""Recovery after crashes: what a root looks like once every dead process is accounted for.

In order (the order matters: a committing log must ACK its receives before the
processing/ sweep could REDELIVER them):

1. transaction logs of dead owners: committing/ rolled forward, the rest back;
2. processing/ entries of dead owners: REDELIVER (they come back redelivered:
   our claim wrote the delivery count into the name; a foreign (1.2) claim kept
   the name, so the count is stamped on the way back, ``redelivery_name``);
3. orphaned working/ files older than ``orphan_age``, named by no transaction log
   and not held by a producer (working/'s lock): QUARANTINE to error/ (or DISCARD);
4. NEW messages whose expiration passed: EXPIRE;
5. (first, in fact) non-durable subscriptions whose consumers all died: removed, and what a
   crash left of a subscription's creation (older than ``orphan_age``) or removal.

A root-wide flock serialises recoverers; live owners are never touched.

What a connection schedules (``housekeeping``, ``finish_own``) runs on every consumer: it loads
only this module and liveness.py; the log machinery (transaction.py), the claim register, topics
and the walk of every dropbox are imported where there is work for them (a dead owner, a log to
finish, the operator's ``recover``).
"""

from __future__ import annotations

import fcntl
import functools
import importlib.metadata
import logging
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import codec, layout
from .layout import log_owner
from .liveness import is_dead, settle_leases
from .codec import from_wire, now_ms
from .dirs import ensure_plain_dir, pending_logs
from .store import Dropbox, NotARegularFile
from .errors import StoreError
from .lifecycle import Move, State

log = logging.getLogger("dropboxmq")

__all__ = ["RECOVERERS", "RecoveryReport", "recover", "recoverers", "reclaim_dead_owners", "reclaim_own_leftovers",
           "redelivery_name", "finish_dead_commits", "recover_owner", "finish_own", "housekeeping"]


@dataclass
class RecoveryReport:
    transactions: dict[str, int] = field(default_factory=dict)  # outcome -> count
    redelivered: int = 0
    orphans_quarantined: int = 0
    orphans_discarded: int = 0
    expired: int = 0
    subscriptions_removed: int = 0  # non-durable subscriptions of dead processes
    unfinished_removed: int = 0  # subscription directories a crash left half created or half removed
    claim_entries_removed: int = 0  # claim-register entries a crash or a lost race left behind
    in_doubt: dict[str, list[str]] = field(default_factory=dict)  # recoverer -> what awaits a decision
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "transactions": dict(self.transactions),
            "redelivered": self.redelivered,
            "orphans_quarantined": self.orphans_quarantined,
            "orphans_discarded": self.orphans_discarded,
            "expired": self.expired,
            "subscriptions_removed": self.subscriptions_removed,
            "unfinished_removed": self.unfinished_removed,
            "claim_entries_removed": self.claim_entries_removed,
            **{f"{name}_in_doubt": list(items) for name, items in self.in_doubt.items()},
            "errors": list(self.errors),
        }


#: The entry point group of recoverers: ``name = "module:function"``, the function takes the root,
#: finishes what it can and returns what still awaits a decision (reported as ``<name>_in_doubt``).
#: The library finds an integration's leftovers this way (XA's prepared branches) without
#: importing it: the integration depends on the library, never the other way.
RECOVERERS = "dropboxmq.recoverers"


@functools.cache
def recoverers() -> dict[str, importlib.metadata.EntryPoint]:
    return {entry.name: entry for entry in importlib.metadata.entry_points(group=RECOVERERS)}


class _RootLock:
    def __init__(self, root: Path):
        path = Path(root) / layout.INTERNAL / "recovery.lock"
        ensure_plain_dir(root, path.parent)
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
            if not stat.S_ISREG(os.fstat(self.fd).st_mode):
                os.close(self.fd)
                raise StoreError(f"{path} is not a regular file: remove it to let recovery run")
        except OSError as exc:
            raise StoreError(f"cannot lock {path}: {exc.strerror or exc}") from exc

    def __enter__(self) -> "_RootLock":
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def recover(
    root: str | Path,
    *,
    orphan_age: float = 3600.0,
    quarantine_orphans: bool = True,
    assume_unknown_dead: bool = False,
    expire: bool = True,
) -> RecoveryReport:
    """Recover every dropbox under ``root``.  ``orphan_age`` in seconds;
    ``assume_unknown_dead`` also reclaims entries of never-registered (foreign/1.2) clients.
    Where flock does not cross mounts, first watches the clients' leases until each is decided
    (up to 1.5 x the longest lease: leases.py), so a client on another host is not taken for dead."""
    from . import claims, inventory
    from .log_lifecycle import LogState
    from .topics import reclaim_orphans, sweep_unfinished
    from .transaction import recover_log

    root = Path(root)
    report = RecoveryReport()
    settle_leases(root)
    with _RootLock(root):
        for where, path in list(pending_logs(root)):
            owner = log_owner(path.name)
            if is_dead(root, owner, assume_unknown_dead):
                try:
                    outcome = recover_log(root, LogState(where), path)
                except (OSError, StoreError) as exc:
                    report.errors.append(f"{path}: {exc}")
                    continue
                report.transactions[outcome] = report.transactions.get(outcome, 0) + 1
        for name, finish in recoverers().items():  # e.g. dropboxmq_xa: decided 2PC branches finished
            try:
                report.in_doubt[name] = [str(x) for x in finish.load()(root)]
            except (OSError, StoreError, ImportError) as exc:  # must not stop the queues' recovery
                report.errors.append(f"{name}: {exc}")
        report.subscriptions_removed = reclaim_orphans(root)
        cutoff = time.time() - orphan_age
        report.unfinished_removed = sweep_unfinished(root, cutoff)
        now = now_ms()
        for _, box in inventory.all_dropboxes(root):
            report.redelivered += reclaim_dead_owners(root, box, assume_unknown_dead)
            _sweep_working(root, box, cutoff, quarantine_orphans, report)
            report.claim_entries_removed += claims.sweep_stale(box, cutoff)
            if expire:
                for name in box.list(State.NEW):
                    if from_wire(name, now).is_expired(now):
                        try:
                            report.expired += box.move(Move.EXPIRE, State.NEW, name)
                        except StoreError as exc:
                            report.errors.append(str(exc))
    return report


def _sweep_working(root: Path, box, cutoff: float, quarantine: bool, report: RecoveryReport) -> None:
    """QUARANTINE (or DISCARD) working/ files older than ``cutoff`` that no producer owns.
    A producer holds working/'s lock from CREATE to SEND (busy: skipped until next time); a
    transacted send is named by its log before its file exists, so the logs are read after
    the listing; a file linked to the same name in target/ was sent by an interrupted
    link()+unlink() rename."""
    try:
        fd = os.open(box.dir(State.NOT_COMMITTED), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return  # no working/ or no access: nothing to sweep
    try:
        try:  # producers hold it shared from CREATE to SEND (Dropbox.lock_working)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        names = box.list(State.NOT_COMMITTED)
        sent = _linked_names(box, State.NEW) if names else set()
        old = []
        for name in names:
            try:
                st = os.lstat(box.file(State.NOT_COMMITTED, name))
            except FileNotFoundError:
                continue
            try:
                if (st.st_ino, name) in sent:
                    report.orphans_discarded += box.move(Move.DISCARD, State.NOT_COMMITTED, name)
                elif st.st_mtime < cutoff:
                    old.append(name)
            except StoreError as exc:
                report.errors.append(str(exc))
        from .transaction import logged_sends  # (recover()'s sweep: recover() loaded the log machinery)

        logged = logged_sends(root) if old else set()
        for name in old:
            if name in logged:
                continue
            try:
                if quarantine:
                    report.orphans_quarantined += box.move(Move.QUARANTINE, State.NOT_COMMITTED, name)
                else:
                    report.orphans_discarded += box.move(Move.DISCARD, State.NOT_COMMITTED, name)
            except StoreError as exc:
                report.errors.append(str(exc))
    finally:
        os.close(fd)


def _linked_names(box, state: State) -> set[tuple[int, str]]:
    """(inode, name) of every file of ``state`` that has more than one link."""
    out = set()
    for name in box.list(state):
        try:
            st = os.lstat(box.file(state, name))
        except FileNotFoundError:
            continue
        if st.st_nlink > 1:
            out.add((st.st_ino, name))
    return out


# ---------------------------------------------------------------- dead owners' claims


def redelivery_name(original: str) -> str:
    """The name a dead owner's processing/ entry goes back to target/ under: it must carry
    a delivery count (trace_rules.COUNT_RULES), or the next delivery would say
    JMSRedelivered=false.  A claim that stamps the count (ours, the shell consumer) left
    one; a claim that keeps the name (1.2) left none on a first delivery: stamp 1.  (A
    kept name that already carries n cannot be told from a stamped one: it stays, so the
    flag is right, and the count is exact whenever the claim stamped it.)"""
    return original if codec.name_delivery_count(original) else codec.with_delivery_count(original, 1)


def _rename_results(pname: str, original: str) -> Callable[[State, str], bool]:
    """Could ``<state>/<name>`` be where a rename of ``processing/<pname>`` was going (or coming
    from)?  CLAIM and REDELIVER change only the delivery count; ACK, EXPIRE and DEAD_LETTER
    keep the name (or move it aside as ``<n>~<pname>``)."""
    core = codec.with_delivery_count(original, None)

    def renamed(state: State, name: str) -> bool:
        if state is State.NEW:
            return codec.with_delivery_count(name, None) == core
        return name == pname or name.endswith("~" + pname)

    return renamed


def reclaim_own_leftovers(root: Path, client_id: str) -> int:
    """REDELIVER every processing/ entry of ``client_id`` under ``root``: called by a connection
    that has just taken the id's lock, so every claim of that id is a dead predecessor's (a
    consumer killed -9 and restarted with the same id) -- nobody else may take them back while
    the id is live again.  Claims a checkpoint holds (a Spark query's) are left to it."""
    from .liveness import holds_claims

    if holds_claims(root, client_id):
        return 0
    from . import inventory  # (a connection with a client id: its predecessor's claims anywhere)

    moved = 0
    for _, box in inventory.all_dropboxes(root):
        for pname in box.list(State.DELIVERED):
            client, original = codec.split_processing_name(pname)
            if client == client_id:
                moved += _give_back(box, pname, original)
    return moved


def _give_back(box: Dropbox, pname: str, original: str) -> int:
    """REDELIVER a dead owner's ``processing/<pname>`` (1 if it moved).  An alias claim goes
    back under its message's name, its count kept by the claim register (claims.py); one
    whose register entry is lost has no headers left to deliver: DEAD_LETTER, for an operator."""
    from . import claims  # (a dead owner's claim: the register and the log machinery only then)
    from .transaction import drop_interrupted_link

    try:
        if claims.alias_inode(pname) is not None:
            name = claims.original_name(box, pname)
            if name is None:
                log.warning("claim %s of %s has no register entry: dead-lettered", pname, box.path)
                claims.finish(box, Move.DEAD_LETTER, pname)
                return 0
            return int(box.move(Move.REDELIVER, State.DELIVERED, pname, name))
        if drop_interrupted_link(box, State.DELIVERED, pname, _rename_results(pname, original)):
            return 0  # a claim/ack/redeliver cut short in the link()+unlink() fallback
        moved = box.move(Move.REDELIVER, State.DELIVERED, pname, redelivery_name(original))
        log.debug("redeliver %s of %s: %s", pname, box.path, "done" if moved else "gone already")
        return int(moved)
    except StoreError as exc:
        log.warning("cannot redeliver %s: %s", pname, exc)
        return 0


def reclaim_dead_owners(root: Path, box: Dropbox, assume_unknown_dead: bool = False) -> int:
    """REDELIVER every processing/ entry whose owner is dead. Returns how many."""
    moved = 0
    verdicts: dict[str, bool] = {}
    for pname in box.list(State.DELIVERED):
        client, original = codec.split_processing_name(pname)
        if client is None:
            dead = assume_unknown_dead
        else:
            # Our claims always carry their owner (claims.py: no bare claims), so the client
            # before the "~" is the owner; a bare name is 1.2's, whose owner is unknown.
            if client not in verdicts:
                verdicts[client] = is_dead(root, client, assume_unknown_dead)
                if verdicts[client]:
                    recover_owner(root, client)  # its committing/ log ACKs, the rest come back
            dead = verdicts[client]
        if dead:
            moved += _give_back(box, pname, original)
    return moved


def finish_dead_commits(root: Path) -> int:
    """Roll forward every committed (``committing/``) transaction whose owner is dead, so that a
    publisher killed in mid fan-out is finished by the consumers of its dropboxes, not only by
    an operator's ``recover``.  Owners never registered here are left alone.  Returns how many."""
    n = 0
    for where, path in list(pending_logs(root, ("committing",))):
        try:
            if is_dead(root, log_owner(path.name)) and _recover_ours(root, where, path):
                n += 1
        except (OSError, StoreError) as exc:
            # One transaction that cannot be finished must not stop every consumer of the root:
            # it stays in committing/ for `dropboxmq recover`, which reports it.
            log.warning("cannot finish transaction %s yet: %s", path.name, exc)
    return n


def _recover_ours(root: Path, where: str, path: Path) -> bool:
    """recover_log, leaving alone (with a warning) what is no log of ours."""
    from .log_lifecycle import LogState
    from .transaction import CorruptLogError, recover_log  # (a log to finish: the machinery only then)

    try:
        recover_log(root, LogState(where), path)
    except (NotARegularFile, CorruptLogError) as exc:  # hostile, not ours: left for an operator
        log.warning("transaction log %s left alone: %s", path, exc)
        return False
    return True


def recover_owner(root: Path, client_id: str) -> int:
    """Finish every transaction of one dead client (before its processing/ entries are
    redelivered: a committing log must ACK them, not see them redelivered).  Also run by a
    connection that has just taken the client id's lock: every log of that id is then its
    dead predecessor's (or its own, committed but left in doubt)."""
    n = 0
    for where, path in list(pending_logs(root)):
        if log_owner(path.name) == client_id:
            try:
                if _recover_ours(root, where, path):
                    n += 1
            except (OSError, StoreError) as exc:  # left for `dropboxmq recover`; the others go on
                log.warning("cannot finish transaction %s yet: %s", path.name, exc)
    return n


def finish_own(root: Path, client_id: str, leftovers: bool = False) -> None:
    """A connection's own leftovers, at connect and close: the transaction logs of its client id
    that no open session owns (committed ones forward, the rest back) and, with ``leftovers``, the
    unacknowledged claims a dead predecessor with this id left.  Best effort: what fails stays for
    the next connection or `dropboxmq recover`."""
    try:
        recover_owner(root, client_id)
    except (OSError, StoreError) as exc:
        log.warning("cannot finish the transactions left by client %r: %s", client_id, exc)
    try:
        if leftovers:
            reclaim_own_leftovers(root, client_id)
    except (OSError, StoreError) as exc:
        log.warning("cannot redeliver the messages left by client %r: %s", client_id, exc)


def housekeeping(root: Path, box: Dropbox, retention_seconds: float | None) -> None:
    """What a connection runs for each dropbox it consumes from, every ``recovery_interval``
    (``Connection.housekeeping``), so that no operator is needed: transactions a dead
    publisher committed are finished (e.g. killed in mid fan-out), a dead consumer's claims
    come back, and acknowledged and expired files older than the retention go."""
    finish_dead_commits(root)
    reclaim_dead_owners(root, box)
    if retention_seconds is not None:
        from . import retention  # (only with a retention set)

        retention.prune(box, ["processed", "expired"], retention_seconds, root=root)
