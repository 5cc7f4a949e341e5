"""Operator tasks on a queue's files: look at any state directory, redrive dead letters, and
the removal tallies that keep Prometheus counters monotonic when retention deletes files.

Redrive (SQS's redrive, RabbitMQ's shovel) sends each dead letter again under its original
name, so its id, class, headers, properties and body are unchanged and its delivery count
starts over: Create a copy in working/, Send it, fsync target/, then Purge the error/ file.
A crash between the Send and the Purge leaves the message in both places (at-least-once,
as every redrive is); nothing is ever lost.

Removal tallies: what ``prune``, ``purge`` and ``redrive`` remove from a dropbox is appended,
one ``<state> <count>`` line per call, to ``<root>/dropboxmq/removed/<enc(dropbox)>`` (O_APPEND:
concurrent pruners never lose each other's lines).  A counter is then what a state directory
holds now plus what was ever removed from it, so it never goes down.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from . import codec, layout
from .lifecycle import Move, State
from .message import Message
from .store import Dropbox, NotARegularFile, sync_many
from .transaction import read_lines

__all__ = ["StoredMessage", "messages_in", "redrive", "record_removed", "removed_totals", "REMOVED_DIR"]

REMOVED_DIR = "removed"


@dataclass
class StoredMessage:
    """A message as it lies in one state directory."""

    message: Message
    state: State
    file_name: str
    size: int


def _decode(state: State, file_name: str, now: int) -> Message:
    """The message a file of ``state`` names; a claimed name's ``<client>~`` prefix is not part of it."""
    claimed = state in (State.DELIVERED, State.ACKNOWLEDGED, State.DEAD_LETTER)
    bare = codec.split_processing_name(file_name)[1] if claimed else file_name
    return codec.from_wire(bare, now, claimed=claimed)


def messages_in(box: Dropbox, state: State, limit: int = 0) -> Iterator[StoredMessage]:
    """The messages of one state directory in delivery order (priority, then send order),
    bodies read, nothing moved.  Files that are not regular files are skipped."""
    now = codec.now_ms()
    names = box.list(state)
    names.sort(key=lambda n: codec.sort_key(codec.split_processing_name(n)[1]))
    shown = 0
    for name in names:
        if limit and shown >= limit:
            return
        try:
            body = box.read(state, name)
        except (OSError, NotARegularFile):
            continue  # moved meanwhile, or not a regular file
        msg = _decode(state, name, now)
        msg.body = body
        shown += 1
        yield StoredMessage(msg, state, name, len(body))


def redrive(root: Path, box: Dropbox, display_name: str, limit: int = 0) -> Iterator[Message]:
    """Send the dead letters of ``box`` (oldest first, at most ``limit``; 0 = all) back to
    its target/ under their original names; yields each message once it is waiting again."""
    moved = 0
    for stored in list(messages_in(box, State.DEAD_LETTER, limit)):
        name = codec.with_delivery_count(codec.split_processing_name(stored.file_name)[1], None)
        with contextlib.ExitStack() as held:
            if (fd := box.lock_working()) >= 0:  # no orphan sweep between our Create and Send
                held.callback(os.close, fd)
            with box.open_body(State.DEAD_LETTER, stored.file_name) as body:
                box.create(name, body, durable=True)
            if not box.move(Move.SEND, State.NOT_COMMITTED, name):
                box.move(Move.DISCARD, State.NOT_COMMITTED, name)  # waiting already (an earlier, cut-off redrive)
                continue
        sync_many([(box, State.NEW)])
        if box.move(Move.PURGE, State.DEAD_LETTER, stored.file_name):
            moved += 1
        yield _decode(State.NEW, name, codec.now_ms())
    record_removed(root, display_name, {State.DEAD_LETTER.value: moved})


def _tally_file(root: Path, display_name: str) -> Path:
    return Path(root) / layout.INTERNAL / REMOVED_DIR / codec.encode_field(display_name)


def record_removed(root: Path, display_name: str, per_state: dict[str, int]) -> None:
    """Append what was removed from the dropbox ``display_name`` (as inventory.all_dropboxes
    names it), by state directory name.  Best effort: a tally that cannot be written makes
    a counter restart, it loses no message."""
    line = "".join(f"{state} {n}\n" for state, n in per_state.items() if n)
    if not line:
        return
    path = _tally_file(root, display_name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, line.encode())  # one write, appended whole
        finally:
            os.close(fd)
    except OSError:
        pass


def removed_totals(root: Path) -> dict[str, dict[str, int]]:
    """dropbox display name -> state directory name -> messages ever removed from it."""
    totals: dict[str, dict[str, int]] = {}
    directory = Path(root) / layout.INTERNAL / REMOVED_DIR
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return totals
    for entry in entries:
        if not entry.is_file(follow_symlinks=False):
            continue
        row = totals.setdefault(codec.decode_field(entry.name), {})
        try:  # line by line: a hostile root's huge file only to its first overlong line
            lines = read_lines(Path(entry.path))
        except OSError:
            continue
        for line in lines:
            state, _, count = line.decode(errors="replace").strip().partition(" ")
            if count.isdigit():
                row[state] = row.get(state, 0) + int(count)
    return totals
