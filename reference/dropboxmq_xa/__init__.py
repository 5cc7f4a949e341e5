"""A dropbox session as a two-phase-commit resource (the DB-API 2.0 TPC extension, XA-shaped).

The interface is the one psycopg implements, so one small coordinator
(``coordinator.py``) drives a dropbox session and a PostgreSQL connection alike:

    s = create_xa_session(connection)
    x = s.xid(0x444d51, "order-42", "mq")
    s.tpc_begin(x)
    ... receive and send exactly as in a transacted session ...
    s.tpc_prepare()          # durable and survivable, nothing visible yet
    s.tpc_commit()           # or s.tpc_rollback(); or, from any process: tpc_commit(x)

``tpc_commit()`` without ``tpc_prepare()`` is a one-phase commit (allowed when
the branch is the only resource): it is the ordinary transacted commit.

Log layout (DropboxMQ 1.2 kept XA logs in ``transaction/unassociated/`` and
``transaction/prepared/`` under ``xa-`` names; we follow it)::

    dropboxmq/transaction/associated/<client>~<session>~<seq>   open branch (the session's log)
    dropboxmq/transaction/unassociated/xa-<g>-<b>-<fmt>         being prepared (ended, not prepared)
    dropboxmq/transaction/prepared/xa-<g>-<b>-<fmt>             PREPARED: waits for the decision
    dropboxmq/transaction/xa-committing/xa-<g>-<b>-<fmt>        decided commit, being applied
    dropboxmq/transaction/xa-rolling-back/xa-<g>-<b>-<fmt>      decided rollback, being applied

with ``<g>``, ``<b>`` the gtrid and bqual escaped like a file-name field (and
``-`` escaped too, so the name splits back unambiguously) and ``<fmt>`` the
decimal format id.

Prepare (the branch is then immune to every dead-owner sweep):

1. write the whole prepared log -- the xid, the owner, and per operation its
   dropbox, its current name, its *parked* name and its final name -- to
   ``unassociated/`` and fsync it;
2. *park* every file of the branch: rename ``working/<name>`` (a send) and
   ``processing/<client>~<name>`` (a receive) to a dot-name
   ``.xa-<h>~<name>`` in the same directory (``<h>``: 12 hex digits of the
   xid's hash).  A rename within one directory is not a state change -- the
   message stays NOT_COMMITTED / DELIVERED -- but dot-names are never listed
   (``store.Dropbox.list``), so neither the processing/ sweep of dead owners
   (``recovery.reclaim_dead_owners``, even with ``assume_unknown_dead``) nor the
   orphan sweep of working/ (``recovery._sweep_working``) can touch a parked
   file: a prepared receive is never redelivered and a prepared send never
   quarantined while the branch waits for its coordinator;
3. fsync every parked file and every touched directory;
4. rename the log into ``prepared/`` and fsync that directory -- the branch is
   PREPARED -- then delete the session's associated log.

A crash before 4 leaves the associated log (rolled back by the ordinary
recovery of a dead owner: its names are gone or still there, either way the
moves are idempotent) and perhaps the unassociated log, which :func:`recover`
(and so ``tpc_recover``) rolls back for a dead owner from parked *or* original
names: presumed abort.  ``dirs.pending_logs`` and recovery.py only look at
associated/, committing/ and rolling-back/, so prepared/ is left alone.

Phase two renames the prepared log into ``xa-committing/`` (fsynced: from
here only commit can finish it) or ``xa-rolling-back/``, applies every move
(commit: SEND parked -> ``target/<name>``, ACK parked -> ``processed/<pname>``;
rollback: DISCARD parked, REDELIVER parked -> ``target/<original>``, which
carries the delivery count, so the message comes back with JMSRedelivered),
fsyncs the touched directories and deletes the log.  Every move whose source
is gone returns False, so finishing a decided branch twice, or from two
processes at once, is harmless; a decided branch found after a crash is
finished by :func:`recover`.  ``tpc_rollback`` of a branch that is already
committing (and vice versa) is refused: a branch is never half-applied.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from dropboxmq import claims, codec
from dropboxmq.codec import MAX_NAME_BYTES
from dropboxmq.clients import registration_path
from dropboxmq.liveness import is_dead
from dropboxmq.errors import DropboxMQError, IllegalStateError
from dropboxmq.lifecycle import State
from dropboxmq.log_lifecycle import XA_LOG_STATES, LogMove, LogState, next_log_state
from dropboxmq.ackmode import AckMode
from dropboxmq.session import Session
from dropboxmq.dirs import ensure_plain_dir
from dropboxmq.store import Dropbox, NotARegularFile, fsync_dir, read_record, rename_noreplace
from dropboxmq.transaction import (CorruptLogError, LogStore, apply_moves, is_file_name, is_inside, read_lines,
                                   rollback_session)

__all__ = [
    "LOG_PREFIX", "DEFAULT_FORMAT_ID", "XAError", "UnknownXidError", "Xid", "XAEntry", "BranchLog",
    "ensure_xa_layout", "prepare_branch", "find_branch", "finish_branch", "recover", "list_branches",
    "XASession", "create_xa_session",
]

LOG_PREFIX = "xa-"

#: Format id of the xids this module creates by default ("DMQ").
DEFAULT_FORMAT_ID = 0x444D51


class XAError(DropboxMQError):
    """A two-phase-commit protocol error (XAER_PROTO, XAER_DUPID)."""


class UnknownXidError(XAError):
    """No branch with this xid is prepared or being finished here (XAER_NOTA)."""


# ---------------------------------------------------------------- xids


@dataclass(frozen=True)
class Xid:
    """A transaction branch id: (format_id, global transaction id, branch qualifier).

    Same shape as psycopg's ``Xid`` and the DB-API's ``connection.xid()``: it
    unpacks and indexes as the triple ``(format_id, gtrid, bqual)``."""

    format_id: int
    gtrid: str
    bqual: str

    def __post_init__(self) -> None:
        if isinstance(self.format_id, bool) or not isinstance(self.format_id, int) \
                or not 0 <= self.format_id < 2**31:
            raise ValueError(f"format_id must be an int in [0, 2**31), got {self.format_id!r}")
        for what, v in (("gtrid", self.gtrid), ("bqual", self.bqual)):
            if not isinstance(v, str):
                raise ValueError(f"{what} must be a str, got {v!r}")
            if len(v.encode("utf-8")) > 64:
                raise ValueError(f"{what} must be at most 64 bytes (XA), got {v!r}")
        if not self.gtrid:
            raise ValueError("gtrid must not be empty")

    def __iter__(self) -> Iterator[Any]:
        return iter((self.format_id, self.gtrid, self.bqual))

    def __getitem__(self, i: int) -> Any:
        return (self.format_id, self.gtrid, self.bqual)[i]

    def __len__(self) -> int:
        return 3

    @property
    def log_name(self) -> str:
        """``xa-<enc(gtrid)>-<enc(bqual)>-<format_id>``: the branch's log file name."""
        return f"{LOG_PREFIX}{_enc(self.gtrid)}-{_enc(self.bqual)}-{self.format_id}"

    def __str__(self) -> str:
        return self.log_name

    @classmethod
    def from_log_name(cls, name: str) -> "Xid":
        if not name.startswith(LOG_PREFIX):
            raise ValueError(f"not an xa log name: {name!r}")
        parts = name[len(LOG_PREFIX):].split("-")
        if len(parts) != 3 or not parts[2].isdigit():
            raise ValueError(f"not an xa log name: {name!r}")
        return cls(int(parts[2]), codec.decode_field(parts[0]), codec.decode_field(parts[1]))

    @classmethod
    def parse(cls, text: str) -> "Xid":
        """An xid as printed by ``dropboxmq xa list`` (its log name, with or without
        ``xa-``) or as ``FORMAT_ID:GTRID:BQUAL``."""
        if text.startswith(LOG_PREFIX) and text.count("-") >= 3:
            return cls.from_log_name(text)
        fmt, sep, rest = text.partition(":")
        if sep and fmt.isdigit():
            gtrid, _, bqual = rest.partition(":")
            return cls(int(fmt), gtrid, bqual)
        return cls.from_log_name(LOG_PREFIX + text)

    def to_json(self) -> dict:
        return {"format_id": self.format_id, "gtrid": self.gtrid, "bqual": self.bqual}

    @classmethod
    def of(cls, x: Any) -> "Xid":
        """Accept our Xid, any (format_id, gtrid, bqual) triple (psycopg's Xid) or a log name."""
        if isinstance(x, Xid):
            return x
        if isinstance(x, str):
            return cls.parse(x)
        if getattr(x, "gtrid", None) is not None:
            fmt, gtrid, bqual = x.format_id, x.gtrid, x.bqual
        else:
            fmt, gtrid, bqual = x
        return cls(int(fmt), gtrid, bqual)


