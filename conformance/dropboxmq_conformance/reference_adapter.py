"""The reference implementation's adapter: the JSON-lines session protocol (README.md) on
top of ``dropboxmq.session``.  Run as::

    python -m dropboxmq_conformance.reference_adapter ROOT CLIENT_ID

One process = one connection; it reads one request per line on stdin and writes
one response per line on stdout.  This module is the *implementation* side of
the protocol (an example for other implementations); the suite itself only
talks to it through the pipe.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from typing import Any

from dropboxmq.errors import IllegalStateError, InvalidClientIDError, InvalidDestinationError, JMSException
from dropboxmq.selector import InvalidSelectorError
from dropboxmq.message import Queue, TextMessage, Topic
from dropboxmq.values import Property
from dropboxmq.ackmode import AckMode
from dropboxmq.connection import Connection, Settings

ACK = {"auto": AckMode.AUTO_ACKNOWLEDGE, "client": AckMode.CLIENT_ACKNOWLEDGE,
       "dups_ok": AckMode.DUPS_OK_ACKNOWLEDGE, "transacted": AckMode.SESSION_TRANSACTED}
ERRORS = [(InvalidSelectorError, "invalid_selector"), (InvalidClientIDError, "invalid_client_id"),
          (InvalidDestinationError, "invalid_destination"), (IllegalStateError, "illegal_state"),
          (JMSException, "jms")]
FAST = Settings(poll_interval=0.005, scan_interval=0.01, recovery_interval=0.2)


def _prop(v: Any) -> Property:
    if isinstance(v, bool):
        return Property("B", v)
    if isinstance(v, int):
        return Property("I" if -(2**31) <= v < 2**31 else "L", v)
    if isinstance(v, float):
        return Property("D", v)
    return Property("S", str(v))


def _message(msg) -> dict:
    try:
        body = msg.body.decode("utf-8")
    except UnicodeDecodeError:
        body = msg.body.decode("latin-1")
    return {"id": msg.message_id, "body": body, "redelivered": bool(msg.redelivered),
            "delivery_count": int(msg.delivery_count), "priority": msg.priority,
            "properties": {k: p.value for k, p in msg.properties.items()}}


class Gauge:
    """How many listener calls run at once, and the most there ever were."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = self.most = 0

    def enter(self) -> None:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def leave(self) -> None:
        with self._lock:
            self.now -= 1


