"""Run every verb and API entry point once against a (hostile) root; print a JSON report.

Run by tests/test_hostile_fuzz.py in a child process with a time bound, so that a hang is a
failure and not a stuck suite.  Usage: python hostile_worker.py ROOT OUTPUT_DIR.  The verbs and
entry points are those dropboxmq_stress.hostile lists (CLI_VERBS, API_STEPS: its coverage table).  The report holds the
message ids received and every error raised, with whether it is a documented one
(a DropboxMQError from the API; for the CLI, a clean exit with a status and no traceback), and per
step what it cost: ``read`` (bytes read by the whole process: /proc/self/io's rchar delta), ``peak``
(resident memory's peak over the step above where it started: VmHWM, reset through
/proc/self/clear_refs, less VmRSS before) and ``delivered`` (message bodies the step legitimately
holds or prints: the bodies it received or browsed, the CLI's output and the files it wrote)."""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

from click.testing import CliRunner

from dropboxmq.cli import main as cli
from dropboxmq.distributor import distribute
from dropboxmq.errors import DropboxMQError
from dropboxmq.message import Queue, TextMessage, Topic
from dropboxmq.recovery import recover
from dropboxmq.retention import prune
from dropboxmq.ackmode import CLIENT_ACKNOWLEDGE
from dropboxmq.connection import Connection, Settings
from dropboxmq.store import Dropbox
from dropboxmq_stress.hostile import API_STEPS, CLI_VERBS

FAST = Settings(poll_interval=0.005, scan_interval=0.01, recovery_interval=0.0)


def _proc(path: str, key: bytes) -> int:
    """A number of /proc/self/io or /proc/self/status (``key:`` first on its line; kB there)."""
    with open(path, "rb") as f:
        for line in f:
            if line.startswith(key + b":"):
                return int(line.split()[1]) * (1024 if path.endswith("status") else 1)
    raise KeyError(key)


class Cost:
    """What one step reads and how far its resident memory peaks (Linux: /proc)."""

    def __enter__(self) -> "Cost":
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM := VmRSS (Linux >= 4.0): the peak from here on is this step's
        self.rss = _proc("/proc/self/status", b"VmRSS")
        self.rchar = _proc("/proc/self/io", b"rchar")
        return self

    def __exit__(self, *exc) -> None:
        self.read = _proc("/proc/self/io", b"rchar") - self.rchar
        self.peak = max(0, _proc("/proc/self/status", b"VmHWM") - self.rss)


def _size(body) -> int:
    return len(body.encode() if isinstance(body, str) else body or b"")


def _bytes_under(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and not p.is_symlink())


