"""A small two-phase-commit coordinator: enough to drive a dropbox XA session and a
database connection together -- documented, not a full transaction manager.

Resources are anything with the DB-API 2.0 two-phase extension: ``xid()``,
``tpc_begin``, ``tpc_prepare``, ``tpc_commit``, ``tpc_rollback``,
``tpc_recover`` -- a :class:`dropboxmq_xa.XASession` and a psycopg 3
``Connection`` both qualify.  Typical use (consume a message and write its row,
or neither)::

    coord = Coordinator("/var/lib/app/tm", name="worker-1")
    coord.recover({"mq": xa_session, "db": pg})        # on start: finish in-doubt work
    tx = coord.begin({"mq": xa_session, "db": pg})     # tpc_begin on each
    msg = consumer.receive(1)
    pg.execute("INSERT ...", (...))
    coord.commit(tx)                                   # or coord.rollback(tx)

``commit`` is the classic protocol with *presumed abort*:

1. phase one: ``tpc_prepare`` every resource; any failure -> ``tpc_rollback``
   all, nothing is logged;
2. the decision: ``<dir>/<enc(gtrid)>.commit`` is written, fsynced, and its
   directory fsynced -- the transaction's point of no return;
3. phase two: ``tpc_commit`` every resource in order;
4. the decision file is deleted (the coordinator "forgets").

With a single resource, ``commit`` is a one-phase commit (no prepare, no log).

``recover`` is what a restarted coordinator runs first: it asks each resource
for its prepared branches (``tpc_recover``), keeps those whose gtrid is its own
(``<name>.<uuid>``: coordinators with different names never touch each other's
branches), commits those with a decision file and rolls back the others (no
decision = never decided = abort), then forgets decisions none of whose
branches is still in doubt.  A crash anywhere -- before the decision, between
the decision and the first commit, between two commits -- is therefore
finished the same way on restart.  One process per coordinator name: the
decision directory is flock'ed while a Coordinator is open (the lock dies with
the process, so a restarted one gets it).

``on_step`` (tests only) is called with "prepared:<res>", "decided",
"committed:<res>" and "rolled-back:<res>" so a test can kill -9 the process at
an exact point of the protocol.
"""

from __future__ import annotations

import fcntl
import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from dropboxmq import codec
from dropboxmq.errors import DropboxMQError
from dropboxmq.making import replace_durably
from dropboxmq.store import fsync_dir
from . import DEFAULT_FORMAT_ID

__all__ = [
    "DECISION_SUFFIX", "CoordinatorError", "HeuristicError", "GlobalTx", "RecoveryResult", "Coordinator",
]

DECISION_SUFFIX = ".commit"


class CoordinatorError(DropboxMQError):
    pass


class HeuristicError(CoordinatorError):
    """Phase two could not complete on some resource; the decision is kept and
    ``recover()`` retries it."""


@dataclass
class GlobalTx:
    gtrid: str
    format_id: int
    branches: dict[str, Any]  # resource name -> that resource's xid object
    resources: dict[str, Any]
    state: str = "active"  # active | committed | rolled back
    prepared: list[str] = field(default_factory=list)


@dataclass
class RecoveryResult:
    committed: list[tuple[str, str]] = field(default_factory=list)  # (resource, gtrid)
    rolled_back: list[tuple[str, str]] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)  # decisions removed


