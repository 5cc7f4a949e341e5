"""Celery on dropboxmq:// against kombu's filesystem:// (and Redis, when redis-server is installed:
one started here on a Unix socket, no port) with real worker pools.

    python -m dropboxmq_stress.celery_compare [--tasks 200] [--kill-after 60] [--json out.json]

Three runs per transport, each on a fresh directory with real ``celery worker`` processes
(prefork, concurrency 2, ``task_acks_late``, ``task_reject_on_worker_lost``, prefetch 1):

* kill: N tasks; once ``kill_after`` have finished (counted by the files they write) the
  worker's process group is stopped, its in-flight claims listed, and killed -9; a new worker
  finishes the queue and is stopped warm.  Counted: tasks that never ran (lost), tasks that
  ran twice (duplicates), tasks running at the kill, what is left in the queue.
* priority: twenty priority-0 tasks, then five priority-9 ones, all waiting before the worker
  starts: the places of the priority-9 tasks in the order the worker started them.
* latency: one task at a time to an idle worker (concurrency 1): seconds from send to start.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from dropboxmq import codec

TRANSPORTS = ("dropboxmq", "filesystem", "redis")
TASKS_MODULE = "dropboxmq_stress.celery_tasks"
QUEUE = "work"


@dataclass
class Broker:
    kind: str  # "dropboxmq", "filesystem" or "redis"
    dir: Path
    server: subprocess.Popen | None = None  # redis-server, on a Unix socket in dir (no port)

    @property
    def url(self) -> str:
        if self.kind == "redis":
            return f"redis+socket://{self.dir / 'redis.sock'}"
        return f"dropboxmq://{self.dir}" if self.kind == "dropboxmq" else "filesystem://"

    @property
    def fs_folder(self) -> str | None:
        return str(self.dir) if self.kind == "filesystem" else None

    def env(self, out: Path) -> dict[str, str]:
        env = {**os.environ, "CELERY_COMPARE_BROKER": self.url, "CELERY_COMPARE_OUT": str(out)}
        if self.fs_folder is not None:
            env["CELERY_COMPARE_FS_FOLDER"] = self.fs_folder
        return env

    def redis(self) -> Any:
        import redis

        return redis.Redis(unix_socket_path=str(self.dir / "redis.sock"))

    def waiting(self) -> list[str]:
        """Messages of the queue not yet taken by a worker (dropbox: target/; filesystem: the
        folder; redis: the queue's lists, one per priority step)."""
        if self.kind == "dropboxmq":
            return _names(self.dir / QUEUE / "incoming" / "target")
        if self.kind == "redis":
            client = self.redis()
            keys = [k for k in client.keys(QUEUE + "*") if k == QUEUE.encode() or k.startswith(QUEUE.encode() + b"\x06")]
            return [f"{k!r}#{i}" for k in keys for i in range(client.llen(k))]
        return [n for n in _names(self.dir) if n.endswith(f".{QUEUE}.msg")]

    def in_flight(self) -> list[str]:
        """Messages taken and not acknowledged (dropbox: processing/; redis: its unacked hash;
        kombu's filesystem transport keeps none: it deletes the file as it hands the message over)."""
        if self.kind == "redis":
            return sorted(json.loads(v)[0]["headers"]["id"] for v in self.redis().hvals("unacked"))
        return _names(self.dir / QUEUE / "incoming" / "processing") if self.kind == "dropboxmq" else []

    def in_flight_tasks(self) -> list[str]:
        return sorted(task_name_of(n) for n in self.in_flight()) if self.kind == "dropboxmq" else self.in_flight()

    def acknowledged(self) -> list[str]:
        return _names(self.dir / QUEUE / "incoming" / "processed") if self.kind == "dropboxmq" else []

    def close(self) -> None:
        if self.server is not None:
            self.server.terminate()
            self.server.wait(30)


def _names(path: Path) -> list[str]:
    try:
        return sorted(n for n in os.listdir(path) if not n.startswith("."))
    except FileNotFoundError:
        return []


def broker(kind: str, base: Path) -> Broker:
    if kind not in TRANSPORTS:
        raise ValueError(f"transport {kind!r}: one of {', '.join(TRANSPORTS)}")
    path = base / f"{kind}-broker"
    path.mkdir(parents=True, exist_ok=True)
    if kind == "filesystem":
        (base / f"{kind}-broker-control").mkdir(exist_ok=True)
    if kind != "redis":
        return Broker(kind, path)
    log = open(path / "redis.log", "ab")
    server = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", str(path / "redis.sock"),
                               "--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--dir", str(path)],
                              stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    b = Broker(kind, path, server)
    try:
        wait_for(lambda: (path / "redis.sock").exists(), 30, "redis-server's socket")
    except TimeoutError:
        b.close()
        raise
    return b


