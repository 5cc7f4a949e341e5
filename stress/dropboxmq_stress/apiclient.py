"""One client process of the model-based API tester (``apitester``), driven over a pipe.

Usage: ``python -m dropboxmq_stress.apiclient ROOT CLIENT_ID MAX_ATTEMPTS``.  The parent writes one
JSON command a line on standard input; for each, this process first answers ``{"started": true}``
(so that the parent can kill it while the command runs) and then the outcome: ``{"ok": true, ...}``
or ``{"error": ..., "documented": bool}`` (documented = a ``DropboxMQError``, the library's own
one-line errors; anything else is a defect the tester reports).  Everything it does goes through
the public API of ``dropboxmq``.
"""

from __future__ import annotations

import json
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from dropboxmq import (AUTO_ACKNOWLEDGE, CLIENT_ACKNOWLEDGE, DUPS_OK_ACKNOWLEDGE, Connection, DeliveryMode,
                       DropboxMQError, Message, Queue, Settings, TextMessage, Topic)

__all__ = ["MODES", "PLANT_ENV", "client_settings", "describe", "Client", "plant_bug", "main"]

MODES = {"auto": AUTO_ACKNOWLEDGE, "client": CLIENT_ACKNOWLEDGE, "dups": DUPS_OK_ACKNOWLEDGE}


def client_settings(max_attempts: int) -> Settings:
    # recovery at every claim and no redelivery back-off: a step's outcome depends on the
    # program, not on how long the steps before it took
    return Settings(max_delivery_attempts=max_attempts, poll_interval=0.005, scan_interval=0.0,
                    recovery_interval=0.0, redelivery_delay=0.0, dups_ok_batch=3)


def describe(msg: Message) -> dict[str, Any]:
    body = msg.body if isinstance(msg.body, (bytes, bytearray)) else b""
    return {"id": msg.message_id, "redelivered": msg.redelivered, "count": msg.delivery_count,
            "body": bytes(body).decode("latin-1"), "priority": msg.priority, "expiration": msg.expiration,
            "delivery_time": msg.delivery_time}