def _enc(s: str) -> str:
    return codec.encode_field(s).replace("-", "%2D")


def _hash(xid: Xid) -> str:
    return hashlib.sha1(xid.log_name.encode("utf-8")).hexdigest()[:12]


# ---------------------------------------------------------------- the prepared log


@dataclass(frozen=True)
class XAEntry:
    kind: str  # "send" | "receive"
    box: str  # dropbox path relative to the root
    name: str  # where it was before prepare: working/<name> or processing/<pname>
    parked: str  # its dot-name while prepared (same directory)
    final: str  # commit: target/<final> (send); rollback: target/<final> (receive)

    def to_json(self) -> dict:
        return {"kind": self.kind, "box": self.box, "name": self.name, "parked": self.parked,
                "final": self.final}

    @property
    def state(self) -> State:
        return State.NOT_COMMITTED if self.kind == "send" else State.DELIVERED

    # --- as transaction.apply_moves sees it: the file is parked until the decision
    @property
    def at(self) -> str:
        return self.parked

    @property
    def after_commit(self) -> str:
        return self.final if self.kind == "send" else self.name

    @property
    def after_rollback(self) -> str:
        return self.final


@dataclass
class BranchLog:
    xid: Xid
    owner: str
    entries: list[XAEntry]
    prepared_at: float
    pid: int = 0
    host: str = ""

    def dump(self) -> bytes:
        head = {"xid": self.xid.to_json(), "owner": self.owner, "pid": self.pid, "host": self.host,
                "prepared_at": self.prepared_at, "entries": len(self.entries)}
        lines = [json.dumps(head, ensure_ascii=False)] + [json.dumps(e.to_json(), ensure_ascii=False)
                                                          for e in self.entries]
        return ("\n".join(lines) + "\n").encode("utf-8")

    @classmethod
    def load(cls, path: Path) -> "BranchLog":
        """CorruptLogError (a ValueError) for anything but a log of ours: a FIFO or symlink,
        another shape, an entry naming a path outside the root."""
        try:
            lines = [line for line in (raw.decode("utf-8") for raw in read_lines(path)) if line.strip()]
        except NotARegularFile as exc:
            raise CorruptLogError(f"{path}: {exc.strerror}") from None
        if not lines:
            raise ValueError(f"{path}: empty xa log")
        entries = []
        for line in lines[1:]:
            try:
                d = json.loads(line)
                entry = XAEntry(d["kind"], d["box"], d["name"], d["parked"], d["final"])
            except (ValueError, KeyError, TypeError):
                break  # torn tail: only possible in unassociated/, before any file was parked
            if entry.kind not in ("send", "receive") or not is_inside(entry.box) or not all(
                    is_file_name(n) for n in (entry.name, entry.parked, entry.final)):
                raise CorruptLogError(f"{path}: entry {line[:120]!r} is not a send or receive inside the root")
            entries.append(entry)
        try:
            head = json.loads(lines[0])
            x = head["xid"]
            return cls(Xid(x["format_id"], x["gtrid"], x["bqual"]), head.get("owner", ""), entries,
                       head.get("prepared_at", 0.0), head.get("pid", 0), head.get("host", ""))
        except (KeyError, TypeError, AttributeError) as exc:
            raise CorruptLogError(f"{path}: not an xa log head: {exc}") from None


