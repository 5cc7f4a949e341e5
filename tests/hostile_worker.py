"""Run every verb and API entry point once against a (hostile) root; print a JSON report.

Run by tests/test_hostile_fuzz.py in a child process with a time bound, so that a hang is a
failure and not a stuck suite.  Usage: python hostile_worker.py ROOT.  The report holds the
message ids received and every error raised, with whether it is a documented one
(a DropboxMQError from the API; for the CLI, a clean exit with a status and no traceback)."""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

from click.testing import CliRunner

from dropboxmq.cli import main as cli
from dropboxmq.distributor import distribute
from dropboxmq.errors import DropboxMQError
from dropboxmq.message import Queue, TextMessage, Topic
from dropboxmq.recovery import recover
from dropboxmq.session import CLIENT_ACKNOWLEDGE, Connection, Settings

FAST = Settings(poll_interval=0.005, scan_interval=0.01, recovery_interval=0.0)


def main(root: Path) -> dict:
    report: dict = {"received": [], "published": [], "errors": []}

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
                report["received"].append(m.message_id)
            tx.commit()
            client = conn.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
            consumer = client.create_consumer(Queue("q"))
            while (m := consumer.receive(timeout=0)) is not None:
                report["received"].append(m.message_id)
            client.acknowledge()

    def drain_subscription() -> None:
        with Connection(root, client_id="c", settings=FAST, create=True) as conn:
            consumer = conn.create_session().create_durable_consumer(Topic("t"), "s")
            while (m := consumer.receive(timeout=0)) is not None:
                report["received"].append(m.message_id)

    def publish() -> None:
        with Connection(root, settings=FAST, create=True) as conn:
            msg = TextMessage(body=b"published by the worker")
            conn.create_session().create_producer(Topic("t")).send(msg)
            report["published"].append(msg.message_id)

    def browse_api() -> None:
        with Connection(root, settings=FAST, create=True) as conn:
            for name in ("q", "h"):
                list(conn.create_session().create_browser(Queue(name)))

    verb("stat")
    verb("stat", "--json")
    verb("browse", "q")
    verb("browse", "h", "--json")
    verb("xa", "list")
    verb("audit", "--json")
    api("browse (API)", browse_api)
    api("recover (API)", lambda: recover(root))
    api("recover --assume-unknown-dead (API)", lambda: recover(root, orphan_age=0, assume_unknown_dead=True))
    verb("recover")
    api("distribute (API)", lambda: distribute(root, settings=FAST))
    verb("distribute")
    api("publish (API)", publish)
    verb("publish", "t", "from the CLI")
    api("receive q (API)", drain_queue)
    api("receive subscription (API)", drain_subscription)
    verb("receive", "h", "--count", "5", "--timeout", "0")
    received = verb("receive", "q", "-n", "0", "--json")
    for line in received.stdout.splitlines():
        if line.startswith("{"):
            report["received"].append(json.loads(line)["id"])
    verb("purge", "h", "--yes", "--state", "target", "--state", "error")
    verb("stat")
    return report


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
