"""The library operations the explorer records, each with what its caller was promised.

An operation prepares a root with the ordinary library (not recorded: that state is the
durable starting point), then calls ``start()`` to begin recording and runs the one call under
test, marking each point where a call returned to its caller (``rec.mark``).  It returns an
:class:`Expect`: who the crash killed, which transactions and fan-outs must be all or nothing,
which messages may vanish (retention) and which acknowledgements are lazy (DUPS_OK).

Messages are known by their bodies (``body_of``), so a message is followed through renames,
copies and recovery whatever its file is called; a reference is ``<dropbox>|<key>``, the
dropbox relative to the root.
"""

from __future__ import annotations

import os
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from .record import Recorder

__all__ = ["Scale", "DEFAULT_SCALE", "DEEP_SCALE", "Expect", "Operation", "OPERATIONS", "body_of", "key_of", "ref"]

StartRecording = Callable[[], AbstractContextManager[Recorder]]


class HasFileno(Protocol):
    def fileno(self) -> int: ...

_PAD = b"." * 48


def body_of(key: str) -> bytes:
    """The body of message ``key``: its key, then padding, so a torn file is told from a whole one."""
    return b"msg:" + key.encode() + b":" + _PAD


def key_of(content: bytes) -> str | None:
    """The key of a whole message body; None for anything else (torn, zeros, not ours)."""
    if not content.startswith(b"msg:"):
        return None
    key = content[4:].split(b":", 1)[0].decode("ascii", "replace")
    return key if content == body_of(key) else None


def ref(box: str, key: str) -> str:
    return f"{box}|{key}"


@dataclass(frozen=True)
class Scale:
    batch: int  # messages of send_many, queues of a producer commit, ...
    subscribers: int  # subscriptions a distributed file is fanned out to


DEFAULT_SCALE = Scale(batch=3, subscribers=2)
DEEP_SCALE = Scale(batch=4, subscribers=3)


@dataclass
class Expect:
    clients: tuple[str, ...] = ()  # client ids the crash killed: the next process connects as them
    transactions: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=dict)  # sends, receives
    committed_before: set[str] = field(default_factory=set)  # transactions past their commit point at the start
    fanouts: dict[str, tuple[str, ...]] = field(default_factory=dict)  # incoming file -> its copies
    purgeable: set[str] = field(default_factory=set)  # messages the operation may delete (retention)
    lazy_acks: set[str] = field(default_factory=set)  # DUPS_OK: acknowledged without a sync
    subscriptions: dict[str, str] = field(default_factory=dict)  # name -> directory relative to the root
    non_persistent: bool = False  # the operation's messages are NON_PERSISTENT: not synced at all (D2, D6)


@dataclass(frozen=True)
class Operation:
    name: str
    summary: str
    run: Callable[[Path, Scale, StartRecording], Expect]


def _settings(**kw: object):  # type: ignore[no-untyped-def]
    from dropboxmq.connection import Settings

    return Settings(poll_interval=0.001, scan_interval=0.0, recovery_interval=1e9, **kw)  # type: ignore[arg-type]


def _message(session, key: str):  # type: ignore[no-untyped-def]
    return session.create_bytes_message(body_of(key))


def _queue_box(name: str) -> str:
    return f"{name}/incoming"


def _seed(root: Path, queue: str, keys: list[str]) -> None:
    """Durably send ``keys`` to ``queue`` (setup, not recorded)."""
    from dropboxmq.message import Queue
    from dropboxmq.connection import Connection

    with Connection(root, client_id="seeder", settings=_settings(), create=True) as conn:
        s = conn.create_session()
        p = s.create_producer(Queue(queue))
        for k in keys:
            p.send(_message(s, k))


def _receive(consumer, key: str) -> None:  # type: ignore[no-untyped-def]
    m = consumer.receive(timeout=5.0)
    if m is None or m.body != body_of(key):
        raise RuntimeError(f"setup: expected message {key}, got {m and m.body!r}")


# ---------------------------------------------------------------- producers


