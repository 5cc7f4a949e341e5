"""Every JMS promise of issue 2 for queues, one named test per rule (PROTOCOL.md §2, §4, §5, §6)."""

from __future__ import annotations

import os
import pickle
import signal
import threading
import time
import types
from pathlib import Path

import pytest

from dropboxmq import codec, filesystems, ids, layout, recovery
from dropboxmq.errors import IllegalStateError, InvalidClientIDError, InvalidDestinationError, NameTooLongError
from dropboxmq.filesystems import UnsupportedFileSystemError
from dropboxmq.lifecycle import Move, State
from dropboxmq.bodies import BytesMessage, MapMessage, ObjectMessage, StreamMessage
from dropboxmq.message import DeliveryMode, Queue, TextMessage, Topic
from dropboxmq.values import Property
from dropboxmq.ackmode import AUTO_ACKNOWLEDGE, CLIENT_ACKNOWLEDGE, DUPS_OK_ACKNOWLEDGE
from dropboxmq.connection import Connection, Settings
from conftest import FAST, counts, fork_context, ls, state_dir

Q = Queue("Q1")
WAIT = 5.0  # upper bound for receive(timeout) when a message is known to be there


def send_texts(conn: Connection, texts, queue=Q, **kw) -> list[str]:
    s = conn.create_session()
    p = s.create_producer(queue)
    ids = [p.send(TextMessage(body=t.encode()), **kw).message_id for t in texts]
    s.close()
    return ids


def drain(consumer, timeout: float = 0.2) -> list:
    out = []
    while (m := consumer.receive(timeout)) is not None:
        out.append(m)
    return out


def shift_clock(monkeypatch, seconds: float) -> None:
    """Make the library's wall clock (codec.now_ms: expiry, delivery delay) run ``seconds`` ahead."""
    real = time.time_ns
    monkeypatch.setattr(codec, "time", types.SimpleNamespace(time_ns=lambda: real() + int(seconds * 1e9)))


# ================================================================ acknowledgement modes


def test_auto_ack_after_receive_returns(root):
    with Connection(root, "a", FAST, create=True) as c:
        send_texts(c, ["x"])
        assert ls(root, "Q1", "target") and not ls(root, "Q1", "processed")
        cons = c.create_session(ack_mode=AUTO_ACKNOWLEDGE).create_consumer(Q)
        m = cons.receive(WAIT)
        assert m is not None and m.text == "x"
        assert counts(root, "Q1") == dict(working=0, target=0, processing=0, processed=1, expired=0, error=0)


def test_a_selective_consumer_forgets_the_misses_that_left_target(root):
    """The names a consumer's selector rejected are remembered only while they stay in target/:
    a long-running selective consumer does not grow with every message that others consume."""
    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session()
        p = s.create_producer(c.create_queue("Q1"))
        for keep in (False, True):
            m = TextMessage("x")
            m.set_property("keep", keep)
            p.send(m)
        picky = s.create_consumer(Q, "keep = TRUE")
        assert picky.receive(0) is not None
        assert len(picky.claimer.skip) == 1  # the miss, while it is in target/
        assert s.create_consumer(Q).receive(0) is not None  # another consumer takes it
        assert picky.receive(0) is None  # the walk ended: target/ is listed again
        assert picky.claimer.skip == set()


def test_a_consumer_forgets_the_held_back_names_that_left_target(root):
    """A message held back (delivery delay) and then purged from target/ is forgotten at the next
    listing: a long-running consumer does not keep, till its delivery time, every delayed message
    an operator purged, nor wake for it (next_retry_in).  Found by the API tester's held-state bound."""
    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session()
        p = s.create_producer(c.create_queue("Q1"))
        consumer = s.create_consumer(Q)
        for _ in range(3):
            p.send(TextMessage("later"), delivery_delay=3600)
            assert consumer.receive(0) is None  # held back: its delivery time is an hour away
        assert len(consumer.claimer.deferred) == 3
        box = layout.queue_box(root, Q)
        for name in box.list(State.NEW):
            assert box.move(Move.PURGE, State.NEW, name)  # what ``dropboxmq purge Q1`` does
        assert consumer.receive(0) is None  # lists target/ again
        assert consumer.claimer.deferred == {} and consumer.next_retry_in() is None


def test_auto_listener_acked_after_on_message_returns(root):
    seen_during: list[tuple[list, list]] = []
    done = threading.Event()
    with Connection(root, "a", FAST, create=True) as c:
        send_texts(c, ["x"])
        s = c.create_session(ack_mode=AUTO_ACKNOWLEDGE)

        def on_message(m):
            seen_during.append((ls(root, "Q1", "processing"), ls(root, "Q1", "processed")))
            done.set()

        s.create_consumer(Q).set_message_listener(on_message)
        assert done.wait(WAIT)
        s.close()  # joins the dispatcher: the ack after on_message has happened
        processing, processed = seen_during[0]
        assert len(processing) == 1 and processed == []  # not acked while the listener runs
        assert ls(root, "Q1", "processed") and not ls(root, "Q1", "processing")
        assert not ls(root, "Q1", "target")


