"""Producer and consumer processes, and the message bodies they exchange.

Every message carries a *value* chosen by the test (``<process>-<seq>``,
unique across the run) in its body and in the String property ``sv`` (so a
file can be identified by its name alone, even when it is empty or torn).
The body is ``value|size|<padding>|crc32`` so a consumer detects any torn,
empty or foreign body (``corrupt`` in its history).
"""

from __future__ import annotations

import errno
import os
import random
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .history import History

VALUE_PROP = "sv"
ESCAPE_SECRET = b"DMQ-ESCAPE-SECRET"  # planted outside the root by the bad-input nemesis


# ---------------------------------------------------------------- bodies


def make_body(value: str, size: int) -> bytes:
    head = f"{value}|{size}|".encode()
    n = max(0, size - len(head) - 9)
    seed = zlib.crc32(value.encode())
    pad = (seed.to_bytes(4, "little") * (n // 4 + 1))[:n]
    core = head + pad + b"|"
    return core + b"%08x" % zlib.crc32(core)


def record_receive(hist, msg, mode: str, **extra) -> str | None:
    """Record one received message (consumer loop and drain alike); returns its value, or None
    for a foreign file.  A torn body's value is not trusted: ours only if the name says so."""
    value, intact = parse_body(msg.body or b"")
    prop = msg.get_property(VALUE_PROP)
    if not intact:
        value = prop if isinstance(prop, str) else None
    rec = {"redelivered": bool(msg.redelivered), "count": msg.delivery_count, **extra,
           "lat": time.time() - msg.timestamp / 1000.0, "mode": mode}
    if ESCAPE_SECRET in (msg.body or b""):
        hist.record("info", "escape", None, name=msg.message_id)
    if value is None:
        rec["foreign"] = msg.message_id
    elif not intact or (isinstance(prop, str) and prop != value):
        rec["corrupt"] = True
        rec["size"] = len(msg.body or b"")
    hist.ok("receive", value, **rec)
    return value


def parse_body(body: bytes) -> tuple[str | None, bool]:
    """(value, intact).  value None: not one of ours (foreign or empty)."""
    try:
        value, size, _ = body.split(b"|", 2)
        value_s = value.decode("ascii")
        int(size)
    except (ValueError, UnicodeDecodeError):
        return None, False
    core, crc = body[:-8], body[-8:]
    intact = len(core) > 0 and core.endswith(b"|") and b"%08x" % zlib.crc32(core) == crc
    return value_s, intact


# ---------------------------------------------------------------- configuration


@dataclass
class Workload:
    queue: str = "stress"
    duration: float = 20.0
    producers: int = 2
    consumers: int = 2
    min_size: int = 64
    max_size: int = 2048
    priorities: tuple[int, ...] = tuple(range(10))
    persistent_fraction: float = 0.8
    producer_modes: tuple[str, ...] = ("single", "many", "tx")
    batch: int = 8  # send_many / transacted batch size (upper bound)
    ack_modes: tuple[str, ...] = ("auto", "client", "transacted", "dups_ok")  # round-robin over consumers
    ack_every: int = 4  # client / transacted consumers ack or commit every 1..ack_every messages
    rollback_p: float = 0.05  # transacted consumers roll back this often (legit redelivery)
    max_messages: int | None = None  # per producer incarnation
    rate: float | None = None  # per producer, operations per second (None: as fast as possible)
    receive_timeout: float = 0.1
    poll_interval: float = 0.005
    scan_interval: float = 0.02
    recovery_interval: float = 0.2

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class WorkerSpec:
    role: str  # "producer" | "consumer"
    index: int
    incarnation: int
    ack_mode: str = "auto"
    seed: int = 0
    fault_probability: float = 0.0
    fault_actions: tuple[str, ...] = ()
    rename_path: str = "renameat2"
    extra: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.role[0]}{self.index}.{self.incarnation}"


def _settings(w: Workload):
    from dropboxmq.connection import Settings

    return Settings(poll_interval=w.poll_interval, scan_interval=w.scan_interval,
                    recovery_interval=w.recovery_interval)


def _install_faults(spec: WorkerSpec, hist: History):
    if spec.fault_probability <= 0:
        return None
    from . import faults

    plan = faults.Plan(probability=spec.fault_probability, actions=tuple(spec.fault_actions) or
                       ("errno:ENOSPC", "errno:EIO", "errno:EACCES", "short"), seed=spec.seed, counting=True,
                       on_fire=lambda fr: hist.info("fault", None, n=fr.n, kind=fr.kind, action=fr.action,
                                                    via=fr.via))
    faults.install(plan, spec.rename_path)
    return plan


def _err(exc: BaseException) -> dict:
    return {"err": f"{type(exc).__name__}: {exc}", "errno": getattr(exc, "errno", None)}


# ---------------------------------------------------------------- producer


def producer_main(spec: WorkerSpec, w: Workload, root: str, hist_dir: str, deadline: float) -> None:
    from dropboxmq.message import DeliveryMode, Message, Queue
    from dropboxmq.connection import Connection

    hist = History(hist_dir, spec.name)
    hist.record("info", "start", role="producer", pid=os.getpid())
    rng = random.Random(spec.seed)
    _install_faults(spec, hist)
    conn = Connection(root, client_id=spec.name, settings=_settings(w), create=True)
    plain = conn.create_session()
    tx = conn.create_session(transacted=True)
    queue = Queue(w.queue)
    p_plain, p_tx = plain.create_producer(queue), tx.create_producer(queue)
    seq, sent = 0, 0
    interval = 1.0 / w.rate if w.rate else 0.0
    next_at = time.time()
    while time.time() < deadline and (w.max_messages is None or sent < w.max_messages):
        if interval:
            delay = next_at - time.time()
            if delay > 0:
                time.sleep(delay)  # pacing, not synchronisation
            next_at += interval
        mode = rng.choice(w.producer_modes)
        n = 1 if mode == "single" else rng.randint(2, max(2, w.batch))
        if w.max_messages is not None:
            n = max(1, min(n, w.max_messages - sent))
            if n == 1 and mode == "many":
                mode = "single"
        values = [f"{spec.name}-{seq + i}" for i in range(n)]
        seq += n
        persistent = rng.random() < w.persistent_fraction
        prio = rng.choice(w.priorities)
        dm = DeliveryMode.PERSISTENT if persistent else DeliveryMode.NON_PERSISTENT
        msgs: list[Message] = []
        for v in values:
            m = plain.create_bytes_message(make_body(v, rng.randint(w.min_size, w.max_size)))
            m.set_property(VALUE_PROP, v)
            msgs.append(m)
        hist.invoke("send", values, mode=mode, persistent=persistent, prio=prio)
        t0 = time.perf_counter()
        try:
            if mode == "single":
                p_plain.send(msgs[0], delivery_mode=dm, priority=prio)
            elif mode == "many":
                p_plain.send_many(msgs, delivery_mode=dm, priority=prio)
            else:
                for each in msgs:
                    p_tx.send(each, delivery_mode=dm, priority=prio)
                tx.commit()
        except Exception as exc:  # noqa: BLE001 - any failure is recorded, the run goes on
            hist.info("send", values, mode=mode, persistent=persistent, **_err(exc))
            if mode == "tx":
                try:
                    tx.rollback()
                except Exception:  # noqa: BLE001
                    pass
            if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
                time.sleep(0.01)  # back off on a full disk
            continue
        hist.ok("send", values, mode=mode, persistent=persistent, prio=prio, lat=time.perf_counter() - t0)
        sent += n
    conn.close()
    hist.record("info", "exit", sent=sent)
    hist.close()


# ---------------------------------------------------------------- consumer


def consumer_main(spec: WorkerSpec, w: Workload, root: str, hist_dir: str, deadline: float) -> None:
    from dropboxmq.message import Queue
    from dropboxmq.ackmode import AckMode
    from dropboxmq.connection import Connection

    hist = History(hist_dir, spec.name)
    hist.record("info", "start", role="consumer", ack_mode=spec.ack_mode, pid=os.getpid())
    rng = random.Random(spec.seed)
    _install_faults(spec, hist)
    mode = spec.ack_mode
    ack_mode = {"auto": AckMode.AUTO_ACKNOWLEDGE, "client": AckMode.CLIENT_ACKNOWLEDGE,
                "dups_ok": AckMode.DUPS_OK_ACKNOWLEDGE, "transacted": AckMode.AUTO_ACKNOWLEDGE}[mode]
    conn = Connection(root, client_id=spec.name, settings=_settings(w), create=True)
    session = conn.create_session(transacted=(mode == "transacted"), ack_mode=ack_mode)
    consumer = session.create_consumer(Queue(w.queue))
    pending: list[str] = []
    batch = rng.randint(1, w.ack_every)
    received = 0
    stop_when_empty = spec.extra.get("stop_when_empty", False)

    def settle(final: bool = False) -> None:
        nonlocal pending, batch
        if not pending:
            return
        if mode == "transacted" and not final and rng.random() < w.rollback_p:
            hist.invoke("rollback", pending)
            try:
                session.rollback()
                hist.ok("rollback", pending)
            except Exception as exc:  # noqa: BLE001
                hist.info("rollback", pending, **_err(exc))
            pending, batch = [], rng.randint(1, w.ack_every)
            return
        f = "commit" if mode == "transacted" else "ack"
        hist.invoke(f, pending)
        try:
            if mode == "transacted":
                session.commit()
            else:
                session.acknowledge()
            hist.ok(f, pending)
            pending = []
        except Exception as exc:  # noqa: BLE001
            hist.info(f, pending, **_err(exc))
            if mode == "transacted":
                pending = []  # the transaction is over (its outcome unknown)
        batch = rng.randint(1, w.ack_every)

    while time.time() < deadline:
        hist.invoke("receive")
        try:
            msg = consumer.receive(timeout=w.receive_timeout)
        except Exception as exc:  # noqa: BLE001
            hist.info("receive", None, **_err(exc))
            time.sleep(0.01)
            continue
        if msg is None:
            hist.fail("receive", None, err="empty")
            if stop_when_empty:
                break
            continue
        received += 1
        value = record_receive(hist, msg, mode, prio=msg.priority)
        if mode in ("client", "transacted"):
            pending.append(value if value is not None else str(msg.message_id))
            if len(pending) >= batch:
                settle()
    settle(final=True)
    try:
        conn.close()
    except Exception as exc:  # noqa: BLE001
        hist.info("close", None, **_err(exc))
    hist.record("info", "exit", received=received)
    hist.close()


def worker_main(spec: WorkerSpec, w: Workload, root: str, hist_dir: str, deadline: float) -> None:
    (producer_main if spec.role == "producer" else consumer_main)(spec, w, root, hist_dir, deadline)


def drain(root: str | Path, queue: str, hist_dir: str | Path, name: str = "drain",
          settings=None) -> int:
    """Consume everything left (CLIENT_ACKNOWLEDGE, ack after each message), recording history."""
    from dropboxmq.message import Queue
    from dropboxmq.ackmode import AckMode
    from dropboxmq.connection import Connection, Settings

    hist = History(hist_dir, name)
    conn = Connection(root, client_id=name, settings=settings or Settings(poll_interval=0.005,
                                                                          scan_interval=0.0), create=True)
    session = conn.create_session(ack_mode=AckMode.CLIENT_ACKNOWLEDGE)
    consumer = session.create_consumer(Queue(queue))
    n = 0
    while True:
        hist.invoke("receive")
        msg = consumer.receive(timeout=0)
        if msg is None:
            hist.fail("receive", None, err="empty")
            break
        n += 1
        value = record_receive(hist, msg, "drain")
        hist.invoke("ack", [value])
        session.acknowledge()
        hist.ok("ack", [value])
    conn.close()
    hist.close()
    return n
