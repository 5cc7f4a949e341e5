"""Topics and subscriptions: every branch of seed 004's pseudocode has a test named after it,
plus fan-out, noLocal, selectors at fan-out, transactions, temporary destinations and
the distributor."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import multiprocess as mp
import pytest

from dropboxmq import topics
from dropboxmq.making import ensure_dropbox
from dropboxmq.distributor import distribute
from dropboxmq.errors import IllegalStateError, InvalidDestinationError, JMSException
from dropboxmq.selector import InvalidSelectorError
from dropboxmq.topics import subscriptions_dir, topic_incoming
from dropboxmq.lifecycle import State
from dropboxmq.message import Queue, TextMessage, Topic
from dropboxmq.recovery import recover
from dropboxmq.connection import Connection


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "root"


def publish(root: Path, topic: str, *texts: str, client_id: str = "publisher", **props) -> None:
    with Connection(root, client_id, create=True) as conn:
        producer = conn.create_session().create_producer(Topic(topic))
        for text in texts:
            msg = TextMessage(body=text.encode())
            for k, v in props.items():
                msg.set_property(k, v)
            producer.send(msg)


def drain(consumer) -> list[str]:
    return [m.text for m in consumer]


def sub_dirs(root: Path, topic: str) -> list[str]:
    d = subscriptions_dir(root, Topic(topic))
    return sorted(n for n in os.listdir(d) if not n.startswith(".")) if d.exists() else []


# ------------------------------------------------------------ durable (unshared), seed 004 branches


def test_durable_when_local_active_shared_durable_raises(root):
    with Connection(root, "c1", create=True) as conn:
        s = conn.create_session()
        s.create_shared_durable_consumer(Topic("t"), "sub")
        with pytest.raises(JMSException, match="shared durable subscription"):
            s.create_durable_consumer(Topic("t"), "sub")


def test_durable_when_local_active_non_shared_durable_raises(root):
    with Connection(root, "c1", create=True) as conn:
        s = conn.create_session()
        s.create_durable_consumer(Topic("t"), "sub")
        with pytest.raises(IllegalStateError, match="already has an active consumer"):
            s.create_durable_consumer(Topic("t"), "sub")


def test_durable_when_shared_durable_exists_inactive_raises(root):
    with Connection(root, "c1", create=True) as conn:
        s = conn.create_session()
        s.create_shared_durable_consumer(Topic("t"), "sub").close()
        with pytest.raises(JMSException, match="shared durable subscription"):
            s.create_durable_consumer(Topic("t"), "sub")


@pytest.mark.parametrize(
    "change",
    [dict(topic="other"), dict(selector="x = 1"), dict(no_local=True)],
    ids=["other-topic", "other-selector", "other-nolocal"],
)
def test_durable_exists_inactive_details_dont_match_is_unsubscribe_and_new(root, change):
    with Connection(root, "c1", create=True) as conn:
        conn.create_session().create_durable_consumer(Topic("t"), "sub").close()
    publish(root, "t", "kept?", x=1)
    with Connection(root, "c1", create=True) as conn:
        s = conn.create_session()
        topic = Topic(change.get("topic", "t"))
        consumer = s.create_durable_consumer(topic, "sub", change.get("selector"), change.get("no_local", False))
        assert drain(consumer) == []  # the old subscription and its message are gone
        assert len(topics.find_by_name(root, "sub", "c1")) == 1


def test_durable_exists_inactive_details_match_reuses_and_keeps_messages(root):
    with Connection(root, "c1", create=True) as conn:
        conn.create_session().create_durable_consumer(Topic("t"), "sub").close()
    publish(root, "t", "m1", "m2")  # no consumer attached: the durable subscription keeps them
    with Connection(root, "c1", create=True) as conn:
        assert drain(conn.create_session().create_durable_consumer(Topic("t"), "sub")) == ["m1", "m2"]


def test_durable_create_new_subscription_uses_12_sub_id(root):
    with Connection(root, "client.1", create=True) as conn:
        conn.create_session().create_durable_consumer(Topic("a.b"), "my sub", no_local=True)
        assert sub_dirs(root, "a.b") == ["my+sub.client%2E1.no-local"]


def test_durable_requires_client_id(root):
    with Connection(root, create=True) as conn:  # generated id: not "set" by the user
        with pytest.raises(IllegalStateError, match="client id"):
            conn.create_session().create_durable_consumer(Topic("t"), "sub")


def test_durable_second_consumer_in_another_process_raises(root):
    with Connection(root, "c1", create=True) as conn:
        conn.create_session().create_durable_consumer(Topic("t"), "sub")
        # the same client id cannot be used twice; another client id is another subscription,
        # so use the subscription lock directly as a second process would find it
        sub = topics.find_by_name(root, "sub", "c1")[0]
        assert sub.active_consumers() == 1
        with pytest.raises(IllegalStateError):
            sub.attach(exclusive=True)


# ------------------------------------------------------------ shared durable, seed 004 branches


def test_shared_durable_local_active_details_dont_match_raises(root):
    with Connection(root, "c1", create=True) as conn:
        s = conn.create_session()
        s.create_shared_durable_consumer(Topic("t"), "sub", "x = 1")
        with pytest.raises(JMSException, match="different topic or selector"):
            s.create_shared_durable_consumer(Topic("t"), "sub", "x = 2")
        with pytest.raises(JMSException, match="different topic or selector"):
            s.create_shared_durable_consumer(Topic("u"), "sub", "x = 1")


def test_shared_durable_local_active_details_match_adds_competing_consumer(root):
    with Connection(root, "c1", create=True) as conn:
        s1, s2 = conn.create_session(), conn.create_session()
        a = s1.create_shared_durable_consumer(Topic("t"), "sub")
        b = s2.create_shared_durable_consumer(Topic("t"), "sub")
        publish(root, "t", *[f"m{i}" for i in range(20)])
        got_a, got_b = [], []
        for _ in range(10):
            got_a.append(a.receive(0).text)
            got_b.append(b.receive(0).text)
        assert sorted(got_a + got_b) == sorted(f"m{i}" for i in range(20))  # each to exactly one
        assert a.receive(0) is None and b.receive(0) is None


def test_shared_durable_when_local_active_non_shared_raises(root):
    with Connection(root, "c1", create=True) as conn:
        s = conn.create_session()
        s.create_durable_consumer(Topic("t"), "sub")
        with pytest.raises(JMSException, match="non-shared durable subscription"):
            s.create_shared_durable_consumer(Topic("t"), "sub")


def test_shared_durable_when_non_shared_exists_raises(root):
    with Connection(root, "c1", create=True) as conn:
        s = conn.create_session()
        s.create_durable_consumer(Topic("t"), "sub").close()
        with pytest.raises(JMSException, match="non-shared durable subscription"):
            s.create_shared_durable_consumer(Topic("t"), "sub")


def test_shared_durable_exists_inactive_details_dont_match_is_unsubscribe_and_new(root):
    with Connection(root, "c1", create=True) as conn:
        conn.create_session().create_shared_durable_consumer(Topic("t"), "sub").close()
    publish(root, "t", "old", x=2)
    with Connection(root, "c1", create=True) as conn:
        c = conn.create_session().create_shared_durable_consumer(Topic("t"), "sub", "x = 2")
        assert drain(c) == []


def test_shared_durable_exists_inactive_details_match_reuses(root):
    with Connection(root, "c1", create=True) as conn:
        conn.create_session().create_shared_durable_consumer(Topic("t"), "sub").close()
    publish(root, "t", "kept")
    with Connection(root, "c1", create=True) as conn:
        assert drain(conn.create_session().create_shared_durable_consumer(Topic("t"), "sub")) == ["kept"]


def test_shared_durable_without_client_id_is_shared_across_connections(root):
    with Connection(root, create=True) as c1, Connection(root, create=True) as c2:
        a = c1.create_session().create_shared_durable_consumer(Topic("t"), "jobs")
        b = c2.create_session().create_shared_durable_consumer(Topic("t"), "jobs")
        publish(root, "t", "one", "two")
        got = [m.text for m in (a.receive(0), b.receive(0))]
        assert sorted(got) == ["one", "two"]
        assert sub_dirs(root, "t") == ["jobs..shared"]


# ------------------------------------------------------------ unsubscribe, seed 004 branches


def test_unsubscribe_with_active_consumer_raises(root):
    with Connection(root, "c1", create=True) as conn:
        s = conn.create_session()
        s.create_durable_consumer(Topic("t"), "sub")
        with pytest.raises(IllegalStateError, match="active consumer"):
            s.unsubscribe("sub")


def test_unsubscribe_unknown_name_raises(root):
    with Connection(root, "c1", create=True) as conn:
        with pytest.raises(InvalidDestinationError, match="no durable subscription"):
            conn.create_session().unsubscribe("nope")


def test_unsubscribe_ends_subscription_and_removes_messages(root):
    with Connection(root, "c1", create=True) as conn:
        conn.create_session().create_durable_consumer(Topic("t"), "sub").close()
    publish(root, "t", "gone")
    with Connection(root, "c1", create=True) as conn:
        conn.create_session().unsubscribe("sub")
        assert sub_dirs(root, "t") == []
        assert drain(conn.create_session().create_durable_consumer(Topic("t"), "sub")) == []


def test_unsubscribe_with_pending_transacted_work_raises(root):
    with Connection(root, "c1", create=True) as conn:
        conn.create_session().create_durable_consumer(Topic("t"), "sub").close()
    publish(root, "t", "m")
    with Connection(root, "c1", create=True) as conn:
        tx = conn.create_session(transacted=True)
        c = tx.create_durable_consumer(Topic("t"), "sub")
        assert c.receive(0).text == "m"
        c.close()  # consumer gone, but its receive is still in the open transaction
        with pytest.raises(IllegalStateError, match="not acknowledged or committed"):
            conn.create_session().unsubscribe("sub")
        tx.rollback()
        conn.create_session().unsubscribe("sub")


def test_unsubscribe_shared_durable(root):
    with Connection(root, "c1", create=True) as conn:
        s = conn.create_session()
        s.create_shared_durable_consumer(Topic("t"), "sub").close()
        s.unsubscribe("sub")
        assert sub_dirs(root, "t") == []


# ------------------------------------------------------------ shared non-durable, seed 004 branches


def test_shared_nondurable_local_active_details_dont_match_raises(root):
    with Connection(root, "c1", create=True) as conn:
        s = conn.create_session()
        s.create_shared_consumer(Topic("t"), "sub", "x = 1")
        with pytest.raises(JMSException, match="different topic or selector"):
            s.create_shared_consumer(Topic("t"), "sub", "x = 2")
        with pytest.raises(JMSException, match="different topic or selector"):
            s.create_shared_consumer(Topic("u"), "sub", "x = 1")


def test_shared_nondurable_local_active_details_match_adds_subscriber(root):
    with Connection(root, "c1", create=True) as conn:
        a = conn.create_session().create_shared_consumer(Topic("t"), "sub")
        b = conn.create_session().create_shared_consumer(Topic("t"), "sub")
        publish(root, "t", "x", "y")
        assert sorted([a.receive(0).text, b.receive(0).text]) == ["x", "y"]


def test_shared_nondurable_exists_elsewhere_details_dont_match_raises(root):
    with Connection(root, create=True) as c1, Connection(root, create=True) as c2:
        c1.create_session().create_shared_consumer(Topic("t"), "sub", "x = 1")
        with pytest.raises(JMSException, match="different topic or selector"):
            c2.create_session().create_shared_consumer(Topic("t"), "sub", "x = 3")


def test_shared_nondurable_exists_elsewhere_details_match_joins(root):
    with Connection(root, create=True) as c1, Connection(root, create=True) as c2:
        a = c1.create_session().create_shared_consumer(Topic("t"), "sub")
        b = c2.create_session().create_shared_consumer(Topic("t"), "sub")
        publish(root, "t", "only one copy")
        got = [m for m in (a.receive(0), b.receive(0)) if m is not None]
        assert [m.text for m in got] == ["only one copy"]


def test_shared_nondurable_ends_with_last_consumer(root):
    with Connection(root, "c1", create=True) as conn:
        a = conn.create_session().create_shared_consumer(Topic("t"), "sub")
        b = conn.create_session().create_shared_consumer(Topic("t"), "sub")
        publish(root, "t", "pending")
        a.close()
        assert sub_dirs(root, "t") == ["sub.c1.shared-nondurable"]
        b.close()
        assert sub_dirs(root, "t") == []


# ------------------------------------------------------------ non-durable, fan-out, noLocal, selectors


def test_nondurable_subscription_removed_with_undelivered_messages_on_close(root):
    with Connection(root, "c1", create=True) as conn:
        c = conn.create_session().create_consumer(Topic("t"))
        publish(root, "t", "never read")
        assert len(sub_dirs(root, "t")) == 1
        c.close()
        assert sub_dirs(root, "t") == []


def test_nondurable_only_receives_messages_published_while_it_exists(root):
    publish(root, "t", "before")
    with Connection(root, "c1", create=True) as conn:
        c = conn.create_session().create_consumer(Topic("t"))
        publish(root, "t", "after")
        assert drain(c) == ["after"]


def _subscribe_and_die(root: str, ready) -> None:
    conn = Connection(root, "doomed", create=True)
    conn.create_session().create_consumer(Topic("t"))
    ready.set()
    os.kill(os.getpid(), signal.SIGKILL)


def test_crashed_process_nondurable_subscription_is_reclaimed(root):
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    p = ctx.Process(target=_subscribe_and_die, args=(str(root), ready))
    p.start()
    p.join()
    assert p.exitcode == -signal.SIGKILL and ready.is_set()
    assert len(sub_dirs(root, "t")) == 1  # left behind by the dead process
    report = recover(root)
    assert report.subscriptions_removed == 1
    assert sub_dirs(root, "t") == []


def test_publisher_skips_and_removes_dead_nondurable_subscription(root):
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    p = ctx.Process(target=_subscribe_and_die, args=(str(root), ready))
    p.start()
    p.join()
    publish(root, "t", "nobody listens")
    assert sub_dirs(root, "t") == []


def test_publish_fans_out_to_topic_and_every_ancestor(root):
    with Connection(root, "c1", create=True) as conn:
        s = conn.create_session()
        subs = {name: s.create_durable_consumer(Topic(name), f"on-{name}") for name in ("a", "a.b", "a.b.c", "a.x")}
        publish(root, "a.b.c", "deep")
        publish(root, "a.b", "middle")
        got = {name: drain(c) for name, c in subs.items()}
    assert got == {"a": ["deep", "middle"], "a.b": ["deep", "middle"], "a.b.c": ["deep"], "a.x": []}


def test_each_subscription_gets_its_own_copy(root):
    with Connection(root, "c1", create=True) as conn:
        s = conn.create_session()
        x = s.create_durable_consumer(Topic("t"), "x")
        y = s.create_durable_consumer(Topic("t"), "y")
        publish(root, "t", "hello")
        assert drain(x) == ["hello"] and drain(y) == ["hello"]


def test_no_local_skips_messages_of_the_same_connection(root):
    with Connection(root, "me", create=True) as conn:
        s = conn.create_session()
        mine = s.create_durable_consumer(Topic("t"), "mine", no_local=True)
        everything = s.create_durable_consumer(Topic("t"), "all")
        s.create_producer(Topic("t")).send(TextMessage(body=b"from me"))
        publish(root, "t", "from someone else", client_id="other")
        assert drain(mine) == ["from someone else"]
        assert drain(everything) == ["from me", "from someone else"]


def test_topic_selector_applied_at_fan_out_unmatched_never_accumulate(root):
    with Connection(root, "c1", create=True) as conn:
        c = conn.create_session().create_durable_consumer(Topic("t"), "red", "color = 'red'")
        for color in ("red", "blue", "red", "green"):
            publish(root, "t", color, color=color)
        sub = topics.find_by_name(root, "red", "c1")[0]
        assert len(sub.box.list(State.NEW)) == 2  # blue and green were never written
        assert drain(c) == ["red", "red"]


def test_invalid_selector_raises_before_subscription_is_created(root):
    with Connection(root, "c1", create=True) as conn:
        with pytest.raises(InvalidSelectorError):
            conn.create_session().create_durable_consumer(Topic("t"), "bad", "color = ")
        assert sub_dirs(root, "t") == []


def test_transacted_publish_all_copies_at_commit_none_on_rollback(root):
    with Connection(root, "c1", create=True) as conn:
        s = conn.create_session()
        x = s.create_durable_consumer(Topic("t"), "x")
        y = s.create_durable_consumer(Topic("t.u"), "y")
        tx = conn.create_session(transacted=True)
        p = tx.create_producer(Topic("t.u"))
        p.send(TextMessage(body=b"rolled back"))
        assert drain(x) == [] and drain(y) == []
        tx.rollback()
        p.send(TextMessage(body=b"one"))
        p.send(TextMessage(body=b"two"))
        assert drain(x) == [] and drain(y) == []
        tx.commit()
        assert drain(x) == ["one", "two"] and drain(y) == ["one", "two"]


def test_durable_subscription_redelivery_on_recover(root):
    from dropboxmq.ackmode import CLIENT_ACKNOWLEDGE

    with Connection(root, "c1", create=True) as conn:
        s = conn.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        c = s.create_durable_consumer(Topic("t"), "sub")
        publish(root, "t", "again")
        first = c.receive(0)
        assert not first.redelivered
        s.recover()
        second = c.receive(0)
        assert second.text == "again" and second.redelivered and second.delivery_count == 2
        second.acknowledge()


# ------------------------------------------------------------ temporary destinations


def test_temporary_queue_removed_when_connection_closes(root):
    conn = Connection(root, "owner", create=True)
    q = conn.create_session().create_temporary_queue()
    conn.create_session().create_producer(q).send(TextMessage(body=b"reply"))
    assert (root / q.name / "incoming" / "target").is_dir()
    conn.close()
    assert not (root / q.name).exists()


def test_temporary_queue_only_creating_connection_consumes(root):
    with Connection(root, "owner", create=True) as owner, Connection(root, "other", create=True) as other:
        q = owner.create_session().create_temporary_queue()
        other.create_session().create_producer(q).send(TextMessage(body=b"reply"))  # anyone may send
        with pytest.raises(InvalidDestinationError, match="temporary"):
            other.create_session().create_consumer(q)
        assert owner.create_session().create_consumer(q).receive(0).text == "reply"


def test_temporary_topic_only_creating_connection_subscribes_and_is_removed(root):
    owner = Connection(root, "owner", create=True)
    t = owner.create_session().create_temporary_topic()
    with Connection(root, "other", create=True) as other:
        with pytest.raises(InvalidDestinationError, match="temporary"):
            other.create_session().create_consumer(t)
    c = owner.create_session().create_consumer(t)
    publish(root, t.name, "hi")
    assert drain(c) == ["hi"]
    owner.close()
    assert not (root / "topic-root" / t.name).exists()


# ------------------------------------------------------------ distributor


def _drop_foreign(root: Path, topic: str, names: list[str]) -> None:
    box = ensure_dropbox(topic_incoming(root, Topic(topic)))
    for name in names:
        path = Path(box.dir(State.NOT_COMMITTED)) / name
        path.write_bytes(name.encode())
        os.rename(path, Path(box.dir(State.NEW)) / name)


def test_distributor_fans_out_foreign_files_once(root):
    with Connection(root, "c1", create=True) as conn:
        s = conn.create_session()
        a = s.create_durable_consumer(Topic("t"), "a")
        b = s.create_durable_consumer(Topic("t"), "b")
        _drop_foreign(root, "t", ["4.1140429201295000-9262574723.T", "report.csv"])
        assert distribute(root) == 2
        assert distribute(root) == 0  # nothing twice
        assert sorted(m.body for m in a) == sorted(m.body for m in b) == [
            b"4.1140429201295000-9262574723.T", b"report.csv"]
        incoming = topic_incoming(root, Topic("t"))
        assert incoming.list(State.NEW) == [] and len(incoming.list(State.ACKNOWLEDGED)) == 2


def _distribute_and_die(root: str, when: str) -> None:
    from dropboxmq import session, transaction

    def die(*a, **k):
        os.kill(os.getpid(), signal.SIGKILL)

    if when == "before-commit":
        session.Session.commit = die
    else:  # after the point of no return, before any rename is applied
        transaction.roll_forward = die
    distribute(root, client_id="distributor-1")


@pytest.mark.parametrize("when", ["before-commit", "after-point-of-no-return"])
def test_distributor_killed_mid_file_still_fans_out_exactly_once(root, when):
    with Connection(root, "c1", create=True) as conn:
        conn.create_session().create_durable_consumer(Topic("t"), "a").close()
        conn.create_session().create_durable_consumer(Topic("t"), "b").close()
    _drop_foreign(root, "t", ["1.1140429201295000-0000000001.T"])
    p = mp.get_context("fork").Process(target=_distribute_and_die, args=(str(root), when))
    p.start()
    p.join()
    assert p.exitcode == -signal.SIGKILL
    distribute(root, client_id="distributor-2")  # the survivor recovers the dead one's work
    recover(root)
    with Connection(root, "c1", create=True) as conn:
        s = conn.create_session()
        for name in ("a", "b"):
            got = [m.body for m in s.create_durable_consumer(Topic("t"), name)]
            assert got == [b"1.1140429201295000-0000000001.T"], name
    incoming = topic_incoming(root, Topic("t"))
    assert [incoming.list(st) for st in (State.NOT_COMMITTED, State.NEW, State.DELIVERED)] == [[], [], []]


def _run_distributor(root: str, i: int) -> None:
    distribute(root, client_id=f"dist-{i}")


def test_several_distributors_fan_out_each_file_exactly_once(root):
    with Connection(root, "c1", create=True) as conn:
        conn.create_session().create_durable_consumer(Topic("t"), "a").close()
    names = [f"4.11404292012{i:02d}000-00000000{i:02d}.T" for i in range(60)]
    _drop_foreign(root, "t", names)
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_run_distributor, args=(str(root), i)) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    with Connection(root, "c1", create=True) as conn:
        got = sorted(m.body.decode() for m in conn.create_session().create_durable_consumer(Topic("t"), "a"))
    assert got == sorted(names)


def test_publish_to_queue_name_with_topic_is_an_error(root):
    with Connection(root, "c1", create=True) as conn:
        with pytest.raises(InvalidDestinationError):
            conn.create_session().create_durable_consumer(Queue("q"), "x")