class Client:
    def __init__(self, root: Path, client_id: str, max_attempts: int):
        self.root, self.client_id, self.settings = root, client_id, client_settings(max_attempts)
        self.conn: Connection | None = None
        self.sessions: dict[int, Any] = {}
        self.consumers: dict[int, Any] = {}

    def op_connect(self, cmd: dict) -> dict:
        self.conn = Connection(self.root, client_id=self.client_id, settings=self.settings, create=True)
        return {}

    def op_session(self, cmd: dict) -> dict:
        assert self.conn is not None
        mode = cmd["mode"]
        self.sessions[cmd["sid"]] = (self.conn.create_session(transacted=True) if mode == "tx"
                                     else self.conn.create_session(ack_mode=MODES[mode]))
        return {}

    def op_consumer(self, cmd: dict) -> dict:
        session, kind, dest = self.sessions[cmd["sid"]], cmd["kind"], cmd["dest"]
        selector = cmd.get("selector")
        if kind == "queue":
            consumer = session.create_consumer(Queue(dest))
        elif kind == "nondurable":
            consumer = session.create_consumer(Topic(dest), selector, cmd.get("no_local", False))
        elif kind == "durable":
            consumer = session.create_durable_consumer(Topic(dest), cmd["sub"], selector, cmd.get("no_local", False))
        elif kind == "shared":
            consumer = session.create_shared_consumer(Topic(dest), cmd["sub"], selector)
        else:
            consumer = session.create_shared_durable_consumer(Topic(dest), cmd["sub"], selector)
        self.consumers[cmd["cid"]] = consumer
        return {"box": str(Path(consumer.box.path).relative_to(self.root))}

    def op_send(self, cmd: dict) -> dict:
        session = self.sessions[cmd["sid"]]
        dest = Queue(cmd["dest"]) if cmd["dest_kind"] == "queue" else Topic(cmd["dest"])
        msg = TextMessage(cmd["body"])
        msg.set_property("n", cmd["n"])
        mode = DeliveryMode.PERSISTENT if cmd["persistent"] else DeliveryMode.NON_PERSISTENT
        session.create_producer().send(msg, dest, delivery_mode=mode, priority=cmd["priority"],
                                       time_to_live=cmd["ttl"], delivery_delay=cmd["delay"])
        return {"id": msg.message_id, "expiration": msg.expiration, "delivery_time": msg.delivery_time}

    def op_receive(self, cmd: dict) -> dict:
        msg = self.consumers[cmd["cid"]].receive(cmd["timeout"])
        return {"msg": None if msg is None else describe(msg)}

    def op_listen(self, cmd: dict) -> dict:
        """A listener that raises on its first ``failures`` calls and returns normally on the
        next one, unsetting itself there (in the dispatcher's own thread: no race with a claim)."""
        consumer = self.consumers[cmd["cid"]]
        calls: list[dict] = []
        done = threading.Event()

        def listener(msg: Message) -> None:
            calls.append(describe(msg))
            if len(calls) <= cmd["failures"]:
                raise RuntimeError("the tester's listener fails on purpose")
            consumer.set_message_listener(None)
            done.set()

        consumer.set_message_listener(listener)
        finished = done.wait(cmd["timeout"])
        return {"calls": calls, "finished": finished}

    def op_acknowledge(self, cmd: dict) -> dict:
        self.sessions[cmd["sid"]].acknowledge()
        return {}

    def op_recover(self, cmd: dict) -> dict:
        self.sessions[cmd["sid"]].recover()
        return {}

    def op_commit(self, cmd: dict) -> dict:
        self.sessions[cmd["sid"]].commit()
        return {}

    def op_rollback(self, cmd: dict) -> dict:
        self.sessions[cmd["sid"]].rollback()
        return {}

    def op_close_session(self, cmd: dict) -> dict:
        self.sessions.pop(cmd["sid"]).close()
        return {}

    def op_close_consumer(self, cmd: dict) -> dict:
        self.consumers.pop(cmd["cid"]).close()
        return {}

    def op_unsubscribe(self, cmd: dict) -> dict:
        self.sessions[cmd["sid"]].unsubscribe(cmd["sub"])
        return {}

    def op_cli(self, cmd: dict) -> dict:
        """One CLI invocation, in this process (an interpreter start per run would cost more than
        the rest of a program): its exit status and output, and a traceback if it raised."""
        from click.testing import CliRunner

        from dropboxmq.cli import main as cli

        result = CliRunner().invoke(cli, ["--root", str(self.root), *cmd["args"]])
        crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
        return {"status": result.exit_code, "stdout": result.stdout, "stderr": result.stderr,
                "traceback": "".join(traceback.format_exception(result.exception)) if crashed else ""}

    def op_close(self, cmd: dict) -> dict:
        if self.conn is not None:
            self.conn.close()
        return {}

    def handle(self, cmd: dict) -> dict:
        try:
            return {"ok": True, **getattr(self, "op_" + cmd["op"])(cmd)}
        except DropboxMQError as exc:
            return {"error": f"{type(exc).__name__}: {exc}", "documented": True}
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}", "documented": False, "traceback": traceback.format_exc()}


def plant_bug(name: str) -> None:
    """Break this process's library on purpose (tests/test_api_model.py: the tester must notice).
    ``PLANT_ENV`` names the bug; each one breaks one guarantee of the model."""
    from dropboxmq import MessageConsumer, Session

    if name == "no-redelivered-flag":  # every delivery looks like a first one
        receive = MessageConsumer.receive

        def first_looking(self: Any, timeout: float | None = None) -> Message | None:
            msg = receive(self, timeout)
            if msg is not None:
                msg.redelivered, msg.delivery_count = False, 1
            return msg

        MessageConsumer.receive = first_looking  # type: ignore[method-assign]
    elif name == "acknowledge-acks-nothing":  # acknowledge() returns, the messages stay in processing/
        def acks_nothing(self: Any, *messages: Any) -> None:
            return None

        Session.acknowledge = acks_nothing  # type: ignore[method-assign]
    elif name == "recover-loses-messages":  # recover() deletes what it should put back
        def losing_recover(self: Any, *messages: Any, back_off: bool = False) -> None:
            for path in Path(self.connection.root).glob(f"*/incoming/processing/{self.connection.client_id}~*"):
                path.unlink()

        Session.recover = losing_recover  # type: ignore[method-assign]
    else:
        raise SystemExit(f"unknown planted bug {name!r}")


#: the environment variable that plants a bug in every client process (tests only)
PLANT_ENV = "DROPBOXMQ_APITESTER_PLANT"


def main(argv: list[str]) -> None:
    import os

    if os.environ.get(PLANT_ENV):
        plant_bug(os.environ[PLANT_ENV])
    client = Client(Path(argv[0]), argv[1], int(argv[2]))
    out = sys.stdout
    for line in sys.stdin:
        cmd = json.loads(line)
        out.write('{"started": true}\n')
        out.flush()
        out.write(json.dumps(client.handle(cmd)) + "\n")
        out.flush()
        if cmd["op"] == "close":
            return


if __name__ == "__main__":
    main(sys.argv[1:])
