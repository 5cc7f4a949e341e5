"""``dropboxmq demo``: several producer and consumer processes on one queue, then an audit.

Each producer sends its share of numbered messages; each consumer receives
until the producers are done and the queue is empty, and reports the
(producer, seq) pairs it processed.  The audit checks every message was
processed exactly once and that nothing is left anywhere but processed/.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import click

from rich.console import Console
from rich.table import Table

from dropboxmq import layout
from dropboxmq.making import ensure_dropbox
from dropboxmq.lifecycle import STATE_DIRS, State
from dropboxmq.message import Queue, TextMessage

__all__ = ["demo", "run_demo"]


def _produce(root: str, queue: str, run: str, index: int, count: int, results) -> None:
    from dropboxmq.connection import Connection

    started = time.perf_counter()
    with Connection(root, create=True) as conn:
        producer = conn.create_session().create_producer(Queue(queue))
        for seq in range(count):
            msg = TextMessage(body=f"message {seq} from producer {index}".encode())
            msg.set_property("run", run)
            msg.set_property("producer", index)
            msg.set_property("seq", seq)
            producer.send(msg, priority=seq % 10)
    results.put(("producer", index, count, time.perf_counter() - started, []))


def _consume(root: str, queue: str, index: int, producers_done, results) -> None:
    from dropboxmq.connection import Connection

    got: list[tuple[str, int, int]] = []  # (run, producer, seq) of each message received
    started = time.perf_counter()
    with Connection(root, create=True) as conn:
        consumer = conn.create_session().create_consumer(Queue(queue))
        while True:
            msg = consumer.receive(0.2)
            if msg is not None:
                got.append((str(msg.get_property("run")), int(msg.get_property("producer", -1)),
                            int(msg.get_property("seq", -1))))
            elif producers_done.is_set():
                if consumer.receive(0.3) is None:  # one last look after the producers finished
                    break
    results.put(("consumer", index, len(got), time.perf_counter() - started, got))


def _collect(results, n: int, tick, workers: list) -> list:
    """n reports from the worker processes, calling ``tick`` while none arrives; a worker that
    died without reporting ends the demo with an error instead of a wait for ever."""
    import queue as queue_module

    got: list[tuple] = []
    while len(got) < n:
        try:
            got.append(results.get(timeout=0.2))
        except queue_module.Empty:
            tick()
            failed = [p for p in workers if p.exitcode not in (None, 0)]
            if failed:
                raise click.ClickException(f"demo: a worker process failed (exit {failed[0].exitcode}); see above") from None
    return got


def run_demo(root: Path, queue: str, producers: int, consumers: int, messages: int, console: Console,
             show_progress: bool = False) -> bool:
    root = Path(root)
    box = ensure_dropbox(layout.queue_box(root, Queue(queue)))
    before = len(box.list(State.ACKNOWLEDGED))
    if box.list(State.NEW) or box.list(State.DELIVERED):
        console.print(f"[yellow]{queue} has waiting messages from an earlier run; they are consumed too[/yellow]")
    run = uuid.uuid4().hex[:8]
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    done = ctx.Event()
    shares = [messages // producers + (1 if i < messages % producers else 0) for i in range(producers)]
    console.print(f"demo: {producers} producers send {messages} persistent messages to queue "
                  f"[bold]{queue}[/bold] under {root}; {consumers} consumers compete for them")
    started = time.perf_counter()
    cons = [ctx.Process(target=_consume, args=(str(root), queue, i, done, results)) for i in range(consumers)]
    prods = [ctx.Process(target=_produce, args=(str(root), queue, run, i, n, results)) for i, n in enumerate(shares)]
    for p in cons + prods:
        p.start()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("processed"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                  transient=True, disable=not show_progress) as progress:
        task = progress.add_task("", total=messages)

        def tick() -> None:
            progress.update(task, completed=len(box.list(State.ACKNOWLEDGED)) - before)

        reports = _collect(results, len(prods), tick, cons + prods)
        done.set()
        reports += _collect(results, len(cons), tick, cons + prods)
    for p in cons + prods:
        p.join()
    elapsed = time.perf_counter() - started

    table = Table(title="what happened")
    for col in ("process", "messages", "seconds", "msg/s"):
        table.add_column(col, justify="right" if col != "process" else "left")
    seen: Counter = Counter()
    for role, index, count, secs, got in sorted(reports):
        table.add_row(f"{role} {index}", str(count), f"{secs:.2f}", f"{count / secs:,.0f}" if secs else "-")
        seen.update(tuple(x) for x in got)
    console.print(table)

    expected = {(run, p, s) for p, n in enumerate(shares) for s in range(n)}
    duplicated = sum(c - 1 for c in seen.values() if c > 1)
    lost = len(expected - seen.keys())
    unexpected = len({k for k in seen if k[0] == run} - expected)
    earlier = sum(c for k, c in seen.items() if k[0] != run)
    counts = {d: len(box.list(State(d))) for d in STATE_DIRS}
    processed_now = counts["processed"] - before
    console.print(f"sent {sum(shares)}, processed {sum(seen.values())} in {elapsed:.2f} s "
                  f"({sum(seen.values()) / elapsed:,.0f} msg/s end to end)")
    if earlier:
        console.print(f"({earlier} messages left over from earlier runs were consumed too)")
    console.print(f"lost {lost}, duplicated {duplicated}, unexpected {unexpected}; "
                  f"files now: " + ", ".join(f"{d}/ {n}" for d, n in counts.items()))
    ok = lost == 0 and duplicated == 0 and unexpected == 0 and processed_now >= len(expected) \
        and counts["processing"] == 0
    console.print("[green]OK: every message processed exactly once[/green]" if ok
                  else "[red]FAILED: see the figures above[/red]")
    return ok


@click.command("demo")
@click.option("--producers", default=2, show_default=True, type=click.IntRange(1, 64), help="Producer processes.")
@click.option("--consumers", default=3, show_default=True, type=click.IntRange(1, 64), help="Consumer processes.")
@click.option("--messages", default=2000, show_default=True, type=click.IntRange(1),
              help="Persistent messages to send, shared among the producers.")
@click.option("--queue", default="demo", show_default=True, help="The queue to use (created if needed).")
@click.pass_context
def demo(ctx, producers, consumers, messages, queue) -> None:
    """Send and consume with several processes on one queue and check every message
    was processed exactly once.  Exit status 1 if not."""
    Queue(queue)
    ok = run_demo(ctx.obj["root"], queue, producers, consumers, messages, Console(),
                  show_progress=not ctx.obj["quiet"] and sys.stdout.isatty())
    sys.exit(0 if ok else 1)