def test_auto_listener_exception_redelivers(root):
    calls: list[tuple[str, bool, int]] = []
    done = threading.Event()
    with Connection(root, "a", FAST, create=True) as c:
        [mid] = send_texts(c, ["x"])
        s = c.create_session(ack_mode=AUTO_ACKNOWLEDGE)

        def on_message(m):
            calls.append((m.message_id, m.redelivered, m.get_property("JMSXDeliveryCount")))
            if len(calls) == 1:
                raise RuntimeError("listener failure")
            done.set()

        s.create_consumer(Q).set_message_listener(on_message)
        assert done.wait(WAIT)
        s.close()
    assert calls == [(mid, False, 1), (mid, True, 2)]
    assert len(ls(root, "Q1", "processed")) == 1


def test_client_acknowledge_on_first_acks_all_consumed(root):
    with Connection(root, "a", FAST, create=True) as c:
        send_texts(c, ["1", "2", "3"])
        s = c.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        cons = s.create_consumer(Q)
        ms = [cons.receive(WAIT) for _ in range(3)]
        assert [m.text for m in ms] == ["1", "2", "3"]
        assert len(ls(root, "Q1", "processing")) == 3
        ms[0].acknowledge()  # JMS: acks every consumed message, not only up to this one
        assert len(ls(root, "Q1", "processed")) == 3
        assert ls(root, "Q1", "processing") == []
        s.close()
    assert len(ls(root, "Q1", "processed")) == 3 and ls(root, "Q1", "target") == []


def test_client_unacked_are_redelivered_after_session_close(root):
    with Connection(root, "a", FAST, create=True) as c:
        [mid] = send_texts(c, ["1"])
        s = c.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        assert s.create_consumer(Q).receive(WAIT).message_id == mid
        s.close()
        m = c.create_session().create_consumer(Q).receive(WAIT)
        assert m.message_id == mid and m.redelivered


def test_recover_redelivers_all_unacked_oldest_first(root):
    with Connection(root, "a", FAST, create=True) as c:
        ids = send_texts(c, ["1", "2", "3"])
        s = c.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        cons = s.create_consumer(Q)
        first = [cons.receive(WAIT) for _ in range(3)]
        assert [m.message_id for m in first] == ids
        assert all(not m.redelivered for m in first)
        s.recover()
        assert ls(root, "Q1", "processing") == [] and len(ls(root, "Q1", "target")) == 3
        again = [cons.receive(WAIT) for _ in range(3)]
        assert [m.message_id for m in again] == ids  # oldest first
        assert all(m.redelivered for m in again)
        assert all(m.get_property("JMSXDeliveryCount") >= 2 for m in again)
        assert all(m.delivery_count >= 2 for m in again)
        again[-1].acknowledge()
    assert len(ls(root, "Q1", "processed")) == 3


def test_dups_ok_acks_in_batches_and_at_close(root):
    settings = Settings(poll_interval=0.005, dups_ok_batch=2)
    with Connection(root, "a", settings, create=True) as c:
        send_texts(c, ["1", "2", "3"])
        s = c.create_session(ack_mode=DUPS_OK_ACKNOWLEDGE)
        cons = s.create_consumer(Q)
        assert cons.receive(WAIT) is not None
        assert cons.receive(WAIT) is not None
        assert len(ls(root, "Q1", "processed")) == 2  # a full batch is flushed
        assert cons.receive(WAIT) is not None
        s.close()  # at the latest on close
        assert len(ls(root, "Q1", "processed")) == 3
        assert ls(root, "Q1", "processing") == [] and ls(root, "Q1", "target") == []


def test_dups_ok_listener_acks_eventually(root):
    got = threading.Event()
    with Connection(root, "a", FAST, create=True) as c:
        send_texts(c, ["1", "2"])
        s = c.create_session(ack_mode=DUPS_OK_ACKNOWLEDGE)
        n = []

        def on_message(m):
            n.append(m)
            if len(n) == 2:
                got.set()

        s.create_consumer(Q).set_message_listener(on_message)
        assert got.wait(WAIT)
        s.close()
    assert len(ls(root, "Q1", "processed")) == 2 and ls(root, "Q1", "processing") == []


def test_acknowledge_and_recover_illegal_in_transacted_session(root):
    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session(transacted=True)
        with pytest.raises(IllegalStateError):
            s.acknowledge()
        with pytest.raises(IllegalStateError):
            s.recover()
        with pytest.raises(IllegalStateError):
            c.create_session().commit()


