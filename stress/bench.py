"""``make bench``: how fast the reference implementation is, next to the raw syscall floor.

Run: ``python -m dropboxmq.stress.bench [--messages N] [--quick] [--json FILE] [--dir DIR]``

One run, one temporary root, one machine; every figure is messages per second
and is printed next to the *floor* it should be compared with, as a ratio:

* **floor** (``floor.*``): the protocol's file operations in pure ``os`` calls, no
  library: create ``working/<name>`` with O_EXCL (and O_NOFOLLOW), write, close,
  rename into ``target/`` (send), rename to ``processing/`` (claim), rename to
  ``processed/`` (ack).  Three durability levels:

  - ``nosync``: no fsync at all (the NON_PERSISTENT floor);
  - ``fsync``: fsync the file, then fsync ``target/`` after the rename, and fsync
    ``processed/`` after the ack (the PERSISTENT floor, one message at a time);
  - ``group100``: fsync every file, rename a batch of 100, fsync ``target/`` once
    (the group-commit floor).

* **reference** (``ref.*``): the ``dropboxmq`` API doing the same jobs — persistent
  and non-persistent ``send`` (one message per call), ``send_many`` of 100
  persistent messages (group commit), a transacted session committing 100
  persistent sends, and AUTO_ACKNOWLEDGE ``receive`` (persistent acks fsync
  ``processed/``; non-persistent ones do not).

A *cycle* is send + receive + ack of the same messages: all sends are timed
first, then all receives, and the cycle rate is messages / (send time + receive
time) — the same method for the floor and the reference.

Each timed case stops after ``--messages`` messages or its time budget
(``--budget`` seconds), whichever comes first, so a slow disk (fsync at ~100/s)
still finishes the whole run in about a minute; the table says how many
messages each figure is based on.

Growing this (issue 6): a peer is one more ``Case`` whose ``figure`` names the
comparable floor in ``FLOOR_OF``; backlog and multi-consumer figures are more
cases.  Results are keyed ``<impl>.<mode>.<figure>`` so ``stress compare``
can diff two JSON files ratio by ratio.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

RESULTS_DIR = Path(__file__).resolve().parent / "results"
BATCH = 100
_CHUNK = 32  # progress is advanced every _CHUNK messages (rich is not free)


# ---------------------------------------------------------------- measurement plumbing


@dataclass
class Figure:
    """One measured rate."""

    key: str
    label: str
    durability: str
    messages: int = 0
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict:
        return {"label": self.label, "durability": self.durability, "messages": self.messages,
                "seconds": round(self.seconds, 6), "msg_per_s": round(self.rate, 3)}


@dataclass
class Timer:
    """One timed stretch of one case: counts messages against a limit and a budget."""

    progress: Progress
    task: int
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

    The cases run in ``rounds`` (floor and reference of the same job next to each
    other, the whole sequence repeated) so that a change in the machine's load
    during the run hits both sides of a ratio alike; each round gets
    1/``rounds`` of the message limit and of the time budget, and the figures
    add the rounds up.
    """

    def __init__(self, root: Path, messages: int, budget: float, size: int, rounds: int, progress: Progress):
        self.root = root
        self.rounds = rounds
        self.messages = max(1, messages // rounds)
        self.budget = budget / rounds
        self.body = (b"dropboxmq benchmark payload " * (size // 28 + 1))[:size]
        self.progress = progress
        self.figures: dict[str, Figure] = {}
        self._tasks: dict[str, int] = {}

    def timer(self, description: str, limit: int | None = None) -> Timer:
        if description not in self._tasks:
            self._tasks[description] = self.progress.add_task(description, total=self.messages * self.rounds)
        limit = self.messages if limit is None else limit
        return Timer(self.progress, self._tasks[description], limit, self.budget)

    def record(self, key: str, label: str, durability: str, timer: Timer) -> Timer:
        fig = self.figures.setdefault(key, Figure(key, label, durability))
        fig.messages += timer.messages
        fig.seconds += timer.seconds
        return timer

    def finish(self) -> None:
        for t in self.progress.tasks:
            self.progress.update(t.id, total=max(t.completed, 1))
        for prefix, label, durability in (("floor.nosync", "floor nosync: full cycle", FLOOR_DURABILITY["nosync"]),
                                          ("floor.fsync", "floor fsync: full cycle", FLOOR_DURABILITY["fsync"]),
                                          ("ref.persistent", "persistent full cycle", "persistent"),
                                          ("ref.nonpersistent", "non-persistent full cycle", "no fsync")):
            send, recv = self.figures.get(f"{prefix}.send"), self.figures.get(f"{prefix}.receive")
            if send and recv and send.messages and recv.messages:
                # send + receive + ack of the same messages: n / (time to send n + time to receive n)
                n = recv.messages
                self.figures[f"{prefix}.cycle"] = Figure(f"{prefix}.cycle", label, durability, n,
                                                         send.seconds * n / send.messages + recv.seconds)


# ---------------------------------------------------------------- the floor: pure os calls

_O_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
FLOOR_DURABILITY = {
    "nosync": "no fsync",
    "fsync": "fsync file + target/ per send; processed/ per ack",
    "group100": "fsync each file; target/ once per 100",
}


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def floor(bench: Bench, mode: str, round_: int) -> None:
    """create/write/close/rename (send), rename (claim), rename (ack) per message."""
    base = bench.root / f"floor-{mode}-{round_}"
    dirs = {d: str(base / d) for d in ("working", "target", "processing", "processed")}
    for d in dirs.values():
        os.makedirs(d)
    work, target, proc, done = dirs["working"], dirs["target"], dirs["processing"], dirs["processed"]
    body, sync = bench.body, mode != "nosync"
    stamp = time.time_ns() // 1_000_000
    i = 0
    with bench.timer(f"floor {mode}: send") as t:
        while t.more():
            n = BATCH if mode == "group100" else 1
            names = [f"ID:{stamp}{i + k:06d}-{(i + k) * 7919 % 10**10:010d}" for k in range(n)]
            for name in names:
                fd = os.open(f"{work}/{name}", _O_CREATE, 0o644)
                os.write(fd, body)
                if sync:
                    os.fsync(fd)
                os.close(fd)
            for name in names:
                os.rename(f"{work}/{name}", f"{target}/{name}")
            if sync:
                _fsync_dir(target)
            i += n
            t.done(n)
    sent = bench.record(f"floor.{mode}.send", f"floor {mode}: send", FLOOR_DURABILITY[mode], t).messages
    if mode == "group100":
        return
    with bench.timer(f"floor {mode}: claim + ack", limit=sent) as t:
        for name in sorted(os.listdir(target)):
            if not t.more():
                break
            claimed = f"c0000000001~{name}"
            os.rename(f"{target}/{name}", f"{proc}/{claimed}")
            os.rename(f"{proc}/{claimed}", f"{done}/{claimed}")
            if sync:
                _fsync_dir(done)
            t.done()
    bench.record(f"floor.{mode}.receive", f"floor {mode}: claim + ack", FLOOR_DURABILITY[mode], t)


# ---------------------------------------------------------------- the reference implementation


class Reference:
    """The reference implementation's cases, on one connection per round."""

    def __init__(self, bench: Bench, round_: int):
        from dropboxmq.message import DeliveryMode, Queue, TextMessage
        from dropboxmq.session import Connection

        self.bench, self.Queue, self.TextMessage = bench, Queue, TextMessage
        self.P, self.NP = DeliveryMode.PERSISTENT, DeliveryMode.NON_PERSISTENT
        self.conn = Connection(bench.root / f"reference-{round_}", f"bench{round_}")
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
        self.bench.record("ref.persistent.send_many100", label, "fsync each file; target/ once per batch", t)

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
        self.bench.record("ref.persistent.transacted100", label, "group commit through the transaction log", t)


def run_rounds(bench: Bench) -> None:
    """Floor and reference of the same job back to back, the whole sequence ``rounds`` times."""
    for r in range(bench.rounds):
        ref = Reference(bench, r)
        try:
            floor(bench, "nosync", r)
            ref.nonpersistent()
            floor(bench, "fsync", r)
            ref.persistent()
            floor(bench, "group100", r)
            ref.send_many()
            ref.transacted()
        finally:
            ref.close()
    bench.finish()


# ---------------------------------------------------------------- comparisons

#: reference figure -> the floor it is compared with (peers will map onto the same floors)
FLOOR_OF = {
    "ref.persistent.send": "floor.fsync.send",
    "ref.persistent.receive": "floor.fsync.receive",
    "ref.persistent.cycle": "floor.fsync.cycle",
    "ref.nonpersistent.send": "floor.nosync.send",
    "ref.nonpersistent.receive": "floor.nosync.receive",
    "ref.nonpersistent.cycle": "floor.nosync.cycle",
    "ref.persistent.send_many100": "floor.group100.send",
    "ref.persistent.transacted100": "floor.group100.send",
}

#: (key, numerator, denominator, description, goal from issue 6 or None)
RATIOS = [
    ("nonpersistent_cycle_vs_floor", "ref.nonpersistent.cycle", "floor.nosync.cycle",
     "non-persistent full cycle / floor", 0.6),
    ("send_many100_vs_persistent_send", "ref.persistent.send_many100", "ref.persistent.send",
     "send_many(100) / per-message persistent send", 10.0),
    ("transacted100_vs_persistent_send", "ref.persistent.transacted100", "ref.persistent.send",
     "transacted batch of 100 / per-message persistent send", 10.0),
    ("persistent_vs_nonpersistent_send", "ref.persistent.send", "ref.nonpersistent.send",
     "persistent / non-persistent send (cost of durability)", None),
    ("floor_fsync_vs_nosync_send", "floor.fsync.send", "floor.nosync.send",
     "floor: fsync / no-fsync send (the disk's price)", None),
]


def ratios(figures: dict[str, Figure]) -> dict[str, dict]:
    out = {}
    for key, ref in FLOOR_OF.items():
        if key in figures and ref in figures and figures[ref].rate > 0:
            out[f"{key}/floor"] = {"numerator": key, "denominator": ref,
                                   "ratio": round(figures[key].rate / figures[ref].rate, 4)}
    for key, num, den, desc, goal in RATIOS:
        if num in figures and den in figures and figures[den].rate > 0:
            out[key] = {"numerator": num, "denominator": den, "description": desc, "goal": goal,
                        "ratio": round(figures[num].rate / figures[den].rate, 4)}
    return out


def _rate(r: float) -> str:
    return f"{r:,.0f}" if r >= 100 else f"{r:,.1f}"


def render(result: dict, console: Console) -> None:
    figures, all_ratios = result["figures"], result["ratios"]
    table = Table(title=f"dropboxmq bench: {result['body_bytes']}-byte messages, {result['file_system']} "
                        f"under {result['directory']}, {result['cpus']} CPUs", title_justify="left")
    for col in ("reference", "msgs", "msg/s", "floor", "floor msg/s", "ref / floor"):
        table.add_column(col, justify="left" if col in ("reference", "floor") else "right", no_wrap=True)
    order = [k for k in FLOOR_OF if k in figures] + [k for k in figures if k.startswith("ref.") and k not in FLOOR_OF]
    for key in order:
        fig = figures[key]
        floor_key = FLOOR_OF.get(key, "")
        floor_fig = figures.get(floor_key)
        ratio = all_ratios.get(f"{key}/floor", {}).get("ratio")
        table.add_row(fig["label"], str(fig["messages"]), _rate(fig["msg_per_s"]),
                      floor_key.removeprefix("floor.") if floor_fig else "-",
                      _rate(floor_fig["msg_per_s"]) if floor_fig else "-",
                      f"{ratio:.2f}" if ratio is not None else "-")
    console.print(table)
    legend = "; ".join(f"[bold]{mode}[/bold] = {desc}" for mode, desc in FLOOR_DURABILITY.items())
    console.print(f"floor = the same file operations in pure os calls: create O_EXCL, write, close, rename "
                  f"(send), rename (claim), rename (ack); {legend}.  A cycle is send + receive + ack.",
                  highlight=False)

    extra = Table(title="ratios", title_justify="left")
    extra.add_column("comparison", no_wrap=True)
    extra.add_column("ratio", justify="right", no_wrap=True)
    extra.add_column("goal (issue 6)", justify="right", no_wrap=True)
    for key, _, _, desc, goal in RATIOS:
        r = all_ratios.get(key)
        if r is None:
            continue
        met = "" if goal is None else (" [green]met[/green]" if r["ratio"] >= goal else " [red]missed[/red]")
        extra.add_row(desc, f"{r['ratio']:.2f}×", (f"≥ {goal:g}×{met}" if goal is not None else "-"))
    console.print(extra)


# ---------------------------------------------------------------- the run


class RateColumn(ProgressColumn):
    def render(self, task) -> Text:
        if task.finished and task.finished_time:
            speed = task.completed / task.finished_time
        else:
            speed = task.speed
        return Text(f"{speed:>10,.0f} msg/s" if speed else " " * 16, style="progress.data.speed")


def run(messages: int, budget: float, size: int, rounds: int, directory: Path | None, console: Console,
        keep: bool = False) -> dict:
    from dropboxmq.store import file_system_type

    base = Path(tempfile.mkdtemp(prefix="dropboxmq-bench-", dir=directory))
    started = time.perf_counter()
    progress = Progress(TextColumn("{task.description:<38}"), BarColumn(), MofNCompleteColumn(),
                        RateColumn(), TimeElapsedColumn(), console=console, transient=False)
    try:
        with progress:
            bench = Bench(base, messages, budget, size, rounds, progress)
            run_rounds(bench)
        fs = file_system_type(base)
    finally:
        if keep:
            console.print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    result = {
        "tool": "dropboxmq.stress.bench",
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": platform.node(), "platform": platform.platform(), "python": platform.python_version(),
        "cpus": os.cpu_count(), "file_system": fs, "directory": str(base.parent),
        "messages_limit": messages, "budget_seconds": budget, "rounds": rounds, "body_bytes": size,
        "wall_seconds": round(time.perf_counter() - started, 3),
        "figures": {k: f.as_dict() for k, f in bench.figures.items()},
        "ratios": ratios(bench.figures),
    }
    return result


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--messages", "-n", type=click.IntRange(BATCH), default=None,
              help="Messages per timed case at most (default 5000; --quick: 200); each case also stops "
                   "at its time budget.")
@click.option("--budget", type=click.FloatRange(0.05), default=None,
              help="Seconds per timed case at most (default 4, which keeps the whole run within about "
                   "a minute even at ~100 fsyncs/s; --quick: 0.3).")
@click.option("--size", type=click.IntRange(0, 1 << 20), default=100, show_default=True,
              help="Body size in bytes.")
@click.option("--rounds", type=click.IntRange(1, 20), default=None,
              help="Repeat the sequence of cases this often, splitting limit and budget, so a change in "
                   "load hits floor and reference alike (default 3; --quick: 1).")
@click.option("--quick", is_flag=True, help="A ~5 s run (few messages, short budgets): a smoke test.")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where to make the temporary root (default: the system temp dir). The file system "
                   "there is what is measured.")
@click.option("--json", "json_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the results here (default: stress/results/bench-<date>.json).")
@click.option("--keep", is_flag=True, help="Keep the temporary root.")
def main(messages, budget, size, rounds, quick, directory, json_file, keep) -> None:
    """Benchmark the reference implementation against the raw syscall floor; print a
    table of rates and ratios and write them as JSON."""
    console = Console(stderr=True)
    out = Console() if sys.stdout.isatty() else Console(width=110)
    if messages is None:
        messages = 200 if quick else 5000
    if budget is None:
        budget = 0.3 if quick else 4.0
    if rounds is None:
        rounds = 1 if quick else 3
    if directory is not None:
        os.makedirs(directory, exist_ok=True)
    result = run(messages, budget, size, rounds, directory, console, keep)
    render(result, out)
    if json_file is None:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        json_file = RESULTS_DIR / f"bench-{_dt.datetime.now():%Y-%m-%d-%H%M%S}.json"
    json_file.parent.mkdir(parents=True, exist_ok=True)
    json_file.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    out.print(f"results written to {json_file} (whole run {result['wall_seconds']:.1f} s)", highlight=False)


if __name__ == "__main__":
    main()