def op_send(root: Path, scale: Scale, start: StartRecording) -> Expect:
    from dropboxmq.message import Queue
    from dropboxmq.connection import Connection

    conn = Connection(root, client_id="app", settings=_settings(), create=True)
    s = conn.create_session()
    p = s.create_producer(Queue("q"))
    m = _message(s, "m0")
    with start() as rec:
        p.send(m)
        rec.mark("sent", ref(_queue_box("q"), "m0"))
    return Expect(clients=("app",))


def op_send_non_persistent(root: Path, scale: Scale, start: StartRecording) -> Expect:
    from dropboxmq.message import DeliveryMode, Queue
    from dropboxmq.connection import Connection

    conn = Connection(root, client_id="app", settings=_settings(), create=True)
    s = conn.create_session()
    p = s.create_producer(Queue("q"))
    p.send(_message(s, "setup"))  # the queue exists (durably): only the message is unsynced
    with start() as rec:
        p.send(_message(s, "m0"), delivery_mode=DeliveryMode.NON_PERSISTENT)
        rec.mark("sent-non-persistent", ref(_queue_box("q"), "m0"))
    return Expect(clients=("app",), non_persistent=True)


def op_send_many(root: Path, scale: Scale, start: StartRecording) -> Expect:
    from dropboxmq.message import Queue
    from dropboxmq.connection import Connection

    conn = Connection(root, client_id="app", settings=_settings(), create=True)
    s = conn.create_session()
    p = s.create_producer(Queue("q"))
    keys = [f"m{i}" for i in range(scale.batch)]
    msgs = [_message(s, k) for k in keys]
    with start() as rec:
        p.send_many(msgs)
        rec.mark("sent", *(ref(_queue_box("q"), k) for k in keys))
    return Expect(clients=("app",))


def op_commit_producer(root: Path, scale: Scale, start: StartRecording) -> Expect:
    """A transacted session sends one message to each of ``batch - 1`` queues (two: each
    target/ fsynced; three or more: the group sync of sync_many), then commits."""
    from dropboxmq.message import Queue
    from dropboxmq.connection import Connection

    conn = Connection(root, client_id="app", settings=_settings(), create=True)
    s = conn.create_session(transacted=True)
    queues = [f"q{i}" for i in range(max(2, scale.batch - 1))]
    producers = [s.create_producer(Queue(q)) for q in queues]
    sends = tuple(ref(_queue_box(q), f"m{i}") for i, q in enumerate(queues))
    with start() as rec:
        for i, p in enumerate(producers):
            p.send(_message(s, f"m{i}"))
        s.commit()
        rec.mark("committed", "tx")
    return Expect(clients=("app",), transactions={"tx": (sends, ())})


def op_commit_consumer(root: Path, scale: Scale, start: StartRecording) -> Expect:
    """A transacted session receives two messages (deep: and sends one), then commits."""
    from dropboxmq.message import Queue
    from dropboxmq.ackmode import AckMode
    from dropboxmq.connection import Connection

    keys = ["m0", "m1"]
    _seed(root, "q", keys)
    conn = Connection(root, client_id="app", settings=_settings(), create=True)
    s = conn.create_session(transacted=True, ack_mode=AckMode.SESSION_TRANSACTED)
    c = s.create_consumer(Queue("q"))
    mixed = scale.batch > DEFAULT_SCALE.batch
    p = s.create_producer(Queue("out"))
    with start() as rec:
        for k in keys:
            _receive(c, k)
            rec.mark("delivered", ref(_queue_box("q"), k))
        if mixed:
            p.send(_message(s, "n0"))
        s.commit()
        rec.mark("committed", "tx")
    sends = (ref(_queue_box("out"), "n0"),) if mixed else ()
    return Expect(clients=("app",), transactions={"tx": (sends, tuple(ref(_queue_box("q"), k) for k in keys))})


# ---------------------------------------------------------------- acknowledgement modes