def main(root: Path, output_dir: Path) -> dict:
    report: dict = {"received": [], "published": [], "errors": [], "steps": []}
    delivered = [0]  # bodies the current step received or browsed

    def got(m) -> None:
        report["received"].append(m.message_id)
        delivered[0] += _size(m.body)

    def api(step: str, fn) -> None:
        try:
            fn()
        except DropboxMQError as exc:  # documented: one clear line
            report["errors"].append({"step": step, "error": f"{type(exc).__name__}: {exc}", "documented": True})
        except Exception as exc:
            report["errors"].append({"step": step, "error": f"{type(exc).__name__}: {exc}", "documented": False,
                                     "traceback": traceback.format_exc()})

    def verb(*args: str):
        result = CliRunner().invoke(cli, ["--root", str(root), *args], input="y\n")
        clean = result.exception is None or isinstance(result.exception, SystemExit)
        if not clean or "Traceback" in result.output:
            report["errors"].append({"step": " ".join(args), "error": repr(result.exception), "documented": False,
                                     "traceback": "".join(traceback.format_exception(result.exception))
                                     if result.exception else result.output})
        return result

    def drain_queue() -> None:
        with Connection(root, client_id="fuzz", settings=FAST, create=True) as conn:
            tx = conn.create_session(transacted=True)
            consumer = tx.create_consumer(Queue("q"))
            while (m := consumer.receive(timeout=0)) is not None:
                got(m)
            tx.commit()
            client = conn.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
            consumer = client.create_consumer(Queue("q"))
            while (m := consumer.receive(timeout=0)) is not None:
                got(m)
            client.acknowledge()

    def drain_subscription() -> None:
        with Connection(root, client_id="c", settings=FAST, create=True) as conn:
            consumer = conn.create_session().create_durable_consumer(Topic("t"), "s")
            while (m := consumer.receive(timeout=0)) is not None:
                got(m)

    def publish() -> None:
        with Connection(root, settings=FAST, create=True) as conn:
            msg = TextMessage(body=b"published by the worker")
            conn.create_session().create_producer(Topic("t")).send(msg)
            report["published"].append(msg.message_id)

    def browse_api() -> None:
        with Connection(root, settings=FAST, create=True) as conn:
            for name in ("q", "h"):
                delivered[0] += sum(_size(m.body) for m in conn.create_session().create_browser(Queue(name)))

    def background_tasks() -> None:
        """What a consumer does besides claiming: dead owners' recovery and retention, each receive."""
        background = Settings(poll_interval=0.005, scan_interval=0.0, recovery_interval=0.0, retention=0.0)
        with Connection(root, client_id="fuzz", settings=background) as conn:
            consumer = conn.create_session().create_consumer(Queue("h"))
            while (m := consumer.receive(timeout=0)) is not None:
                got(m)

    def retention_prune() -> None:
        for box in (Dropbox(root / "q" / "incoming"), Dropbox(root / "h" / "incoming")):
            prune(box, ["processed", "expired", "error"], 0)

    def connect_as_planted() -> None:
        for client_id in ("ghost", "c~s~1", "fuzz"):
            with Connection(root, client_id=client_id, settings=FAST):
                pass

    steps = {
        "browse (API)": browse_api,
        "recover (API)": lambda: recover(root),
        "recover --assume-unknown-dead (API)": lambda: recover(root, orphan_age=0, assume_unknown_dead=True),
        "distribute (API)": lambda: distribute(root, settings=FAST),
        "publish (API)": publish,
        "receive q (API)": drain_queue,
        "receive subscription (API)": drain_subscription,
        "consumer background: recovery and retention (API)": background_tasks,
        "retention prune (API)": retention_prune,
        "connect as a planted client id (API)": connect_as_planted,
    }
    assert tuple(steps) == API_STEPS, "hostile.API_STEPS (the coverage table) must list what runs here"
    order = ["stat", "stat --json", "stat --format prometheus", "browse", "browse --json", "browse --state error", "redrive", "xa list", "audit", "browse (API)", "recover (API)",
             "recover --assume-unknown-dead (API)", "recover", "distribute (API)", "distribute", "publish (API)",
             "publish", "init", "send --create", "receive q (API)", "receive subscription (API)",
             "consumer background: recovery and retention (API)", "receive", "receive --json",
             "receive --output-dir", "subscribe", "unsubscribe", "retention prune (API)", "prune",
             "connect as a planted client id (API)", "recover --assume-unknown-dead", "purge", "stat"]
    assert set(order) == set(CLI_VERBS) | set(API_STEPS), "every verb of the coverage table runs"
    for name in order:
        delivered[0] = 0
        if name in steps:
            with Cost() as cost:
                api(name, steps[name])
            report["steps"].append({"step": name, "read": cost.read, "peak": cost.peak, "delivered": delivered[0]})
            continue
        args = tuple(str(output_dir) if a == "OUT" else a for a in CLI_VERBS[name])
        written = _bytes_under(output_dir)
        with Cost() as cost:
            result = verb(*args)
        delivered[0] = len(result.stdout_bytes) + _bytes_under(output_dir) - written
        report["steps"].append({"step": name, "read": cost.read, "peak": cost.peak, "delivered": delivered[0]})
        if name == "receive --json":
            for line in result.stdout.splitlines():
                if line.startswith("{"):
                    report["received"].append(json.loads(line)["id"])
        if name == "subscribe":
            for line in result.stdout.splitlines():
                if line.startswith("ID:"):
                    report["received"].append(line.split()[0])
        if name == "receive --output-dir":
            report["received"] += ["ID:" + os.path.basename(line) for line in result.stdout.splitlines() if line]
    return report


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), Path(sys.argv[2]))))