def redis_available() -> bool:
    import importlib.util
    import shutil

    return shutil.which("redis-server") is not None and importlib.util.find_spec("redis") is not None


def task_name_of(dropbox_name: str) -> str:
    """The Celery task id (= the task's name here) in a processing/ or target/ file name: the
    transport writes it as the message's correlation id."""
    if "~" in dropbox_name:
        dropbox_name = codec.split_processing_name(dropbox_name)[1]
    return codec.from_wire(dropbox_name).correlation_id or "?"


def delivery_count_of(dropbox_name: str) -> int:
    if "~" in dropbox_name:
        return codec.from_wire(codec.split_processing_name(dropbox_name)[1], claimed=True).delivery_count
    return codec.from_wire(dropbox_name).delivery_count


class Worker:
    """``celery worker`` in its own process group (prefork pool: a parent and its children)."""

    def __init__(self, b: Broker, out: Path, concurrency: int = 2, label: str = "worker"):
        self.log_path = out / f"{label}.log"
        self.log = open(self.log_path, "ab")
        cmd = [sys.executable, "-m", "celery", "-A", TASKS_MODULE, "worker", "-P", "prefork", "-c", str(concurrency),
               "-n", f"{label}-{os.getpid()}-{time.monotonic_ns()}@%h", "-Q", QUEUE, "-l", "info",
               "--without-mingle", "--without-gossip", "--without-heartbeat"]
        self.proc = subprocess.Popen(cmd, env=b.env(out), stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def stop_group(self) -> None:
        """SIGSTOP the whole group: what it holds stays as it is while we look."""
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def kill_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.log.close()

    def stop_warm(self, timeout: float = 60.0) -> int | None:
        """SIGTERM to the main process: Celery's warm shutdown (running tasks finish)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc: int | None = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = None
        self.kill_group()  # stragglers (and a worker that did not stop in time)
        return rc

    def tail(self, n: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-n:]


def wait_for(condition: Callable[[], bool], timeout: float, what: str, worker: Worker | None = None) -> None:
    """Wait (with a deadline) until ``condition()`` holds; a dead worker ends the wait early."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while not condition():
        if worker is not None and worker.proc.poll() is not None:
            raise RuntimeError(f"the worker exited ({worker.proc.returncode}) while waiting for {what}:\n"
                               + worker.tail())
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:g} s" + (f":\n{worker.tail()}" if worker else ""))
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def runs(out: Path, kind: str) -> dict[str, int]:
    """How many times each task name ran to its end (``done``) or began (``started``)."""
    counted: dict[str, int] = {}
    for n in _names(out / kind):
        name = n.rsplit("~", 1)[0]
        counted[name] = counted.get(name, 0) + 1
    return counted


def has_run(out: Path, name: str) -> bool:
    return name in runs(out, "done")