def test_receive_and_send_refused_once_closed_or_with_a_listener(root):
    """receive() and send() say what is closed (a closed connection has closed its sessions, and
    a closed session its consumers); receive() refuses while a listener is set; nothing moves."""
    with Connection(root, "a", FAST, create=True) as c:
        send_texts(c, ["x"])
        s = c.create_session()
        listening, closed = s.create_consumer(Q), s.create_consumer(Q)
        c.stop()  # (the listener takes nothing)
        listening.set_message_listener(lambda m: None)
        closed.close()
        with pytest.raises(IllegalStateError, match="^receive\\(\\) is not allowed while a message listener is set$"):
            listening.receive(0)
        with pytest.raises(IllegalStateError, match="^consumer is closed$"):
            closed.receive(0)
        on_session, on_connection = c.create_session(), c.create_session()
        first, second = on_session.create_consumer(Q), on_connection.create_consumer(Q)
        producer = on_connection.create_producer(Q)
        on_session.close()
        with pytest.raises(IllegalStateError, match="^session is closed$"):
            first.receive(0)
    with pytest.raises(IllegalStateError, match="^session is closed$"):
        second.receive(0)
    with pytest.raises(IllegalStateError, match="^session is closed$"):
        producer.send(TextMessage("y"))
    with pytest.raises(IllegalStateError, match="^connection is closed$"):
        c.create_session()
    assert len(ls(root, "Q1", "target")) == 1


# ================================================================ transactions


def test_transacted_sends_invisible_until_commit(root):
    with Connection(root, "producer", FAST, create=True) as c, Connection(root, "other", FAST, create=True) as other:
        s = c.create_session(transacted=True)
        p = s.create_producer(Q)
        ids = [p.send(TextMessage(body=str(i).encode())).message_id for i in range(3)]
        assert ls(root, "Q1", "target") == []
        assert len(ls(root, "Q1", "working")) == 3
        cons = other.create_session().create_consumer(Q)
        assert cons.receive(0.05) is None
        assert list(other.create_session().create_browser(Q)) == []
        s.commit()
        assert len(ls(root, "Q1", "target")) == 3 and ls(root, "Q1", "working") == []
        assert [m.message_id for m in drain(cons)] == ids
    assert os.listdir(layout.transaction_dir(root) / "committing") == []
    assert os.listdir(layout.transaction_dir(root) / "associated") == []


def test_rollback_discards_sends(root):
    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session(transacted=True)
        p = s.create_producer(Q)
        for _ in range(3):
            p.send(TextMessage(body=b"x"))
        s.rollback()
        assert counts(root, "Q1") == dict(working=0, target=0, processing=0, processed=0, expired=0, error=0)
        assert c.create_session().create_consumer(Q).receive(0.05) is None
        p.send(TextMessage(body=b"after"))  # the session goes on with a new transaction
        s.commit()
        assert c.create_session().create_consumer(Q).receive(WAIT).text == "after"


def test_transacted_receive_rollback_redelivers(root):
    with Connection(root, "a", FAST, create=True) as c:
        [mid] = send_texts(c, ["x"])
        s = c.create_session(transacted=True)
        cons = s.create_consumer(Q)
        m = cons.receive(WAIT)
        assert m.message_id == mid and not m.redelivered
        assert len(ls(root, "Q1", "processing")) == 1
        s.rollback()
        assert len(ls(root, "Q1", "target")) == 1 and ls(root, "Q1", "processing") == []
        m2 = cons.receive(WAIT)
        assert m2.message_id == mid and m2.redelivered and m2.get_property("JMSXDeliveryCount") == 2
        s.commit()
    assert len(ls(root, "Q1", "processed")) == 1 and ls(root, "Q1", "target") == []


def test_transacted_receive_commit_acks(root):
    with Connection(root, "a", FAST, create=True) as c:
        send_texts(c, ["x", "y"])
        s = c.create_session(transacted=True)
        cons = s.create_consumer(Q)
        assert cons.receive(WAIT) and cons.receive(WAIT)
        assert ls(root, "Q1", "processed") == []
        s.commit()
        assert len(ls(root, "Q1", "processed")) == 2 and ls(root, "Q1", "processing") == []


def test_session_close_rolls_back(root):
    with Connection(root, "a", FAST, create=True) as c:
        [mid] = send_texts(c, ["received"])
        s = c.create_session(transacted=True)
        assert s.create_consumer(Q).receive(WAIT).message_id == mid
        s.create_producer(Q).send(TextMessage(body=b"never"))
        s.close()
        assert ls(root, "Q1", "working") == []
        assert len(ls(root, "Q1", "target")) == 1
        m = c.create_session().create_consumer(Q).receive(WAIT)
        assert m.message_id == mid and m.redelivered
        assert c.create_session().create_consumer(Q).receive(0.05) is None


# --- crash atomicity of commit: a real process dies (SIGKILL) at each step of the commit

CRASH_POINTS = [
    "before-committing",  # log still in associated/: roll back
    "after-committing",  # renamed into committing/, nothing applied: roll forward
    "after-first-send",  # one of the three SENDs applied: roll forward
    "after-all-moves",  # everything applied, log not yet deleted: roll forward (idempotent)
]


