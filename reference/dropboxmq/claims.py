"""Claims of names with no room: the owner and the delivery count for every legal name.

A claim renames ``target/<name>`` to ``processing/<enc(clientId)>~<name with the count>``
(codec.processing_name, codec.with_delivery_count): the owner prefix lets recovery give a
dead consumer's messages back, the count makes the next delivery say JMSRedelivered and
dead-letters a poison message.  Some legal names leave no room for that:

* a foreign name that is no 1.2 message name (``invoice-42.xml``): the count has no field;
* a name of 237-255 bytes: the count pair does not fit;
* a name that fits, but not behind the client id (229 bytes for a 25-byte prefix).

1.2 claimed those bare and forgot the count, so they were never recovered, never
redelivered as such and never dead-lettered.  Ours claims them under an *alias*,
``processing/<enc(clientId)>~#<inode>`` -- ``#`` is escaped by every 1.2 encoder
(``%23``), so no message name starts with it -- and keeps the name and the count in the
dropbox's claim register, ``<dropbox>/.claims/<inode>``: a small file holding the name, the
body's size and the deliveries attempted so far, made durable before the claim's rename.
The inode names the message across its renames (a rename keeps it); the size guards
against a register entry outliving its file (an operator's purge) and meeting a reused
inode.  So:

* CLAIM      writes the entry (count = this delivery), then renames target/<name> to the alias;
* REDELIVER  renames the alias back to target/<name>: the entry already holds the count, and
             the next claim reads it (JMSRedelivered = true, JMSXDeliveryCount = count + 1);
* ACK, DEAD_LETTER, EXPIRE  rename the alias to ``<state>/<name>`` and forget the entry.

Every other name is claimed exactly as before: 1.2 reads and writes both kinds.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from . import codec
from .errors import store_error
from .lifecycle import Move, State
from .making import replace_durably
from .store import REGISTER, Dropbox, fsync_dir, read_record

if TYPE_CHECKING:
    from .claim import Delivery

__all__ = [
    "Entry", "alias_name", "alias_inode", "lookup", "remember", "forget", "original_name", "claim_name", "finish",
    "sweep_stale", "acked_before",
]

log = logging.getLogger("dropboxmq")



class Entry:
    """What the register keeps for one aliased message."""

    __slots__ = ("name", "size", "count")

    def __init__(self, name: str, size: int, count: int):
        self.name, self.size, self.count = name, size, count


def _register(box: Dropbox) -> Path:
    return box.path / REGISTER


def alias_name(client_id: str, inode: int) -> str:
    return f"{codec.encode_field(client_id)}~{codec.ALIAS_MARK}{inode}"


def alias_inode(pname: str) -> int | None:
    """The inode an alias claim names, or None for an ordinary processing/ name."""
    rest = codec.split_processing_name(pname)[1]
    return int(rest[1:]) if rest[:1] == codec.ALIAS_MARK and rest[1:].isdigit() else None


def _read(box: Dropbox, inode: int) -> Entry | None:
    try:
        # (a root may be hostile: no FIFO, no symlink, not a huge file read whole)
        d = json.loads(read_record(_register(box) / str(inode)).decode("utf-8", "surrogateescape"))
        return Entry(str(d["name"]), int(d["size"]), int(d["count"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("claim register entry %s of %s is unreadable: %s", inode, box.path, exc)
        return None


def lookup(box: Dropbox, state: State, name: str, inodes: frozenset[int]) -> Entry | None:
    """The register's entry for ``<state>/<name>``, if ``inodes`` (a listing of the register)
    says there may be one and it belongs to this very file (same inode, same size)."""
    if not inodes:
        return None
    try:
        st = os.lstat(box.file(state, name))
    except FileNotFoundError:
        return None
    if st.st_ino not in inodes:
        return None
    entry = _read(box, st.st_ino)
    return entry if entry is not None and entry.size == st.st_size else None


def remember(box: Dropbox, inode: int, name: str, size: int, count: int) -> None:
    """Write the entry durably: it must outlast a crash whenever the claim's rename does."""
    register = _register(box)
    try:
        os.mkdir(register)
    except FileExistsError:
        if not stat.S_ISDIR(os.lstat(register).st_mode):
            raise NotADirectoryError(f"{register} is not a directory") from None
    else:
        fsync_dir(str(box.path))
    data = json.dumps({"name": name, "size": size, "count": count}).encode("utf-8", "surrogateescape")
    path = register / str(inode)
    replace_durably(path, data, register / f".{inode}.{os.getpid()}.tmp")
    fsync_dir(str(register))