class Adapter:
    def __init__(self, root: str, client_id: str):
        self.conn = Connection(root, client_id or None, FAST, create=True)
        self.sessions: dict[str, Any] = {}
        self.consumers: dict[str, Any] = {}
        self.queue_consumers: dict[tuple, Any] = {}
        self.numbers = itertools.count(1)  # ids are never reused, even after a close
        self.received: dict[str, Any] = {}  # JMSMessageID -> the message object the adapter handed out

    def handle(self, req: dict) -> dict:
        op = req.get("op")
        fn = getattr(self, "op_" + str(op), None)
        if fn is None:
            return {"ok": False, "error": "unknown_op", "message": f"unknown op {op!r}"}
        try:
            out = fn(req) or {}
        except Exception as exc:  # every failure is an answer, never a crash
            kind = next((k for cls, k in ERRORS if isinstance(exc, cls)), "other")
            return {"ok": False, "error": kind, "message": f"{type(exc).__name__}: {exc}"}
        return {"ok": True, **out}

    def _session(self, req: dict):
        return self.sessions[req.get("session", "s1")]

    def op_session(self, req: dict) -> dict:
        sid = f"s{next(self.numbers)}"
        mode = ACK[req.get("ack_mode", "auto")]
        self.sessions[sid] = self.conn.create_session(mode is AckMode.SESSION_TRANSACTED, mode)
        return {"session": sid}

    def _dest(self, req: dict):
        if req.get("queue"):
            return Queue(req["queue"])
        if req.get("topic"):
            return Topic(req["topic"])
        raise InvalidDestinationError("give 'queue' or 'topic'")

    def op_send(self, req: dict) -> dict:
        s = self._session(req)
        msg = TextMessage(body=str(req.get("body", "")).encode("utf-8"))
        for k, v in (req.get("properties") or {}).items():
            msg.properties[k] = _prop(v)
        s.create_producer(self._dest(req)).send(msg, priority=int(req.get("priority", 4)),
                                                time_to_live=float(req.get("ttl_ms", 0)) / 1000)
        return {"id": msg.message_id}

    def op_subscribe(self, req: dict) -> dict:
        s = self._session(req)
        topic, name, sel = Topic(req["topic"]), req.get("name"), req.get("selector")
        durable, shared = bool(req.get("durable")), bool(req.get("shared"))
        if shared and durable:
            c = s.create_shared_durable_consumer(topic, name, sel)
        elif shared:
            c = s.create_shared_consumer(topic, name, sel)
        elif durable:
            c = s.create_durable_consumer(topic, name, sel, bool(req.get("no_local")))
        else:
            c = s.create_consumer(topic, sel, bool(req.get("no_local")))
        cid = f"c{next(self.numbers)}"
        self.consumers[cid] = c
        return {"consumer": cid}

    def op_receive(self, req: dict) -> dict:
        if req.get("consumer"):
            c = self.consumers[req["consumer"]]
        else:
            s = self._session(req)
            key = (req.get("session", "s1"), req.get("queue"), req.get("selector"))
            c = self.queue_consumers.get(key)
            if c is None:
                c = self.queue_consumers[key] = s.create_consumer(self._dest(req), req.get("selector"))
        msg = c.receive(float(req.get("timeout_ms", 200)) / 1000)
        if msg is not None:
            self.received[msg.message_id] = msg
        return {"message": None if msg is None else _message(msg)}

    def listener(self, session, got: list, done: threading.Event, count: int, throw_first: bool,
                 finish: str | None, hold: float = 0.0, gauge: "Gauge | None" = None):
        """The MessageListener of op_listen: records each delivery, holds it ``hold`` s, throws on
        the first; at the count-th it acknowledges or commits (from the listener: the session is
        the listener's)."""
        gauge = gauge or Gauge()

        def on_message(msg) -> None:
            gauge.enter()
            self.received[msg.message_id] = msg
            got.append(_message(msg))
            try:
                if hold:
                    time.sleep(hold)  # the listener's own work: a second concurrent call would overlap it
                if throw_first and len(got) == 1:
                    raise RuntimeError("the conformance listener fails its first message")
                if len(got) == count and finish == "acknowledge":
                    msg.acknowledge()
                elif len(got) == count and finish == "commit":
                    session.commit()
            finally:
                gauge.leave()
                if len(got) >= count:
                    done.set()
        return on_message

    def op_listen(self, req: dict) -> dict:
        s = self._session(req)
        dests = [Queue(q) for q in req["queues"]] if req.get("queues") else [self._dest(req)]
        got: list[dict] = []
        done = threading.Event()
        gauge = Gauge()
        on_message = self.listener(s, got, done, int(req.get("count", 1)), bool(req.get("throw_on_first")),
                                   req.get("finish"), float(req.get("hold_ms", 0)) / 1000, gauge)
        consumers = [s.create_consumer(d) for d in dests]
        for c in consumers:
            c.set_message_listener(on_message)
        done.wait(float(req.get("timeout_ms", 5000)) / 1000)
        for c in consumers:
            c.close()
        return {"deliveries": list(got), "max_concurrent": gauge.most}

    def op_close_consumer(self, req: dict) -> dict:
        self.consumers.pop(req["consumer"]).close()
        return {}

    def op_unsubscribe(self, req: dict) -> dict:
        self._session(req).unsubscribe(req["name"])
        return {}

    def op_acknowledge(self, req: dict) -> dict:
        if req.get("message"):  # Message.acknowledge() on that message: all the session consumed
            self.received[req["message"]].acknowledge()
        else:
            self._session(req).acknowledge()
        return {}

    def op_recover(self, req: dict) -> dict:
        self._session(req).recover()
        return {}

    def op_commit(self, req: dict) -> dict:
        self._session(req).commit()
        return {}

    def op_rollback(self, req: dict) -> dict:
        self._session(req).rollback()
        return {}

    def op_close_session(self, req: dict) -> dict:
        self.sessions.pop(req.get("session", "s1")).close()
        return {}

    def op_close(self, req: dict) -> dict:
        self.conn.close()
        return {}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: reference_adapter ROOT CLIENT_ID", file=sys.stderr)
        return 2
    adapter = Adapter(argv[0], argv[1])
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
        except ValueError as exc:
            resp = {"ok": False, "error": "bad_request", "message": str(exc)}
        else:
            resp = adapter.handle(req)
        sys.stdout.write(json.dumps(resp, default=str) + "\n")
        sys.stdout.flush()
        if isinstance(req, dict) and req.get("op") == "close":
            return 0
    adapter.conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
