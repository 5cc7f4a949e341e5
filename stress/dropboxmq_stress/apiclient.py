"""One client process of the model-based API tester (``apitester``), driven over a pipe.

Usage: ``python -m dropboxmq_stress.apiclient ROOT CLIENT_ID MAX_ATTEMPTS``.  The parent writes one
JSON command a line on standard input; for each, this process first answers ``{"started": true}``
(so that the parent can kill it while the command runs) and then the outcome: ``{"ok": true, ...}``
or ``{"error": ..., "documented": bool}`` (documented = a ``DropboxMQError``, the library's own
one-line errors; anything else is a defect the tester reports).  Everything it does goes through
the public API of ``dropboxmq``.
"""

from __future__ import annotations

import collections
import enum
import json
import logging
import sys
import threading
import traceback
import types
from pathlib import Path, PurePath
from typing import Any

from dropboxmq import (AUTO_ACKNOWLEDGE, CLIENT_ACKNOWLEDGE, DUPS_OK_ACKNOWLEDGE, Connection, DeliveryMode,
                       DropboxMQError, Message, MessageConsumer, Queue, Session, Settings, TextMessage, Topic)

__all__ = ["MODES", "PLANT_ENV", "client_settings", "describe", "held_state", "Client", "plant_bug", "main"]

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


#: values that hold no state of their own: not walked, not counted
_ATOMS = (str, bytes, bytearray, int, float, complex, bool, type(None), PurePath, memoryview, range)
#: what a consumer or a session uses but does not own: code, shared constants, synchronisation,
#: and the objects the other measures are of
_NOT_OWNED = (types.ModuleType, type, enum.Enum, logging.Logger, threading.Thread, threading.Event,
              threading.Condition, type(threading.Lock()), type(threading.RLock()), Connection, Session,
              MessageConsumer, Settings)
_CONTAINERS = (dict, list, tuple, set, frozenset, collections.deque)


def held_state(owner: object, foreign: tuple[object, ...] = ()) -> dict[str, int]:
    """How much state ``owner`` (a live consumer or session) holds: the number of elements of every
    container reachable from it, summed per attribute path (``claimer.skip``, ``unacked[].message
    .properties``: ``[]`` stands for any element of a container).

    The walk is reflective (no private name of the library is imported): from ``owner`` it follows
    each attribute (``__dict__`` and ``__slots__``) and each element of a dict (keys and values),
    list, tuple, set, frozenset or deque, once per object (a cycle or a shared object is counted
    once).  It stops at what the owner uses but does not own: another session or consumer (each has
    its own measure), the connection and its settings, modules, classes, enum members, loggers,
    threads and locks, and anything callable (functions, bound methods, a module-level cache such as
    the selector parser's); strings, numbers and paths are values, counted as one element of their
    container and not walked.  A shared object reached from two owners (a cached selector) is counted
    in both: a constant, which the tester's baseline (the measure at creation) absorbs.  ``foreign``:
    more objects it does not own (a session's deliveries name their consumer's dropbox)."""
    counts: dict[str, int] = {}
    seen = {id(owner), *map(id, foreign)}
    stack: list[tuple[object, str]] = [(owner, "")]
    while stack:
        obj, path = stack.pop()
        if isinstance(obj, _CONTAINERS):
            counts[path or "."] = counts.get(path or ".", 0) + len(obj)
            items = [x for kv in obj.items() for x in kv] if isinstance(obj, dict) else list(obj)
            children = [(x, f"{path}[]") for x in items]
        else:
            names = list(getattr(obj, "__dict__", {}))
            for cls in type(obj).__mro__:
                slots = cls.__dict__.get("__slots__", ())
                names += [slots] if isinstance(slots, str) else list(slots)
            children = [(getattr(obj, n), f"{path}.{n}".lstrip(".")) for n in names
                        if n not in ("__dict__", "__weakref__") and hasattr(obj, n)]
        for child, child_path in children:
            if id(child) in seen or isinstance(child, _ATOMS) or isinstance(child, _NOT_OWNED) or (
                    callable(child) and not isinstance(child, _CONTAINERS)):
                continue
            seen.add(id(child))
            stack.append((child, child_path))
    return counts


class Client:
    def __init__(self, root: Path, client_id: str, max_attempts: int):
        self.root, self.client_id, self.settings = root, client_id, client_settings(max_attempts)
        self.conn: Connection | None = None
        self.sessions: dict[int, Any] = {}
        self.consumers: dict[int, Any] = {}
        self.boxes: list[Any] = []  # every consumer's dropbox: not a session's (op_measure)

    def op_connect(self, cmd: dict) -> dict:
        self.conn = Connection(self.root, client_id=self.client_id, settings=self.settings, create=True)
        return {}

    def op_session(self, cmd: dict) -> dict:
        assert self.conn is not None
        mode = cmd["mode"]
        session = self.sessions[cmd["sid"]] = (self.conn.create_session(transacted=True) if mode == "tx"
                                               else self.conn.create_session(ack_mode=MODES[mode]))
        return {"held": held_state(session, tuple(self.boxes))}

    def op_consumer(self, cmd: dict) -> dict:
        session, kind, dest = self.sessions[cmd["sid"]], cmd["kind"], cmd["dest"]
        selector = cmd.get("selector")
        if kind == "queue":
            consumer = session.create_consumer(Queue(dest), selector)
        elif kind == "nondurable":
            consumer = session.create_consumer(Topic(dest), selector, cmd.get("no_local", False))
        elif kind == "durable":
            consumer = session.create_durable_consumer(Topic(dest), cmd["sub"], selector, cmd.get("no_local", False))
        elif kind == "shared":
            consumer = session.create_shared_consumer(Topic(dest), cmd["sub"], selector)
        else:
            consumer = session.create_shared_durable_consumer(Topic(dest), cmd["sub"], selector)
        self.consumers[cmd["cid"]] = consumer
        self.boxes.append(consumer.box)
        return {"box": str(Path(consumer.box.path).relative_to(self.root)), "held": held_state(consumer)}

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

    def op_measure(self, cmd: dict) -> dict:
        """``held_state`` of each open session and consumer of this process, by the tester's ids."""
        sessions, consumers = {}, {}
        for sid, s in self.sessions.items():
            with s.lock:  # (a listener's dispatcher thread changes its session under this lock)
                if not s.closed:
                    sessions[sid] = held_state(s, tuple(self.boxes))
        for cid, c in self.consumers.items():
            with c.session.lock:
                if not c.closed:
                    consumers[cid] = held_state(c)
        return {"sessions": sessions, "consumers": consumers}

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
    elif name == "selector-misses-kept":  # 162206d's defect: a consumer never forgets its selector's misses
        from dropboxmq.claim import Claimer

        relist = Claimer.relist

        def keeping_misses(self: Any) -> None:
            kept = set(self.skip)
            relist(self)
            self.skip |= kept  # what ``skip &= keys.keys()`` did: the pruned set was a new local one

        Claimer.relist = keeping_misses  # type: ignore[method-assign]
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
