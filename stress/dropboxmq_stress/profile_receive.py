"""Profile the consume path: N AUTO_ACKNOWLEDGE, non-persistent receives under cProfile.

    python -m dropboxmq_stress.profile_receive [-n 20000] [--top 25] [--out FILE]

Sends N non-persistent 100-byte messages (untimed), then profiles ``receive(0)``
until the queue is empty and prints the functions by own time, the calls per
message and the seconds per message (cProfile's overhead included: compare
two profiles with each other, not with ``make bench``).  Deterministic call
counts make it usable on a loaded machine, where wall-clock rates are noise.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import shutil
import tempfile
from pathlib import Path

import click


def profile(messages: int, top: int) -> str:
    from dropboxmq.message import DeliveryMode, Queue, TextMessage
    from dropboxmq.connection import Connection

    root = Path(tempfile.mkdtemp(prefix="dropboxmq-profile-"))
    try:
        with Connection(root, "profiler", create=True) as conn:
            session = conn.create_session()
            producer = session.create_producer(Queue("q"))
            producer.send_many([TextMessage(body=b"x" * 100) for _ in range(messages)],
                               delivery_mode=DeliveryMode.NON_PERSISTENT)
            consumer = session.create_consumer(Queue("q"))
            profiler = cProfile.Profile()
            got = 0
            profiler.enable()
            while consumer.receive(0) is not None:
                got += 1
            profiler.disable()
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        calls = stats.total_calls  # type: ignore[attr-defined]
        seconds = stats.total_tt  # type: ignore[attr-defined]
        out.write(f"{got} receives: {calls} function calls = {calls / max(got, 1):.1f} per message, "
                  f"{seconds:.3f} s under cProfile = {seconds / max(got, 1) * 1e6:.1f} µs per message\n")
        stats.sort_stats("tottime").print_stats(top)
        return out.getvalue()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--messages", "-n", type=click.IntRange(1), default=20000, show_default=True,
              help="Messages sent, then received under the profiler.")
@click.option("--top", type=click.IntRange(1), default=25, show_default=True, help="Functions shown.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the summary here.")
def main(messages: int, top: int, out: Path | None) -> None:
    """Profile N AUTO_ACKNOWLEDGE non-persistent receives (cProfile) and print the summary."""
    text = profile(messages, top)
    click.echo(text)
    if out is not None:
        out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