def _crashing_commit(root: str, point: str, ready) -> None:
    """Child: receive M0 and send A, B, C in one transaction; SIGKILL itself inside commit."""
    from dropboxmq import store as st, transaction as tx

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    real_rename, real_unlink, real_move = os.rename, os.unlink, st.Dropbox.move
    sends = [0]

    def rename(src, dst, *a, **kw):
        if point == "before-committing" and "/committing/" in str(dst):
            die()
        real_rename(src, dst, *a, **kw)
        if point == "after-committing" and "/committing/" in str(dst):
            die()

    def unlink(path, *a, **kw):
        if point == "after-all-moves" and "/committing/" in str(path):
            die()
        real_unlink(path, *a, **kw)

    def move(self, m, *a, **kw):
        ok = real_move(self, m, *a, **kw)
        if m is Move.SEND and point == "after-first-send":
            sends[0] += 1
            if sends[0] == 1:
                die()
        return ok

    c = Connection(root, "crasher", FAST, create=True)
    s = c.create_session(transacted=True)
    assert s.create_consumer(Q).receive(WAIT) is not None
    p = s.create_producer(Q)
    for body in (b"A", b"B", b"C"):
        p.send(TextMessage(body=body))
    ready.set()
    tx.os.rename, tx.os.unlink, st.Dropbox.move = rename, unlink, move
    s.commit()
    os._exit(3)  # not reached: every crash point kills the process


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_commit_is_crash_atomic(root, point):
    with Connection(root, "setup", FAST, create=True) as c:
        [m0] = send_texts(c, ["M0"])
    ctx = fork_context()
    ready = ctx.Event()
    child = ctx.Process(target=_crashing_commit, args=(str(root), point, ready))
    child.start()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL, "the child must die inside commit"
    assert ready.is_set()
    report = recovery.recover(root)
    forward = point != "before-committing"
    assert report.transactions == {("rolled forward" if forward else "rolled back"): 1}
    tdir = layout.transaction_dir(root)
    assert all(os.listdir(tdir / d) == [] for d in ("associated", "committing", "rolling-back"))
    assert ls(root, "Q1", "working") == [] and ls(root, "Q1", "processing") == []
    with Connection(root, "after", FAST, create=True) as c:
        got = drain(c.create_session().create_consumer(Q))
    bodies = sorted(m.body for m in got)
    if forward:  # all three sends visible, the receive acknowledged
        assert bodies == [b"A", b"B", b"C"]
        assert len(ls(root, "Q1", "processed")) == 4
    else:  # no send visible, the received message comes back redelivered
        assert bodies == [b"M0"]
        assert got[0].message_id == m0 and got[0].redelivered


def test_commit_crash_log_in_associated_with_live_owner_is_left_alone(root):
    with Connection(root, "live", FAST, create=True) as c:
        s = c.create_session(transacted=True)
        s.create_producer(Q).send(TextMessage(body=b"pending"))
        report = recovery.recover(root, orphan_age=0)
        assert report.transactions == {} and report.orphans_quarantined == 0
        assert len(ls(root, "Q1", "working")) == 1
        s.commit()
    assert len(ls(root, "Q1", "target")) == 1


# ================================================================ expiry and delivery delay


def test_expired_message_never_delivered_nor_browsed(root, monkeypatch):
    with Connection(root, "a", FAST, create=True) as c:
        send_texts(c, ["short"], time_to_live=60)
        send_texts(c, ["long"], time_to_live=3600)
        shift_clock(monkeypatch, 120)
        assert [m.text for m in c.create_session().create_browser(Q)] == ["long"]
        cons = c.create_session().create_consumer(Q)
        assert [m.text for m in drain(cons)] == ["long"]
    assert len(ls(root, "Q1", "expired")) == 1 and ls(root, "Q1", "target") == []


def test_expiry_counts_from_send_time(root):
    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session()
        m = s.create_producer(Q).send(TextMessage(body=b"x"), time_to_live=30)
        assert m.expiration == m.timestamp + 30_000
        got = s.create_consumer(Q).receive(WAIT)
        assert got.expiration == m.expiration


def test_recovery_sweep_expires(root, monkeypatch):
    with Connection(root, "a", FAST, create=True) as c:
        send_texts(c, ["x"], time_to_live=1)
    shift_clock(monkeypatch, 10)
    assert recovery.recover(root).expired == 1
    assert len(ls(root, "Q1", "expired")) == 1 and ls(root, "Q1", "target") == []


def test_ttl_zero_never_expires(root, monkeypatch):
    with Connection(root, "a", FAST, create=True) as c:
        m = c.create_session().create_producer(Q).send(TextMessage(body=b"x"), time_to_live=0)
        assert m.expiration == 0
        shift_clock(monkeypatch, 10 * 365 * 86400)
        assert recovery.recover(root).expired == 0
        assert c.create_session().create_consumer(Q).receive(WAIT).text == "x"


def test_delivery_delay_not_delivered_before_its_time(root, monkeypatch):
    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session()
        s.create_producer(Q).send(TextMessage(body=b"later"), delivery_delay=60)
        send_texts(c, ["now"])
        cons = s.create_consumer(Q)
        assert cons.receive(WAIT).text == "now"
        assert cons.receive(0.05) is None
        assert list(s.create_browser(Q)) == []
        assert len(ls(root, "Q1", "target")) == 1
        shift_clock(monkeypatch, 61)
        m = cons.receive(WAIT)
        assert m is not None and m.text == "later"


