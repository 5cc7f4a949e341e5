"""Throughput and recovery per file system, two hosts on one root (issue 28; part of ``make bench``).

``python -m dropboxmq_stress.netfs_bench [--fs local moosefs glusterfs sshfs] [--messages 300]
[--json OUT] [--markdown]``

For local disk (the baseline: one directory, both "hosts" use it) and each network file system
(:mod:`netfs`: daemons on loopback, two client mounts of one export playing hosts A and B), with
the library's public API and persistent 100-byte messages, :mod:`multihost`'s processes and
histories:

* send rate: producer p0 on A alone, p1 on B alone, then both at once (aggregate);
* receive + acknowledge rate (CLIENT_ACKNOWLEDGE, one acknowledge per message) of the messages
  just sent: consumer c0 on A alone, c2 on B alone, then both at once;
* recovery time: a backlog sent from A, consumer c0 on A (acknowledging nothing) and c2 on B; c0
  killed -9 once it holds 20 messages, recovery from B: kill to the last of them received on B.

Each phase has its own root (a subdirectory of the mounts); a rate is messages over the span from
the first to the last send (or from the first receive to the last acknowledgement), taken from
the processes' own timestamps, so the driver's polling does not count.  A file system that
cannot be started here (not root, no FUSE, packages missing) is skipped with its reason.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from . import multihost, netfs
from .history import read_history

KINDS = ("local", "moosefs", "glusterfs", "sshfs")
SIZE = 100
PACKAGE = {"moosefs": "moosefs-client", "glusterfs": "glusterfs-client", "sshfs": "sshfs"}
# one process per host and phase: (host index, producer name, consumer name) as multihost names them
HOST_A, HOST_B = (0, "p0", "c0"), (1, "p1", "c2")
PHASES = {"host_a": (HOST_A,), "host_b": (HOST_B,), "aggregate": (HOST_A, HOST_B)}


def unavailable(kind: str) -> str | None:
    return None if kind == "local" else netfs.unavailable(kind)


@contextlib.contextmanager
def started(kind: str) -> Iterator[netfs.NetFS]:
    """The file system with its two hosts' mounts; local: one directory on the local disk, twice."""
    if kind != "local":
        with netfs.start(kind) as fs:
            yield fs
        return
    with tempfile.TemporaryDirectory(prefix="dmq-netfs-bench-local-") as d:
        yield netfs.NetFS(kind="local", work=Path(d), mounts=(Path(d), Path(d)))


def on(fs: netfs.NetFS, sub: str) -> netfs.NetFS:
    """The same file system with both hosts' roots in subdirectory ``sub`` (one root per phase)."""
    return netfs.NetFS(kind=fs.kind, work=fs.work, mounts=(fs.mounts[0] / sub, fs.mounts[1] / sub),
                       procs=fs.procs, servers=fs.servers, mount_points=fs.mount_points)


# ---------------------------------------------------------------- pure: rates from histories


def acknowledged(history: list[dict]) -> int:
    return len({v for r in history if r.get("f") == "ack" and r["type"] == "ok" for v in r["value"]})


def sent(history: list[dict]) -> int:
    return sum(1 for r in history if r.get("f") == "send" and r["type"] == "ok")


def rate(n: int, times: list[float]) -> float | None:
    """``n`` events over the span of ``times`` (None when there is no span to divide by)."""
    span = max(times) - min(times) if len(times) > 1 else 0.0
    return round(n / span, 1) if span > 0 else None


def send_rate(history: list[dict]) -> float | None:
    invoked = [r["t"] for r in history if r.get("f") == "send" and r["type"] == "invoke"]
    oks = [r["t"] for r in history if r.get("f") == "send" and r["type"] == "ok"]
    # from the first send's start to the last send's return: every one of the n sends is inside
    return rate(len(oks), invoked[:1] + oks) if oks else None


