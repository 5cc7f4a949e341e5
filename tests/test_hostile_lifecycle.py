"""Regressions for issue 15's lifecycle defects (7, 9, 10, 12-16), found by hostile testing:
racing operator commands, kills at chosen points, foreign hard links, closed temporary
destinations.  Deaths are real processes killed with SIGKILL; every wait is on an event or a
bounded receive, never a sleep."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FAST, fork_context, ls
from dropboxmq import layout, recovery, topics
from dropboxmq.making import ensure_dropbox
from dropboxmq.errors import IllegalStateError, InvalidDestinationError, StoreError
from dropboxmq.transaction import TransactionInDoubtError
from dropboxmq.lifecycle import Move, State
from dropboxmq.message import Queue, TextMessage, Topic
from dropboxmq.ackmode import CLIENT_ACKNOWLEDGE
from dropboxmq.connection import Connection
from dropboxmq.distributor import distribute

Q = Queue("Q1")
WAIT = 5.0  # upper bound for a receive of a message known to be there (or due within a recovery interval)
LIMIT = 60  # seconds a child may take at most


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dropboxmq.cli", "--root", str(root), *args],
                          capture_output=True, text=True, timeout=LIMIT)


def _stall_at_send(stalled, go) -> None:
    """In a child: every SEND (working -> target) first says so and waits for ``go``."""
    from dropboxmq import store

    real = store.Dropbox.move

    def move(self, m, *a, **kw):
        if m is Move.SEND:
            stalled.set()
            go.wait()
        return real(self, m, *a, **kw)

    store.Dropbox.move = move


def _die_after_first_send() -> None:
    """In a child: SIGKILL right after the first SEND of a commit (past its point of no return)."""
    from dropboxmq import store

    real = store.Dropbox.move

    def move(self, m, *a, **kw):
        moved = real(self, m, *a, **kw)
        if m is Move.SEND:
            os.kill(os.getpid(), signal.SIGKILL)
        return moved

    store.Dropbox.move = move


def _run(target, *args):
    child = fork_context().Process(target=target, args=args)
    child.start()
    return child


# ---------------------------------------------------------------- 7: an acknowledged send in error/


def _stalled_producer(root: str, stalled, go) -> None:
    _stall_at_send(stalled, go)
    try:
        with Connection(root, "producer", create=True) as c:
            c.create_session().create_producer(Q).send(TextMessage(body=b"stalled"))
    except StoreError:
        os._exit(7)
    os._exit(0)


@contextlib.contextmanager
def _producer_stalled_at_send(root: Path):
    """A producer process whose send has created its file in working/ and waits before the
    SEND until the block ends; yields the child (joined, with its exit code, afterwards)."""
    Connection(root, "setup", create=True).close()
    ctx = fork_context()
    stalled, go = ctx.Event(), ctx.Event()
    child = _run(_stalled_producer, str(root), stalled, go)
    try:
        assert stalled.wait(LIMIT)
        yield child
    finally:
        go.set()
        child.join(LIMIT)


def test_recover_with_orphan_age_zero_leaves_a_live_producers_file_alone(root):
    """`recover --orphan-age 0` while a producer is between CREATE and SEND (stalled there):
    the file is not an orphan, and the send completes into target/ (it was quarantined)."""
    with _producer_stalled_at_send(root) as child:
        out = _cli(root, "recover", "--orphan-age", "0")
        assert out.returncode == 0, out.stderr
    assert child.exitcode == 0
    assert len(ls(root, "Q1", "target")) == 1 and ls(root, "Q1", "error") == [] and ls(root, "Q1", "working") == []


def test_a_send_whose_file_was_taken_from_working_raises(root):
    """Something foreign moves the producer's file out of working/ before its SEND: the send
    failed and must say so (it returned as if sent)."""
    with _producer_stalled_at_send(root) as child:
        [name] = ls(root, "Q1", "working")
        box = layout.queue_box(root, Q)
        os.rename(box.file(State.NOT_COMMITTED, name), box.file(State.DEAD_LETTER, name))
    assert child.exitcode == 7, "the send must raise StoreError"


def _transacted_sender(root: str, go, sent, commit) -> None:
    with Connection(root, "tx-producer", create=True) as c:
        s = c.create_session(transacted=True)
        p = s.create_producer(Q)
        go.wait()
        p.send(TextMessage(body=b"tx"))
        sent.set()
        commit.wait()
        s.commit()
    os._exit(0)


def test_orphan_sweep_reads_the_logs_after_listing_working(root, monkeypatch):
    """A transacted send logged and created while recover runs (after it looked at the logs,
    before it lists working/) is not an orphan: its commit must deliver it."""
    Connection(root, "setup", create=True).close()
    ensure_dropbox(layout.queue_box(root, Q))
    ctx = fork_context()
    go, sent, commit = ctx.Event(), ctx.Event(), ctx.Event()
    child = _run(_transacted_sender, str(root), go, sent, commit)
    real = topics.reclaim_orphans

    def between_logs_and_sweep(r):
        go.set()
        assert sent.wait(LIMIT)
        return real(r)

    monkeypatch.setattr(topics, "reclaim_orphans", between_logs_and_sweep)
    try:
        report = recovery.recover(root, orphan_age=0)
    finally:
        go.set()
        commit.set()
        child.join(LIMIT)
    assert child.exitcode == 0 and report.orphans_quarantined == 0
    assert len(ls(root, "Q1", "target")) == 1 and ls(root, "Q1", "error") == []


# ---------------------------------------------------------------- 9: distribute's copies


@pytest.mark.parametrize("name", ["4.1140429201295000-0000000001.T",
                                  "4.1140429201295000-0000000002.T.....JMSXDeliveryCountI=3"])
def test_distributed_copies_are_first_deliveries(root, name):
    with Connection(root, "c1", create=True) as conn:
        for sub in ("a", "b"):
            conn.create_session().create_durable_consumer(Topic("t"), sub).close()
    incoming = ensure_dropbox(topics.topic_incoming(root, Topic("t")))
    Path(incoming.file(State.NEW, name)).write_bytes(b"dropped")
    assert distribute(root) == 1
    with Connection(root, "c1", create=True) as conn:
        s = conn.create_session()
        for sub in ("a", "b"):
            m = s.create_durable_consumer(Topic("t"), sub).receive(WAIT)
            assert m is not None and m.body == b"dropped"
            assert (m.redelivered, m.delivery_count) == (False, 1), sub
            assert m.get_property("JMSXDeliveryCount") == 1


# ---------------------------------------------------------------- 10: hard links in target/


def _claim_and_hold(root: str, held) -> None:
    with Connection(root, "holder", create=True) as c:
        s = c.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        assert s.create_consumer(Q).receive(WAIT) is not None
        held.set()
        signal.pause()  # until SIGKILL


def test_hard_links_in_target_are_two_messages_not_an_interrupted_rename(root):
    box = ensure_dropbox(layout.queue_box(root, Q))
    first, second = "4.1140429201295000-0000000001.T", "4.1140429201295000-0000000002.T"
    Path(box.file(State.NEW, first)).write_bytes(b"linked")
    os.link(box.file(State.NEW, first), box.file(State.NEW, second))
    with Connection(root, "acker", FAST, create=True) as c:
        assert c.create_session().create_consumer(Q).receive(WAIT).message_id == "ID:1140429201295000-0000000001"
    held = fork_context().Event()
    child = _run(_claim_and_hold, str(root), held)
    assert held.wait(LIMIT)
    os.kill(child.pid, signal.SIGKILL)
    child.join(LIMIT)
    assert recovery.recover(root).redelivered == 1
    with Connection(root, "after", FAST, create=True) as c:
        m = c.create_session().create_consumer(Q).receive(WAIT)
    assert m is not None and m.message_id == "ID:1140429201295000-0000000002" and m.redelivered


# ---------------------------------------------------------------- 12 and 15: removing a subscription with work in flight


def _hold_one_of_sub(conn: Connection, **session_kind):
    """Durable subscription "sub" on t with one message, received by a new session of ``conn``
    and left unacknowledged / uncommitted, its consumer closed.  Returns the session."""
    conn.create_session().create_durable_consumer(Topic("t"), "sub").close()
    conn.create_session().create_producer(Topic("t")).send(TextMessage(body=b"m"))
    s = conn.create_session(**session_kind)
    c = s.create_durable_consumer(Topic("t"), "sub")
    assert c.receive(WAIT).body == b"m"
    c.close()
    return s


def test_unsubscribe_with_unacknowledged_client_messages_is_refused(root):
    with Connection(root, "c1", create=True) as conn:
        s = _hold_one_of_sub(conn, ack_mode=CLIENT_ACKNOWLEDGE)
        with pytest.raises(IllegalStateError, match="not acknowledged"):
            conn.create_session().unsubscribe("sub")
        s.acknowledge()
        conn.create_session().unsubscribe("sub")


def test_acknowledge_survives_a_subscription_removed_by_another_connection(root):
    """A shared durable subscription (no client id) removed by another connection while this
    session holds an unacked message of it: acknowledge() still acks the session's other
    messages (it raised on every call)."""
    with Connection(root, create=True) as a, Connection(root, create=True) as b:
        s = a.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        sub = s.create_shared_durable_consumer(Topic("t"), "shared")
        b.create_session().create_producer(Topic("t")).send(TextMessage(body=b"topic"))
        b.create_session().create_producer(Q).send(TextMessage(body=b"queue"))
        assert sub.receive(WAIT).body == b"topic"
        assert s.create_consumer(Q).receive(WAIT).body == b"queue"
        sub.close()
        b.create_session().unsubscribe("shared")
        s.acknowledge()
        s.acknowledge()
    assert len(ls(root, "Q1", "processed")) == 1 and ls(root, "Q1", "processing") == []


def test_recreating_a_durable_subscription_keeps_an_uncommitted_receive(root):
    with Connection(root, "c1", create=True) as conn:
        tx = _hold_one_of_sub(conn, transacted=True)
        for topic, selector in ((Topic("t"), "x = 1"), (Topic("other"), None)):
            with pytest.raises(IllegalStateError, match="not acknowledged or committed"):
                conn.create_session().create_durable_consumer(topic, "sub", selector=selector)
        tx.rollback()
        again = conn.create_session().create_durable_consumer(Topic("t"), "sub")
        m = again.receive(WAIT)
        assert m is not None and m.body == b"m" and m.redelivered


# ---------------------------------------------------------------- 13 and 14: a dead publisher's committed transaction


def _publisher_dies_mid_commit(root: str, dest) -> None:
    with Connection(root, "publisher", create=True) as c:
        s = c.create_session(transacted=True)
        p = s.create_producer(dest)
        for body in (b"one", b"two"):
            p.send(TextMessage(body=body))
        _die_after_first_send()
        s.commit()
    os._exit(3)  # not reached


def _kill_publisher_mid_commit(root: Path, dest) -> None:
    child = _run(_publisher_dies_mid_commit, str(root), dest)
    child.join(LIMIT)
    assert child.exitcode == -signal.SIGKILL
    assert len(os.listdir(layout.transaction_dir(root) / "committing")) == 1


def test_reconnecting_publisher_finishes_its_predecessors_commit(root):
    ensure_dropbox(layout.queue_box(root, Q))
    _kill_publisher_mid_commit(root, Q)
    assert len(ls(root, "Q1", "target")) == 1  # a partial commit
    with Connection(root, "publisher", FAST, create=True):
        assert len(ls(root, "Q1", "target")) == 2  # finished as it connected
        recovery.recover(root)  # while it is connected too: nothing is left over
        assert os.listdir(layout.transaction_dir(root) / "committing") == []
        assert ls(root, "Q1", "working") == []


def test_consumers_finish_a_dead_publishers_partial_fan_out(root):
    """No `recover`: the consumers of the subscriptions finish the committed transaction."""
    with Connection(root, "c1", create=True) as conn:
        for sub in ("a", "b"):
            conn.create_session().create_durable_consumer(Topic("t"), sub).close()
    _kill_publisher_mid_commit(root, Topic("t"))
    with Connection(root, "c1", FAST, create=True) as conn:
        s = conn.create_session()
        for sub in ("a", "b"):
            c = s.create_durable_consumer(Topic("t"), sub)
            assert sorted(m.body for m in (c.receive(WAIT), c.receive(WAIT)) if m) == [b"one", b"two"], sub
            c.close()
    assert os.listdir(layout.transaction_dir(root) / "committing") == []


# ---------------------------------------------------------------- 16: closed temporary queues, in-doubt commits


def test_send_to_a_closed_temporary_queue_is_an_invalid_destination(root):
    with Connection(root, create=True) as sender:
        p = sender.create_session().create_producer()
        with Connection(root, create=True) as owner:
            temp = owner.create_session().create_temporary_queue()
            p.send(TextMessage(body=b"while open"), temp)
        with pytest.raises(InvalidDestinationError, match="does not exist"):
            p.send(TextMessage(body=b"after close"), temp)
    with Connection(root, create=True) as late:  # one that never sent there before
        with pytest.raises(InvalidDestinationError, match="does not exist"):
            late.create_session().create_producer(temp).send(TextMessage(body=b"after close"))
    assert not (Path(root) / temp.name).exists()
    out = _cli(root, "send", temp.name, "from the shell")
    assert out.returncode == 1 and "does not exist" in out.stderr and "Traceback" not in out.stderr
    assert not (Path(root) / temp.name).exists()


def test_transacted_send_failing_past_the_point_of_no_return_is_in_doubt(root):
    box = ensure_dropbox(layout.queue_box(root, Q))
    target = Path(box.dir(State.NEW))
    with Connection(root, "tx", create=True) as c:
        s = c.create_session(transacted=True)
        s.create_producer(Q).send(TextMessage(body=b"committed"))
        target.rmdir()
        target.write_bytes(b"")  # SEND now fails with ENOTDIR, after the log reached committing/
        with pytest.raises(TransactionInDoubtError, match="in doubt"):
            s.commit()
        target.unlink()
        target.mkdir()
    # closing retried it; failing that, recovery would have (the log says committed)
    assert os.listdir(layout.transaction_dir(root) / "committing") == []
    with Connection(root, "reader", FAST, create=True) as c:
        assert c.create_session().create_consumer(Q).receive(WAIT).body == b"committed"