def order(out: Path) -> list[str]:
    try:
        return [line.split()[0] for line in (out / "order.log").read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


def send(b: Broker, calls: list[dict], task: str = "record") -> None:
    """Send tasks through Celery (``send_task`` keyword arguments each), then close the producer."""
    from .celery_tasks import make_app

    app = make_app(b.url, b.fs_folder)
    try:
        for call in calls:
            app.send_task(task, **call)
    finally:
        app.close()


@dataclass
class KillResult:
    transport: str
    tasks: int
    done_before_kill: int
    running_at_kill: list[str]  # started, not done, when the group was stopped
    in_flight_at_kill: list[str]  # claimed and unacknowledged then (dropbox: processing/)
    ran: int  # tasks that ran to their end at least once
    lost: list[str]  # never ran to their end
    duplicates: list[str]  # ran to their end more than once
    restarted: list[str]  # began more than once (a run cut by the kill, then a full one)
    redelivered: list[str]  # acknowledged with JMSXDeliveryCount >= 2 (dropbox: the name says so)
    left_waiting: int  # after the warm shutdown of the second worker
    left_in_flight: int
    acknowledged: int
    warm_exit: int | None
    seconds: float
    notes: list[str] = field(default_factory=list)


def kill_run(kind: str, base: Path, tasks: int = 200, kill_after: int = 60, work: float = 0.1,
             timeout: float = 120.0) -> KillResult:
    started_at = time.monotonic()
    b, out = broker(kind, base), base / f"{kind}-out"
    try:
        out.mkdir(parents=True, exist_ok=True)
        names = [f"t{i:03d}" for i in range(tasks)]
        send(b, [{"args": [n, work], "task_id": n} for n in names])
        first = Worker(b, out, label="first")
        try:
            def mid_task() -> bool:  # past kill_after tasks done, and some task between its start and its end
                done = runs(out, "done")
                return sum(done.values()) >= kill_after and bool(set(runs(out, "started")) - set(done))
            wait_for(mid_task, timeout, f"{kill_after} tasks done and one running", first)
            first.stop_group()
            done = runs(out, "done")
            running = sorted(set(runs(out, "started")) - set(done))
            in_flight = b.in_flight_tasks()
        finally:
            first.kill_group()
        killed_runs = sum(runs(out, "started").values()) - sum(runs(out, "done").values())  # will never end
        second = Worker(b, out, label="second")
        notes = []
        try:
            def settled() -> bool:  # nothing waiting, nothing claimed, no task between start and end
                started, finished = runs(out, "started"), runs(out, "done")
                return not b.waiting() and not b.in_flight() \
                    and sum(started.values()) - killed_runs == sum(finished.values()) \
                    and (kind != "dropboxmq" or set(finished) >= set(names))
            wait_for(settled, timeout, "a drained queue", second)
        except TimeoutError as exc:
            notes.append(str(exc).splitlines()[0])
        warm_exit = second.stop_warm()
        finished = runs(out, "done")
        return KillResult(
            transport=kind, tasks=tasks, done_before_kill=sum(done.values()), running_at_kill=running,
            in_flight_at_kill=in_flight, ran=sum(1 for n in names if n in finished),
            lost=[n for n in names if n not in finished], duplicates=sorted(n for n, k in finished.items() if k > 1),
            restarted=sorted(n for n, k in runs(out, "started").items() if k > 1),
            redelivered=sorted(task_name_of(n) for n in b.acknowledged() if delivery_count_of(n) >= 2),
            left_waiting=len(b.waiting()), left_in_flight=len(b.in_flight()), acknowledged=len(b.acknowledged()),
            warm_exit=warm_exit, seconds=round(time.monotonic() - started_at, 1), notes=notes)
    finally:
        b.close()


@dataclass
class PriorityResult:
    transport: str
    order: list[str]
    high_positions: list[int]  # 1-based places of the priority-9 tasks in the start order
    countdown_delay: float | None  # seconds from send to start of a countdown=3 task (None: not sent)
    countdown_held_ms: int | None  # dropbox: its delivery time minus its send time, from its name


def priority_run(kind: str, base: Path, low: int = 20, high: int = 5, countdown: float | None = 3.0,
                 timeout: float = 60.0) -> PriorityResult:
    b, out = broker(kind, base), base / f"{kind}-out"
    try:
        out.mkdir(parents=True, exist_ok=True)
        calls = [{"args": [f"p0-{i:02d}", 0.02], "task_id": f"p0-{i:02d}", "priority": 0} for i in range(low)]
        calls += [{"args": [f"p9-{i:02d}", 0.02], "task_id": f"p9-{i:02d}", "priority": 9} for i in range(high)]
        send(b, calls)
        sent = time.time()
        if countdown is not None:
            send(b, [{"args": ["countdown", 0], "task_id": "countdown", "countdown": countdown}])
        worker = Worker(b, out, label="priority")
        try:
            expected = low + high + (countdown is not None)
            wait_for(lambda: sum(runs(out, "done").values()) >= expected, timeout, f"{expected} tasks done", worker)
        finally:
            worker.stop_warm()
        started = order(out)
        delay = None
        if countdown is not None:
            began = [float(line.split()[1]) for line in (out / "order.log").read_text().splitlines()
                     if line.startswith("countdown ")]
            delay = round(began[0] - sent, 3) if began else None
        held = None
        for n in b.acknowledged():
            if task_name_of(n) == "countdown":
                header = codec.from_wire(codec.split_processing_name(n)[1], 0)
                held = header.delivery_time - header.timestamp
        ranked = [n for n in started if n != "countdown"]
        return PriorityResult(kind, started, [i + 1 for i, n in enumerate(ranked) if n.startswith("p9-")], delay, held)
    finally:
        b.close()


@dataclass
class LatencyResult:
    transport: str
    tasks: int
    mean_seconds: float
    max_seconds: float


def latency_run(kind: str, base: Path, tasks: int = 10, timeout: float = 60.0) -> LatencyResult:
    """One task at a time to an idle worker (concurrency 1, prefetch 1): send -> start."""
    b, out = broker(kind, base), base / f"{kind}-out"
    try:
        out.mkdir(parents=True, exist_ok=True)
        worker = Worker(b, out, concurrency=1, label="latency")
        from .celery_tasks import make_app

        app = make_app(b.url, b.fs_folder)
        delays = []
        try:
            app.send_task("record", args=["warm-up", 0], task_id="warm-up")
            wait_for(lambda: "warm-up" in runs(out, "done"), timeout, "the warm-up task", worker)
            for i in range(tasks):
                name = f"l{i:02d}"
                sent = time.time()
                app.send_task("record", args=[name, 0], task_id=name)
                wait_for(functools.partial(has_run, out, name), timeout, f"task {name}", worker)
                line = next(x for x in (out / "order.log").read_text().splitlines() if x.startswith(name + " "))
                delays.append(float(line.split()[1]) - sent)
        finally:
            app.close()
            worker.stop_warm()
        return LatencyResult(kind, tasks, round(sum(delays) / len(delays), 3), round(max(delays), 3))
    finally:
        b.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dropboxmq_stress.celery_compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transport", action="append", choices=TRANSPORTS,
                        help="(repeatable; default: all, redis when redis-server and the redis package are there)")
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--kill-after", type=int, default=60)
    parser.add_argument("--latency-tasks", type=int, default=10)
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)
    results: dict[str, dict] = {}
    for kind in args.transport or [k for k in TRANSPORTS if k != "redis" or redis_available()]:
        with tempfile.TemporaryDirectory(prefix=f"celery-{kind}-") as tmp:
            base = Path(tmp)
            kill = kill_run(kind, base / "kill", args.tasks, args.kill_after)
            prio = priority_run(kind, base / "priority")
            lat = latency_run(kind, base / "latency", args.latency_tasks)
        results[kind] = {"kill": asdict(kill), "priority": asdict(prio), "latency": asdict(lat)}
        if kill.notes:
            print(f"{kind}: " + "; ".join(kill.notes))
        print(f"{kind}: {args.tasks} tasks, killed -9 after {kill.done_before_kill} done: ran {kill.ran}, "
              f"lost {len(kill.lost)} {kill.lost}, duplicates {len(kill.duplicates)} {kill.duplicates}, "
              f"running at the kill {kill.running_at_kill}, in flight {kill.in_flight_at_kill}; "
              f"left waiting {kill.left_waiting}, in flight {kill.left_in_flight}")
        print(f"{kind}: priority-9 tasks behind {20} priority-0 ones started at places {prio.high_positions}; "
              f"countdown=3 started after {prio.countdown_delay} s")
        print(f"{kind}: send -> start of one task on an idle worker: mean {lat.mean_seconds} s, max {lat.max_seconds} s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