def _ack_op(mode_name: str) -> Callable[[Path, Scale, StartRecording], Expect]:
    def run(root: Path, scale: Scale, start: StartRecording) -> Expect:
        from dropboxmq.message import Queue
        from dropboxmq.ackmode import AckMode
        from dropboxmq.connection import Connection

        mode = AckMode[mode_name]
        keys = ["m0"] if mode is AckMode.AUTO_ACKNOWLEDGE else ["m0", "m1"]
        _seed(root, "q", keys)
        # DUPS_OK: the batch of lazy acks is flushed by the last receive, without a sync
        conn = Connection(root, client_id="app", settings=_settings(dups_ok_batch=len(keys)), create=True)
        s = conn.create_session(ack_mode=mode)
        c = s.create_consumer(Queue("q"))
        refs = tuple(ref(_queue_box("q"), k) for k in keys)
        with start() as rec:
            for k, r in zip(keys, refs, strict=True):
                _receive(c, k)
                rec.mark("acked" if mode is AckMode.AUTO_ACKNOWLEDGE else "delivered", r)
            if mode is AckMode.CLIENT_ACKNOWLEDGE:
                s.acknowledge()
                rec.mark("acked", *refs)
            elif mode is AckMode.DUPS_OK_ACKNOWLEDGE:
                rec.mark("acked-lazily", *refs)
        return Expect(clients=("app",), lazy_acks=set(refs) if mode is AckMode.DUPS_OK_ACKNOWLEDGE else set())
    return run


# ---------------------------------------------------------------- recovery, distribution, retention


def _die_after_commit_point(root: Path) -> None:
    """In a forked child: a client claims messages (CLIENT, unacknowledged), leaves a
    transaction open, and dies right after a second transaction's commit point (its log
    fsynced into committing/, none of its moves done)."""
    from dropboxmq.message import Queue
    from dropboxmq.ackmode import AckMode
    from dropboxmq.connection import Connection

    real_fsync = os.fsync

    def fsync_then_die(fd: int | HasFileno) -> None:
        real_fsync(fd)
        number = fd if isinstance(fd, int) else fd.fileno()
        if os.readlink(f"/proc/self/fd/{number}").endswith("/transaction/committing"):
            os._exit(0)  # the power of this process goes here: nothing after the commit point runs

    conn = Connection(root, client_id="dead-owner", settings=_settings(), create=True)
    client = conn.create_session(ack_mode=AckMode.CLIENT_ACKNOWLEDGE)
    cc = client.create_consumer(Queue("q"))
    _receive(cc, "m0")
    _receive(cc, "m1")
    open_tx = conn.create_session(transacted=True)
    _receive(open_tx.create_consumer(Queue("q")), "m2")
    open_tx.create_producer(Queue("out")).send(_message(open_tx, "n0"))
    committing = conn.create_session(transacted=True)
    _receive(committing.create_consumer(Queue("q")), "m3")
    committing.create_producer(Queue("out")).send(_message(committing, "n1"))
    os.fsync = fsync_then_die
    committing.commit()
    os._exit(1)  # not reached: the commit point kills the process


def op_recover(root: Path, scale: Scale, start: StartRecording) -> Expect:
    from dropboxmq.recovery import recover

    keys = ["m0", "m1", "m2", "m3"]
    _seed(root, "q", keys)
    pid = os.fork()
    if pid == 0:
        try:
            _die_after_commit_point(root)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError("setup: the dead owner did not die at its commit point")
    q, out = _queue_box("q"), _queue_box("out")
    with start() as rec:
        recover(root)
        rec.mark("recovered")
    return Expect(transactions={"open": ((ref(out, "n0"),), (ref(q, "m2"),)),
                                "committed": ((ref(out, "n1"),), (ref(q, "m3"),))},
                  committed_before={"committed"})


