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
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from . import codec
from .errors import StoreError, TransactionInDoubtError
from .lifecycle import Move, State
from .store import (Dropbox, NotARegularFile, _fsync_dir, ensure_plain_dir, is_plain_path, open_regular,
                    read_regular_file, sync_file_system, sync_many)

log = logging.getLogger(__name__)

ASSOCIATED, COMMITTING, ROLLING_BACK = "associated", "committing", "rolling-back"
LOG_DIRS = (ASSOCIATED, COMMITTING, ROLLING_BACK, "committed", "rolled-back")


@dataclass(frozen=True)
class LogEntry:
    kind: str  # "send" | "receive"
    box: str  # dropbox path relative to the root
    name: str  # working/ name (send) or processing/ name (receive)

    def to_json(self) -> str:
        # ASCII escapes: a name with an undecodable byte (a surrogate) survives the round trip
        return json.dumps({"kind": self.kind, "box": self.box, "name": self.name})

    @classmethod
    def from_json(cls, line: str) -> "LogEntry":
        """KeyError/ValueError for a torn line; CorruptLogError for a whole line that is no
        entry of ours, or that names a path outside the root."""
        d = json.loads(line)
        if not isinstance(d, dict):
            raise CorruptLogError(f"log line {line[:80]!r} is not an object")
        entry = cls(d["kind"], d["box"], d["name"])
        if entry.kind not in ("send", "receive") or not is_inside(entry.box) or not is_file_name(entry.name):
            raise CorruptLogError(f"log entry {line[:120]!r} is not a send or receive inside the root")
        return entry


class CorruptLogError(StoreError, ValueError):
    """A transaction log that this library did not write (wrong shape, a path leaving the root)."""