class Coordinator:
    def __init__(self, log_dir: str | Path, name: str = "tm", format_id: int = DEFAULT_FORMAT_ID,
                 on_step: Callable[[str], None] | None = None):
        if not name or "." in name or "/" in name:
            raise ValueError(f"coordinator name must be non-empty without '.' or '/': {name!r}")
        self.dir = Path(log_dir)
        self.name = name
        self.format_id = format_id
        self.on_step = on_step
        os.makedirs(self.dir, exist_ok=True)
        self._lock_fd: int | None = os.open(self.dir / f".{name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise CoordinatorError(f"coordinator {name!r} is already running on {self.dir}") from None

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> "Coordinator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _step(self, what: str) -> None:
        if self.on_step is not None:
            self.on_step(what)

    # --- the protocol
    def begin(self, resources: Mapping[str, Any]) -> GlobalTx:
        gtrid = f"{self.name}.{uuid.uuid4().hex}"
        tx = GlobalTx(gtrid, self.format_id, {}, dict(resources))
        for rname, res in tx.resources.items():
            xid = res.xid(self.format_id, gtrid, rname)
            res.tpc_begin(xid)
            tx.branches[rname] = xid
        return tx

    def commit(self, tx: GlobalTx) -> None:
        if tx.state != "active":
            raise CoordinatorError(f"transaction {tx.gtrid} is {tx.state}")
        if len(tx.resources) == 1:  # one-phase commit: the branch is the only resource
            (rname, res), = tx.resources.items()
            res.tpc_commit()
            tx.state = "committed"
            self._step(f"committed:{rname}")
            return
        try:
            for rname, res in tx.resources.items():
                res.tpc_prepare()
                tx.prepared.append(rname)
                self._step(f"prepared:{rname}")
        except BaseException:
            self._abort(tx)
            raise
        self._write_decision(tx)
        self._step("decided")
        failed = []
        for rname, res in tx.resources.items():
            try:
                res.tpc_commit()
            except Exception as exc:  # keep the decision: recover() finishes it
                failed.append(f"{rname}: {exc}")
                continue
            self._step(f"committed:{rname}")
        tx.state = "committed"
        if failed:
            raise HeuristicError(f"{tx.gtrid} decided commit but phase two failed on "
                                 + "; ".join(failed) + " (recover() will retry)")
        self._forget(tx.gtrid)

    def rollback(self, tx: GlobalTx) -> None:
        if tx.state != "active":
            raise CoordinatorError(f"transaction {tx.gtrid} is {tx.state}")
        self._abort(tx)

    def _abort(self, tx: GlobalTx) -> None:
        errors = []
        for rname, res in tx.resources.items():
            try:
                res.tpc_rollback()
                self._step(f"rolled-back:{rname}")
            except Exception as exc:  # an unprepared branch dies with its connection anyway
                errors.append(f"{rname}: {exc}")
        tx.state = "rolled back"
        if errors:
            raise CoordinatorError(f"rollback of {tx.gtrid}: " + "; ".join(errors))

    # --- the decision log
    def _decision_path(self, gtrid: str) -> Path:
        return self.dir / (codec.encode_field(gtrid) + DECISION_SUFFIX)

    def _write_decision(self, tx: GlobalTx) -> None:
        final = self._decision_path(tx.gtrid)
        tmp = final.with_name("." + final.name + ".tmp")
        data = json.dumps({"gtrid": tx.gtrid, "format_id": tx.format_id, "decision": "commit",
                           "resources": list(tx.resources)}).encode()
        replace_durably(final, data, tmp)
        fsync_dir(str(self.dir))  # ---- the decision is durable: point of no return ----

    def _forget(self, gtrid: str) -> None:
        try:
            os.unlink(self._decision_path(gtrid))
        except FileNotFoundError:
            pass

    def decisions(self) -> set[str]:
        """gtrids of THIS coordinator with a durable commit decision not yet forgotten
        (coordinators of other names may share the directory)."""
        out = set()
        for n in os.listdir(self.dir):
            if n.endswith(DECISION_SUFFIX) and not n.startswith("."):
                gtrid = codec.decode_field(n[: -len(DECISION_SUFFIX)])
                if gtrid.startswith(self.name + "."):
                    out.add(gtrid)
        return out

    def _mine(self, xid: Any) -> bool:
        gtrid = getattr(xid, "gtrid", None)
        fmt = getattr(xid, "format_id", None)
        return isinstance(gtrid, str) and gtrid.startswith(self.name + ".") and fmt == self.format_id

    def recover(self, resources: Mapping[str, Any]) -> RecoveryResult:
        """Finish every in-doubt branch of this coordinator: commit where a decision
        is logged, roll back the rest; then forget the finished decisions."""
        result = RecoveryResult()
        decided = self.decisions()
        still_in_doubt: set[str] = set()
        for rname, res in resources.items():
            for xid in res.tpc_recover():
                if not self._mine(xid):
                    continue
                try:
                    if xid.gtrid in decided:
                        res.tpc_commit(xid)
                        result.committed.append((rname, xid.gtrid))
                    else:
                        res.tpc_rollback(xid)
                        result.rolled_back.append((rname, xid.gtrid))
                except Exception:
                    still_in_doubt.add(xid.gtrid)
        for gtrid in sorted(decided - still_in_doubt):
            self._forget(gtrid)
            result.forgotten.append(gtrid)
        return result
