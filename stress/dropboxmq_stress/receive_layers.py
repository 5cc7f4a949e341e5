"""Where a receive's time goes: the consume path built up one layer at a time.

    python -m dropboxmq_stress.receive_layers [--messages 5000] [--rounds 5]

Each layer drains its own backlog of the same non-persistent 100-byte messages, sent by
the reference producer (so the names are the protocol's), doing what the layer below does
plus one thing more.  Rounds are interleaved (every layer once, repeated) and each figure
is the median of its rounds, as in ``make bench``; the listing is inside every timing.

* ``os-paths`` — ``make bench``'s pure-``os`` consumer: list, sort the names as text,
  rename by path into ``processing/``, open + read + close, rename into ``processed/``.
* ``os-dirfd`` — the same, each rename and open relative to a held directory fd.
* ``names`` — plus what the protocol asks of a name: priority order
  (``codec.sort_key``), the decoded message and the delivery count stamped on the claim
  (``codec.claim_reading``), the client-id prefix (``codec.processing_name``).
* ``fstat`` — plus the body read as the library reads it (``store.read_regular_file``:
  fstat, so a FIFO or device planted in the dropbox is never read or delivered).
* ``store`` — the same moves through the library's store: ``decide`` (selector, expiry,
  delivery time, dead-lettering) and ``Dropbox.move`` / ``Dropbox.read`` (the lifecycle
  table, symlink checks, lost races, foreign name clashes).
* ``receive`` — ``MessageConsumer.receive(0)`` in an AUTO_ACKNOWLEDGE session: the session
  lock, the consumer's scanner, recovery timers, the JMS headers and the ack.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import click
from rich.console import Console
from rich.table import Table

from .bench import O_FLOOR_READ

LAYERS = ("os-paths", "os-dirfd", "names", "fstat", "store", "receive")
_DIRS = ("target", "processing", "processed")
_CLIENT = "layers"


def _fill(root: Path, messages: int, size: int):
    """A connection whose queue ``q`` holds ``messages`` non-persistent messages."""
    from dropboxmq.message import DeliveryMode, Queue, TextMessage
    from dropboxmq.connection import Connection

    conn = Connection(root, _CLIENT, create=True)
    session = conn.create_session()
    session.create_producer(Queue("q")).send_many([TextMessage(body=b"x" * size) for _ in range(messages)],
                                                  delivery_mode=DeliveryMode.NON_PERSISTENT)
    return conn, session


def _os_paths(box_path: str) -> int:
    from dropboxmq.store import rename_noreplace

    target, processing, processed = (f"{box_path}/{d}" for d in _DIRS)
    got = 0
    for name in sorted(os.listdir(target)):
        claimed = f"{_CLIENT}~{name}"
        rename_noreplace(f"{target}/{name}", f"{processing}/{claimed}")
        fd = os.open(f"{processing}/{claimed}", O_FLOOR_READ)
        os.read(fd, 65536)
        os.close(fd)
        rename_noreplace(f"{processing}/{claimed}", f"{processed}/{claimed}")
        got += 1
    return got


def _by_fd(box_path: str, level: str) -> int:
    from dropboxmq import codec
    from dropboxmq.store import read_regular_file, rename_noreplace

    fds = [os.open(f"{box_path}/{d}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) for d in _DIRS]
    target, processing, processed = fds
    got = 0
    try:
        if level == "os-dirfd":
            names = sorted(os.listdir(target))
        else:
            names = sorted(os.listdir(target), key=codec.sort_key)
        for name in names:
            if level == "os-dirfd":
                claimed = f"{_CLIENT}~{name}"
            else:
                claimed = codec.processing_name(_CLIENT, codec.claim_reading(name, 0)[1])
            rename_noreplace(name, claimed, target, processing)
            if level == "fstat":
                read_regular_file(claimed, processing)
            else:
                fd = os.open(claimed, O_FLOOR_READ, dir_fd=processing)
                os.read(fd, 65536)
                os.close(fd)
            rename_noreplace(claimed, claimed, processing, processed)
            got += 1
    finally:
        for fd in fds:
            os.close(fd)
    return got


def _store(box_path: str) -> int:
    from dropboxmq import codec
    from dropboxmq.decision import ClaimSettings, Verdict, decide
    from dropboxmq.lifecycle import Move, State
    from dropboxmq.store import Dropbox

    box = Dropbox(box_path)
    box.hold_dirs()
    settings = ClaimSettings()
    got = 0
    try:
        for name in sorted(box.list(State.NEW), key=codec.sort_key):
            d = decide(name, 0, settings)
            assert d.verdict is Verdict.CLAIM, name
            pname = codec.processing_name(_CLIENT, d.claimed_name)
            box.move(Move.CLAIM, State.NEW, name, pname)
            d.header.body = box.read(State.DELIVERED, pname)
            box.move(Move.ACK, State.DELIVERED, pname)
            got += 1
    finally:
        box.close()
    return got


def _receive(session) -> int:
    from dropboxmq.message import Queue

    got = 0
    with session.create_consumer(Queue("q")) as consumer:
        while consumer.receive(0) is not None:
            got += 1
    return got


#: layer -> drain(dropbox path, session): drains queue ``q``, returns the messages it consumed
LAYER_DRAINS: dict[str, Callable[[str, Any], int]] = {
    "os-paths": lambda box_path, _: _os_paths(box_path),
    "os-dirfd": lambda box_path, _: _by_fd(box_path, "os-dirfd"),
    "names": lambda box_path, _: _by_fd(box_path, "names"),
    "fstat": lambda box_path, _: _by_fd(box_path, "fstat"),
    "store": lambda box_path, _: _store(box_path),
    "receive": lambda _, session: _receive(session),
}


def run_layer(layer: str, root: Path, messages: int, size: int,
              drains: dict[str, Callable[[str, Any], int]] = LAYER_DRAINS) -> float:
    """Seconds per message for ``layer`` draining ``messages`` fresh messages under ``root``."""
    from dropboxmq import layout
    from dropboxmq.message import Queue

    conn, session = _fill(root, messages, size)
    try:
        box_path = str(layout.queue_box(conn.root, Queue("q")).path)
        drain = drains[layer]
        started = time.perf_counter()
        got = drain(box_path, session)
        seconds = time.perf_counter() - started
    finally:
        conn.close()
        shutil.rmtree(root, ignore_errors=True)
    if got != messages:
        raise RuntimeError(f"layer {layer} drained {got} of {messages} messages")
    return seconds / messages


def measure(messages: int, rounds: int, size: int = 100, workdir: Path | None = None) -> dict[str, float]:
    """Median seconds per message of every layer over ``rounds`` interleaved rounds."""
    per_round: dict[str, list[float]] = {layer: [] for layer in LAYERS}
    base = Path(tempfile.mkdtemp(prefix="dropboxmq-layers-", dir=workdir))
    try:
        for r in range(rounds):
            for layer in LAYERS:
                per_round[layer].append(run_layer(layer, base / f"{layer}-{r}", messages, size))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return {layer: statistics.median(v) for layer, v in per_round.items()}


def table(result: dict[str, float]) -> Table:
    t = Table(title="a receive, layer by layer (µs a message, median of rounds)")
    for column in ("layer", "µs", "added", "pure-os / layer"):
        t.add_column(column, justify="left" if column == "layer" else "right")
    previous = None
    for layer in LAYERS:
        us = result[layer] * 1e6
        added = "" if previous is None else f"{us - previous:+.1f}"
        t.add_row(layer, f"{us:.1f}", added, f"{result['os-paths'] / result[layer]:.2f}")
        previous = us
    return t


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--messages", "-n", type=click.IntRange(1), default=5000, show_default=True,
              help="Messages each layer drains per round.")
@click.option("--rounds", "-r", type=click.IntRange(1), default=5, show_default=True,
              help="Interleaved rounds; each figure is the median.")
@click.option("--dir", "workdir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Where the temporary dropboxes go (default: the system's temp directory).")
def main(messages: int, rounds: int, workdir: Path | None) -> None:
    """Time the consume path one layer at a time (see the module docstring)."""
    Console().print(table(measure(messages, rounds, workdir=workdir)))


if __name__ == "__main__":
    main()