def ensure_xa_layout(root: Path) -> None:
    store = LogStore(root)
    for state in sorted(XA_LOG_STATES, key=lambda s: s.value):
        ensure_plain_dir(root, store.base / state.value)


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _parked_name(h: str, name: str, i: int) -> str:
    parked = f".xa-{h}~{name}"
    return parked if len(os.fsencode(parked)) <= MAX_NAME_BYTES else f".xa-{h}~#{i}"


def prepare_branch(root: Path, xid: Xid, owner: str, ops: list[tuple[str, str, str]]) -> None:
    """Make the branch of ``ops`` ((kind, box, name) as in the session's log) PREPARED.
    Raises XAError (and changes nothing visible) if ``xid`` is already prepared here."""
    root = Path(root)
    ensure_xa_layout(root)
    name = xid.log_name
    if len(os.fsencode(name)) > MAX_NAME_BYTES:
        raise XAError(f"xid {xid} gives a log name over {MAX_NAME_BYTES} bytes")
    if find_branch(root, xid) is not None:
        raise XAError(f"xid {xid} is already prepared (XAER_DUPID)")
    h = _hash(xid)
    entries = []
    for i, (kind, box, pname) in enumerate(ops):
        if kind == "send":
            final = pname
        else:  # a claim under an alias (claims.py) ends under its message's own name
            final = claims.original_name(Dropbox(root / box), pname) or codec.split_processing_name(pname)[1]
        entries.append(XAEntry(kind, box, pname, _parked_name(h, final, i), final))
    log = BranchLog(xid, owner, entries, time.time(), os.getpid(), socket.gethostname())
    store = LogStore(root)
    store.stage(name, log.dump())  # complete before it is visible: a recoverer never sees half of it
    # park every file: invisible to every listing-based sweep from here on
    dirs: set[str] = set()
    for e in entries:
        dropbox = Dropbox(root / e.box)
        src, dst = dropbox.file(e.state, e.name), dropbox.file(e.state, e.parked)
        try:
            rename_noreplace(src, dst)  # (never replaces: FileNotFoundError if the file is gone)
        except FileNotFoundError:
            if not os.path.lexists(dst):
                _undo_staging(root, log)
                raise XAError(f"{src} vanished before prepare: the branch is rolled back") from None
        _fsync_file(dst)
        dirs.add(dropbox.dir(e.state))
    for d in sorted(dirs):
        fsync_dir(d)
    try:
        store.move(LogState.UNASSOCIATED, LogMove.PREPARE, name)
    except FileExistsError:
        _undo_staging(root, log)
        raise XAError(f"xid {xid} is already prepared (XAER_DUPID)") from None
    # ---- PREPARED: only a decision (tpc_commit / tpc_rollback) ends it ----


