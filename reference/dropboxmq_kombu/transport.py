"""kombu's virtual transport over a dropbox root: every queue a dropbox queue, every fanout
exchange a topic, and acknowledgement the rename into processed/.

The mapping (kombu -> dropboxmq, through the library's public API):

* ``_put``: one message per kombu message, the kombu envelope (JSON) as its body, JMSType
  ``kombu``; kombu priority 0-9 is JMSPriority (higher = sooner, as on RabbitMQ); a Celery ETA
  or countdown becomes a delivery delay, so the message waits in target/, not in a worker.
* ``_get``: a claim (rename into processing/) by the channel's CLIENT_ACKNOWLEDGE session;
  nothing is acknowledged on hand-off.
* QoS ``ack``: ``Session.acknowledge(message)``, the rename into processed/ (durable);
  ``reject(requeue=True)`` and the restore of unacknowledged messages (channel close, warm
  shutdown): ``Session.recover(message)``, back to target/ flagged redelivered with its delivery
  count; ``reject(requeue=False)``: ``Session.dead_letter(message)``, into error/.
* A worker that dies (kill -9, power loss) leaves its claims in processing/ under its client
  id; the next consumer of the queue reclaims them (dead-owner recovery) as redelivered.
* Fanout: a fanout exchange is a topic; a queue bound to it is a shared subscription named
  after the queue (durable queues: shared durable; auto-delete ones: shared non-durable), so
  competing consumers of one broadcast queue share its copies, as on RabbitMQ.
* Bindings (direct, topic, fanout) are kept under ``<root>/dropboxmq/kombu/bindings/``, so a
  process routes by the bindings another process declared (a reply to a remote-control
  request, for one).
* A message whose body is not a kombu envelope (a shell script's, a Java service's) is given
  to the Celery task named by the transport option ``foreign_task`` as one argument, a dict;
  without that option Celery rejects it as unknown, and it is dead-lettered into error/.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import threading
import time
import urllib.parse
from datetime import datetime, timezone
from pathlib import Path
from queue import Empty
from typing import Any

from kombu.transport import virtual

import dropboxmq
from dropboxmq import (CLIENT_ACKNOWLEDGE, BytesMessage, Connection, DropboxMQError, Message, MessageConsumer, Queue,
                       Session, Settings, TextMessage, Topic)
from dropboxmq.making import ensure_dropbox
from dropboxmq.layout import INTERNAL, queue_box
from dropboxmq.lifecycle import Move, State
from dropboxmq.bodies import body_of

__all__ = ["ENVELOPE_TYPE", "Channel", "QoS", "Transport", "foreign_task_payload", "root_of", "topic_for_exchange"]

#: JMSType of a message whose body is a kombu envelope
ENVELOPE_TYPE = "kombu"
#: bindings shared by every process on the root
BINDINGS_DIR = ("kombu", "bindings")
#: transport options passed to the library's Settings
SETTINGS_OPTIONS = ("max_delivery_attempts", "scan_interval", "recovery_interval", "retention")


def root_of(hostname: str | None, virtual_host: str | None, options: dict) -> Path:
    """The root of ``dropboxmq:///abs/path`` (kombu reads the path as the virtual host), or the
    ``root`` transport option."""
    if options.get("root"):
        return Path(options["root"])
    if hostname not in (None, "", "localhost") or not virtual_host:
        raise ValueError("a dropboxmq broker URL names an absolute root with three slashes: "
                         "dropboxmq:///path/to/root (or give transport_options={'root': ...})")
    return Path("/" + virtual_host.lstrip("/"))


def topic_for_exchange(exchange: str) -> Topic:
    """One topic level per exchange: a '.' in an exchange name must not make an ancestor topic
    (1.2's hierarchy would fan ``celery.pidbox`` out to the subscriptions of ``celery``)."""
    return Topic("kombu-" + urllib.parse.quote(exchange, safe="").replace(".", "%2E"))


def _eta_delay(headers: dict) -> float:
    """Seconds until a Celery ETA (protocol 2 header ``eta``, ISO 8601), 0 when none or past."""
    eta = headers.get("eta") if isinstance(headers, dict) else None
    if not isinstance(eta, str) or not eta:
        return 0.0
    try:
        when = datetime.fromisoformat(eta)
    except ValueError:
        return 0.0
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def foreign_task_payload(message: Message, queue: str, task: str) -> dict:
    """A Celery task message (protocol 2) calling ``task`` with the dropbox message as a dict:
    message_id, body (text, when it decodes as UTF-8), body_base64, priority, properties,
    redelivered, delivery_count.  The task id is the message id, the same at every delivery."""
    raw = message.body if isinstance(message.body, bytes) else bytes(message.body or b"")
    try:
        text: str | None = raw.decode("utf-8") if not isinstance(message, TextMessage) else message.text
    except UnicodeDecodeError:
        text = None  # binary: only body_base64
    arg: dict[str, Any] = {
        "message_id": message.message_id,
        "body": text,
        "body_base64": base64.b64encode(raw).decode("ascii"),
        "priority": message.priority,
        "properties": {k: v for k, v in message.property_values.items()
                       if isinstance(v, (str, int, float, bool)) or v is None},
        "redelivered": message.redelivered,
        "delivery_count": message.delivery_count,
    }
    if isinstance(message, (dropboxmq.MapMessage, dropboxmq.StreamMessage)):
        arg["body"] = body_of(message)
    task_id = (message.message_id or "").removeprefix("ID:")
    body = json.dumps([[arg], {}, {"callbacks": None, "errbacks": None, "chain": None, "chord": None}])
    return {
        "body": base64.b64encode(body.encode()).decode("ascii"),
        "content-type": "application/json",
        "content-encoding": "utf-8",
        "headers": {"lang": "py", "task": task, "id": task_id, "root_id": task_id, "parent_id": None,
                    "group": None, "retries": 0, "eta": None, "expires": None, "timelimit": [None, None],
                    "argsrepr": f"({message.message_id!r})", "kwargsrepr": "{}", "origin": "dropboxmq"},
        "properties": {"correlation_id": task_id, "reply_to": "", "delivery_mode": 2, "priority": message.priority,
                       "body_encoding": "base64", "delivery_info": {"exchange": "", "routing_key": queue}},
    }


def _raw_payload(message: Message, queue: str) -> dict:
    """A message that is no kombu envelope, as it is: Celery rejects it as unknown (-> error/)."""
    raw = message.body if isinstance(message.body, bytes) else bytes(message.body or b"")
    return {"body": base64.b64encode(raw).decode("ascii"), "content-type": "application/data",
            "content-encoding": "binary", "headers": {},
            "properties": {"priority": message.priority, "body_encoding": "base64",
                           "delivery_info": {"exchange": "", "routing_key": queue}}}


class QoS(virtual.QoS):
    """Prefetch as kombu counts it; every settlement is a move of the dropbox message."""

    def ack(self, delivery_tag: str) -> None:
        self.channel.settle(delivery_tag, "ack")
        super().ack(delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        self.channel.settle(delivery_tag, "requeue" if requeue else "dead-letter")
        super().ack(delivery_tag)  # out of the unacked set (kombu's reject would _put a copy)


class Channel(virtual.Channel):
    QoS = QoS
    supports_fanout = True
    # kombu types it as a pair; it is any tuple of option names
    from_transport_options = (*virtual.Channel.from_transport_options, "foreign_task")  # type: ignore[assignment]
    #: Celery task that messages without a kombu envelope are given to (transport option)
    foreign_task: str | None = None

    def __init__(self, connection: "Transport", **kwargs: Any):
        super().__init__(connection, **kwargs)
        self.transport = connection
        self.pid = os.getpid()
        self.session: Session = connection.dropbox.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        self.producer = self.session.create_producer()
        self.queue_consumers: dict[str, MessageConsumer] = {}
        self.subscription_consumers: dict[str, dict[str, MessageConsumer]] = {}  # queue -> exchange -> consumer
        self.held: dict[str, Message] = {}  # delivery tag -> the dropbox message it delivered
        self.held_lock = threading.Lock()
        self.queue_arguments: dict[str, dict] = {}

    # --- sending
    def _put(self, queue: str, message: dict, **kwargs: Any) -> None:
        self.send(Queue(queue), message)

    def _put_fanout(self, exchange: str, message: dict, routing_key: str, **kwargs: Any) -> None:
        self.send(topic_for_exchange(exchange), message)

    def send(self, destination: Queue | Topic, message: dict) -> None:
        props = message.get("properties") or {}
        try:
            priority = min(9, max(0, int(props.get("priority") or 0)))
        except (TypeError, ValueError):
            priority = 0
        envelope = BytesMessage(json.dumps(message).encode("utf-8"))
        envelope.jms_type = ENVELOPE_TYPE
        correlation = props.get("correlation_id")
        if isinstance(correlation, str) and 0 < len(correlation) <= 64:
            envelope.correlation_id = correlation  # the Celery task id, readable in the file name
        self.producer.send(envelope, destination, priority=priority,
                           delivery_delay=_eta_delay(message.get("headers") or {}))

    # --- receiving
    def _get(self, queue: str, timeout: float | None = None) -> dict:
        for consumer in self.sources(queue):
            got = consumer.receive(0)
            if got is not None:
                return self.payload(got, queue)
        raise Empty()

    def sources(self, queue: str) -> list[MessageConsumer]:
        """Where ``queue``'s messages are: its subscriptions (fanout bindings), then the queue."""
        found = list(self.subscription_consumers.get(queue, {}).values())
        for exchange in self.transport.fanout_exchanges_of(queue):
            if exchange not in self.subscription_consumers.get(queue, {}):
                found.append(self.subscribe(queue, exchange))
        consumer = self.queue_consumers.get(queue)
        if consumer is None:
            consumer = self.queue_consumers[queue] = self.session.create_consumer(Queue(queue))
            consumer.redelivery_delay = 0  # Celery decides about retries (requeue, countdown)
        found.append(consumer)
        return found

    def subscribe(self, queue: str, exchange: str) -> MessageConsumer:
        args = self.queue_arguments.get(queue, {})
        topic = topic_for_exchange(exchange)
        if args.get("auto_delete") or args.get("exclusive"):
            consumer = self.session.create_shared_consumer(topic, queue)  # ends with its last consumer
        else:
            consumer = self.session.create_shared_durable_consumer(topic, queue)
        consumer.redelivery_delay = 0
        self.subscription_consumers.setdefault(queue, {})[exchange] = consumer
        return consumer

    def payload(self, message: Message, queue: str) -> dict:
        payload: dict | None = None
        if message.jms_type == ENVELOPE_TYPE:
            try:
                payload = json.loads(message.body)
            except ValueError:
                payload = None
        if not isinstance(payload, dict) or not isinstance(payload.get("properties"), dict):
            payload = (foreign_task_payload(message, queue, self.foreign_task) if self.foreign_task
                       else _raw_payload(message, queue))
        props = payload["properties"]
        tag = os.urandom(12).hex()  # one tag per delivery: a redelivery is a new delivery
        props["delivery_tag"] = tag
        info = props.setdefault("delivery_info", {})
        info["redelivered"] = message.redelivered
        info.setdefault("routing_key", queue)
        info.setdefault("exchange", "")
        payload["redelivered"] = message.redelivered
        with self.held_lock:
            self.held[tag] = message
        return payload

    # --- settlement (QoS)
    def settle(self, delivery_tag: str, how: str) -> None:
        """ack / requeue / dead-letter the dropbox message delivered under ``delivery_tag``.
        A forked child settles nothing of its parent's (it would move the parent's claims)."""
        if os.getpid() != self.pid:
            return
        with self.held_lock:
            message = self.held.pop(delivery_tag, None)
        if message is None:
            return  # settled already (kombu may restore what a thread has just acked)
        if how == "ack":
            self.session.acknowledge(message)
        elif how == "requeue":
            self.session.recover(message)
        else:
            self.session.dead_letter(message)
        self.transport.settled.set()  # a prefetch slot is free: the consumer may claim at once

    def _restore(self, message: Any) -> None:
        """An unacknowledged message restored (channel close, warm shutdown, recover): back to
        target/ by the redeliver move, not copied."""
        self.settle(message.delivery_tag, "requeue")

    def _restore_at_beginning(self, message: Any) -> None:
        self._restore(message)

    # --- queues and bindings
    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        self.queue_arguments[queue] = kwargs
        ensure_dropbox(queue_box(self.transport.root, Queue(queue)))

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        return queue_box(self.transport.root, Queue(queue)).exists()

    def _size(self, queue: str) -> int:
        boxes = [queue_box(self.transport.root, Queue(queue))]
        boxes += [c.box for c in self.subscription_consumers.get(queue, {}).values()]
        return sum(len(box.list(State.NEW)) for box in boxes if box.exists())

    def _purge(self, queue: str) -> int:
        """Delete the waiting messages (PURGE); those being processed are never purged."""
        boxes = [queue_box(self.transport.root, Queue(queue))]
        boxes += [c.box for c in self.subscription_consumers.get(queue, {}).values()]
        removed = 0
        for box in boxes:
            if box.exists():
                for name in box.list(State.NEW):
                    removed += bool(box.move(Move.PURGE, State.NEW, name))
        return removed

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        self.transport.save_binding(exchange, routing_key, pattern, queue)
        if self.typeof(exchange).type == "fanout":
            self.transport.note_fanout(queue, exchange)
            if exchange not in self.subscription_consumers.get(queue, {}):
                self.subscribe(queue, exchange)  # from now on the queue gets a copy of each publish

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        if len(args) >= 3:
            exchange, routing_key, pattern = args[:3]
            self.transport.drop_binding(exchange, routing_key, pattern, queue)
        consumer = self.subscription_consumers.get(queue, {}).pop(args[0], None) if args else None
        if consumer is not None:
            consumer.close()

    def get_table(self, exchange: str) -> list:
        own = list(super().get_table(exchange)) if exchange in self.state.exchanges else []
        shared = self.transport.load_bindings(exchange)
        return own + [b for b in shared if b not in own]

    def close(self) -> None:
        super().close()  # cancels consumers and restores the unacked (settle -> recover)
        if os.getpid() == self.pid:
            try:
                self.session.close()
            except DropboxMQError:
                pass


class Transport(virtual.Transport):
    Channel = Channel
    #: seconds between two looks at empty queues (kombu's default is 1 s: a second per task)
    polling_interval = 0.05
    default_port = None
    driver_type = "dropboxmq"
    driver_name = "dropboxmq"
    implements = virtual.Transport.implements.extend(
        asynchronous=False, exchange_type=frozenset(["direct", "topic", "fanout"]), heartbeats=False)

    def __init__(self, client: Any, **kwargs: Any):
        super().__init__(client, **kwargs)
        options = client.transport_options or {}
        self.root = root_of(client.hostname, client.virtual_host, options)
        self.settings = Settings(**{k: options[k] for k in SETTINGS_OPTIONS if k in options})
        self.bindings_dir = self.root.joinpath(INTERNAL, *BINDINGS_DIR)
        self.fanout: dict[str, set[str]] = {}  # queue -> fanout exchanges it is bound to
        self.binding_cache: dict[str, tuple[int, list]] = {}
        self.pid = os.getpid()
        self.connection: Connection | None = None
        self.lock = threading.Lock()
        self.settled = threading.Event()  # set by every ack, requeue or dead-letter

    def drain_events(self, connection: Any, timeout: Any = None, **kwargs: Any) -> None:
        """kombu's loop, except that between two looks at empty queues (or a full prefetch) it
        waits for a settlement as well as for the polling interval: with late acks a worker
        claims its next message as soon as it acknowledged the last one, not a poll later."""
        cycle = self.cycle
        assert cycle is not None  # made by kombu's constructor
        started = time.monotonic()
        polling = self.polling_interval
        if timeout and polling and polling > timeout:
            polling = timeout
        while True:
            self.settled.clear()
            try:
                cycle.get(self._deliver, timeout=timeout)
                return
            except Empty:
                if timeout is not None and time.monotonic() - started >= timeout:
                    raise socket.timeout() from None
                self.settled.wait(polling)

    @property
    def dropbox(self) -> Connection:
        """The library connection of this kombu connection (one client id per process)."""
        with self.lock:
            if self.connection is None or self.pid != os.getpid():
                self.pid = os.getpid()
                self.connection = Connection(self.root, settings=self.settings)
            return self.connection

    def close_connection(self, connection: Any) -> None:
        super().close_connection(connection)
        with self.lock:
            if self.connection is not None and self.pid == os.getpid():
                self.connection.close()  # a forked child must not release its parent's client id
            self.connection = None

    def driver_version(self) -> str:
        return dropboxmq.__version__

    @property
    def default_connection_params(self) -> dict:
        return {"port": None}  # no host: kombu's "Reverting to default 'localhost'" warning is not for us

    # --- fanout bindings of this process
    def note_fanout(self, queue: str, exchange: str) -> None:
        self.fanout.setdefault(queue, set()).add(exchange)

    def fanout_exchanges_of(self, queue: str) -> set[str]:
        return self.fanout.get(queue, set())

    # --- bindings shared through the root: one small file per binding
    def exchange_dir(self, exchange: str) -> Path:
        return self.bindings_dir / ("x-" + urllib.parse.quote(exchange or "amq.direct", safe=""))

    @staticmethod
    def binding_file(routing_key: str, pattern: str, queue: str) -> str:
        key = json.dumps([routing_key, pattern, queue]).encode()
        return hashlib.sha256(key).hexdigest()[:40] + ".json"

    def save_binding(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        where = self.exchange_dir(exchange)
        os.makedirs(where, exist_ok=True)
        path = where / self.binding_file(routing_key, pattern, queue)
        if path.exists():
            return
        tmp = where / f".{path.name}.{os.getpid()}.{threading.get_ident()}"
        tmp.write_text(json.dumps([routing_key, pattern, queue]))
        os.replace(tmp, path)

    def drop_binding(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        try:
            os.unlink(self.exchange_dir(exchange) / self.binding_file(routing_key, pattern, queue))
        except FileNotFoundError:
            pass

    def load_bindings(self, exchange: str) -> list:
        """Every binding of ``exchange`` on the root, as (routing_key, pattern, queue); cached
        until the directory changes."""
        where = self.exchange_dir(exchange)
        try:
            stamp = os.stat(where).st_mtime_ns
        except FileNotFoundError:
            return []
        cached = self.binding_cache.get(exchange)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        listed_at = time.time_ns()
        table = []
        for name in sorted(os.listdir(where)):
            if name.startswith("."):
                continue
            try:
                routing_key, pattern, queue = json.loads((where / name).read_text())
            except (OSError, ValueError):
                continue  # unbound meanwhile, or not a binding file
            table.append((routing_key, pattern, queue))
        # A change within the directory's timestamp granularity (a clock tick) after this listing
        # would keep the same mtime: cache only a listing taken well after the last change.
        if listed_at - stamp > 100_000_000:
            self.binding_cache[exchange] = (stamp, table)
        return table
