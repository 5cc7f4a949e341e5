"""The transaction log: crash-atomic commit of a group of moves (PROTOCOL.md §5).

A transacted session appends one line per operation to its log in
``dropboxmq/transaction/associated/`` while the transaction is open (so that
a dead session's working/ files can be attributed and rolled back at once).

    commit:   fsync the log; rename it into committing/ and fsync that directory
              -- the POINT OF NO RETURN --; apply every move (SEND for sends,
              ACK for receives); fsync the touched directories; delete the log.
    rollback: rename the log into rolling-back/; apply the inverse moves
              (DISCARD for sends, REDELIVER for receives); delete the log.
    recovery: a log in committing/ is rolled forward, a log anywhere else is
              rolled back -- only for owners that are dead.

Applying a move twice is harmless: a move whose source is gone returns False
(store.Dropbox.move), so roll-forward and roll-back are idempotent.

Where a log may go is the table of ``log_lifecycle.py``; ``LogStore`` here is the
only code that creates, renames or deletes a log, for these session logs, the
two-phase branches of ``dropboxmq_xa`` and the Spark jobs and sinks of ``dropboxmq_spark``.
"""

from __future__ import annotations

import json
import logging
import contextlib
import os
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii as _json_str
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Protocol

from . import claims, codec
from .errors import IllegalStateError, JMSException, StoreError
from .lifecycle import Move, State
from .log_lifecycle import NO_REPLACE, SYNCED, LogMove, LogState, next_log_state
from .groupsync import sync_files
from .dirs import is_plain_path, log_names
from .making import replace_durably
from .layout import transaction_dir
from .store import Dropbox, NotARegularFile, fsync_dir, open_regular, rename_noreplace, sync_many

if TYPE_CHECKING:
    from .claim import Delivery
    from .session import Session

__all__ = [
    "LogEntry", "CorruptLogError", "LogStore", "TransactionLog", "Applicable", "is_inside", "is_file_name",
    "box_in_root", "apply_moves", "roll_forward", "roll_back", "LINE_LIMIT", "read_lines", "read_log", "logged_sends", "recover_log", "drop_interrupted_link",
    "TransactionRolledBackError", "TransactionInDoubtError", "session_log", "record_receive", "end_transaction",
    "rollback_session",
]

log = logging.getLogger(__name__)

_L, _LM = LogState, LogMove


class TransactionRolledBackError(JMSException):
    pass


class TransactionInDoubtError(JMSException):
    """A commit passed its point of no return (its log reached ``committing/``) but could not
    apply every move (disk full, I/O error, a dropbox removed underneath).  The transaction is
    committed, not failed: recovery rolls it forward (the same client id reconnecting, any
    consumer of an affected dropbox once this connection is gone, or ``dropboxmq recover``).
    Do not send again: that would duplicate it."""


@dataclass(frozen=True)
class LogEntry:
    kind: str  # "send" | "receive"
    box: str  # dropbox path relative to the root
    name: str  # working/ name (send) or processing/ name (receive)

    def to_json(self) -> str:
        # json.dumps of {"kind", "box", "name"}, byte for byte, without a dict and the encoder's
        # machinery per entry (a Spark job logs and gathers one entry a message).  ASCII escapes:
        # a name with an undecodable byte (a surrogate) survives the round trip.
        return f'{{"kind": {_json_str(self.kind)}, "box": {_json_str(self.box)}, "name": {_json_str(self.name)}}}'

    @classmethod
    def from_json(cls, line: str) -> "LogEntry":
        """KeyError/ValueError for a torn line; CorruptLogError for a whole line that is no
        entry of ours, or that names a path outside the root."""
        return cls.from_dict(json.loads(line), line)

    @classmethod
    def from_dict(cls, d: object, line: str, inside: set[str] | None = None) -> "LogEntry":
        """from_json of a line already parsed into ``d``; ``inside``: box paths already found
        inside the root (a log names a few dropboxes many times)."""
        if not isinstance(d, dict):
            raise CorruptLogError(f"log line {line[:80]!r} is not an object")
        entry = cls(d["kind"], d["box"], d["name"])
        box_ok = inside is not None and entry.box in inside
        if not box_ok and is_inside(entry.box):
            box_ok = True
            if inside is not None:
                inside.add(entry.box)
        if entry.kind not in ("send", "receive") or not box_ok or not is_file_name(entry.name):
            raise CorruptLogError(f"log entry {line[:120]!r} is not a send or receive inside the root")
        return entry

    # --- as apply_moves sees it: the file is where the log says, commit keeps its name
    @property
    def at(self) -> str:
        return self.name

    @property
    def after_commit(self) -> str:
        return self.name

    @property
    def after_rollback(self) -> str:
        return codec.split_processing_name(self.name)[1] if self.kind == "receive" else self.name