def is_inside(rel: object) -> bool:
    """A relative path with no ``..``, ``.`` or empty component: it stays below the root."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\0" in rel:
        return False
    return all(part not in ("", ".", "..") for part in rel.split("/"))


def is_file_name(name: object) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\0" not in name


def transaction_dir(root: Path) -> Path:
    return Path(root) / "dropboxmq" / "transaction"


def ensure_layout(root: Path) -> None:
    for d in LOG_DIRS:
        ensure_plain_dir(root, transaction_dir(root) / d)


def log_owner(log_name: str) -> str:
    """The client id that owns a log named ``<enc(clientId)>~<session>~<seq>``."""
    return codec.decode_field(log_name.split("~", 1)[0])


class TransactionLog:
    """The log of one open transaction of one session."""

    def __init__(self, root: Path, client_id: str, session_tag: str, seq: int):
        self.root = Path(root)
        self.name = f"{codec.encode_field(client_id)}~{session_tag}~{seq}"
        self.entries: list[LogEntry] = []
        self._fd: int | None = None
        self._rel: dict[str, str] = {}  # dropbox path -> its path relative to the root

    def _path(self, where: str) -> str:
        return str(transaction_dir(self.root) / where / self.name)

    def record(self, kind: str, box: Dropbox, name: str) -> None:
        key = str(box.path)
        rel = self._rel.get(key)
        if rel is None:
            rel = self._rel[key] = os.path.relpath(key, self.root)
        entry = LogEntry(kind, rel, name)
        if self._fd is None:
            self._fd = open_regular(self._path(ASSOCIATED), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.write(self._fd, (entry.to_json() + "\n").encode("utf-8"))
        self.entries.append(entry)

    def _close(self, sync: bool) -> None:
        if self._fd is not None:
            if sync:
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None

    def commit(self, durable: bool) -> None:
        if not self.entries:
            self._close(False)
            return
        self._close(False)
        if durable:  # group commit: the log and every working/ file it names, in one syncfs
            sync_file_system(self.root)
        os.rename(self._path(ASSOCIATED), self._path(COMMITTING))
        # ---- point of no return: from here on recovery rolls forward ----
        try:
            if durable:
                _fsync_dir(str(transaction_dir(self.root) / COMMITTING))
            roll_forward(self.root, self.entries, durable)
            os.unlink(self._path(COMMITTING))
        except (OSError, StoreError) as exc:
            raise TransactionInDoubtError(
                f"in doubt: transaction {self.name} is committed but not fully applied ({exc}); "
                "recovery will finish it -- do not send it again") from exc

    def rollback(self) -> None:
        if not self.entries:
            self._close(False)
            return
        self._close(False)
        os.rename(self._path(ASSOCIATED), self._path(ROLLING_BACK))
        roll_back(self.root, self.entries)
        os.unlink(self._path(ROLLING_BACK))


def box_in_root(root: Path, rel: str) -> Dropbox:
    """The dropbox a log names by its path relative to the root; CorruptLogError if that
    path leaves the root by ``..`` or goes through a symlink."""
    path = Path(root) / rel
    if not is_inside(rel) or not is_plain_path(root, path):
        raise CorruptLogError(f"transaction log names {rel!r}, which is outside the root")
    return Dropbox(path)


def _box(root: Path, rel: str, boxes: dict[str, Dropbox]) -> Dropbox:
    box = boxes.get(rel)
    if box is None:  # one Dropbox per directory, not one per entry
        box = boxes[rel] = box_in_root(root, rel)
    return box


def roll_forward(root: Path, entries: list[LogEntry], durable: bool) -> None:
    touched = []
    boxes: dict[str, Dropbox] = {}
    for e in entries:
        box = _box(root, e.box, boxes)
        if e.kind == "send":
            box.move(Move.SEND, State.NOT_COMMITTED, e.name)
            touched.append((box, State.NEW))
        else:
            box.move(Move.ACK, State.DELIVERED, e.name)
            touched.append((box, State.ACKNOWLEDGED))
    if durable:
        sync_many(touched)


def roll_back(root: Path, entries: list[LogEntry]) -> None:
    boxes: dict[str, Dropbox] = {}
    for e in reversed(entries):
        box = _box(root, e.box, boxes)
        if e.kind == "send":
            box.move(Move.DISCARD, State.NOT_COMMITTED, e.name)
        else:
            _, original = codec.split_processing_name(e.name)
            box.move(Move.REDELIVER, State.DELIVERED, e.name, original)


def read_log(path: Path) -> list[LogEntry]:
    """The entries of a log (a regular file: a FIFO or symlink raises NotARegularFile).
    CorruptLogError for a log this library did not write."""
    entries = []
    text = read_regular_file(path).decode("utf-8", "surrogateescape")
    for line in text.splitlines():
        line = line.strip()
        if line:
            try:
                entries.append(LogEntry.from_json(line))
            except CorruptLogError:
                raise
            except (ValueError, KeyError, TypeError):
                break  # a torn last line: the op it describes never happened
    return entries


def pending_logs(root: Path, dirs: tuple[str, ...] = (COMMITTING, ASSOCIATED, ROLLING_BACK)
                 ) -> Iterator[tuple[str, Path]]:
    """(directory, path) of every log still on disk (in ``dirs``)."""
    for where in dirs:
        d = transaction_dir(root) / where
        if not is_plain_path(root, d):
            continue  # a symlinked log directory holds no log of ours: never follow it
        try:
            names = sorted(os.listdir(d))
        except (FileNotFoundError, NotADirectoryError):
            continue  # a file where the directory belongs holds no log of ours
        for name in names:
            yield where, d / name


def logged_sends(root: Path) -> set[str]:
    """The working/ name of every send that a log still on disk names.  Directories are read in
    the order a log travels (associated/ first), and a log gone from where it was listed is
    read where it went, so a transaction committing or rolling back meanwhile is not missed."""
    names: set[str] = set()
    for where in (ASSOCIATED, COMMITTING, ROLLING_BACK):
        if not is_plain_path(root, transaction_dir(root) / where):
            continue  # a symlinked log directory holds no log of ours
        try:
            listed = sorted(os.listdir(transaction_dir(root) / where))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for log_name in listed:
            for place in (where, COMMITTING, ROLLING_BACK):
                try:
                    entries = read_log(transaction_dir(root) / place / log_name)
                except FileNotFoundError:
                    continue
                except (NotARegularFile, CorruptLogError):
                    break  # not a log of ours: it names no send
                names.update(e.name for e in entries if e.kind == "send")
                break
    return names


def recover_log(root: Path, where: str, path: Path) -> str:
    """Finish a dead owner's transaction: forward if it reached committing/, else back.
    Idempotent, so two recoverers racing on one log do no harm."""
    try:
        entries = read_log(path)
    except FileNotFoundError:
        return "already recovered"
    if where == COMMITTING:
        roll_forward(root, entries, durable=True)
        outcome = "rolled forward"
    else:
        roll_back(root, entries)
        outcome = "rolled back"
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return outcome


def finish_dead_commits(root: Path) -> int:
    """Roll forward every committed (``committing/``) transaction whose owner is dead, so that a
    publisher killed in mid fan-out is finished by the consumers of its dropboxes, not only by
    an operator's ``recover``.  Owners never registered here are left alone.  Returns how many."""
    from .clients import is_dead

    n = 0
    for where, path in list(pending_logs(root, (COMMITTING,))):
        if is_dead(root, log_owner(path.name)) and _recover_ours(root, where, path):
            n += 1
    return n


def _recover_ours(root: Path, where: str, path: Path) -> bool:
    """recover_log, leaving alone (with a warning) what is no log of ours."""
    try:
        recover_log(root, where, path)
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
            if _recover_ours(root, where, path):
                n += 1
    return n
