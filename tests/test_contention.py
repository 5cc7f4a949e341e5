"""Competing consumer processes: every message is processed exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

from dropboxmq.message import DeliveryMode, Queue, TextMessage
from dropboxmq.ackmode import AUTO_ACKNOWLEDGE
from dropboxmq.connection import Connection, Settings
from conftest import counts, fork_context

Q = Queue("Q1")
SETTINGS = Settings(poll_interval=0.005, scan_interval=0.05, recovery_interval=5.0)


def _consume(root: str, index: int, out: str, start, producers_done) -> None:
    """Child: receive (AUTO ack) until target/ stays empty; write the ids it got."""
    ids = []
    with Connection(root, f"consumer-{index}", SETTINGS, create=True) as c:
        cons = c.create_session(ack_mode=AUTO_ACKNOWLEDGE).create_consumer(Q)
        start.wait()
        while True:
            finished = producers_done.is_set()  # read BEFORE the receive that may come back empty
            m = cons.receive(0.2)
            if m is None:
                if finished:
                    break
                continue
            ids.append(m.message_id)
    Path(out).write_text("\n".join(ids))


def _produce(root: str, index: int, n: int, out: str, start) -> None:
    with Connection(root, f"producer-{index}", SETTINGS, create=True) as c:
        p = c.create_session().create_producer(Q)
        start.wait()
        ids = [p.send(TextMessage(body=f"{index}:{i}".encode())).message_id for i in range(n)]
    Path(out).write_text("\n".join(ids))


def _read_ids(path: Path) -> list[str]:
    text = path.read_text()
    return text.split("\n") if text else []


def _run_consumers(ctx, root: Path, tmp: Path, n: int, start, producers_done):
    procs = []
    for i in range(n):
        p = ctx.Process(target=_consume, args=(str(root), i, str(tmp / f"consumed-{i}"), start,
                                               producers_done))
        p.start()
        procs.append(p)
    return procs


def _join(procs, timeout=120):
    for p in procs:
        p.join(timeout)
    for p in procs:
        if p.exitcode is None:
            p.kill()
            p.join()
    assert [p.exitcode for p in procs] == [0] * len(procs)


@pytest.mark.slow
def test_four_consumers_10000_messages_each_processed_once(root, tmp_path):
    total = 10_000
    with Connection(root, "producer", SETTINGS, create=True) as c:
        sent = c.create_session().create_producer(Q).send_many(
            [TextMessage(body=str(i).encode()) for i in range(total)],
            delivery_mode=DeliveryMode.NON_PERSISTENT)
    sent_ids = {m.message_id for m in sent}
    assert len(sent_ids) == total
    ctx = fork_context()
    start, producers_done = ctx.Barrier(4), ctx.Event()
    producers_done.set()  # everything is in target/ already
    procs = _run_consumers(ctx, root, tmp_path, 4, start, producers_done)
    _join(procs)
    per_consumer = [_read_ids(tmp_path / f"consumed-{i}") for i in range(4)]
    consumed = [mid for ids in per_consumer for mid in ids]
    assert len(consumed) == len(set(consumed)), "a message was delivered twice"
    assert set(consumed) == sent_ids, "a message was lost"
    assert all(ids for ids in per_consumer), [len(ids) for ids in per_consumer]  # they did compete
    assert counts(root, "Q1") == dict(working=0, target=0, processing=0, processed=total, expired=0,
                                      error=0)


@pytest.mark.slow
def test_concurrent_persistent_producers_and_consumers(root, tmp_path):
    producers, consumers, per_producer = 2, 3, 300
    ctx = fork_context()
    start, producers_done = ctx.Barrier(producers + consumers), ctx.Event()
    cprocs = _run_consumers(ctx, root, tmp_path, consumers, start, producers_done)
    pprocs = []
    for i in range(producers):
        p = ctx.Process(target=_produce, args=(str(root), i, per_producer, str(tmp_path / f"sent-{i}"),
                                               start))
        p.start()
        pprocs.append(p)
    _join(pprocs)
    producers_done.set()
    _join(cprocs)
    sent = [mid for i in range(producers) for mid in _read_ids(tmp_path / f"sent-{i}")]
    consumed = [mid for i in range(consumers) for mid in _read_ids(tmp_path / f"consumed-{i}")]
    assert len(sent) == producers * per_producer == len(set(sent))
    assert len(consumed) == len(set(consumed)), "a message was delivered twice"
    assert set(consumed) == set(sent), "a message was lost"
    assert counts(root, "Q1") == dict(working=0, target=0, processing=0, processed=len(sent), expired=0,
                                      error=0)
