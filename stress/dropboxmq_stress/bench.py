"""``make bench``: the reference implementation next to the syscall floor and its peers.

Run: ``python -m dropboxmq_stress.bench [--quick] [--messages N] [--budget S] [--rounds R]
[--backlogs 10000,100000,1000000] [--json FILE] [--dir DIR]``

One run, one temporary root, one machine.  Every case runs once per *round*
and the rounds are interleaved (floor, reference and peers of the same job back
to back, the whole sequence repeated), so a change in the machine's load hits
every side of a ratio alike.  Each figure is the **median of its per-round
rates**, each ratio the **median of its per-round ratios**.

Implementations (keys ``<impl>.<mode>.<figure>``; ``mode`` is the durability):

* ``floor`` — the protocol's file operations with no library: create
  ``working/<name>`` O_EXCL|O_NOFOLLOW, write, close, renameat2(NOREPLACE) into
  ``target/`` (send); renameat2 into ``processing/`` (claim), open + read +
  close (the body), renameat2 into ``processed/`` (ack).  A tiny C program
  compiled at run time when a C compiler is present, else the same loop in pure
  ``os`` calls (``result["floor_impl"]`` says which).  ``nosync`` = no fsync;
  ``fsync`` = fsync the file, fsync ``target/`` per send, ``processed/`` per
  ack; ``group100`` = fsync each file, ``target/`` once per 100; ``syncfs100`` =
  send_many's own group commit: write 100 files, one syncfs, rename 100, fsync
  ``target/`` once.
* ``osfloor`` — the pure-``os`` floor (non-persistent), shown next to the C one
  to separate the interpreter's share from the library's.
* ``ref`` — ``dropboxmq``: persistent / non-persistent ``send`` (one message per
  call), AUTO_ACKNOWLEDGE ``receive``; ``send_many`` of 100 and a transacted
  session committing 100 sends (group commit).
* peers, each at its stated durability (see ``PEERS`` for exactly which fsyncs
  each does): python-dirq ``QueueSimple``, persist-queue file ``Queue`` and
  ``SQLiteAckQueue``, diskcache ``Deque``, stdlib ``mailbox.Maildir``.  A peer
  that is not installed (``pip install -e '.[bench]'``) is skipped and listed.

A *cycle* is send + claim + ack of the same messages: all sends are timed,
then all receives, and the cycle rate is n / (time to send n + time to receive n).

Two more phases:

* **backlog** (``ref.backlog.<N>.consume``): the consume cost per message with
  N messages waiting.  The backlog is made fast (C floor or ``os``, names from
  the codec, NON_PERSISTENT, empty bodies), then a fresh AUTO consumer takes a
  sample of messages; the cost is claim + read + ack per message plus the
  scanner's listing cost amortized over the messages one listing serves (its
  batch), i.e. the steady-state cost of draining that backlog.  The first
  listing (a fresh consumer's start-up, O(N)) is reported apart.  The backlog is
  topped up after each sample.  1M needs about a minute to create; a budget
  (``--backlog-budget``) skips a size whose creation would not fit.
* **consumers** (``ref.consumers.<k>.consume``): k consumer processes
  (``multiprocess``) draining one queue of ``--mc-messages`` non-persistent
  messages (empty bodies); each takes one untimed message first (start-up:
  registration, recovery scan, first listing), then all start together at a
  barrier; aggregate messages per second until the queue is empty.  With the C
  floor, k C processes drain the same way (``floor.consumers.<k>.consume``):
  what the file system itself lets k claimers do on one directory.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

import click
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TaskID, TextColumn,
                           TimeElapsedColumn)
from rich.table import Table
from rich.text import Text

from dropboxmq.extras import require

BATCH = 100
CONSUMER_COUNTS = (1, 2, 4, 8)
_CHUNK = 32  # progress is advanced every _CHUNK messages (rich is not free)


# ---------------------------------------------------------------- measurement plumbing


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


@dataclass
class Figure:
    """One measured rate: (messages, seconds) per round; the rate is the median of the rounds'."""

    key: str
    label: str
    durability: str
    runs: dict[int, tuple[int, float]] = field(default_factory=dict)

    def add(self, round_: int, messages: int, seconds: float) -> None:
        m, s = self.runs.get(round_, (0, 0.0))
        self.runs[round_] = (m + messages, s + seconds)

    def round_rates(self) -> dict[int, float]:
        return {r: m / s for r, (m, s) in self.runs.items() if s > 0 and m > 0}

    @property
    def messages(self) -> int:
        return sum(m for m, _ in self.runs.values())

    @property
    def seconds(self) -> float:
        return sum(s for _, s in self.runs.values())

    @property
    def rate(self) -> float:
        return _median(list(self.round_rates().values()))

    def as_dict(self) -> dict:
        return {"label": self.label, "durability": self.durability, "messages": self.messages,
                "seconds": round(self.seconds, 6), "msg_per_s": round(self.rate, 3),
                "us_per_msg": round(1e6 / self.rate, 2) if self.rate else None,
                "rounds": [round(r, 3) for _, r in sorted(self.round_rates().items())]}


@dataclass
class Timer:
    """One timed stretch of one case: counts messages against a limit and a budget."""

    progress: Progress
    task: TaskID
    limit: int
    budget: float
    messages: int = 0
    seconds: float = 0.0
    _pending: int = 0
    _started: float = field(default=0.0, init=False)
    _deadline: float = field(default=0.0, init=False)

    def __enter__(self) -> "Timer":
        self._started = time.perf_counter()
        self._deadline = self._started + self.budget
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self._started
        self.progress.advance(self.task, self._pending)
        self._pending = 0

    def more(self) -> bool:
        return self.messages < self.limit and time.perf_counter() < self._deadline

    def done(self, n: int = 1) -> None:
        self.messages += n
        self._pending += n
        if self._pending >= _CHUNK:
            self.progress.advance(self.task, self._pending)
            self._pending = 0


