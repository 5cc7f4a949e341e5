"""A hostile root's huge file where the library reads a record (found by the growth check of the
hostile-root fuzzer, tests/test_hostile_fuzz.py): each read stops at the record's bound
(store.RECORD_LIMIT for a record, transaction.LINE_LIMIT for a log's line) instead of reading -- and
holding -- the whole file.  Each test measures the bytes this process reads (/proc/self/io)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dropboxmq import claims
from dropboxmq.connection import Connection
from dropboxmq.lifecycle import State
from dropboxmq.liveness import hold_path, holds_claims, is_dead
from dropboxmq.message import Queue, TextMessage
from dropboxmq.operations import removed_totals
from dropboxmq.store import REGISTER, Dropbox
from dropboxmq.topics import CorruptSubscriptionError, Subscription
from dropboxmq.transaction import read_log
from dropboxmq.transaction import CorruptLogError
from dropboxmq_xa import BranchLog

HUGE = 64 << 20
#: what a bounded read of one of them may cost: the record's bound (1 MiB) and some slack
BOUNDED = 2 << 20


def rchar() -> int:
    with open("/proc/self/io", "rb") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(b"rchar:"))


def huge(path: Path, head: bytes) -> Path:
    """A sparse file of HUGE bytes: a valid record's shape, then zeros."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(head)
        os.truncate(f.fileno(), HUGE)
    return path


def read_by(fn) -> int:
    before = rchar()
    fn()
    return rchar() - before


def test_a_huge_subscription_record_is_corrupt_and_not_read_whole(tmp_path):
    huge(tmp_path / "s.c" / ".subscription",
         b'{"kind": "durable", "name": "s", "client_id": "c", "topic": "t", "selector": null, "no_local": false}')

    def info():
        with pytest.raises(CorruptSubscriptionError):
            _ = Subscription(tmp_path / "s.c").info

    assert read_by(info) < BOUNDED


def test_a_huge_claim_register_entry_is_no_entry_and_not_read_whole(tmp_path):
    root = tmp_path / "root"
    with Connection(root, create=True) as conn:
        conn.create_session().create_producer(Queue("q")).send(TextMessage(body=b"x"))
    box = Dropbox(root / "q" / "incoming")
    (name,) = os.listdir(box.path / "target")
    inode = os.lstat(box.path / "target" / name).st_ino
    huge(box.path / REGISTER / str(inode), b'{"name": "x", "size": 1, "count": 1}')
    found: list = []
    assert read_by(lambda: found.append(claims.lookup(box, State.NEW, name, frozenset({inode})))) < BOUNDED
    assert found == [None]


def test_a_huge_checkpoint_hold_is_no_hold_and_not_read_whole(tmp_path):
    huge(hold_path(tmp_path, "ghost"), str(tmp_path).encode())  # (a checkpoint that exists)
    held: list = []
    assert read_by(lambda: held.append(holds_claims(tmp_path, "ghost"))) < BOUNDED
    assert held == [False]


def test_a_hold_for_an_owner_too_long_to_name_one_is_no_hold(tmp_path):
    """A foreign file's "owner" may be longer than a file name may be: recovery asks whether it is
    dead, and no hold can be named after it (it raised ENAMETOOLONG)."""
    (tmp_path / "dropboxmq" / "holds").mkdir(parents=True)
    owner = "4." + "é" * 126
    assert not holds_claims(tmp_path, owner)
    assert is_dead(tmp_path, owner, assume_unknown_dead=True)


def test_a_huge_transaction_log_is_read_to_its_first_overlong_line(tmp_path):
    log = huge(tmp_path / "c~s~1", b'{"kind": "send", "box": "q/incoming", "name": "x"}\n')
    entries: list = []
    assert read_by(lambda: entries.extend(read_log(log))) < BOUNDED
    assert [(e.kind, e.box, e.name) for e in entries] == [("send", "q/incoming", "x")]


def test_a_huge_xa_log_is_read_to_its_first_overlong_line(tmp_path):
    log = huge(tmp_path / "xa-0-00-0", b'{"xid": {"format_id": 0, "gtrid": "00", "bqual": "00"}, "owner": "g"}\n'
                                       b'{"kind": "send", "box": "q/incoming", "name": "x", "parked": "p", "final": "x"}\n')
    loaded: list = []

    def load():
        try:
            loaded.append(BranchLog.load(log))
        except (CorruptLogError, ValueError) as exc:
            loaded.append(exc)

    assert read_by(load) < BOUNDED
    assert isinstance(loaded[0], BranchLog) and [e.name for e in loaded[0].entries] == ["x"]


def test_a_huge_removal_tally_is_read_to_its_first_overlong_line(tmp_path):
    huge(tmp_path / "dropboxmq" / "removed" / "q", b"error 1\nexpired 2\n")
    totals: dict = {}
    assert read_by(lambda: totals.update(removed_totals(tmp_path))) < BOUNDED
    assert totals == {"q": {"error": 1, "expired": 2}}