def _undo_staging(root: Path, log: BranchLog) -> None:
    """Un-park what was parked (back to the original names) and drop the staged log."""
    for e in log.entries:
        box = Dropbox(root / e.box)
        try:
            rename_noreplace(box.file(e.state, e.parked), box.file(e.state, e.name))
        except (FileNotFoundError, FileExistsError):
            pass
    LogStore(root).move(LogState.UNASSOCIATED, LogMove.UNSTAGE, log.xid.log_name, missing_ok=True)


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def find_branch(root: Path, xid: Xid) -> tuple[LogState, Path] | None:
    """(state, path) of the branch's log in prepared/ or a phase-two directory."""
    store = LogStore(root)
    for where in (LogState.PREPARED, LogState.XA_COMMITTING, LogState.XA_ROLLING_BACK):
        p = store.path(where, xid.log_name)
        if p.exists():
            return where, p
    return None


def _apply(root: Path, log: BranchLog, commit: bool) -> None:
    touched = apply_moves(root, log.entries, commit)
    for d in sorted({box.dir(state) for box, state in touched}):
        try:
            fsync_dir(d)
        except FileNotFoundError:
            pass


def finish_branch(root: Path, xid: Xid, commit: bool) -> str:
    """Phase two for a prepared branch, from its log alone (any process may call it).

    Returns "committed" / "rolled back".  Raises UnknownXidError when no such
    branch is here (XAER_NOTA), XAError when the branch is already being finished
    the other way."""
    root = Path(root)
    ensure_xa_layout(root)
    store = LogStore(root)
    name = xid.log_name
    decision, refused = (LogMove.COMMIT, LogMove.ROLL_BACK) if commit else (LogMove.ROLL_BACK, LogMove.COMMIT)
    mine, other = next_log_state(LogState.PREPARED, decision), next_log_state(LogState.PREPARED, refused)
    path = store.path(mine, name)
    try:
        store.move(LogState.PREPARED, decision, name)  # the branch's decision: durable before any move
    except FileNotFoundError:
        if store.path(other, name).exists():
            raise XAError(f"branch {xid} is already being {'rolled back' if commit else 'committed'}; "
                          "it can only be finished that way") from None
        if not path.exists():
            raise UnknownXidError(f"no prepared branch {xid} (XAER_NOTA)") from None
    except FileExistsError:  # a link()+unlink() rename cut in half: the prepared name is a leftover
        _unlink(store.path(LogState.PREPARED, name))
    try:
        log = BranchLog.load(path)
    except FileNotFoundError:
        return "committed" if commit else "rolled back"  # another process finished it just now
    _apply(root, log, commit)
    store.move(mine, LogMove.FINISH, name, missing_ok=True)
    return "committed" if commit else "rolled back"