def test_escaped_or_foreign_headers_still_hold_a_claim_back(root):
    """A consumer without a selector claims plain first deliveries before decoding them; a name
    whose delivery time, expiration or delivery count is there (escaped or not) is decoded first."""
    far = int(time.time() * 1000) + 3_600_000
    with Connection(root, "a", FAST, create=True) as c:
        cons = c.create_session().create_consumer(Q)
        target = state_dir(root, "Q1", "target")
        (target / f"4.1140429201295003-3333333333.T.....JMS_DropboxMQ_Delivery%54imeL={far}").write_bytes(b"later")
        (target / "4.1140429201295004-4444444444.T.1").write_bytes(b"expired")
        (target / "4.1140429201295005-5555555555.T.....JMSX%44eliveryCountI=2").write_bytes(b"third")
        (target / "4.1140429201295006-6666666666.T").write_bytes(b"first")
        got = drain(cons, 0.1)
    assert [(m.body, m.get_property("JMSXDeliveryCount"), m.redelivered) for m in got] == \
        [(b"third", 3, True), (b"first", 1, False)]
    assert len(ls(root, "Q1", "target")) == 1 and len(ls(root, "Q1", "expired")) == 1
    assert any("JMSXDeliveryCountI=3" in n for n in ls(root, "Q1", "processed"))


# ================================================================ order


class _FakeMonotonic:
    """``time.monotonic`` that a test moves forward: the claim step's clock (when to list again)."""

    def __init__(self):
        self.offset = 0.0

    def monotonic(self):
        return time.monotonic() + self.offset


def test_priority_new_high_message_overtakes_backlog_within_one_scan_interval(root):
    clock = _FakeMonotonic()
    settings = Settings(scan_interval=1.0, poll_interval=0.005, recovery_interval=1e9)
    with Connection(root, "a", settings, create=True) as c:
        p = c.create_session().create_producer(Q)
        p.send_many([TextMessage(body=f"low{i}".encode()) for i in range(50)], priority=4,
                    delivery_mode=DeliveryMode.NON_PERSISTENT)
        cons = c.create_session().create_consumer(Q)
        cons.claimer.monotonic = clock.monotonic
        assert cons.receive(WAIT).text == "low0"  # the consumer has listed the backlog
        p.send(TextMessage(body=b"HIGH"), priority=9)
        clock.offset += 1.01  # one scan interval passes
        assert cons.receive(WAIT).text == "HIGH"
        assert [m.text for m in drain(cons, 0.05)] == [f"low{i}" for i in range(1, 50)]


def test_send_many_of_nothing_sends_nothing(root):
    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session()
        assert s.create_producer(Q).send_many([]) == []
        assert s.create_producer(Topic("T1")).send_many([]) == []
        assert s.create_consumer(Q).receive(0) is None


def test_a_backlog_is_listed_once_while_the_listing_is_fresh(root, monkeypatch):
    """A drain walks the whole listing: target/ is listed again only when the walk ends or the
    listing is stale, not every eighth of the backlog (the consume profile had 15 % of its time
    in relisting)."""
    frozen = time.monotonic()
    settings = Settings(scan_interval=1.0, poll_interval=0.005, recovery_interval=1e9)
    with Connection(root, "a", settings, create=True) as c:
        c.create_session().create_producer(Q).send_many([TextMessage(body=str(i)) for i in range(2000)],
                                                       delivery_mode=DeliveryMode.NON_PERSISTENT)
        cons = c.create_session().create_consumer(Q)
        # time stands still: the listing never goes stale (on a loaded machine the drain takes longer
        cons.claimer.monotonic = lambda: frozen  # than the scan interval)
        listings = []
        real_list = cons.box.list
        monkeypatch.setattr(cons.box, "list", lambda state: listings.append(state) or real_list(state))
        got = [m.text for m in iter(cons)]
    assert got == [str(i) for i in range(2000)]
    assert listings.count(State.NEW) == 2  # the backlog, then the empty target/ that ends the drain


def test_priority_order_of_a_backlog(root):
    with Connection(root, "a", FAST, create=True) as c:
        p = c.create_session().create_producer(Q)
        order = [3, 9, 0, 4, 9, 7, 4]
        for i, prio in enumerate(order):
            p.send(TextMessage(body=str(i).encode()), priority=prio)
        got = drain(c.create_session().create_consumer(Q))
    expected = [str(i) for i, _ in sorted(enumerate(order), key=lambda t: (-t[1], t[0]))]
    assert [m.text for m in got] == expected


def test_fifo_within_one_priority_in_one_millisecond(root, monkeypatch):
    frozen = time.time_ns()

    class Frozen:
        def time_ns(self):
            return frozen

        def __getattr__(self, name):
            return getattr(time, name)

    monkeypatch.setattr(ids, "time", Frozen())  # every id is minted "in the same millisecond"
    monkeypatch.setattr(codec, "time", Frozen())
    with Connection(root, "a", FAST, create=True) as c:
        p = c.create_session().create_producer(Q)
        sent = p.send_many([TextMessage(body=str(i).encode()) for i in range(1100)],
                           delivery_mode=DeliveryMode.NON_PERSISTENT)
        monkeypatch.undo()
        assert len({m.timestamp for m in sent[:1000]}) == 1  # the premise: one millisecond
        got = drain(c.create_session().create_consumer(Q), 0.05)
    assert [m.message_id for m in got] == [m.message_id for m in sent]