class CorruptLogError(StoreError, ValueError):
    """A transaction log that this library did not write (wrong shape, a path leaving the root)."""


def is_inside(rel: object) -> bool:
    """A relative path with no ``..``, ``.`` or empty component: it stays below the root."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\0" in rel:
        return False
    return all(part not in ("", ".", "..") for part in rel.split("/"))


def is_file_name(name: object) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\0" not in name


# ---------------------------------------------------------------- the I/O shell of the log table


class LogStore:
    """The only code that creates, renames or deletes a transaction log: it executes the
    table of ``log_lifecycle.py`` (which decides the destination, the fsync and whether a
    rename may replace) for the session logs, the two-phase branches and Spark alike."""

    def __init__(self, root: Path | str):
        self.root = Path(root)
        self.base = transaction_dir(self.root)

    def path(self, state: LogState, name: str) -> Path:
        return self.base / state.value / name

    def open(self, name: str) -> int:
        """OPEN: a descriptor appending to the log ``name`` in associated/."""
        path = self.path(next_log_state(_L.ABSENT, _LM.OPEN), name)
        return open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)

    def close(self, fd: int, sync: bool) -> None:
        """CLOSE: the log is complete (fsynced with ``sync``; a commit's syncfs may do it instead)."""
        try:
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def stage(self, name: str, data: bytes) -> None:
        """STAGE: the log ``name`` written whole and fsynced, then renamed into unassociated/,
        so that no reader ever sees half of it."""
        staged = self.path(next_log_state(_L.ABSENT, _LM.STAGE), name)
        replace_durably(staged, data, staged.with_name(f".{name}.{os.getpid()}.tmp"))

    def rename(self, state: LogState, move: LogMove, name: str) -> LogState:
        """The rename (or, into ABSENT, the unlink: FileNotFoundError if already gone) of ``move``."""
        after = next_log_state(state, move)
        src = self.path(state, name)
        if after is _L.ABSENT:
            os.unlink(src)
        elif after is not state:
            dst = self.path(after, name)
            if (state, move) in NO_REPLACE:
                rename_noreplace(str(src), str(dst))
            else:
                os.rename(src, dst)
        return after

    def sync(self, state: LogState, move: LogMove) -> None:
        """Make ``move`` out of ``state`` durable, if the table says it is a decision."""
        if (state, move) in SYNCED:
            fsync_dir(str(self.base / next_log_state(state, move).value))

    def move(self, state: LogState, move: LogMove, name: str, durable: bool = True,
             missing_ok: bool = False) -> LogState:
        """rename, then sync when ``durable``; ``missing_ok``: a log already gone is no error."""
        try:
            after = self.rename(state, move, name)
        except FileNotFoundError:
            if not missing_ok:
                raise
            return next_log_state(state, move)
        if durable:
            self.sync(state, move)
        return after

    def names(self, state: LogState) -> list[str]:
        """The logs in ``state``'s directory, sorted (``dirs.log_names``)."""
        return log_names(self.root, str(state.value))


class TransactionLog:
    """The log of one open transaction of one session."""

    def __init__(self, root: Path, client_id: str, session_tag: str, seq: int):
        self.root = Path(root)
        self.store = LogStore(self.root)
        self.name = f"{codec.encode_field(client_id)}~{session_tag}~{seq}"
        self.entries: list[LogEntry] = []
        self._fd: int | None = None
        self._rel: dict[str, str] = {}  # dropbox path -> its path relative to the root
        self._sent_bytes = 0  # bodies of the sends recorded (for the group commit's choice)

    def open(self) -> None:
        """Create the log file now (a log with no entry yet: a Spark batch's empty proof)."""
        if self._fd is None:
            self._fd = self.store.open(self.name)

    def record(self, kind: str, box: Dropbox, name: str, size: int = 0) -> None:
        """Log a send of ``box``'s working/``name`` (``size`` bytes of body, when known) or a
        receive of its processing/``name``."""
        self._sent_bytes += size
        key = str(box.path)
        rel = self._rel.get(key)
        if rel is None:
            rel = self._rel[key] = os.path.relpath(key, self.root)
        entry = LogEntry(kind, rel, name)
        self.open()
        assert self._fd is not None
        os.write(self._fd, (entry.to_json() + "\n").encode("utf-8"))
        self.entries.append(entry)

    def record_many(self, kind: str, files: list[tuple[Dropbox, str]], size: int = 0) -> None:
        """:meth:`record` for many (dropbox, name) in one write (``size``: their bodies' bytes
        in all): a bulk send logs a batch before it creates any of its files."""
        self._append([LogEntry(kind, self._relative(box), name) for box, name in files], size)

    def record_entries(self, entries: list[LogEntry]) -> None:
        """Append entries read from other logs (a Spark job gathering its tasks' logs) in one write."""
        self._append(entries, 0)

    def _relative(self, box: Dropbox) -> str:
        key = str(box.path)
        rel = self._rel.get(key)
        if rel is None:
            rel = self._rel[key] = os.path.relpath(key, self.root)
        return rel

    def _append(self, entries: list[LogEntry], size: int) -> None:
        if not entries:
            return
        self.open()
        assert self._fd is not None
        data = "".join(e.to_json() + "\n" for e in entries).encode("utf-8")
        written = os.write(self._fd, data)
        while written < len(data):  # (a regular file takes the whole write; a full disk raises)
            written += os.write(self._fd, data[written:])
        self._sent_bytes += size
        self.entries.extend(entries)

    @property
    def path(self) -> Path:
        """Where the log is while its transaction is open (associated/)."""
        return self.store.path(_L.ASSOCIATED, self.name)

    def close(self, sync: bool) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self.store.close(fd, sync)

    def _files(self) -> list[str]:
        """What must be durable before the commit point: the log, the working/ file of every
        send it records, and the directories that hold those files and the receives' claims.
        (Roll-forward finds each file where the log says: a send's entry in working/ and a
        receive's in processing/ must not be undone by a power loss once the log is in
        committing/.  An fsync of a file does not make its name durable; one syncfs does all.)"""
        boxes: dict[str, Dropbox] = {}
        files = [str(self.store.path(_L.ASSOCIATED, self.name))]
        dirs: dict[str, None] = {}
        for e in self.entries:
            box = boxes.get(e.box) or boxes.setdefault(e.box, box_in_root(self.root, e.box))
            if e.kind == "send":
                files.append(box.file(State.NOT_COMMITTED, e.name))
                dirs[box.dir(State.NOT_COMMITTED)] = None
            else:
                dirs[box.dir(State.DELIVERED)] = None
        return files + list(dirs)

    def commit(self, durable: bool, held: bool = False) -> None:
        """Commit: the log into committing/ (the point of no return), then every move applied
        (``held``: see apply_moves)."""
        if not self.entries:
            self.close(False)
            return
        self.close(False)
        if durable:  # group commit: the log and every working/ file it names, durable together
            sync_files(self.root, self._files(), self._sent_bytes)
        try:
            self.store.rename(_L.ASSOCIATED, _LM.COMMIT, self.name)
        except FileNotFoundError:
            # only a recovery moves our log out of associated/: it took us for dead (a lost lease
            # or lock) and rolled the transaction back (fencing by construction, PROTOCOL.md H4)
            raise TransactionRolledBackError(
                f"transaction {self.name} was rolled back by recovery (this client was presumed dead): "
                "its receives are delivered again and its sends discarded; nothing of it is committed") from None
        # ---- point of no return: from here on recovery rolls forward ----
        try:
            if durable:
                self.store.sync(_L.ASSOCIATED, _LM.COMMIT)
            roll_forward(self.root, self.entries, durable, held=held)
            self.store.move(_L.COMMITTING, _LM.FINISH, self.name)
        except (OSError, StoreError) as exc:
            raise TransactionInDoubtError(
                f"in doubt: transaction {self.name} is committed but not fully applied ({exc}); "
                "recovery will finish it -- do not send it again") from exc

    def rollback(self) -> None:
        if not self.entries:
            self.close(False)
            return
        self.close(False)
        self.store.move(_L.ASSOCIATED, _LM.ROLL_BACK, self.name)
        roll_back(self.root, self.entries)
        self.store.move(_L.ROLLING_BACK, _LM.FINISH, self.name)

    def hand_over(self) -> None:
        """Drop the log: another log (a prepared branch, a Spark job's) now carries its entries."""
        self.close(False)
        self.store.move(_L.ASSOCIATED, _LM.HAND_OVER, self.name, missing_ok=True)


# ---------------------------------------------------------------- a transacted session's steps
# (session.Session calls these: a session that is not transacted never imports this module)


def session_log(session: Session) -> TransactionLog:
    """The log of ``session``'s open transaction, begun by its first send or receive."""
    if session.tx is None:
        session.tx_seq += 1
        session.tx = TransactionLog(session.connection.root, session.connection.client_id, session.tag,
                                     session.tx_seq)
    return session.tx


def record_receive(session: Session, d: Delivery) -> None:
    """The *take* step LOG (ackmode.py): the receive is in the log, and held until commit/rollback."""
    try:
        session_log(session).record("receive", d.box, d.processing_name)
    except OSError as exc:
        from .redelivery import redeliver

        redeliver(session, [d])  # not in the log means nobody would ever redeliver it: put it back now
        raise StoreError(f"cannot record the receive in the transaction log: {exc}") from exc
    session.unacked.append(d)


def end_transaction(session: Session, commit: bool) -> None:
    """``session.commit()`` or ``session.rollback()``."""
    with session.lock:
        session.check_open()
        if not session.transacted:
            raise IllegalStateError(f"{'commit' if commit else 'rollback'}() needs a transacted session")
        if not commit:
            return rollback_session(session)
        session.connection.registration.check("commit")
        tx, session.tx = session.tx, None
        session.unacked = []
        if tx is not None:
            tx.commit(durable=True)


def rollback_session(session: Session) -> None:
    """Roll back the open transaction (rollback(), and a transacted session's close)."""
    tx, session.tx = session.tx, None
    session.unacked = []
    if tx is not None:
        tx.rollback()
    for c in session.consumers:
        c.claimer.invalidate()

def box_in_root(root: Path, rel: str) -> Dropbox:
    """The dropbox a log names by its path relative to the root; CorruptLogError if that
    path leaves the root by ``..`` or goes through a symlink."""
    path = Path(root) / rel
    if not is_inside(rel) or not is_plain_path(root, path):
        raise CorruptLogError(f"transaction log names {rel!r}, which is outside the root")
    return Dropbox(path)


class Applicable(Protocol):
    """An entry of a log as apply_moves sees it (LogEntry, xa.XAEntry)."""

    @property
    def kind(self) -> str: ...  # "send" | "receive"

    @property
    def box(self) -> str: ...  # the dropbox, relative to the root

    @property
    def at(self) -> str: ...  # the file's name now (in working/ or processing/)

    @property
    def after_commit(self) -> str: ...  # its name in target/ (send) or processed/ (receive)

    @property
    def after_rollback(self) -> str: ...  # its name back in target/ (receive)


def apply_moves(root: Path, entries: Iterable[Applicable], commit: bool,
                after_crash: bool = False, held: bool = False) -> list[tuple[Dropbox, State]]:
    """Apply every entry's move -- commit: SEND / ACK; rollback: DISCARD / REDELIVER -- and return
    the (dropbox, state directory) each one touched.  A move whose file is gone is skipped
    (store.Dropbox.move returns False), so applying a log twice is harmless.  ``after_crash``
    (recovery): a move an earlier attempt left half done in the link()+unlink() fallback (the
    file under its old and its new name) is finished by dropping the old name.  ``held``: each
    dropbox's state directories held open (Dropbox.hold_dirs) while the moves run, so a long log
    (a Spark job's) makes one renameat a move instead of walking both paths."""
    touched: list[tuple[Dropbox, State]] = []
    boxes: dict[str, Dropbox] = {}
    try:
        _apply(root, entries, commit, after_crash, held, boxes, touched)
    finally:
        for box in boxes.values():
            box.close()
    return touched


def _apply(root: Path, entries: Iterable[Applicable], commit: bool, after_crash: bool, held: bool,
           boxes: dict[str, Dropbox], touched: list[tuple[Dropbox, State]]) -> None:
    for e in entries:
        box = boxes.get(e.box)
        if box is None:  # one Dropbox per directory, not one per entry
            box = boxes[e.box] = box_in_root(root, e.box)
            if held:
                box.hold_dirs()
        if after_crash and _finish_interrupted(box, e, commit):
            pass
        elif e.kind == "send" and commit:
            box.move(Move.SEND, State.NOT_COMMITTED, e.at, e.after_commit)
            touched.append((box, State.NEW))
        elif e.kind == "send":
            box.move(Move.DISCARD, State.NOT_COMMITTED, e.at)
            touched.append((box, State.NOT_COMMITTED))
        elif commit:
            if claims.alias_inode(e.at) is not None:  # a claim under an alias ends under its own name
                claims.finish(box, Move.ACK, e.at)
            else:
                box.move(Move.ACK, State.DELIVERED, e.at, e.after_commit)
            touched.append((box, State.ACKNOWLEDGED))
        elif (name := claims.original_name(box, e.at)) is None and claims.alias_inode(e.at) is not None:
            # an alias whose register entry is lost has no name to go back under (N-11): as recovery does
            claims.finish(box, Move.DEAD_LETTER, e.at)
            touched.append((box, State.DEAD_LETTER))
        else:
            box.move(Move.REDELIVER, State.DELIVERED, e.at, name or e.after_rollback)
            touched.append((box, State.NEW))


def drop_interrupted_link(box: Dropbox, state: State, name: str,
                          renamed: Callable[[State, str], bool] = lambda other, other_name: True) -> bool:
    """Undo half of a rename_noreplace that a crash cut short in its link()+unlink()
    fallback: if ``state/<name>`` shares its inode with a name in another state
    directory of this dropbox that a rename of it could have produced (``renamed``),
    that other name is the message; this one is removed.  (Hard links a foreign
    program made to one file are other messages, not an interrupted rename.)
    Not a lifecycle move: the message keeps exactly one state throughout."""
    try:
        st = os.lstat(box.file(state, name))
    except FileNotFoundError:
        return False
    if st.st_nlink < 2:
        return False
    for other in State:
        if other is state or other.value is None:
            continue
        try:
            with os.scandir(box.dir(other)) as it:
                if any(e.inode() == st.st_ino and renamed(other, e.name) for e in it):
                    with contextlib.suppress(OSError):
                        os.unlink(box.file(state, name))
                    return True
        except FileNotFoundError:
            continue
    return False


def _finish_interrupted(box: Dropbox, e: Applicable, commit: bool) -> bool:
    """Was ``e``'s move cut short between its link() and its unlink()?  Then drop the old name
    (the new one is the message) and say so.  A DISCARD has no new name: never."""
    if e.kind == "send":
        if not commit:
            return False
        source, dest, name = State.NOT_COMMITTED, State.NEW, e.after_commit
    else:
        source = State.DELIVERED
        dest, name = (State.ACKNOWLEDGED, e.after_commit) if commit else (State.NEW, e.after_rollback)
    return drop_interrupted_link(box, source, e.at, lambda state, other: state is dest and other == name)


def roll_forward(root: Path, entries: list[LogEntry], durable: bool, after_crash: bool = False,
                 held: bool = False) -> None:
    touched = apply_moves(root, entries, commit=True, after_crash=after_crash, held=held)
    if durable:
        sync_many(touched)


def roll_back(root: Path, entries: list[LogEntry], after_crash: bool = False) -> None:
    apply_moves(root, reversed(entries), commit=False, after_crash=after_crash)


#: the longest log line read: ours name a dropbox and a file (255 bytes a name)
LINE_LIMIT = 1 << 16


def read_lines(path: Path) -> list[bytes]:
    """The lines of a regular file (see store.open_regular) up to the first longer than
    LINE_LIMIT bytes (its newline included), which ends them as a torn line would: a log of any
    length is read, but a hostile root's huge file only to its first overlong line."""
    lines = []
    with os.fdopen(open_regular(path), "rb") as f:
        while line := f.readline(LINE_LIMIT + 1):
            if len(line) > LINE_LIMIT:
                break
            lines.append(line)
    return lines


def read_log(path: Path) -> list[LogEntry]:
    """The entries of a log (a regular file: a FIFO or symlink raises NotARegularFile).
    CorruptLogError for a log this library did not write."""
    entries = []
    lines = [line for line in (raw.decode("utf-8", "surrogateescape").strip() for raw in read_lines(path)) if line]
    try:  # every line whole (the usual case): one parse for the log, not one a line
        parsed: list[object] = json.loads(f"[{','.join(lines)}]")
        if len(parsed) != len(lines):  # a line of two values ("{}, {}") is no line of ours
            raise ValueError
    except ValueError:
        parsed = []
    inside: set[str] = set()
    if parsed:
        for d, line in zip(parsed, lines, strict=True):
            try:
                entries.append(LogEntry.from_dict(d, line, inside))
            except CorruptLogError:
                raise
            except (KeyError, TypeError):
                break  # an object missing a field: a torn line's prefix cannot be whole JSON, but keep the rule
        return entries
    for line in lines:
        try:
            entries.append(LogEntry.from_dict(json.loads(line), line, inside))
        except CorruptLogError:
            raise
        except (ValueError, KeyError, TypeError):
            break  # a torn last line: the op it describes never happened
    return entries


def logged_sends(root: Path) -> set[str]:
    """The working/ name of every send that a log still on disk names.  Directories are read in
    the order a log travels (associated/ first), and a log gone from where it was listed is
    read where it went, so a transaction committing or rolling back meanwhile is not missed."""
    store = LogStore(root)
    names: set[str] = set()
    for where in (_L.ASSOCIATED, _L.COMMITTING, _L.ROLLING_BACK):
        for log_name in store.names(where):
            for place in (where, _L.COMMITTING, _L.ROLLING_BACK):
                try:
                    entries = read_log(store.path(place, log_name))
                except FileNotFoundError:
                    continue
                except (NotARegularFile, CorruptLogError):
                    break  # not a log of ours: it names no send
                names.update(e.name for e in entries if e.kind == "send")
                break
    return names


def recover_log(root: Path, where: LogState, path: Path) -> str:
    """Finish a dead owner's transaction: forward if it reached committing/, else back.
    Idempotent, so two recoverers racing on one log do no harm."""
    try:
        entries = read_log(path)
    except FileNotFoundError:
        return "already recovered"
    if where is _L.COMMITTING:
        roll_forward(root, entries, durable=True, after_crash=True)
        outcome = "rolled forward"
    else:
        roll_back(root, entries, after_crash=True)
        outcome = "rolled back"
    LogStore(root).move(where, _LM.RECOVER, path.name, missing_ok=True)
    return outcome