def _abandoned(root: Path, log: BranchLog) -> bool:
    """Is the process that was preparing ``log`` gone?  Its client id is dead, or it is
    held by a later incarnation (another pid/host in the registration)."""
    if not log.owner or is_dead(root, log.owner):
        return True
    try:
        reg = read_record(registration_path(root, log.owner)).decode("utf-8", "replace").split()
    except (FileNotFoundError, NotARegularFile, ValueError):  # (ValueError: a huge file, no registration of ours)
        return False  # closed cleanly or never registered: a live prepare removes its own log
    return bool(log.pid) and (f"pid={log.pid}" not in reg or f"host={log.host}" not in reg)


def _roll_back_unassociated(root: Path, path: Path) -> bool:
    """A dead owner's branch that never reached prepared/: presumed abort."""
    try:
        log = BranchLog.load(path)
    except FileNotFoundError:
        return False
    except ValueError:
        return False  # corrupt (logs are renamed in complete): left for an operator
    if not _abandoned(root, log):
        return False
    apply_moves(root, log.entries, commit=False)  # the parked files
    apply_moves(root, [dataclasses.replace(e, parked=e.name) for e in log.entries], commit=False)  # not yet
    LogStore(root).move(LogState.UNASSOCIATED, LogMove.RECOVER, path.name, missing_ok=True)
    return True


def recover(root: Path) -> list[Xid]:
    """Restart-time scan: roll back branches of dead owners that never reached prepared/,
    finish branches already decided (xa-committing/, xa-rolling-back/), and return
    the prepared, undecided branches -- those wait for their coordinator."""
    root = Path(root)
    ensure_xa_layout(root)
    for path in _logs(root, LogState.UNASSOCIATED):
        _roll_back_unassociated(root, path)
    _sweep_staging_leftovers(root)
    for where, commit in ((LogState.XA_COMMITTING, True), (LogState.XA_ROLLING_BACK, False)):
        for path in _logs(root, where):
            try:
                finish_branch(root, Xid.from_log_name(path.name), commit)
            except (UnknownXidError, ValueError):
                pass
    return [b.xid for b in list_branches(root)]


def _sweep_staging_leftovers(root: Path, age: float = 3600.0) -> None:
    """A prepare killed while writing its log leaves ``unassociated/.xa-....tmp``
    (no file was parked yet): harmless, removed once it is an hour old."""
    d = LogStore(root).base / LogState.UNASSOCIATED.value
    cutoff = time.time() - age
    for n in os.listdir(d):
        if n.startswith("." + LOG_PREFIX) and n.endswith(".tmp"):
            try:
                if os.lstat(d / n).st_mtime < cutoff:
                    os.unlink(d / n)
            except FileNotFoundError:
                pass


def _logs(root: Path, where: LogState) -> list[Path]:
    store = LogStore(root)
    return [store.path(where, n) for n in store.names(where) if n.startswith(LOG_PREFIX)]


def list_branches(root: Path, where: LogState = LogState.PREPARED) -> list[BranchLog]:
    out = []
    for path in _logs(Path(root), where):
        try:
            out.append(BranchLog.load(path))
        except (FileNotFoundError, ValueError):
            continue
    return out


# ---------------------------------------------------------------- the XA session