def test_fifo_real_clock_bulk_send(root):
    with Connection(root, "a", FAST, create=True) as c:
        p = c.create_session().create_producer(Q)
        sent = p.send_many([TextMessage(body=str(i).encode()) for i in range(1000)],
                           delivery_mode=DeliveryMode.NON_PERSISTENT)
        assert len({m.timestamp for m in sent}) < len(sent)  # several sends shared a millisecond
        got = drain(c.create_session().create_consumer(Q), 0.05)
    assert [m.message_id for m in got] == [m.message_id for m in sent]


# ================================================================ dead letters


def test_dead_letter_after_max_delivery_attempts(root):
    settings = Settings(max_delivery_attempts=3, poll_interval=0.005)
    with Connection(root, "a", settings, create=True) as c:
        [mid] = send_texts(c, ["poison"])
        s = c.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        cons = s.create_consumer(Q)
        counts_seen = []
        for _ in range(3):
            m = cons.receive(WAIT)
            assert m is not None and m.message_id == mid
            counts_seen.append(m.get_property("JMSXDeliveryCount"))
            s.recover()
        assert counts_seen == [1, 2, 3]
        assert cons.receive(0.05) is None
        assert len(ls(root, "Q1", "error")) == 1
        assert ls(root, "Q1", "target") == [] and ls(root, "Q1", "processing") == []


def test_dead_letter_after_listener_keeps_failing(root):
    settings = Settings(max_delivery_attempts=3, poll_interval=0.005)
    calls = []
    third = threading.Event()
    with Connection(root, "a", settings, create=True) as c:
        send_texts(c, ["poison"])
        s = c.create_session()

        def on_message(m):
            calls.append(m.get_property("JMSXDeliveryCount"))
            if len(calls) == 3:
                third.set()
            raise ValueError("cannot process")

        s.create_consumer(Q).set_message_listener(on_message)
        assert third.wait(WAIT)
        s.close()
        assert c.create_session().create_consumer(Q).receive(0.05) is None
    assert calls == [1, 2, 3]
    assert len(ls(root, "Q1", "error")) == 1 and ls(root, "Q1", "target") == []


def test_redelivery_below_limit_is_not_dead_lettered(root):
    settings = Settings(max_delivery_attempts=3, poll_interval=0.005)
    with Connection(root, "a", settings, create=True) as c:
        send_texts(c, ["x"])
        s = c.create_session(transacted=True)
        cons = s.create_consumer(Q)
        for _ in range(2):
            assert cons.receive(WAIT) is not None
            s.rollback()
        m = cons.receive(WAIT)
        assert m.get_property("JMSXDeliveryCount") == 3
        s.commit()
    assert ls(root, "Q1", "error") == [] and len(ls(root, "Q1", "processed")) == 1


# ================================================================ foreign files and junk


def test_junk_in_target_neither_crashes_nor_blocks(root, tmp_path):
    secret = tmp_path / "outside-secret"
    secret.write_bytes(b"TOP-SECRET")
    with Connection(root, "a", FAST, create=True) as c:
        send_texts(c, ["good-before"])
        target = state_dir(root, "Q1", "target")
        (target / "garbage name with spaces").write_bytes(b"g1")
        (target / "x..y").write_bytes(b"g2")
        (target / "4.1140429201295000-9262574723.T").write_bytes(b"from 1.2")
        (target / "empty-file").write_bytes(b"")
        (target / ".in-progress").write_bytes(b"foreign work in progress")
        (target / "4.1140429201295001-1111111111.T.sub").mkdir()
        (target / "a-directory").mkdir()
        os.symlink(secret, target / "9.1140429201295002-2222222222.T")  # high priority, outside root
        os.symlink("/nonexistent/dangling", target / "dangling-link")
        os.mkfifo(target / "a-fifo")
        send_texts(c, ["good-after"])
        cons = c.create_session().create_consumer(Q)
        got = drain(cons, 0.1)
    bodies = {m.body for m in got}
    assert {b"good-before", b"good-after", b"g1", b"g2", b"from 1.2", b""} <= bodies
    assert b"TOP-SECRET" not in bodies and len(got) == 6
    ids = {m.message_id for m in got}
    assert "ID:garbage name with spaces" in ids and "ID:1140429201295000-9262574723" in ids
    assert ls(root, "Q1", "target") == [] and ls(root, "Q1", "target", dot=True) == [".in-progress"]
    errors = ls(root, "Q1", "error")
    assert len(errors) == 5
    for junk in ("4.1140429201295001-1111111111.T.sub", "a-directory", "9.1140429201295002-2222222222.T",
                 "dangling-link", "a-fifo"):
        assert any(e.split("~", 1)[-1].startswith(junk) for e in errors), junk
    err = state_dir(root, "Q1", "error")
    assert sum(os.path.islink(err / e) for e in errors) == 2
    assert secret.read_bytes() == b"TOP-SECRET" and secret.is_file() and not secret.is_symlink()
    assert ls(root, "Q1", "processing") == []