def receive_ack_rate(history: list[dict]) -> float | None:
    receives = [r["t"] for r in history if r.get("f") == "receive" and r["type"] == "ok"]
    acks = [r["t"] for r in history if r.get("f") == "ack" and r["type"] == "ok"]
    return rate(acknowledged(history), receives[:1] + acks) if acks and receives else None


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def table(results: list[dict]) -> str:
    """The markdown table: one row per file system (a skipped one says why)."""
    lines = ["| file system | send/s A | send/s B | send/s A+B | receive+ack/s A | receive+ack/s B "
             "| receive+ack/s A+B | recovery after kill -9 on A |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        if r.get("skipped"):
            lines.append(f"| {r['fs']} | skipped: {r['skipped']} |||||||")
            continue
        s, a, rec = r["send_per_s"], r["receive_ack_per_s"], r.get("recovery") or {}
        if rec.get("recovery_time_s") is not None:
            rt = f"{rec['recovery_time_s']:.2f} s ({rec['in_flight_at_kill']} held)"
        else:
            rt = rec.get("note", "n/a")
        incomplete = [p for p, n in r["acknowledged"].items() if n < r["expected"][p]]
        name = r["fs"] + (f" (incomplete: {', '.join(incomplete)})" if incomplete else "")
        lines.append(f"| {name} | {_fmt(s['host_a'])} | {_fmt(s['host_b'])} | {_fmt(s['aggregate'])} "
                     f"| {_fmt(a['host_a'])} | {_fmt(a['host_b'])} | {_fmt(a['aggregate'])} | {rt} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- the driver


def _wait(hist_dir: str, expected: int, what: Any, deadline: float, poll: float = 0.25) -> None:
    """Until ``what(history) >= expected`` or the deadline (the rate is then over what was done)."""
    while time.time() < deadline and what(read_history(hist_dir)) < expected:
        time.sleep(poll)   # polls the histories for the end of the phase; measures nothing


def phase(fs: netfs.NetFS, hosts: tuple[tuple[int, str, str], ...], messages: int, local: str,
          phase_seconds: float) -> tuple[list[dict], list[dict]]:
    """Send ``messages`` from each host, then receive and acknowledge them on the same hosts."""
    from dropboxmq import Connection

    ctx = multiprocessing.get_context("fork")
    mounts = [str(m) for m in fs.mounts]
    with Connection(mounts[0], "init", multihost.settings(), create=True) as c:
        c.create_queue(multihost.QUEUE)
    send_dir, recv_dir = str(Path(local) / "send"), str(Path(local) / "receive")
    producers = [ctx.Process(target=multihost.producer, args=(mounts[i], p, messages, send_dir, SIZE))
                 for i, p, _ in hosts]
    for p in producers:
        p.start()
    for p in producers:
        p.join(phase_seconds)
    stop = multihost.stop_flag(ctx)
    consumers = [ctx.Process(target=multihost.consumer, args=(mounts[i], c, 1, recv_dir, stop)) for i, _, c in hosts]
    for p in consumers:
        p.start()
    _wait(recv_dir, messages * len(hosts), acknowledged, time.time() + phase_seconds)
    stop.value = 1
    for p in producers + consumers:
        p.join(30)
        if p.is_alive():
            p.kill()
            p.join()
    return read_history(send_dir), read_history(recv_dir)


def recover_after_kill(fs: netfs.NetFS, messages: int, local: str, seconds: float, hold: int = 20) -> dict:
    """A backlog of ``messages`` from host A; consumers c0 on A (acknowledging nothing) and c2 on B;
    once c0 holds ``hold`` messages it is killed -9 and recovery runs from B (as `dropboxmq recover`
    would there); the recovery time is :func:`multihost.count`'s: kill to the last of c0's
    messages received on B."""
    from dropboxmq import Connection
    from dropboxmq.recovery import recover

    ctx = multiprocessing.get_context("fork")
    mounts = [str(m) for m in fs.mounts]
    with Connection(mounts[0], "init", multihost.settings(), create=True) as conn:
        conn.create_queue(multihost.QUEUE)
    hist_dir = str(Path(local) / "history")
    multihost.producer(mounts[0], "p0", messages, hist_dir, SIZE)
    stop = multihost.stop_flag(ctx)
    c0 = ctx.Process(target=multihost.consumer, args=(mounts[0], "c0", messages + 1, hist_dir, stop))
    c2 = ctx.Process(target=multihost.consumer, args=(mounts[1], "c2", 1, hist_dir, stop))
    c0.start()
    c2.start()
    _wait(hist_dir, hold, lambda h: sum(1 for r in h if r["p"] == "c0" and r.get("f") == "receive"),
          time.time() + seconds, poll=0.02)
    t_kill = time.time()
    c0.kill()
    c0.join()
    t = time.time()
    report = recover(mounts[1])
    recover_s = round(time.time() - t, 3)
    _wait(hist_dir, messages, acknowledged, time.time() + seconds)
    stop.value = 1
    c2.join(30)
    if c2.is_alive():
        c2.kill()
        c2.join()
    c = multihost.count(read_history(hist_dir), {}, "c0", t_kill)
    out = {"recovery_time_s": c["recovery_time_s"], "in_flight_at_kill": c["in_flight_at_kill"],
           "first_recover_s": recover_s, "first_recover": {k: v for k, v in report.as_dict().items() if v},
           "acknowledged": c["acknowledged"], "messages": messages,
           "duplicated_redelivered": c["duplicated_redelivered"], "duplicated_not_flagged": c["duplicated_not_flagged"]}
    if c["recovery_time_s"] is None:
        out["note"] = ("c0 held nothing at the kill" if not c["in_flight_at_kill"]
                       else "not all of c0's messages were delivered again")
    return out


def bench_fs(kind: str, messages: int = 300, recovery_messages: int = 200, phase_seconds: float = 120.0,
             recovery: bool = True) -> dict:
    why = unavailable(kind)
    if why:
        return {"fs": kind, "skipped": why}
    out: dict[str, Any] = {"fs": kind, "messages_per_host": messages, "body_bytes": SIZE,
                           "send_per_s": {}, "receive_ack_per_s": {}, "sent": {}, "acknowledged": {},
                           "expected": {}}
    if kind in PACKAGE:
        out["package"] = _version(PACKAGE[kind])
    t0 = time.time()
    with started(kind) as fs:
        out["start_s"] = round(time.time() - t0, 2)
        for name, hosts in PHASES.items():
            with tempfile.TemporaryDirectory(prefix="dmq-netfs-bench-hist-") as local:
                sends, recvs = phase(on(fs, name), hosts, messages, local, phase_seconds)
            out["send_per_s"][name] = send_rate(sends)
            out["receive_ack_per_s"][name] = receive_ack_rate(recvs)
            out["sent"][name], out["acknowledged"][name] = sent(sends), acknowledged(recvs)
            out["expected"][name] = messages * len(hosts)
        if recovery:
            with tempfile.TemporaryDirectory(prefix="dmq-netfs-bench-hist-") as local:
                out["recovery"] = recover_after_kill(on(fs, "recovery"), recovery_messages, local, phase_seconds)
    out["wall_s"] = round(time.time() - t0, 1)
    return out


def _version(pkg: str) -> str | None:
    try:
        return subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg], capture_output=True, text=True,
                              timeout=10).stdout or None
    except (OSError, subprocess.SubprocessError):
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dropboxmq_stress.netfs_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--fs", nargs="+", choices=KINDS, default=list(KINDS))
    ap.add_argument("--messages", type=int, default=300,
                    help="persistent 100-byte messages per host and phase (300: GlusterFS sends ~15-25 a second here)")
    ap.add_argument("--recovery-messages", type=int, default=200, help="the backlog of the kill -9 run")
    ap.add_argument("--phase-seconds", type=float, default=120.0,
                    help="cap per phase; a rate is then over the messages done (the table marks it incomplete)")
    ap.add_argument("--json", type=Path, help="write the results here (default: netfs-bench-<date>.json)")
    a = ap.parse_args(argv)
    started_at = datetime.datetime.now(datetime.timezone.utc)
    results = []
    for kind in a.fs:
        r = bench_fs(kind, a.messages, a.recovery_messages, a.phase_seconds)
        print(f"{kind}: skipped: {r['skipped']}" if r.get("skipped") else
              f"{kind}: done in {r['wall_s']} s", file=sys.stderr, flush=True)
        results.append(r)
    load = os.getloadavg()
    doc = {"started": started_at.isoformat(timespec="seconds"), "platform": platform.platform(),
           "python": platform.python_version(), "cpus": os.cpu_count(), "loadavg_at_end": [round(x, 2) for x in load],
           "results": results, "markdown": table(results)}
    path = a.json or Path(f"netfs-bench-{started_at:%Y-%m-%d-%H%M%S}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"Measured {started_at:%Y-%m-%d %H:%M} UTC, {a.messages} persistent {SIZE}-byte messages per host, "
          f"load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} at the end; {path}\n")
    print(doc["markdown"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