def forget(box: Dropbox, inode: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_register(box) / str(inode))


def sweep_stale(box: Dropbox, cutoff: float) -> int:
    """Delete what a crash left in the register: a half-written entry (``.<inode>.<pid>.tmp``) and
    an entry no file of target/ or processing/ has the inode of any more (its claim lost a race,
    or was finished by a process that died before forgetting it), each older than ``cutoff``
    (seconds since the epoch).  Returns how many were deleted."""
    register = _register(box)
    try:
        names = os.listdir(register)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    live: set[int] = set()
    for state in (State.NEW, State.DELIVERED):
        for name in box.list(state):
            with contextlib.suppress(FileNotFoundError):
                live.add(os.lstat(box.file(state, name)).st_ino)
    removed = 0
    for name in names:
        stale = name.endswith(".tmp") if name.startswith(".") else (name.isdigit() and int(name) not in live)
        try:
            if stale and os.lstat(register / name).st_mtime < cutoff:
                os.unlink(register / name)
                removed += 1
        except FileNotFoundError:
            continue
    return removed


def original_name(box: Dropbox, pname: str) -> str | None:
    """The message name an alias claim stands for (None: no alias, or no entry for it)."""
    inode = alias_inode(pname)
    if inode is None:
        return None
    entry = _read(box, inode)
    return None if entry is None else entry.name


def claim_name(box: Dropbox, client_id: str, name: str, claimed: str, count: int, counted: bool) -> str | None:
    """The processing/ name to claim ``target/<name>`` under as delivery ``count``: ``claimed``
    behind the owner prefix, or (no room) an alias whose entry is written here, first; "" when
    the name is gone (claimed by someone else meanwhile).  ``counted``: the decision read the
    register's entry for this name; if it did not and an entry turns up, None (decide again).
    StoreError when the entry cannot be written."""
    pname = codec.claim_as(client_id, name, claimed)
    if pname is not None:
        return pname
    try:
        st = os.lstat(box.file(State.NEW, name))
        if not counted:
            entry = _read(box, st.st_ino)
            if entry is not None and entry.size == st.st_size and entry.count >= count:
                return None  # the register was listed before another consumer's claim wrote it
        remember(box, st.st_ino, name, st.st_size, count)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise store_error("register the claim of", name, exc) from exc
    return alias_name(client_id, st.st_ino)


def finish(box: Dropbox, move: Move, pname: str) -> bool:
    """ACK, DEAD_LETTER or EXPIRE the claim ``processing/<pname>``: an alias ends under its
    message's own name (and its entry is forgotten), any other name as it is."""
    inode = alias_inode(pname)
    entry = None if inode is None else _read(box, inode)
    if entry is None:
        return box.move(move, State.DELIVERED, pname)
    moved = box.move(move, State.DELIVERED, pname, entry.name)
    if moved:
        forget(box, inode)  # type: ignore[arg-type]  # set whenever entry is
    return moved


def acked_before(d: Delivery, taken: list[Delivery]) -> bool:
    """An ACK of ``d`` renamed nothing.  True if it is acked all the same (by an earlier
    acknowledge() whose sync failed, or after all); False if its subscription was removed (by
    another connection: nothing to ack), or recovery renamed the claim away (added to ``taken``:
    fenced by construction)."""
    if not os.path.isdir(d.box.dir(State.DELIVERED)):
        return False
    if d.acked or acked_after_all(d.box, d.processing_name, d.original_name):
        return True
    taken.append(d)
    return False


def acked_after_all(box: Dropbox, pname: str, original: str) -> bool:
    """Did an ACK whose rename answered "no such file" happen after all?  (NFS retransmits a
    RENAME whose reply was lost and answers the retry ENOENT.)  Then the message is in processed/
    under the name the ACK gives it: the claim's own name ``pname``, or for an alias claim its
    message's name ``original`` with the alias's inode."""
    inode = alias_inode(pname)
    try:
        if inode is None:
            os.lstat(box.file(State.ACKNOWLEDGED, pname))
            return True
        return os.lstat(box.file(State.ACKNOWLEDGED, original)).st_ino == inode
    except FileNotFoundError:
        return False