def test_browser_skips_junk(root):
    with Connection(root, "a", FAST, create=True) as c:
        send_texts(c, ["good"])
        target = state_dir(root, "Q1", "target")
        os.mkfifo(target / "4.1140429201295000-9262574723.T")
        os.symlink("/etc/passwd", target / "link")
        assert [m.text for m in c.create_session().create_browser(Q)] == ["good"]


# ================================================================ orphan recovery (kill -9)


def _claim_and_hang(root: str, n: int, claimed, transacted: bool = False) -> None:
    c = Connection(root, "doomed", FAST, create=True)
    cons = c.create_session(transacted, ack_mode=CLIENT_ACKNOWLEDGE).create_consumer(Q)
    for _ in range(n):
        assert cons.receive(WAIT) is not None
    claimed.set()
    threading.Event().wait()  # hold the messages until SIGKILL


def _kill_consumer_holding(root: Path, n: int, transacted: bool = False) -> None:
    ctx = fork_context()
    claimed = ctx.Event()
    child = ctx.Process(target=_claim_and_hang, args=(str(root), n, claimed, transacted))
    child.start()
    try:
        assert claimed.wait(30), "child did not claim its messages"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
    assert child.exitcode == -signal.SIGKILL


@pytest.mark.parametrize("by", ["recovery", "consumer"])
def test_orphans_of_killed_consumer_come_back_redelivered(root, by):
    with Connection(root, "setup", FAST, create=True) as c:
        ids = send_texts(c, ["1", "2", "3"])
    _kill_consumer_holding(root, 3)
    processing = ls(root, "Q1", "processing")
    assert len(processing) == 3 and all(p.startswith("doomed~") for p in processing)
    if by == "recovery":
        assert recovery.recover(root).redelivered == 3
        assert ls(root, "Q1", "processing") == [] and len(ls(root, "Q1", "target")) == 3
    with Connection(root, "rescuer", FAST, create=True) as c:
        got = drain(c.create_session().create_consumer(Q))
    assert [m.message_id for m in got] == ids
    assert all(m.redelivered and m.get_property("JMSXDeliveryCount") == 2 for m in got)


def test_transacted_receives_of_killed_consumer_come_back(root):
    with Connection(root, "setup", FAST, create=True) as c:
        ids = send_texts(c, ["1", "2"])
    _kill_consumer_holding(root, 2, transacted=True)
    assert len(ls(root, "Q1", "processing")) == 2
    assert len(os.listdir(layout.transaction_dir(root) / "associated")) == 1
    with Connection(root, "rescuer", FAST, create=True) as c:  # the consumer itself reclaims (no recover())
        got = drain(c.create_session().create_consumer(Q))
    assert [m.message_id for m in got] == ids and all(m.redelivered for m in got)
    assert os.listdir(layout.transaction_dir(root) / "associated") == []


def test_live_consumer_messages_are_not_reclaimed(root):
    with Connection(root, "setup", FAST, create=True) as c:
        send_texts(c, ["1"])
    with Connection(root, "holder", FAST, create=True) as holder:
        assert holder.create_session(ack_mode=CLIENT_ACKNOWLEDGE).create_consumer(Q).receive(WAIT)
        assert recovery.recover(root).redelivered == 0
        with Connection(root, "other", FAST, create=True) as other:
            assert other.create_session().create_consumer(Q).receive(0.1) is None
        assert len(ls(root, "Q1", "processing")) == 1


def test_orphaned_working_files_older_than_orphan_age_are_quarantined(root):
    with Connection(root, "a", FAST, create=True) as c:
        send_texts(c, ["x"])
    working = state_dir(root, "Q1", "working")
    (working / "4.1000000000000000-0000000001.T").write_bytes(b"torn")
    (working / "4.1000000000000001-0000000002.T").write_bytes(b"fresh")
    old = time.time() - 7200
    os.utime(working / "4.1000000000000000-0000000001.T", (old, old))
    report = recovery.recover(root, orphan_age=3600)
    assert report.orphans_quarantined == 1
    assert ls(root, "Q1", "error") == ["4.1000000000000000-0000000001.T"]
    assert ls(root, "Q1", "working") == ["4.1000000000000001-0000000002.T"]
    report = recovery.recover(root, orphan_age=0, quarantine_orphans=False)
    assert report.orphans_discarded == 1 and ls(root, "Q1", "working") == []
    assert len(ls(root, "Q1", "target")) == 1  # the sent message is untouched


# ================================================================ client ids


def test_second_live_connection_with_same_client_id_is_refused(root):
    with Connection(root, "dup", FAST, create=True):
        with pytest.raises(InvalidClientIDError):
            Connection(root, "dup", FAST, create=True)
    with Connection(root, "dup", FAST, create=True):  # released on close
        pass