class Bench:
    """The run's state: settings, the progress display and the figures so far.

    Each round gets 1/``rounds`` of the message limit and of the time budget."""

    def __init__(self, root: Path, messages: int, budget: float, size: int, rounds: int, progress: Progress,
                 cfloor: "CFloor | None" = None):
        self.root = root
        self.rounds = rounds
        self.phase_rounds = min(rounds, 3)  # the backlog and consumer phases are long: 3 rounds at most
        self.messages = max(1, messages // rounds)
        self.budget = budget / rounds
        self.size = size
        self.body = (b"dropboxmq benchmark payload " * (size // 28 + 1))[:size]
        self.progress = progress
        self.cfloor = cfloor
        self.figures: dict[str, Figure] = {}
        self.notes: list[str] = []
        self.extra: dict[str, dict] = {}
        self.round = 0
        self._tasks: dict[str, TaskID] = {}

    def task(self, description: str, total: int | None = None) -> TaskID:
        if description not in self._tasks:
            self._tasks[description] = self.progress.add_task(
                description, total=total if total is not None else self.messages * self.rounds)
        return self._tasks[description]

    def timer(self, description: str, limit: int | None = None) -> Timer:
        limit = self.messages if limit is None else limit
        return Timer(self.progress, self.task(description), limit, self.budget)

    def record(self, key: str, label: str, durability: str, timer: Timer) -> Timer:
        self.record_raw(key, label, durability, timer.messages, timer.seconds)
        return timer

    def record_raw(self, key: str, label: str, durability: str, messages: int, seconds: float) -> None:
        self.figures.setdefault(key, Figure(key, label, durability)).add(self.round, messages, seconds)

    def finish(self) -> None:
        for t in self.progress.tasks:
            self.progress.update(t.id, total=max(t.completed, 1))
        # cycles: send + receive + ack of the same messages, per round: n / (time to send n + time to receive n)
        for key in [k for k in self.figures if k.endswith(".send")]:
            prefix = key.removesuffix(".send")
            send, recv = self.figures[key], self.figures.get(f"{prefix}.receive")
            if recv is None:
                continue
            cycle = Figure(f"{prefix}.cycle", CYCLE_LABELS.get(prefix) or send.label.replace(": send", ": full cycle"),
                           send.durability)
            for r, (rm, rs) in recv.runs.items():
                sm, ss = send.runs.get(r, (0, 0.0))
                if sm and rm:
                    cycle.add(r, rm, ss * rm / sm + rs)
            if cycle.runs:
                self.figures[cycle.key] = cycle


CYCLE_LABELS = {"ref.persistent": "persistent full cycle", "ref.nonpersistent": "non-persistent full cycle"}


# ---------------------------------------------------------------- the floor: C, or pure os calls

FLOOR_DURABILITY = {
    "nosync": "no fsync",
    "fsync": "fsync file + target/ per send; processed/ per ack",
    "group100": "fsync each file; target/ once per 100",
    "fsyncfile": "fsync the file only (Maildir's durability: no directory fsync)",
    "syncfs100": "write 100, one syncfs, rename 100, fsync target/ once (send_many's group commit)",
}
_MODES = {"nosync": 0, "fsync": 1, "group100": 2, "fsyncfile": 3, "syncfs100": 4}

FLOOR_C = Path(__file__).with_name("floor.c")  # the floor program, compiled at run time


class CFloor:
    """The C floor, compiled at run time into ``workdir``; ``exe`` is None without a compiler."""

    def __init__(self, workdir: Path):
        self.exe: str | None = None
        self.compiler: str | None = None
        self.error: str | None = None
        cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc") or shutil.which("clang")
        if cc is None:
            self.error = "no C compiler (gcc, cc, clang) on PATH"
            return
        workdir.mkdir(parents=True, exist_ok=True)
        exe = workdir / "floor"
        proc = subprocess.run([cc, "-O2", "-w", "-o", str(exe), str(FLOOR_C)], capture_output=True, text=True)
        if proc.returncode != 0:
            self.error = f"{cc} failed: {proc.stderr.strip()[:300]}"
            return
        self.exe, self.compiler = str(exe), os.path.basename(cc)

    def _program(self) -> str:
        if self.exe is None:
            raise RuntimeError(f"the C floor is not available: {self.error}")
        return self.exe

    def cycle(self, base: Path, limit: int, size: int, mode: str, budget: float) -> tuple[int, float, int, float]:
        out = subprocess.run([self._program(), "cycle", str(base), str(limit), str(size), str(_MODES[mode]),
                              f"{budget:.6f}"], capture_output=True, text=True, check=True).stdout.split()
        return int(out[0]), float(out[1]), int(out[2]), float(out[3])

    def consumers(self, base: str, k: int) -> tuple[int, float]:
        """k C consumers draining ``base``/target/ at once: (messages, seconds from the first start
        to the last end)."""
        procs = [subprocess.Popen([self._program(), "claim", base, str(1000 + i)], stdout=subprocess.PIPE, text=True)
                 for i in range(k)]
        outs = [p.communicate()[0].split() for p in procs]
        return sum(int(o[0]) for o in outs), max(float(o[2]) for o in outs) - min(float(o[1]) for o in outs)

    def fill(self, directory: str, start: int, count: int, size: int, prefix: str, suffix: str) -> None:
        subprocess.run([self._program(), "fill", directory, str(start), str(count), str(size), prefix, suffix],
                       check=True, capture_output=True)


_O_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: how the pure-os consumers open a body (also receive_layers', so that its first row is this one)
O_FLOOR_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _floor_dirs(base: Path) -> dict[str, str]:
    dirs = {d: str(base / d) for d in ("working", "target", "processing", "processed")}
    for d in dirs.values():
        os.makedirs(d)
    return dirs


def floor(bench: Bench, mode: str, round_: int) -> None:
    """The floor of one durability mode: the C program when compiled, else pure os calls."""
    if bench.cfloor is None or bench.cfloor.exe is None:
        os_floor(bench, mode, round_, "floor")
        return
    base = bench.root / f"floor-{mode}-{round_}"
    _floor_dirs(base)
    sent, send_s, got, recv_s = bench.cfloor.cycle(base, bench.messages, bench.size, mode, bench.budget)
    bench.progress.advance(bench.task(f"floor {mode}: send"), sent)
    bench.record_raw(f"floor.{mode}.send", f"C floor {mode}: send", FLOOR_DURABILITY[mode], sent, send_s)
    if mode in ("nosync", "fsync"):
        bench.progress.advance(bench.task(f"floor {mode}: claim + read + ack"), got)
        bench.record_raw(f"floor.{mode}.receive", f"C floor {mode}: claim + read + ack", FLOOR_DURABILITY[mode],
                         got, recv_s)
    shutil.rmtree(base, ignore_errors=True)


def os_floor(bench: Bench, mode: str, round_: int, impl: str) -> None:
    """create/write/close/rename (send), rename (claim), read, rename (ack) per message, in os calls."""
    from dropboxmq.groupsync import sync_file_system
    from dropboxmq.store import rename_noreplace

    base = bench.root / f"{impl}-{mode}-{round_}"
    dirs = _floor_dirs(base)
    work, target, proc, done = dirs["working"], dirs["target"], dirs["processing"], dirs["processed"]
    body = bench.body
    sync = mode in ("fsync", "group100", "fsyncfile")  # fsync each file (and, receiving, processed/)
    sync_dir = mode in ("fsync", "group100", "syncfs100")  # fsync target/ after the renames
    stamp = time.time_ns() // 1_000_000
    what = "os floor" if impl == "osfloor" else "floor"
    i = 0
    with bench.timer(f"{what} {mode}: send") as t:
        while t.more():
            n = BATCH if mode in ("group100", "syncfs100") else 1
            names = [f"4.{stamp}{i + k:06d}-{(i + k) * 7919 % 10**10:010d}.T" for k in range(n)]
            for name in names:
                fd = os.open(f"{work}/{name}", _O_CREATE, 0o644)
                os.write(fd, body)
                if sync:
                    os.fsync(fd)
                os.close(fd)
            if mode == "syncfs100":
                sync_file_system(work)
            for name in names:
                rename_noreplace(f"{work}/{name}", f"{target}/{name}")
            if sync_dir:
                _fsync_dir(target)
            i += n
            t.done(n)
    sent = bench.record(f"{impl}.{mode}.send", f"{what} {mode}: send", FLOOR_DURABILITY[mode], t).messages
    if mode in ("nosync", "fsync"):
        with bench.timer(f"{what} {mode}: claim + read + ack", limit=sent) as t:
            for name in sorted(os.listdir(target)):
                if not t.more():
                    break
                claimed = f"c0000000001~{name}"
                rename_noreplace(f"{target}/{name}", f"{proc}/{claimed}")
                fd = os.open(f"{proc}/{claimed}", O_FLOOR_READ)
                os.read(fd, len(body) + 65536)
                os.close(fd)
                rename_noreplace(f"{proc}/{claimed}", f"{done}/{claimed}")
                if sync:
                    _fsync_dir(done)
                t.done()
        bench.record(f"{impl}.{mode}.receive", f"{what} {mode}: claim + read + ack", FLOOR_DURABILITY[mode], t)
    shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------- the reference implementation


class Reference:
    """The reference implementation's cases, on one connection per round."""

    def __init__(self, bench: Bench, round_: int):
        from dropboxmq.message import DeliveryMode, Queue, TextMessage
        from dropboxmq.connection import Connection

        self.bench, self.Queue, self.TextMessage = bench, Queue, TextMessage
        self.P, self.NP = DeliveryMode.PERSISTENT, DeliveryMode.NON_PERSISTENT
        self.conn = Connection(bench.root / f"reference-{round_}", f"bench{round_}", create=True)
        self.session = self.conn.create_session()
        # warm up imports, caches and the directories (untimed)
        for q in ("warmup", "p", "np", "bulk", "tx"):
            self.session.create_producer(Queue(q)).send(TextMessage(body=b""), delivery_mode=self.NP)
            consumer = self.session.create_consumer(Queue(q))
            while consumer.receive(0) is not None:
                pass
            consumer.close()

    def close(self) -> None:
        self.conn.close()

    def _sends(self, key: str, label: str, durability: str, queue: str, mode) -> int:
        producer, body, TextMessage = self.session.create_producer(self.Queue(queue)), self.bench.body, self.TextMessage
        with self.bench.timer(label) as t:
            while t.more():
                producer.send(TextMessage(body=body), delivery_mode=mode)
                t.done()
        return self.bench.record(key, label, durability, t).messages

    def _receives(self, key: str, label: str, durability: str, queue: str, limit: int) -> None:
        consumer = self.session.create_consumer(self.Queue(queue))
        with self.bench.timer(label, limit=limit) as t:
            while t.more():
                if consumer.receive(0) is None:
                    break
                t.done()
        consumer.close()
        self.bench.record(key, label, durability, t)

    def persistent(self) -> None:
        sent = self._sends("ref.persistent.send", "persistent send", "fsync file + target/", "p", self.P)
        self._receives("ref.persistent.receive", "AUTO receive, persistent", "fsync processed/ per ack", "p", sent)

    def nonpersistent(self) -> None:
        sent = self._sends("ref.nonpersistent.send", "non-persistent send", "no fsync", "np", self.NP)
        self._receives("ref.nonpersistent.receive", "AUTO receive, non-persistent", "no fsync", "np", sent)

    def send_many(self) -> None:
        producer, body, TextMessage = self.session.create_producer(self.Queue("bulk")), self.bench.body, self.TextMessage
        label = f"send_many of {BATCH}, persistent"
        with self.bench.timer(label) as t:
            while t.more():
                producer.send_many([TextMessage(body=body) for _ in range(BATCH)], delivery_mode=self.P)
                t.done(BATCH)
        self.bench.record("ref.persistent.send_many100", label,
                          "write all, one syncfs (parallel fsyncs next to others' unwritten data), rename all, "
                          "fsync target/ once", t)

    def transacted(self) -> None:
        tx = self.conn.create_session(transacted=True)
        producer, body, TextMessage = tx.create_producer(self.Queue("tx")), self.bench.body, self.TextMessage
        label = f"transacted batch of {BATCH}, persistent"
        with self.bench.timer(label) as t:
            while t.more():
                for _ in range(BATCH):
                    producer.send(TextMessage(body=body), delivery_mode=self.P)
                tx.commit()
                t.done(BATCH)
        tx.close()
        self.bench.record("ref.persistent.transacted100", label,
                          "syncfs or parallel fsyncs (log + files), fsync committing/, rename all, fsync target/", t)


# ---------------------------------------------------------------- peers


@dataclass
class Peer:
    """A peer queue at its stated durability: ``open(path)`` gives (send(body), receive() -> bool, close())."""

    key: str  # "<impl>.<mode>"
    label: str
    short: str  # durability in a few words, for the tables
    package: str  # the PyPI distribution (or "stdlib")
    module: str
    durability: str
    open: Callable[[str], tuple[Callable[[bytes], object], Callable[[], bool], Callable[[], None]]]


def _dirq(path: str):
    from dirq.QueueSimple import QueueSimple

    q = QueueSimple(path)
    state = {"started": False}

    def receive() -> bool:
        for _ in range(2):  # the cached listing, then one fresh listing
            name = q.next() if state["started"] else q.first()
            state["started"] = True
            while name:
                if q.lock(name):
                    q.get(name)
                    q.remove(name)
                    return True
                name = q.next()
            state["started"] = False
        return False

    return q.add, receive, lambda: None


def _pqfile(path: str):
    import persistqueue

    os.makedirs(path, exist_ok=True)
    q = persistqueue.Queue(path, tempdir=path)

    def receive() -> bool:
        try:
            q.get(block=False)
        except persistqueue.Empty:
            return False
        q.task_done()
        return True

    return q.put, receive, lambda: None


def _pqsqlite(path: str):
    import persistqueue

    q = persistqueue.SQLiteAckQueue(path, multithreading=False)

    def receive() -> bool:
        try:
            item = q.get(block=False, raw=True)
        except persistqueue.Empty:
            return False
        q.ack(id=item["pqid"])
        return True

    return q.put, receive, q.close


def _diskcache(path: str):
    from diskcache import Deque

    d = Deque(directory=path)

    def receive() -> bool:
        try:
            d.popleft()
        except IndexError:
            return False
        return True

    return d.append, receive, lambda: d.directory and d._cache.close()


def _maildir(path: str):
    import mailbox

    mb = mailbox.Maildir(path, factory=None, create=True)
    keys: list[str] = []

    def receive() -> bool:
        if not keys:
            keys.extend(reversed(sorted(mb.iterkeys())))
            if not keys:
                return False
        key = keys.pop()
        mb.get_bytes(key)
        mb.remove(key)
        return True

    return mb.add, receive, mb.close


#: every peer, with exactly which fsyncs it does (from its source; see the module docstring)
PEERS = [
    Peer("dirq.nosync", "python-dirq QueueSimple", "no fsync", "dirq", "dirq",
         "no fsync at all (strace: 0 per message): add = write a tmp file, link it to its name, unlink the "
         "tmp; lock = link <name>.lck; remove = 2 unlinks",
         _dirq),
    Peer("pqfile.chunk", "persist-queue file Queue", "fsync per 100 puts", "persist-queue", "persistqueue",
         "fsync of the chunk file only when it fills (1 per 100 puts); put, get and task_done flush and "
         "rewrite the info file via tmp + os.replace without fsync", _pqfile),
    Peer("diskcache.nosync", "diskcache Deque", "SQLite WAL, sync=NORMAL", "diskcache", "diskcache",
         "SQLite WAL, synchronous=NORMAL: no sync per commit, fdatasync only at WAL checkpoints "
         "(strace: ~0.08 per message); popleft = claim + ack in one statement", _diskcache),
    Peer("pqsqlite.fsync", "persist-queue SQLiteAckQueue", "SQLite WAL, 3 fdatasync/msg", "persist-queue", "persistqueue",
         "SQLite WAL, synchronous=FULL: fdatasync of the WAL at every commit, i.e. put, get (marks "
         "unack) and ack: 3 per message", _pqsqlite),
    Peer("maildir.fsync", "stdlib mailbox.Maildir", "fsync file (not dir)", "stdlib", "mailbox",
         "fsync of the file in tmp/, then link into new/ and unlink tmp/ (no directory fsync: 1 per "
         "message); consume = read + unlink, no claim step (one reader)", _maildir),
]
SHORT = {"floor.nosync": "no fsync", "osfloor.nosync": "no fsync", "floor.fsync": "fsync file + dir",
         "floor.fsyncfile": "fsync file (not dir)",
         "floor.group100": "fsync files, dir once", "floor.syncfs100": "syncfs, dir once",
         "ref.nonpersistent": "no fsync",
         "ref.persistent": "fsync file + dir", **{p.key: p.short for p in PEERS}}
NOSYNC_PEERS = [p for p in PEERS if not p.key.endswith(".fsync")]
#: the group-commit figures, in the order the tables show them
BATCH_SEND_KEYS = ["floor.group100.send", "floor.syncfs100.send", "ref.persistent.send_many100",
                   "ref.persistent.transacted100"]
FSYNC_PEERS = [p for p in PEERS if p.key.endswith(".fsync")]


def available(peer: Peer) -> bool:
    try:
        __import__(peer.module)
        return True
    except ImportError:
        return False


def run_peer(bench: Bench, peer: Peer, round_: int) -> None:
    path = str(bench.root / f"{peer.key.replace('.', '-')}-{round_}")  # each peer makes its own
    send, receive, close = peer.open(path)
    try:
        send(b"")  # warm-up (untimed)
        receive()
        body = bench.body
        with bench.timer(f"{peer.label}: send") as t:
            while t.more():
                send(body)
                t.done()
        sent = bench.record(f"{peer.key}.send", f"{peer.label}: send", peer.durability, t).messages
        with bench.timer(f"{peer.label}: receive + ack", limit=sent) as t:
            while t.more():
                if not receive():
                    break
                t.done()
        bench.record(f"{peer.key}.receive", f"{peer.label}: receive + ack", peer.durability, t)
        CYCLE_LABELS[peer.key] = f"{peer.label}: full cycle"
    finally:
        close()
        shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------- backlog creation


def backlog_name_parts() -> tuple[str, str]:
    """(prefix, suffix) of a NON_PERSISTENT TextMessage's file name around its numeric id,
    from the codec itself: name = prefix + <ms*1000+counter> + "-" + <10 digits> + suffix."""
    from dropboxmq.message import DeliveryMode, TextMessage
    from dropboxmq.codec import to_wire

    m = TextMessage(body=b"")
    m.message_id, m.timestamp = "ID:1000000000000000-0000000000", 1_000_000_000_000
    m.delivery_time, m.delivery_mode = m.timestamp, DeliveryMode.NON_PERSISTENT
    name = to_wire(m)
    prefix, _, rest = name.partition("1000000000000000-0000000000")
    return prefix, rest


def fill(bench: Bench, directory: str, start: int, count: int, size: int) -> None:
    """``count`` messages straight into ``directory`` (a target/), names from the codec."""
    prefix, suffix = backlog_name_parts()
    if bench.cfloor is not None and bench.cfloor.exe is not None:
        bench.cfloor.fill(directory, start, count, size, prefix, suffix)
        return
    body = bench.body[:size] if size <= len(bench.body) else b"x" * size
    for i in range(count):
        fd = os.open(f"{directory}/{prefix}{start + i}-{i * 7919 % 10**10:010d}{suffix}", _O_CREATE, 0o644)
        if body:
            os.write(fd, body)
        os.close(fd)


def remove_tree(path: Path) -> None:
    rm = shutil.which("rm")
    if rm:
        subprocess.run([rm, "-rf", "--", str(path)], check=False)
    shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------- backlog phase


def _label_n(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k" if n % 1000 == 0 else str(n)


def backlog_phase(bench: Bench, backlogs: list[int], sample: int, budget: float, console: Console) -> None:
    from dropboxmq.message import Queue
    from dropboxmq.connection import Connection

    root = bench.root / "backlog"
    conn = Connection(root, "backlog", create=True)
    session = conn.create_session()
    stamp = time.time_ns() // 1_000_000 * 1000
    counters: dict[int, int] = {}
    dirs: dict[int, str] = {}
    made = 0.0  # seconds spent creating backlogs so far
    fill_rate: float | None = None
    sizes = []
    for n in sorted(backlogs):
        if fill_rate is not None and n / fill_rate > budget - made:
            note = (f"backlog {_label_n(n)} skipped: creating it would take ~{n / fill_rate:.0f} s at the measured "
                    f"{fill_rate:,.0f} files/s, over the remaining --backlog-budget of {budget - made:.0f} s")
            bench.notes.append(note)
            console.print(note, highlight=False)
            continue
        consumer = session.create_consumer(Queue(f"b{n}"))  # creates the directories
        consumer.close()
        target = str(root / f"b{n}" / "incoming" / "target")
        task = bench.task(f"backlog {_label_n(n)}: create", total=n)
        started = time.perf_counter()
        done = 0
        while done < n:  # in chunks, for the progress bar
            step = min(n - done, 50_000)
            fill(bench, target, stamp + done, step, 0)
            done += step
            bench.progress.advance(task, step)
        took = time.perf_counter() - started
        made += took
        fill_rate = n / took if took > 0 else None
        counters[n], dirs[n] = stamp + n, target
        sizes.append(n)
        bench.extra.setdefault("backlog", {})[_label_n(n)] = {"create_seconds": round(took, 3),
                                                             "files_per_s": round(n / took if took else 0, 1)}
    for r in range(bench.phase_rounds):
        bench.round = r
        for n in sizes:
            _backlog_sample(bench, session, n, sample)
            fill(bench, dirs[n], counters[n], sample, 0)  # top up: the backlog stays n
            counters[n] += sample
    if sizes:  # memory: a fresh process consuming from the largest backlog (it lists and orders all of it)
        n = sizes[-1]
        out = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, str(root), str(sample), f"backlog:b{n}"],
                             capture_output=True, text=True, check=True).stdout
        bench.extra.setdefault("memory", {})["backlog_rss"] = {"backlog": n, "peak_bytes": int(out.split()[-1])}
    conn.close()
    remove_tree(root)


def _backlog_sample(bench: Bench, session, n: int, sample: int) -> None:
    from dropboxmq.message import Queue

    consumer = session.create_consumer(Queue(f"b{n}"))
    claimer = consumer.claimer
    listings: list[tuple[float, int, int]] = []  # (seconds, names listed, names to walk)
    relist = claimer.relist

    def timed_relist() -> None:
        t0 = time.perf_counter()
        relist()
        listings.append((time.perf_counter() - t0, len(claimer.keys), len(claimer.walk)))

    claimer.relist = timed_relist  # type: ignore[method-assign]
    label = f"backlog {_label_n(n)}: consume"
    task = bench.task(label, total=sample * bench.phase_rounds)
    t0 = time.perf_counter()
    got = 0
    while got < sample and consumer.receive(0) is not None:
        got += 1
        if got % _CHUNK == 0:
            bench.progress.advance(task, _CHUNK)
    total = time.perf_counter() - t0
    bench.progress.advance(task, got % _CHUNK)
    if not got or not listings:
        consumer.close()
        return
    list_seconds = sum(s for s, _, _ in listings)
    claim_ack = max(total - list_seconds, 1e-9) / got
    if len(listings) < 2:
        claimer.relist()  # one warm listing (keys cached, as every listing after a consumer's first)
    consumer.close()
    first_s, first_n, first_batch = listings[0]
    warm = [s for s, _, _ in listings[1:]]
    per_listing = _median(warm)
    # steady state: one listing serves its batch, or what is consumed before the listing goes stale
    stale_after = max(session.settings.scan_interval, 10 * per_listing)
    served = max(1.0, min(first_batch, stale_after / claim_ack))
    cost = claim_ack + per_listing / served
    key = f"ref.backlog.{_label_n(n)}"
    bench.record_raw(f"{key}.consume", f"consume at backlog {_label_n(n)}",
                     "AUTO receive, non-persistent; claim + read + ack + amortized listing", got, got * cost)
    info = bench.extra.setdefault("backlog", {}).setdefault(_label_n(n), {})
    info.setdefault("rounds", []).append({
        "sample": got, "claim_read_ack_us": round(claim_ack * 1e6, 2),
        "listing_s": round(per_listing, 4), "names_listed": first_n, "batch": first_batch,
        "listing_us_per_msg": round(per_listing / served * 1e6, 2), "first_listing_s": round(first_s, 4),
        "served_per_listing": round(served),
        "listings": len(listings)})


# ---------------------------------------------------------------- consumers phase


def _consumer_worker(root: str, queue: str, client: str, barrier, results) -> None:
    from dropboxmq.message import Queue
    from dropboxmq.connection import Connection

    conn = Connection(root, client, create=True)
    session = conn.create_session()
    consumer = session.create_consumer(Queue(queue))
    target = os.path.join(root, queue, "incoming", "target")
    warm = 1 if consumer.receive(0) is not None else 0  # untimed: registration, recovery, first listing
    barrier.wait()
    started = time.monotonic()  # taken here: the parent may be descheduled past the barrier
    got = 0
    while True:
        if consumer.receive(0) is not None:
            got += 1
            continue
        if not any(not n.startswith(".") for n in os.listdir(target)):
            break
    results.put((got, started, time.monotonic(), warm))
    conn.close()


def consumers_phase(bench: Bench, messages: int, counts: tuple[int, ...]) -> None:
    import multiprocess as mp

    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
    root = bench.root / "consumers"
    from dropboxmq.message import Queue
    from dropboxmq.connection import Connection

    conn = Connection(root, "mc-setup", create=True)
    session = conn.create_session()
    stamp = time.time_ns() // 1_000_000 * 1000
    for r in range(bench.phase_rounds):
        bench.round = r
        for k in counts:
            queue = f"mc{r}-{k}"
            session.create_consumer(Queue(queue)).close()
            target = str(root / queue / "incoming" / "target")
            fill(bench, target, stamp, messages + k, 0)  # + one untimed warm-up message each
            stamp += messages + k
            barrier, results = ctx.Barrier(k + 1), ctx.Queue()
            procs = [ctx.Process(target=_consumer_worker, args=(str(root), queue, f"mc{r}-{k}-{i}", barrier, results))
                     for i in range(k)]
            for p in procs:
                p.start()
            barrier.wait()
            outcomes = [results.get(timeout=600) for _ in procs]
            for p in procs:
                p.join()
            got = sum(o[0] for o in outcomes)
            elapsed = max(o[2] for o in outcomes) - min(o[1] for o in outcomes)
            label = f"{k} consumer{'s' if k > 1 else ''}, aggregate"
            bench.progress.advance(bench.task(f"{label}", total=messages * bench.phase_rounds), got)
            bench.record_raw(f"ref.consumers.{k}.consume", label,
                             "AUTO receive, non-persistent, one process each", got, elapsed)
            remove_tree(root / queue)
            if bench.cfloor is not None and bench.cfloor.exe is not None:
                # the same drain by k C processes: how far the file system itself lets claims scale
                queue = f"mcfloor{r}-{k}"
                session.create_consumer(Queue(queue)).close()
                base = str(root / queue / "incoming")
                fill(bench, f"{base}/target", stamp, messages, 0)
                stamp += messages
                got, elapsed = bench.cfloor.consumers(base, k)
                bench.record_raw(f"floor.consumers.{k}.consume", f"C floor, {label}",
                                 "claim + read + ack, one process each", got, elapsed)
                remove_tree(root / queue)
    conn.close()
    remove_tree(root)


# ---------------------------------------------------------------- the rounds


_MEMORY_CHILD = """
import sys
from dropboxmq.bodies import BytesMessage
from dropboxmq.message import DeliveryMode, Queue
from dropboxmq.connection import Connection

def peak():  # high-water mark of this process's resident memory, bytes: VmHWM, which starts
    # afresh at exec (ru_maxrss does not: it keeps the forking bench's, often far higher)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) * 1024

root, size, what = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with Connection(root, "memory-" + what, create=True) as conn:
    session = conn.create_session()
    if what.startswith("backlog:"):  # consume `size` messages of a big backlog: the whole process's peak
        consumer = session.create_consumer(Queue(what.split(":", 1)[1]))
        got = sum(1 for _ in range(size) if consumer.receive(0) is not None)
        assert got == size, got
        print(peak())
    elif what == "send":
        body = b"x" * size  # the caller's copy (touched: it is resident)
        base = peak()
        session.create_producer(Queue("big")).send(BytesMessage(body=body),
                                                   delivery_mode=DeliveryMode.NON_PERSISTENT)
        print(1 + (peak() - base) / size)  # the caller's copy + what the send added
    else:
        consumer = session.create_consumer(Queue("big"))
        base = peak()
        msg = consumer.receive(10)
        assert msg is not None and len(msg.body) == size
        print((peak() - base) / size)
"""


def memory_phase(bench: Bench, size: int) -> None:
    """Copies of one ``size``-byte body a fresh process holds at its peak while sending it, then
    (another process) while receiving it: the high-water mark of resident memory above the
    process's own, in bodies.  One copy is the least possible (the caller's body)."""
    root = bench.root / "memory"
    copies = {}
    for what in ("send", "receive"):
        out = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, str(root), str(size), what],
                             capture_output=True, text=True, check=True).stdout
        copies[what] = round(float(out.split()[-1]), 3)
    bench.extra.setdefault("memory", {}).update({"body_bytes": size, "copies": copies})
    shutil.rmtree(root, ignore_errors=True)


def run_rounds(bench: Bench, peers: list[Peer]) -> None:
    """Floor, reference and peers of the same job back to back, the whole sequence ``rounds`` times.

    (An untimed ``sync`` before each case was tried, so that none would pay the writeback of the
    one before it: the floor's no-fsync send still varied 7× from round to round, as it does
    without, so it is not done.)"""
    c_floor = bench.cfloor is not None and bench.cfloor.exe is not None
    for r in range(bench.rounds):
        bench.round = r
        ref = Reference(bench, r)
        cases: list[Callable[[], None]] = [
            # non-persistent full cycle
            partial(floor, bench, "nosync", r), ref.nonpersistent,
            *[partial(run_peer, bench, p, r) for p in peers if p in NOSYNC_PEERS],
            *([partial(os_floor, bench, "nosync", r, "osfloor")] if c_floor else []),
            # persistent
            partial(floor, bench, "fsync", r), ref.persistent, partial(floor, bench, "fsyncfile", r),
            *[partial(run_peer, bench, p, r) for p in peers if p in FSYNC_PEERS],
            # group commit
            partial(floor, bench, "group100", r), partial(floor, bench, "syncfs100", r), ref.send_many, ref.transacted,
        ]
        try:
            for case in cases:
                case()
        finally:
            ref.close()


# ---------------------------------------------------------------- comparisons

#: figure -> the floor figure it is compared with
FLOOR_OF = {
    "ref.nonpersistent.send": "floor.nosync.send",
    "ref.nonpersistent.receive": "floor.nosync.receive",
    "ref.nonpersistent.cycle": "floor.nosync.cycle",
    "ref.persistent.send": "floor.fsync.send",
    "ref.persistent.receive": "floor.fsync.receive",
    "ref.persistent.cycle": "floor.fsync.cycle",
    "ref.persistent.send_many100": "floor.syncfs100.send",  # the same group commit in C
    "ref.persistent.transacted100": "floor.syncfs100.send",
}
for _p in PEERS:
    for _fig in ("send", "receive", "cycle"):
        FLOOR_OF[f"{_p.key}.{_fig}"] = f"floor.{'fsync' if _p in FSYNC_PEERS else 'nosync'}.{_fig}"
for _fig in ("send", "receive", "cycle"):
    FLOOR_OF[f"osfloor.nosync.{_fig}"] = f"floor.nosync.{_fig}"
for _k in CONSUMER_COUNTS:
    FLOOR_OF[f"ref.consumers.{_k}.consume"] = f"floor.consumers.{_k}.consume"

#: Gains that are a ratio of two ratios: "@name" -> ((a, b), (c, d)) = (a / b) / (c / d).
#: A batch's gain over per-message sends, against the most any batch can gain on this disk
#: (the floor's send without fsync / with fsync: what is left once the fsyncs are free).
GAINS = {
    "@send_many100_gain": (("ref.persistent.send_many100", "ref.persistent.send"),
                           ("floor.nosync.send", "floor.fsync.send")),
    "@transacted100_gain": (("ref.persistent.transacted100", "ref.persistent.send"),
                            ("floor.nosync.send", "floor.fsync.send")),
    # the C floor doing send_many's own group commit: what a batch that really writes its files
    # to the disk reaches of the ceiling (the ceiling counts that writing as free)
    "@floor_syncfs100_gain": (("floor.syncfs100.send", "floor.fsync.send"),
                              ("floor.nosync.send", "floor.fsync.send")),
}

#: (key, numerator, denominator, description, goal from issues 6 and 18 or None, "min" | "max")
RATIOS = [
    ("nonpersistent_receive_vs_osfloor", "ref.nonpersistent.receive", "osfloor.nosync.receive",
     "AUTO receive, non-persistent / pure-os consumer of the same protocol", 0.8, "min"),
    ("nonpersistent_receive_vs_dirq", "ref.nonpersistent.receive", "dirq.nosync.receive",
     "AUTO receive, non-persistent / python-dirq QueueSimple receive", 1.0, "min"),
    ("nonpersistent_cycle_vs_floor", "ref.nonpersistent.cycle", "floor.nosync.cycle",
     "non-persistent full cycle / C floor", 0.6, "min"),
    ("nonpersistent_cycle_vs_dirq", "ref.nonpersistent.cycle", "dirq.nosync.cycle",
     "non-persistent full cycle / python-dirq QueueSimple", 1.0, "min"),
    ("persistent_send_vs_floor", "ref.persistent.send", "floor.fsync.send",
     "persistent send / C floor with the same fsyncs (file + target/)", 0.9, "min"),
    ("persistent_send_vs_maildir", "ref.persistent.send", "maildir.fsync.send",
     "persistent send (fsync file + dir) / Maildir add (fsync file)", 0.9, "min"),
    ("send_many100_vs_ceiling", "@send_many100_gain", "@group_commit_ceiling",
     "send_many(100) gain over per-message sends / this disk's ceiling", 0.8, "min"),
    ("transacted100_vs_ceiling", "@transacted100_gain", "@group_commit_ceiling",
     "transacted batch of 100: gain over per-message sends / this disk's ceiling", 0.8, "min"),
    # Retired (issue 18): "≥ 10× per-message send".  No batch can gain more than the disk's
    # ceiling (floor no-fsync / fsync send, group_commit_ceiling: 3.76× on the 2-core ext4
    # machine), so the target was out of reach by construction; the two rows above replace it.
    ("transacted100_vs_persistent_send", "ref.persistent.transacted100", "ref.persistent.send",
     "transacted batch of 100 / per-message persistent send (≥ 10× retired: over the disk's ceiling)",
     None, "min"),
    ("send_many100_vs_persistent_send", "ref.persistent.send_many100", "ref.persistent.send",
     "send_many(100) / per-message persistent send (≥ 10× retired: over the disk's ceiling)", None, "min"),
    ("floor_syncfs100_vs_ceiling", "@floor_syncfs100_gain", "@group_commit_ceiling",
     "C floor doing send_many's group commit: gain / this disk's ceiling (what a batch reaches)", None, "min"),
    ("send_many100_vs_floor_syncfs100", "ref.persistent.send_many100", "floor.syncfs100.send",
     "send_many(100) / C floor with the same group commit", None, "min"),
    ("transacted100_vs_floor_syncfs100", "ref.persistent.transacted100", "floor.syncfs100.send",
     "transacted batch of 100 / C floor with the same group commit", None, "min"),
    ("backlog_cost_flatness", "@backlog_max_cost", "@backlog_min_cost",
     "consume cost per message, largest / smallest backlog", 1.5, "max"),
    ("consumers2_vs_floor", "ref.consumers.2.consume", "floor.consumers.2.consume",
     "2 consumers, aggregate / C floor's 2 processes", 0.8, "min"),
    ("consumers4_vs_floor", "ref.consumers.4.consume", "floor.consumers.4.consume",
     "4 consumers, aggregate / C floor's 4 processes", 0.8, "min"),
    ("consumers8_vs_1", "ref.consumers.8.consume", "ref.consumers.1.consume",
     "8 consumers / 1 consumer, aggregate rate (no collapse: ≥ 1×)", 1.0, "min"),
    ("consumers4_vs_1", "ref.consumers.4.consume", "ref.consumers.1.consume",
     "4 consumers / 1 consumer, aggregate rate", 1.5, "min"),
    ("floor_consumers4_vs_1", "floor.consumers.4.consume", "floor.consumers.1.consume",
     "C floor: 4 consumers / 1 consumer (what the file system allows)", None, "min"),
    ("consumers2_vs_1", "ref.consumers.2.consume", "ref.consumers.1.consume",
     "2 consumers / 1 consumer, aggregate rate", None, "min"),
    ("nonpersistent_cycle_vs_osfloor", "ref.nonpersistent.cycle", "osfloor.nosync.cycle",
     "non-persistent full cycle / pure-os floor", None, "min"),
    ("group_commit_ceiling", "floor.nosync.send", "floor.fsync.send",
     "ceiling of any batch / per-message gain here: floor no-fsync send / floor fsync send", None, "min"),
    ("floor_fsync_vs_fsyncfile_send", "floor.fsync.send", "floor.fsyncfile.send",
     "floor: fsync file + dir / fsync file only (the price of the dir fsync)", None, "min"),
    ("persistent_vs_nonpersistent_send", "ref.persistent.send", "ref.nonpersistent.send",
     "persistent / non-persistent send (cost of durability)", None, "min"),
    ("floor_fsync_vs_nosync_send", "floor.fsync.send", "floor.nosync.send",
     "floor: fsync / no-fsync send (the disk's price)", None, "min"),
]


#: memory targets (issue 18): copies of one large body held at the peak, by what the process does
MEMORY_TARGETS = [
    ("memory_send_copies", "send", "sending one large body: copies held at the peak (the caller's included)", 1.1),
    ("memory_receive_copies", "receive", "receiving one large body: copies held at the peak", 1.1),
]


BACKLOG_RSS_TARGET = ("memory_backlog_rss", 300)  # MB of peak resident memory, issue 18


def memory_targets(memory: dict) -> dict[str, dict]:
    out = {}
    for key, what, desc, goal in MEMORY_TARGETS:
        copies = memory.get("copies", {}).get(what)
        if copies is not None:
            out[key] = {"description": f"{desc}, {memory['body_bytes'] >> 20} MB", "goal": goal, "sense": "max",
                        "ratio": copies, "met": copies <= goal}
    rss = memory.get("backlog_rss")
    if rss is not None:
        key, goal = BACKLOG_RSS_TARGET
        mb = rss["peak_bytes"] / 2**20
        out[key] = {"description": f"consuming a {_label_n(rss['backlog'])} backlog: peak resident memory of the "
                                   "consumer process (fresh, whole process)",
                    "goal": goal, "sense": "max", "unit": "MB", "ratio": round(mb, 1), "met": mb <= goal}
    return out


def target_keys() -> list[str]:
    return [key for key, *_ in RATIOS] + [key for key, *_ in MEMORY_TARGETS] + [BACKLOG_RSS_TARGET[0]]


def _amount(r: dict) -> str:
    """A target's measured value: a ratio (×), or an amount in its unit."""
    return f"{r['ratio']:.2f}×" if r.get("unit") is None else f"{r['ratio']:,.0f} {r['unit']}"


def _goal(r: dict) -> str:
    unit = "×" if r.get("unit") is None else f" {r['unit']}"
    return f"{'≥' if r['sense'] == 'min' else '≤'} {r['goal']:g}{unit}"


def _backlog_keys(figures: dict[str, Figure]) -> tuple[str, str] | None:
    """(largest, smallest) backlog consume keys; None with fewer than two backlogs."""
    keys = [k for k in figures if k.startswith("ref.backlog.") and k.endswith(".consume")]
    if len(keys) < 2:
        return None

    def size(k: str) -> int:
        s = k.split(".")[2]
        return int(s[:-1]) * (1_000_000 if s.endswith("M") else 1000 if s.endswith("k") else 1) if s[-1] in "kM" \
            else int(s)

    keys.sort(key=size)
    return keys[-1], keys[0]


def paired_ratio(num: Figure, den: Figure) -> float | None:
    """Median over the rounds both figures have of num/den; else the ratio of the medians."""
    nr, dr = num.round_rates(), den.round_rates()
    per_round = [nr[r] / dr[r] for r in nr if r in dr and dr[r] > 0]
    if per_round:
        return _median(per_round)
    return num.rate / den.rate if den.rate > 0 else None


def _gain_ratio(figures: dict[str, Figure], gain: tuple[str, str], ceiling: tuple[str, str]) -> float | None:
    if not all(k in figures for k in gain + ceiling):
        return None
    g, c = paired_ratio(figures[gain[0]], figures[gain[1]]), paired_ratio(figures[ceiling[0]], figures[ceiling[1]])
    return g / c if g is not None and c else None


def ratios(figures: dict[str, Figure]) -> dict[str, dict]:
    out: dict[str, dict[str, object]] = {}
    for key, ref in FLOOR_OF.items():
        if key in figures and ref in figures:
            r = paired_ratio(figures[key], figures[ref])
            if r is not None:
                out[f"{key}/floor"] = {"numerator": key, "denominator": ref, "ratio": round(r, 4)}
    backlog_keys = _backlog_keys(figures)
    for key, num, den, desc, goal, sense in RATIOS:
        if num == "@backlog_max_cost":  # cost = 1/rate: largest backlog's cost / smallest's = rate_small / rate_big
            if backlog_keys is None:
                continue
            big, small = backlog_keys
            num, den = small, big
            desc = f"consume cost per message, {big.split('.')[2]} / {small.split('.')[2]} backlog"
        if num in GAINS:
            r = _gain_ratio(figures, *GAINS[num])
            if r is None:
                continue
            num, den = " / ".join(GAINS[num][0]), " / ".join(GAINS[num][1])
        elif num in figures and den in figures:
            r = paired_ratio(figures[num], figures[den])
            if r is None:
                continue
        else:
            continue
        entry: dict[str, object] = {"numerator": num, "denominator": den, "description": desc, "goal": goal,
                 "sense": sense, "ratio": round(r, 4)}
        if goal is not None:
            entry["met"] = r >= goal if sense == "min" else r <= goal
        out[key] = entry
    return out


def _rate(r: float | None) -> str:
    if r is None:
        return "-"
    return f"{r:,.0f}" if r >= 100 else f"{r:,.1f}"


def _ratio(all_ratios: dict, key: str) -> str:
    r = all_ratios.get(f"{key}/floor", {}).get("ratio")
    return f"{r:.2f}" if r is not None else "-"


def render(result: dict, console: Console) -> None:
    figures, all_ratios = result["figures"], result["ratios"]
    head = (f"dropboxmq bench: {result['body_bytes']}-byte messages, {result['file_system']} under "
            f"{result['directory']}, {result['cpus']} CPUs, {result['rounds']} interleaved rounds (medians); "
            f"floor = {result['floor_impl']}")

    def rate(key: str) -> float | None:
        return figures[key]["msg_per_s"] if key in figures else None

    # 1. full cycles, every implementation
    t = Table(title=head + "\n1. full cycle (send + claim + read + ack), every implementation", title_justify="left")
    for col in ("implementation", "durability", "send/s", "claim+ack/s", "cycle/s", "vs floor"):
        t.add_column(col, justify="left" if col in ("implementation", "durability") else "right",
                     no_wrap=col != "durability", overflow="fold")
    impls = ["floor.nosync", "osfloor.nosync", "ref.nonpersistent"] + [p.key for p in NOSYNC_PEERS] + \
            ["floor.fsync", "ref.persistent"] + [p.key for p in FSYNC_PEERS]
    for impl in impls:
        if f"{impl}.cycle" not in figures:
            continue
        fig = figures[f"{impl}.cycle"]
        name = figures[f"{impl}.send"]["label"].removesuffix(": send")
        if impl.startswith("ref."):
            name = f"dropboxmq {name.removesuffix(' send')}"
        t.add_row(name, SHORT.get(impl, fig["durability"]), _rate(rate(f"{impl}.send")), _rate(rate(f"{impl}.receive")),
                  _rate(fig["msg_per_s"]), "1.00" if impl.startswith("floor.") else _ratio(all_ratios, f"{impl}.cycle"))
    console.print(t)

    # 2. persistent send and group commit
    t = Table(title="2. persistent send, one message per call, and group commit", title_justify="left")
    for col in ("case", "durability", "msg/s", "vs floor", "vs dropboxmq persistent send"):
        t.add_column(col, justify="left" if col in ("case", "durability") else "right",
                     no_wrap=col != "durability", overflow="fold")
    ref_send = rate("ref.persistent.send")
    for key in ["floor.fsync.send", "floor.fsyncfile.send", "ref.persistent.send"] + [f"{p.key}.send" for p in FSYNC_PEERS] + \
               BATCH_SEND_KEYS:
        if key not in figures:
            continue
        fig = figures[key]
        vs = fig["msg_per_s"] / ref_send if ref_send else None
        t.add_row(fig["label"], SHORT.get(key.rsplit(".", 1)[0], fig["durability"]), _rate(fig["msg_per_s"]),
                  "1.00" if key.startswith("floor.") else _ratio(all_ratios, key), f"{vs:.2f}×" if vs else "-")
    console.print(t)

    # 3. backlog
    bl = [k for k in figures if k.startswith("ref.backlog.")]
    if bl:
        t = Table(title="3. consume cost per message vs backlog (AUTO, non-persistent)", title_justify="left")
        for col in ("backlog", "µs/msg", "claim+read+ack µs", "listing µs/msg", "relisting s", "batch",
                    "first listing s", "create s"):
            t.add_column(col, justify="right", no_wrap=True)
        for key in bl:
            n = key.split(".")[2]
            info = result.get("backlog", {}).get(n, {})
            rounds = info.get("rounds", [])
            med = {field: _median([x[field] for x in rounds]) if rounds else None
                   for field in ("claim_read_ack_us", "listing_us_per_msg", "listing_s", "batch", "first_listing_s")}
            t.add_row(n, f"{figures[key]['us_per_msg']:.1f}", f"{med['claim_read_ack_us']:.1f}",
                      f"{med['listing_us_per_msg']:.2f}", f"{med['listing_s']:.3f}", f"{med['batch']:,.0f}",
                      f"{med['first_listing_s']:.2f}", f"{info.get('create_seconds', 0):.1f}")
        console.print(t)

    # 4. consumers
    mc = [k for k in figures if k.startswith("ref.consumers.")]  # the C floor's are shown beside them
    if mc:
        t = Table(title="4. aggregate rate, k consumer processes on one queue", title_justify="left")
        for col in ("consumers", "msg/s", "vs 1 consumer", "C floor msg/s", "C floor vs 1", "vs C floor"):
            t.add_column(col, justify="right", no_wrap=True)
        for key in mc:
            k = key.split(".")[2]
            r = all_ratios.get(f"consumers{k}_vs_1", {}).get("ratio", 1.0 if k == "1" else None)
            fk, f1 = f"floor.consumers.{k}.consume", "floor.consumers.1.consume"
            fr = figures[fk]["msg_per_s"] / figures[f1]["msg_per_s"] if fk in figures and f1 in figures else None
            t.add_row(k, _rate(figures[key]["msg_per_s"]), f"{r:.2f}×" if r is not None else "-",
                      _rate(figures[fk]["msg_per_s"]) if fk in figures else "-",
                      f"{fr:.2f}×" if fr is not None else "-", _ratio(all_ratios, key))
        console.print(t)

    # 5. targets
    t = Table(title="5. targets (issues 6 and 18) and other ratios", title_justify="left")
    t.add_column("comparison", no_wrap=True)
    t.add_column("ratio", justify="right", no_wrap=True)
    t.add_column("target", justify="right", no_wrap=True)
    t.add_column("", no_wrap=True)
    for key in target_keys():
        r = all_ratios.get(key)
        if r is None:
            continue
        goal = r["goal"]
        target = "-" if goal is None else _goal(r)
        verdict = "" if goal is None else ("[green]hit[/green]" if r["met"] else "[red]miss[/red]")
        t.add_row(r["description"], _amount(r), target, verdict)
    console.print(t)
    for note in result.get("notes", []):
        console.print(f"note: {note}", highlight=False)
    console.print("durability of each peer (from its source): " + "; ".join(
        f"[bold]{p.label}[/bold]: {p.durability}" for p in PEERS), highlight=False)


def markdown(result: dict) -> str:
    """The README table: every figure as msg/s and its ratio, and the targets with hit/miss."""
    figures, all_ratios = result["figures"], result["ratios"]
    lines = [f"Measured {result['date'][:10]} on {result['cpus']} CPUs, {result['file_system']}, "
             f"{result['body_bytes']}-byte bodies, {result['rounds']} interleaved rounds (medians); "
             f"floor = {result['floor_impl']}; load average {result.get('load_average', ['?'])[0]:.1f} "
             f"(a shared machine).", "",
             "| figure | durability | msg/s | µs/msg | vs floor |", "|---|---|---:|---:|---:|"]
    impls = ["floor.nosync", "osfloor.nosync", "ref.nonpersistent"] + [p.key for p in NOSYNC_PEERS] + \
            ["floor.fsync", "ref.persistent"] + [p.key for p in FSYNC_PEERS]
    order = [f"{i}.cycle" for i in impls] + \
            ["floor.fsync.send", "floor.fsyncfile.send", "ref.persistent.send"] + \
            [f"{p.key}.send" for p in FSYNC_PEERS] + \
            BATCH_SEND_KEYS + \
            sorted((k for k in figures if k.startswith("ref.backlog.")), key=lambda k: figures[k]["messages"]) + \
            [k for k in figures if k.startswith("ref.consumers.")] + \
            [k for k in figures if k.startswith("floor.consumers.")]
    peer_keys = {p.key for p in PEERS}
    for key in order:
        if key not in figures:
            continue
        fig = figures[key]
        ratio = all_ratios.get(f"{key}/floor", {}).get("ratio")
        impl = key.rsplit(".", 1)[0]
        durability = SHORT[impl] if impl in peer_keys or key.endswith(".cycle") else fig["durability"]
        lines.append(f"| {fig['label']} | {durability} | {_rate(fig['msg_per_s'])} | {fig['us_per_msg']:,.1f} | "
                     f"{'' if ratio is None else f'{ratio:.2f}'} |")
    lines += ["", "| target (issues 6, 18) | ratio | goal | |", "|---|---:|---:|---|"]
    for key in target_keys():
        r = all_ratios.get(key)
        if r is None or r["goal"] is None:
            continue
        lines.append(f"| {r['description']} | {_amount(r)} | {_goal(r)} | {'hit' if r['met'] else '**miss**'} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the run


class RateColumn(ProgressColumn):
    def render(self, task) -> Text:
        if task.finished and task.finished_time:
            speed = task.completed / task.finished_time
        else:
            speed = task.speed
        return Text(f"{speed:>10,.0f} msg/s" if speed else " " * 16, style="progress.data.speed")


def run(messages: int, budget: float, size: int, rounds: int, directory: Path | None, console: Console,
        keep: bool = False, backlogs: list[int] | None = None, sample: int = 2000, backlog_budget: float = 480.0,
        mc_messages: int = 10000, consumer_counts: tuple[int, ...] = CONSUMER_COUNTS, use_c: bool = True,
        memory_bytes: int = 100 << 20) -> dict:
    from dropboxmq.filesystems import file_system_type

    base = Path(tempfile.mkdtemp(prefix="dropboxmq-bench-", dir=directory))
    started = time.perf_counter()
    progress = Progress(TextColumn("{task.description:<44}"), BarColumn(), MofNCompleteColumn(),
                        RateColumn(), TimeElapsedColumn(), console=console, transient=False)
    peers = [p for p in PEERS if available(p)]
    missing = sorted({p.package for p in PEERS if p not in peers})
    try:
        cfloor = CFloor(base / ".cfloor") if use_c else None
        with progress:
            bench = Bench(base, messages, budget, size, rounds, progress, cfloor)
            if missing:
                bench.notes.append(f"peers not installed, skipped: {', '.join(missing)} "
                                   "(pip install -e '.[bench]')")
            run_rounds(bench, peers)
            if backlogs:
                backlog_phase(bench, backlogs, sample, backlog_budget, console)
            if consumer_counts and mc_messages:
                consumers_phase(bench, mc_messages, consumer_counts)
            if memory_bytes:
                memory_phase(bench, memory_bytes)
            bench.finish()
        fs = file_system_type(base)
    finally:
        if keep:
            console.print(f"kept {base}")
        else:
            remove_tree(base)
    floor_impl = (f"C ({cfloor.compiler} -O2, compiled at run time)" if cfloor is not None and cfloor.exe
                  else f"pure os calls ({cfloor.error if cfloor is not None else 'C floor disabled'})")
    result = {
        "tool": "dropboxmq_stress.bench",
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": platform.node(), "platform": platform.platform(), "python": platform.python_version(),
        "cpus": os.cpu_count(), "load_average": list(os.getloadavg()), "file_system": fs,
        "directory": str(base.parent), "floor_impl": floor_impl,
        "messages_limit": messages, "budget_seconds": budget, "rounds": rounds, "body_bytes": size,
        "peers": {p.key: {"label": p.label, "package": p.package, "durability": p.durability,
                          "installed": p in peers} for p in PEERS},
        "backlog_sample": sample, "consumer_messages": mc_messages,
        "wall_seconds": round(time.perf_counter() - started, 3),
        "figures": {k: f.as_dict() for k, f in bench.figures.items()},
        "ratios": {**ratios(bench.figures), **memory_targets(bench.extra.get("memory", {}))},
        "backlog": bench.extra.get("backlog", {}),
        "memory": bench.extra.get("memory", {}),
        "notes": bench.notes,
    }
    return result


def _int_list(ctx, param, value):
    if value is None:
        return None
    try:
        return [int(float(v)) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter("a comma-separated list of message counts, e.g. 10000,100000,1000000") from None


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--messages", "-n", type=click.IntRange(BATCH), default=None,
              help="Messages per timed case at most (default 5000; --quick: 200); each case also stops "
                   "at its time budget.")
@click.option("--budget", type=click.FloatRange(0.05), default=None,
              help="Seconds per timed case at most, all rounds together (default 4; --quick: 0.3).")
@click.option("--size", type=click.IntRange(0, 1 << 20), default=100, show_default=True,
              help="Body size in bytes.")
@click.option("--rounds", type=click.IntRange(1, 50), default=None,
              help="Repeat the sequence of cases this often, splitting limit and budget; figures are the "
                   "medians of the rounds (default 12: short rounds, so a burst of load from other "
                   "processes hits few of them; --quick: 1); the backlog and consumer phases "
                   "use at most 3.")
@click.option("--backlogs", callback=_int_list, default=None,
              help="Backlog sizes for the consume-cost figures (default 10000,100000,1000000; "
                   "--quick: 1000,10000; empty: skip).")
@click.option("--sample", type=click.IntRange(10), default=None,
              help="Messages consumed per backlog and round (default 2000; --quick: 200).")
@click.option("--backlog-budget", type=click.FloatRange(1), default=480.0, show_default=True,
              help="Seconds allowed for creating backlogs: a size that would not fit is skipped (and said).")
@click.option("--mc-messages", type=click.IntRange(0), default=None,
              help="Messages per multi-consumer case (default 5000; --quick: 300; 0: skip).")
@click.option("--memory-mb", type=click.IntRange(0), default=None,
              help="Body size in MB for the memory targets (copies held while sending / receiving one "
                   "body, each in a fresh process; default 100; --quick: 10; 0: skip).")
@click.option("--no-c", is_flag=True, help="Use the pure-os floor even when a C compiler is present.")
@click.option("--quick", is_flag=True, help="A ~10 s run (few messages, short budgets, no 1M backlog): a smoke test.")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where to make the temporary root (default: the system temp dir). The file system "
                   "there is what is measured.")
@click.option("--json", "json_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the results here (default: bench-<date>.json in the current directory).")
@click.option("--keep", is_flag=True, help="Keep the temporary root.")
@click.option("--markdown", "markdown_file", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Also write the README table (markdown) here ('-': stdout).")
@click.option("--report", "report_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Measure nothing: print the tables of a results JSON written earlier.")
def main(messages, budget, size, rounds, backlogs, sample, backlog_budget, mc_messages, memory_mb, no_c, quick,
         directory, json_file, keep, markdown_file, report_file) -> None:
    """Benchmark the reference implementation against the syscall floor and its peers; print
    tables of rates, ratios and the targets of issues 6 and 18 (hit/miss) and write them as JSON."""
    console = Console(stderr=True)
    out = Console() if sys.stdout.isatty() else Console(width=130)
    if report_file is None:
        require("python -m dropboxmq_stress.bench", "bench", "multiprocess")
    if report_file is not None:
        result = json.loads(report_file.read_text(encoding="utf-8"))
        render(result, out)
        if markdown_file is not None:
            click.open_file(markdown_file, "w", encoding="utf-8").write(markdown(result))
        return
    if messages is None:
        messages = 200 if quick else 5000
    if budget is None:
        budget = 0.3 if quick else 4.0
    if rounds is None:
        rounds = 1 if quick else 12
    if backlogs is None:
        backlogs = [1000, 10_000] if quick else [10_000, 100_000, 1_000_000]
    if sample is None:
        sample = 200 if quick else 2000
    if mc_messages is None:
        mc_messages = 300 if quick else 5000
    if memory_mb is None:
        memory_mb = 10 if quick else 100
    if directory is not None:
        os.makedirs(directory, exist_ok=True)
    result = run(messages, budget, size, rounds, directory, console, keep, backlogs, sample, backlog_budget,
                 mc_messages, CONSUMER_COUNTS, not no_c, memory_mb << 20)
    render(result, out)
    if json_file is None:
        json_file = Path(f"bench-{_dt.datetime.now():%Y-%m-%d-%H%M%S}.json")
    json_file.parent.mkdir(parents=True, exist_ok=True)
    json_file.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if markdown_file is not None:
        with click.open_file(markdown_file, "w", encoding="utf-8") as f:
            f.write(markdown(result))
    out.print(f"results written to {json_file} (whole run {result['wall_seconds']:.1f} s)", highlight=False)


if __name__ == "__main__":
    main()