class XASession(Session):
    """A transacted session that is also a TPC resource.  Outside a branch it is
    an ordinary transacted session; inside one, ``commit()``/``rollback()`` are
    refused (JMS: TransactionInProgressException) -- use the tpc_* methods."""

    def __init__(self, connection) -> None:
        super().__init__(connection, AckMode.SESSION_TRANSACTED)
        self._xid: Xid | None = None
        self._xa_state = "idle"  # idle | active | prepared | aborted (prepare failed)
        ensure_xa_layout(connection.root)

    # --- DB-API TPC surface
    def xid(self, format_id: int, gtrid: str, bqual: str) -> Xid:
        return Xid(format_id, gtrid, bqual)

    def tpc_begin(self, xid: Any) -> None:
        with self.lock:
            self.check_open()
            if self._xa_state not in ("idle", "aborted"):
                raise XAError(f"a branch ({self._xid}) is already {self._xa_state} on this session")
            if self.tx is not None and self.tx.entries:
                raise XAError("tpc_begin inside an open local transaction: commit or roll it back first")
            x = Xid.of(xid)
            if len(os.fsencode(x.log_name)) > MAX_NAME_BYTES:
                raise XAError(f"xid {x} gives a log name over {MAX_NAME_BYTES} bytes")
            if find_branch(self.connection.root, x) is not None:
                raise XAError(f"xid {x} is already prepared (XAER_DUPID)")
            self._xid, self._xa_state = x, "active"

    def tpc_prepare(self) -> None:
        with self.lock:
            self.check_open()
            if self._xa_state != "active":
                raise XAError(f"tpc_prepare needs an active branch (state: {self._xa_state})")
            xid = self._branch_xid()
            tx, self.tx = self.tx, None
            self.unacked = []
            ops = [(e.kind, e.box, e.name) for e in tx.entries] if tx is not None else []
            try:
                prepare_branch(self.connection.root, xid, self.connection.client_id, ops)
            except BaseException:
                if tx is not None:
                    tx.rollback()  # presumed abort: nothing was prepared
                self._xa_state = "aborted"  # tpc_rollback() acknowledges it
                self._invalidate()
                raise
            if tx is not None:
                tx.hand_over()  # the prepared log carries its entries now
            self._xa_state = "prepared"

    def tpc_commit(self, xid: Any = None) -> None:
        self._finish(xid, commit=True)

    def tpc_rollback(self, xid: Any = None) -> None:
        self._finish(xid, commit=False)

    def tpc_recover(self) -> list[Xid]:
        """The prepared, undecided branches under this root (after finishing what
        is already decided and rolling back what dead owners never prepared)."""
        self.check_open()
        return recover(self.connection.root)

    def _finish(self, xid: Any, commit: bool) -> None:
        with self.lock:
            self.check_open()
            if xid is not None:
                x = Xid.of(xid)
                if self._xa_state != "idle" and x != self._xid:
                    raise XAError("tpc_commit/tpc_rollback(xid) of another branch must be called "
                                  "outside this session's own branch")
                if self._xa_state == "active" and x == self._xid:
                    raise XAError("the branch is not prepared: call tpc_commit()/tpc_rollback() "
                                  "without an xid")
                finish_branch(self.connection.root, x, commit)
                if x == self._xid:
                    self._xid, self._xa_state = None, "idle"
                return
            if self._xa_state == "aborted":  # a failed prepare already rolled it back
                self._xid, self._xa_state = None, "idle"
                if commit:
                    raise XAError("the branch was rolled back when its prepare failed (XA_RBROLLBACK)")
                return
            if self._xa_state == "idle":
                raise XAError("no branch on this session: tpc_begin first, or pass the xid")
            if self._xa_state == "active":  # one-phase: the ordinary transacted commit
                try:
                    if commit:
                        Session.commit(self)
                    else:
                        rollback_session(self)
                finally:
                    self._xid, self._xa_state = None, "idle"
                return
            x = self._branch_xid()
            self._xid, self._xa_state = None, "idle"
            finish_branch(self.connection.root, x, commit)
            if not commit:
                self._invalidate()

    def _branch_xid(self) -> Xid:
        """The xid of this session's branch: set in every state but idle."""
        if self._xid is None:
            raise XAError(f"this session's {self._xa_state} branch has no xid (internal state error)")
        return self._xid

    def _invalidate(self) -> None:
        for c in self.consumers:
            c.claimer.invalidate()

    # --- local transactions are refused inside a branch
    def commit(self) -> None:
        if self._xa_state != "idle":
            raise IllegalStateError("commit() inside a two-phase branch: use tpc_commit()")
        super().commit()

    def rollback(self) -> None:
        if self._xa_state != "idle":
            raise IllegalStateError("rollback() inside a two-phase branch: use tpc_rollback()")
        super().rollback()

    def close(self, grace: float | None = None) -> None:
        """Close: an active branch is rolled back; a prepared one stays prepared
        (it waits for its coordinator's decision)."""
        with self.lock:
            if self._xa_state in ("prepared", "aborted"):
                self._xid, self._xa_state = None, "idle"
        super().close(grace)

    @property
    def xa_state(self) -> str:
        return self._xa_state


def create_xa_session(connection) -> Any:
    """``connection.createXASession()``: a new XA session on ``connection``."""
    connection.check_open()
    session = XASession(connection)
    connection.sessions.append(session)
    return session