def _register_and_hang(root: str, registered) -> None:
    Connection(root, "dup", FAST, create=True)
    registered.set()
    threading.Event().wait()


def test_client_id_of_killed_owner_is_reclaimable(root):
    ctx = fork_context()
    registered = ctx.Event()
    child = ctx.Process(target=_register_and_hang, args=(str(root), registered))
    child.start()
    try:
        assert registered.wait(30)
        with pytest.raises(InvalidClientIDError):  # alive in another process
            Connection(root, "dup", FAST, create=True)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
    with Connection(root, "dup", FAST, create=True) as c:
        assert c.client_id == "dup"


@pytest.mark.parametrize("bad", ["a/b", "..", "a..b", "../escape", ".hidden", "nul\x00byte", "", "a\\b"])
def test_destination_names_are_validated(root, bad):
    with pytest.raises(InvalidDestinationError):
        Queue(bad)


@pytest.mark.parametrize("bad", ["a/b", "..", ".hidden", "nul\x00byte"])
def test_client_ids_are_validated(root, bad):
    with pytest.raises(InvalidClientIDError):
        Connection(root, bad, FAST, create=True)
    assert not (root.parent / "b").exists()


def test_name_over_255_bytes_rejected_at_send(root):
    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session()
        p = s.create_producer(Q)
        m = TextMessage(body=b"x")
        m.set_property("big", "é" * 200)
        with pytest.raises(NameTooLongError):
            p.send(m)
        ts = c.create_session(transacted=True)
        with pytest.raises(NameTooLongError):
            ts.create_producer(Q).send(m)
        ts.commit()
        assert ls(root, "Q1", "working") == [] and ls(root, "Q1", "target") == []


# ================================================================ file systems


def test_network_file_system_refused_unless_allowed(root, monkeypatch):
    monkeypatch.setattr(filesystems, "file_system_type", lambda path: "nfs")
    with pytest.raises(UnsupportedFileSystemError, match="network file system"):
        Connection(root, "a", FAST, create=True)
    with Connection(root, "a", allow_network_fs=True, create=True) as c:
        send_texts(c, ["ok"])
    with Connection(root, "b", Settings(allow_network_fs=True), create=True) as c:
        assert c.create_session().create_consumer(Q).receive(WAIT).text == "ok"


def test_local_file_system_detected(root):
    os.makedirs(root, exist_ok=True)
    assert filesystems.file_system_type(root) not in filesystems.NETWORK_FILE_SYSTEMS


# ================================================================ browser and bodies


def test_browser_shows_delivery_order_and_moves_nothing(root):
    with Connection(root, "a", FAST, create=True) as c:
        p = c.create_session().create_producer(Q)
        for i, prio in enumerate([1, 8, 4, 8, 0]):
            p.send(TextMessage(body=str(i).encode()), priority=prio)
        before = {s: ls(root, "Q1", s) for s in ("working", "target", "processing", "processed")}
        browsed = [m.message_id for m in c.create_session().create_browser(Q)]
        after = {s: ls(root, "Q1", s) for s in ("working", "target", "processing", "processed")}
        assert before == after
        got = [m.message_id for m in drain(c.create_session().create_consumer(Q))]
    assert browsed == got and len(got) == 5


def test_map_stream_bytes_bodies_round_trip(root):
    values = {"s": "é&=.%", "i": 7, "l": 2**40, "f": 1.5, "b": True, "n": None, "x": b"\x00\xff",
              "short": Property("H", 12)}
    items = ["a", 1, 2.5, False, None, b"raw", Property("Y", -3)]
    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session()
        p = s.create_producer(Q)
        p.send(s.create_map_message(values))
        p.send(s.create_stream_message(items))
        p.send(s.create_bytes_message(b"\x00\x01\xfe"))
        cons = s.create_consumer(Q)
        m1, m2, m3 = cons.receive(WAIT), cons.receive(WAIT), cons.receive(WAIT)
    assert isinstance(m1, MapMessage) and isinstance(m2, StreamMessage) and isinstance(m3, BytesMessage)
    expected = dict(values, short=12)
    assert m1.map == expected
    assert m2.items == ["a", 1, 2.5, False, None, b"raw", -3]
    assert m3.body == b"\x00\x01\xfe"


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch " + str(_Boom.marker),))


def test_object_message_never_unpickles(root, tmp_path, monkeypatch):
    _Boom.marker = tmp_path / "pwned"
    payload = pickle.dumps(_Boom())

    def forbidden(*a, **kw):
        raise AssertionError("unpickling attempted")

    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(pickle, "load", forbidden)
    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session()
        s.create_producer(Q).send(s.create_object_message(payload))
        m = s.create_consumer(Q).receive(WAIT)
        browsed = list(s.create_browser(Q))
    assert isinstance(m, ObjectMessage) and m.body == payload and browsed == []
    assert m.get_object(lambda b: len(b)) == len(payload)  # only a user-supplied deserializer
    assert not _Boom.marker.exists()
