"""Per-message settlement in CLIENT_ACKNOWLEDGE: acknowledge(m), recover(m), dead_letter(m).

A worker pool (Celery through dropboxmq_kombu) finishes messages out of order; each is acked,
redelivered or given up on by itself, the others stay held."""

from __future__ import annotations

import pytest

from conftest import FAST, ls
from dropboxmq import CLIENT_ACKNOWLEDGE, Connection, IllegalStateError, Queue

Q = Queue("Q1")
WAIT = 5


def received_three(c: Connection):
    producer = c.create_session().create_producer(Q)
    for text in ("1", "2", "3"):
        producer.send(Q, text)
    session = c.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
    consumer = session.create_consumer(Q)
    return session, [consumer.receive(WAIT) for _ in range(3)]


def test_acknowledge_one_message_leaves_the_others_held(root):
    with Connection(root, "a", FAST, create=True) as c:
        session, (m1, m2, m3) = received_three(c)
        session.acknowledge(m2)
        assert len(ls(root, "Q1", "processed")) == 1
        assert m2.message_id[3:] in ls(root, "Q1", "processed")[0]
        assert len(ls(root, "Q1", "processing")) == 2
        session.acknowledge(m3, m1)
        assert len(ls(root, "Q1", "processed")) == 3 and ls(root, "Q1", "processing") == []


def test_recover_one_message_redelivers_only_it(root):
    with Connection(root, "a", FAST, create=True) as c:
        session, (m1, m2, m3) = received_three(c)
        session.recover(m1)
        assert len(ls(root, "Q1", "target")) == 1 and len(ls(root, "Q1", "processing")) == 2
        again = session.create_consumer(Q).receive(WAIT)
        assert again.message_id == m1.message_id and again.redelivered and again.delivery_count == 2
        session.acknowledge()  # the JMS form still acks everything held: m2, m3 and the redelivery
        assert len(ls(root, "Q1", "processed")) == 3


def test_dead_letter_moves_one_message_to_error(root):
    with Connection(root, "a", FAST, create=True) as c:
        session, (m1, m2, m3) = received_three(c)
        session.dead_letter(m3)
        assert len(ls(root, "Q1", "error")) == 1 and m3.message_id[3:] in ls(root, "Q1", "error")[0]
        session.close()  # the two still held come back
    assert len(ls(root, "Q1", "target")) == 2 and ls(root, "Q1", "processing") == []


def test_a_message_no_longer_held_is_refused(root):
    with Connection(root, "a", FAST, create=True) as c:
        session, (m1, m2, m3) = received_three(c)
        session.acknowledge(m1)
        for settle in (session.acknowledge, session.recover, session.dead_letter):
            with pytest.raises(IllegalStateError):
                settle(m1)
        with pytest.raises(ValueError):
            session.dead_letter()
        assert len(ls(root, "Q1", "processing")) == 2  # a refused call settles nothing