def op_distribute(root: Path, scale: Scale, start: StartRecording) -> Expect:
    """A foreign program dropped a file into a topic's .incoming/target/; ``distribute`` fans
    it out to every subscription in one transaction."""
    from dropboxmq import topics
    from dropboxmq.distributor import distribute
    from dropboxmq.lifecycle import Move, State
    from dropboxmq.message import Topic
    from dropboxmq.connection import Connection
    from dropboxmq.making import ensure_dropbox
    from dropboxmq.store import sync_many

    topic = Topic("t")
    names = [f"s{i}" for i in range(scale.subscribers)]
    with Connection(root, client_id="subscriber", settings=_settings(), create=True) as conn:
        s = conn.create_session()
        for name in names:
            s.create_durable_consumer(topic, name).close()
    incoming = ensure_dropbox(topics.topic_incoming(root, topic))
    incoming.create("ID_dropped-0", body_of("f0"), durable=True)
    incoming.move(Move.SEND, State.NOT_COMMITTED, "ID_dropped-0")
    sync_many([(incoming, State.NEW)])
    subs = [os.path.relpath(topics.find_by_name(root, n, "subscriber")[0].path, root) for n in names]
    incoming_ref = ref(os.path.relpath(incoming.path, root), "f0")
    with start() as rec:
        distribute(root, client_id="distributor", settings=_settings())
        rec.mark("distributed", incoming_ref)
    return Expect(clients=("distributor",), fanouts={incoming_ref: tuple(ref(b, "f0") for b in subs)})


def op_retention(root: Path, scale: Scale, start: StartRecording) -> Expect:
    """A retention pass over processed/ and expired/ (and error/) of a queue."""
    from dropboxmq import layout, retention
    from dropboxmq.lifecycle import Move, State
    from dropboxmq.message import Queue
    from dropboxmq.connection import Connection
    from dropboxmq.store import sync_many

    keys = ["m0", "m1", "m2", "m3"]
    _seed(root, "q", keys)
    with Connection(root, client_id="consumer", settings=_settings(), create=True) as conn:
        c = conn.create_session().create_consumer(Queue("q"))
        _receive(c, "m0")
        _receive(c, "m1")
        c.close()
    box = layout.queue_box(root, Queue("q"))
    expiring = next(n for n in box.list(State.NEW) if box.read(State.NEW, n) == body_of("m2"))
    box.move(Move.EXPIRE, State.NEW, expiring)
    sync_many([(box, State.EXPIRED)])
    q = _queue_box("q")
    with start() as rec:
        retention.prune(box, list(retention.TERMINAL), older_than=0, now=time.time() + 3600)
        rec.mark("pruned")
    return Expect(purgeable={ref(q, k) for k in ("m0", "m1", "m2")})


def op_subscribe(root: Path, scale: Scale, start: StartRecording) -> Expect:
    """Creating a durable subscription (the first consumer of it)."""
    from dropboxmq import topics
    from dropboxmq.message import Topic
    from dropboxmq.connection import Connection

    conn = Connection(root, client_id="subscriber", settings=_settings(), create=True)
    s = conn.create_session()
    (Path(root) / "topic-root").mkdir(exist_ok=True)
    with start() as rec:
        s.create_durable_consumer(Topic("t"), "s1")
        rec.mark("subscribed", "s1")
    path = os.path.relpath(topics.find_by_name(root, "s1", "subscriber")[0].path, root)
    return Expect(clients=("subscriber",), subscriptions={"s1": path})


OPERATIONS: dict[str, Operation] = {op.name: op for op in (
    Operation("send", "PERSISTENT send of one message", op_send),
    Operation("send-non-persistent", "NON_PERSISTENT send of one message (no sync: D2, D6)", op_send_non_persistent),
    Operation("send_many", "send_many of a batch of PERSISTENT messages (group commit)", op_send_many),
    Operation("commit-producer", "transacted sends to several queues, commit", op_commit_producer),
    Operation("commit-consumer", "transacted receives (deep: and a send), commit", op_commit_consumer),
    Operation("ack-auto", "AUTO_ACKNOWLEDGE receive", _ack_op("AUTO_ACKNOWLEDGE")),
    Operation("ack-client", "CLIENT_ACKNOWLEDGE receives, acknowledge()", _ack_op("CLIENT_ACKNOWLEDGE")),
    Operation("ack-dups-ok", "DUPS_OK_ACKNOWLEDGE receives, lazy acks flushed", _ack_op("DUPS_OK_ACKNOWLEDGE")),
    Operation("recover", "recover() of a dead owner: claims, an open and a committed transaction", op_recover),
    Operation("distribute", "distribute: fan out a dropped file to every subscription", op_distribute),
    Operation("retention", "a retention pass (prune) over processed/, expired/, error/", op_retention),
    Operation("subscribe", "creating a durable subscription", op_subscribe),
)}
