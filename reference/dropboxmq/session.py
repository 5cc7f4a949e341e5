"""The JMS-shaped API: Connection, Session, MessageProducer, MessageConsumer, QueueBrowser.

Semantics follow JMS (PROTOCOL.md §4), not 1.2:

* AUTO_ACKNOWLEDGE: ``receive`` acks as it returns; a listener's message is
  acked after ``on_message`` returns, and redelivered if it raises.
* DUPS_OK_ACKNOWLEDGE: acks are batched (lazy), so a crash may redeliver.
* CLIENT_ACKNOWLEDGE: ``acknowledge()`` acks *every* message the session consumed.
* SESSION_TRANSACTED: sends stay in working/ until ``commit``; receives stay in
  processing/; commit/rollback go through the transaction log; close rolls back.
* ``recover()`` / rollback put messages back in target/ with JMSRedelivered and
  JMSXDeliveryCount + 1; past ``max_delivery_attempts`` they go to error/.

Every file move is a ``store.Dropbox.move`` of a ``lifecycle.Move``.
"""

from __future__ import annotations

import bisect
import contextlib
import difflib
import enum
import errno
import functools
import logging
import os
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Iterator, Protocol, Union

from . import claims, codec, ids, layout, retention, topics
from .decision import ClaimSettings, Verdict, decide
from .clients import Registration
from .errors import (IllegalStateError, InvalidDestinationError, LeaseExpiredError, MessageTakenError,
                     QueueNotFoundError, RootNotFoundError, StoreError)
from .lifecycle import Move, State
from .message import (
    BytesMessage,
    DeliveryMode,
    Destination,
    MapMessage,
    Message,
    ObjectMessage,
    Queue,
    StreamMessage,
    TextMessage,
    Topic,
)
from .recovery import reclaim_dead_owners, reclaim_own_leftovers
from .store import Dropbox, NotARegularFile, check_file_system, sync_files, sync_many
from .transaction import TransactionLog, ensure_layout, finish_dead_commits, recover_owner

if TYPE_CHECKING:
    from .selector import Selector

__all__ = [
    "AckMode", "AUTO_ACKNOWLEDGE", "CLIENT_ACKNOWLEDGE", "DUPS_OK_ACKNOWLEDGE", "SESSION_TRANSACTED",
    "DELIVERY_TIME_PROP", "DELIVERY_MODE_PROP", "DELIVERY_COUNT_PROP", "now_ms", "selector_for",
    "Settings", "to_wire", "from_wire", "Connection", "TemporaryQueue", "TemporaryTopic", "Delivery",
    "Session", "MessageProducer", "temporary_gone", "create_copy", "Body", "as_message", "body_of",
    "parse_selector", "delete_temporary", "MessageListener", "MessageConsumer",
    "QueueBrowser", "check_root", "missing_queue",
]

log = logging.getLogger("dropboxmq")


class AckMode(enum.IntEnum):
    SESSION_TRANSACTED = 0
    AUTO_ACKNOWLEDGE = 1
    CLIENT_ACKNOWLEDGE = 2
    DUPS_OK_ACKNOWLEDGE = 3


AUTO_ACKNOWLEDGE = AckMode.AUTO_ACKNOWLEDGE
CLIENT_ACKNOWLEDGE = AckMode.CLIENT_ACKNOWLEDGE
DUPS_OK_ACKNOWLEDGE = AckMode.DUPS_OK_ACKNOWLEDGE
SESSION_TRANSACTED = AckMode.SESSION_TRANSACTED

DELIVERY_COUNT_PROP = codec.DELIVERY_COUNT
DELIVERY_TIME_PROP, DELIVERY_MODE_PROP = codec.DELIVERY_TIME_PROP, codec.DELIVERY_MODE_PROP
to_wire, from_wire, now_ms = codec.to_wire, codec.from_wire, codec.now_ms  # the wire mapping is the codec's


@functools.lru_cache(maxsize=256)
def selector_for(text: str) -> "Selector":
    """Parsed selectors, cached: a subscription's selector is evaluated at every fan-out."""
    from .selector import parse

    return parse(text)


@dataclass(frozen=True)
class Settings:
    max_delivery_attempts: int = 10  # deliveries before a message is dead-lettered to error/
    scan_interval: float = 0.25  # s: a new higher-priority message overtakes within this
    poll_interval: float = 0.05  # s: longest wait between two looks at an empty target/
    recovery_interval: float = 2.0  # s: how often a consumer reclaims dead owners' messages
    dups_ok_batch: int = 64  # DUPS_OK acks are flushed in groups of this size
    allow_network_fs: bool = False
    # s: the client's lease (leases.py): renewed every lease/3; where flock does not cross mounts
    # another host declares this client dead once its record stayed unchanged for 1.5 x lease,
    # and the client fences itself (LeaseExpiredError) 0.8 x lease after its last renewal
    lease: float = 10.0
    # A message that failed (listener raised, recover(back_off=True)) is not tried again by the
    # same consumer before redelivery_delay * redelivery_backoff ** (deliveries - 1) seconds,
    # at most max_redelivery_delay: a failing handler no longer burns every attempt at once.
    redelivery_delay: float = 0.1
    redelivery_backoff: float = 2.0
    max_redelivery_delay: float = 30.0
    # Seconds to keep acknowledged and expired messages: consumers delete older ones as they
    # go (every recovery_interval), like `dropboxmq prune --older-than`.  None: keep them all.
    retention: float | None = None


# ---------------------------------------------------------------- connection


def _did_you_mean(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def check_root(root: Path) -> None:
    """Raise RootNotFoundError (with a did-you-mean among its siblings) unless ``root`` is an
    existing directory."""
    if root.is_dir():
        return
    if root.exists() or root.is_symlink():
        raise RootNotFoundError(f"dropbox root {str(root)!r} is not a directory")
    try:
        siblings = [p.name for p in root.parent.iterdir() if p.is_dir()]
    except OSError:
        siblings = []
    hint = _did_you_mean(root.name, siblings)
    raise RootNotFoundError(f"no dropbox root at {str(root)!r}{hint} (create one with Connection(root, create=True) "
                            "or 'dropboxmq --root ROOT init QUEUE')")


def missing_queue(root: Path, queue: Queue) -> QueueNotFoundError:
    """The error for a queue that does not exist under ``root``, with a did-you-mean."""
    known = [n for n, _ in layout.all_dropboxes(root) if not n.startswith("topic:")]
    return QueueNotFoundError(f"no queue {queue.name!r} under {root}{_did_you_mean(queue.name, known)} (create it "
                              f"with connection.create_queue({queue.name!r}) or 'dropboxmq init {queue.name}')")


class Connection:
    """A connection to one root.  ``client_id`` is registered (and locked) under
    ``dropboxmq/clients/``; without one, a 1.2-style id is generated.

    The root must exist and so must every queue used (a typo is a ``RootNotFoundError`` or
    ``QueueNotFoundError`` with a did-you-mean, and creates nothing): make them with
    ``dropboxmq init`` or ``create_queue()``.  ``create=True`` creates the root, and each queue
    as it is first used."""

    def __init__(
        self,
        root: str | Path,
        client_id: str | None = None,
        settings: Settings | None = None,
        *,
        create: bool = False,
        allow_network_fs: bool = False,
    ):
        self.root = Path(root)
        self.create = create
        self.settings = settings or Settings(allow_network_fs=allow_network_fs)
        if create:
            try:
                os.makedirs(self.root, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                pass  # check_root says what stands in the way
        check_root(self.root)
        check_file_system(self.root, self.settings.allow_network_fs or allow_network_fs)
        ensure_layout(self.root)
        generated = client_id is None
        self.client_id = client_id or ids.new_message_id()[3:]
        self._registration = Registration(self.root, self.client_id, self.settings.lease)
        self.client_id_generated = generated
        if not generated:
            self._finish_own_logs()  # holding the lock proves a predecessor's logs are ours
            self._reclaim_own_leftovers()  # ... and its claims: a killed consumer's restart gets them back
        self._sessions: list[Session] = []
        self._closed = False
        self._started = threading.Event()
        self._started.set()
        self._temporary: list[Destination] = []
        self._queue_boxes: dict[str, Dropbox] = {}

    @classmethod
    def from_env(cls, settings: Settings | None = None, *, client_id: str | None = None,
                 create: bool = False) -> "Connection":
        """A connection configured like the CLI: the root from $DROPBOXMQ_ROOT (required), the
        client id from ``client_id``, else $DROPBOXMQ_CLIENT_ID, else generated."""
        root = os.environ.get("DROPBOXMQ_ROOT")
        if not root:
            raise RootNotFoundError("DROPBOXMQ_ROOT is not set: export DROPBOXMQ_ROOT=/path/to/root (made by "
                                    "'dropboxmq --root /path/to/root init QUEUE'), or use Connection(root)")
        return cls(root, client_id or os.environ.get("DROPBOXMQ_CLIENT_ID") or None, settings, create=create)

    def create_queue(self, queue: "str | Queue") -> Queue:
        """Create ``queue`` (a name or a Queue) with its state directories, as ``dropboxmq init``
        does; safe to repeat.  Returns the Queue."""
        self._check_open()
        dest = Queue(queue) if isinstance(queue, str) else queue
        self._queue_boxes[dest.name] = layout.queue_box(self.root, dest).ensure()
        return dest

    def queue_box(self, queue: Queue) -> Dropbox:
        """The dropbox of an existing queue (created first when the connection has ``create``)."""
        box = self._queue_boxes.get(queue.name)
        if box is None:  # look (or make the directories) once per connection, not once per send
            box = layout.queue_box(self.root, queue)
            if self.create:
                box.ensure()
            elif not box.exists():
                raise missing_queue(self.root, queue)
            self._queue_boxes[queue.name] = box
        return box

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def create_session(
        self, transacted: bool = False, ack_mode: AckMode = AckMode.AUTO_ACKNOWLEDGE
    ) -> "Session":
        self._check_open()
        session = Session(self, AckMode.SESSION_TRANSACTED if transacted else AckMode(ack_mode))
        self._sessions.append(session)
        return session

    def start(self) -> None:
        self._started.set()

    def stop(self) -> None:
        """Pause delivery to listeners and receives until ``start()``."""
        self._started.clear()

    def close(self, grace: float | None = None) -> None:
        """Close every session.  A message listener that is running may finish: within
        ``grace`` seconds (None: however long it takes) its message is acknowledged as usual;
        past it, the message is returned to the queue (redelivered) and the listener's thread,
        which Python cannot stop, is left to end on its own."""
        if self._closed:
            return
        deadline = None if grace is None else time.monotonic() + grace
        for s in list(self._sessions):
            s.close(grace=None if deadline is None else max(0.0, deadline - time.monotonic()))
        for dest in self._temporary:
            delete_temporary(self.root, dest)
        self._finish_own_logs()  # a commit left in doubt (e.g. the disk was full): try again
        self._registration.release()
        self._closed = True

    def _delete_temporary(self, dest: Destination) -> None:
        """JMS TemporaryQueue/TemporaryTopic.delete(): refused while a consumer uses it."""
        if any(c.destination == dest and not c._closed for s in self._sessions for c in s._consumers):
            raise IllegalStateError(f"{dest} still has an open consumer: close it before delete()")
        if dest in self._temporary:
            self._temporary.remove(dest)
            delete_temporary(self.root, dest)

    def _finish_own_logs(self) -> None:
        """Finish the transaction logs of this client id that no open session owns: roll
        committed ones forward, the rest back.  Best effort: what fails stays for recovery."""
        try:
            recover_owner(self.root, self.client_id)
        except (OSError, StoreError) as exc:
            log.warning("cannot finish the transactions left by client %r: %s", self.client_id, exc)

    def _reclaim_own_leftovers(self) -> None:
        """Redeliver the unacknowledged claims a dead predecessor with this client id left (best
        effort: what fails stays for the next connection or `dropboxmq recover`)."""
        try:
            reclaim_own_leftovers(self.root, self.client_id)
        except (OSError, StoreError) as exc:
            log.warning("cannot redeliver the messages left by client %r: %s", self.client_id, exc)

    def _has_pending_work(self, box: Dropbox) -> bool:
        """Does a session of this connection hold messages of ``box`` in an open transaction or
        delivered and not yet acknowledged?  (DUPS_OK's lazy acks are flushed first.)"""
        rel = os.path.relpath(box.path, self.root)
        for s in list(self._sessions):
            with s._lock:
                s._flush_lazy_acks()
                if s._tx is not None and any(e.box == rel for e in s._tx.entries):
                    return True
                if any(d.box.path == box.path for d in s._unacked):
                    return True
        return False

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("connection is closed")

    def _check_lease(self, what: str) -> None:
        """LeaseExpiredError once this connection is fenced (leases.py)."""
        self._registration.check(what)

    def _temporary_boxes(self, dest: Destination, header: Message) -> list[Dropbox]:
        """A temporary destination lives as long as its connection: once that closed (its
        directory is gone) a send is an error, and never re-creates the directory."""
        if isinstance(dest, Queue):
            box = layout.queue_box(self.root, dest)
            if box.exists():
                return [box]
        elif layout.subscriptions_dir(self.root, dest).is_dir():
            return topics.fan_out_targets(self.root, dest, header, self.client_id)
        raise temporary_gone(dest)

    def _boxes_for_send(self, dest: Destination, header: Message) -> list[Dropbox]:
        """Where a send writes: the queue's dropbox, or one copy per matching subscription."""
        if topics.temporary_owner(dest.name) is not None:
            return self._temporary_boxes(dest, header)
        if isinstance(dest, Queue):
            return [self.queue_box(dest)]
        return topics.fan_out_targets(self.root, dest, header, self.client_id)


class _Temporary:
    """delete() for temporary destinations; equal to the plain destination of the same name."""

    name: str
    connection: Connection

    def delete(self) -> None:
        self.connection._delete_temporary(self)  # type: ignore[arg-type]  # a Queue or Topic too

    def __eq__(self, other: object) -> bool:
        kind = Queue if isinstance(self, Queue) else Topic
        return isinstance(other, kind) and other.name == self.name

    def __hash__(self) -> int:
        return hash((self.name,))


@dataclass(frozen=True, eq=False)
class TemporaryQueue(_Temporary, Queue):
    connection: Connection = field(default=None, compare=False, repr=False)  # type: ignore[assignment]


@dataclass(frozen=True, eq=False)
class TemporaryTopic(_Temporary, Topic):
    connection: Connection = field(default=None, compare=False, repr=False)  # type: ignore[assignment]


# ---------------------------------------------------------------- session


@dataclass(slots=True)
class Delivery:
    """A message in processing/ that this session holds."""

    box: Dropbox
    processing_name: str
    original_name: str
    message: Message
    body_file: BinaryIO | None = None  # receive_streamed(): the body, unread
    acked: bool = False  # its ACK rename is done (an acknowledge() whose sync failed is retried)


class Session:
    def __init__(self, connection: Connection, ack_mode: AckMode):
        self.connection = connection
        self.ack_mode = ack_mode
        self.settings = connection.settings
        self._tag = uuid.uuid4().hex[:12]
        self._tx_seq = 0
        self._tx: TransactionLog | None = None
        self._unacked: list[Delivery] = []  # CLIENT, DUPS_OK (lazy) and transacted receives
        self._consumers: list[MessageConsumer] = []
        self._closed = False
        self._lock = threading.RLock()
        self._dispatcher: threading.Thread | None = None
        self._wake = threading.Event()
        self._stopping = False  # close() began: the dispatcher takes no new message
        self._in_listener: Delivery | None = None  # the message a listener is handling now

    # --- JMS surface
    @property
    def transacted(self) -> bool:
        return self.ack_mode is AckMode.SESSION_TRANSACTED

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def create_producer(self, destination: Destination | None = None) -> "MessageProducer":
        self._check_open()
        return MessageProducer(self, destination)

    def create_consumer(self, destination: Destination, selector: str | None = None,
                        no_local: bool = False) -> "MessageConsumer":
        """A queue consumer, or a topic consumer on a new non-durable subscription."""
        self._check_open()
        if isinstance(destination, Topic):
            return self._subscribe(destination, topics.NON_DURABLE, None, selector, no_local)
        owner = topics.temporary_owner(destination.name)
        if owner is not None and owner != self.connection.client_id:
            raise InvalidDestinationError(f"{destination} is a temporary queue of another connection")
        selector_obj = parse_selector(selector)
        box = layout.queue_box(self.connection.root, destination).ensure() if owner is not None \
            else self.connection.queue_box(destination)
        consumer = MessageConsumer(self, box, destination, selector, selector_obj)
        self._consumers.append(consumer)
        return consumer

    def create_durable_consumer(self, topic: Topic, name: str, selector: str | None = None,
                                no_local: bool = False) -> "MessageConsumer":
        """Unshared durable subscription: needs a client id; one active consumer at a time."""
        return self._subscribe(topic, topics.DURABLE, name, selector, no_local)

    def create_shared_consumer(self, topic: Topic, name: str, selector: str | None = None) -> "MessageConsumer":
        """Shared non-durable subscription: consumers compete; it ends with its last consumer."""
        return self._subscribe(topic, topics.SHARED_NON_DURABLE, name, selector, False)

    def create_shared_durable_consumer(self, topic: Topic, name: str,
                                       selector: str | None = None) -> "MessageConsumer":
        """Shared durable subscription: consumers compete; it stays until unsubscribed."""
        return self._subscribe(topic, topics.SHARED_DURABLE, name, selector, False)

    def unsubscribe(self, name: str) -> None:
        """Remove a durable subscription and its messages (error if active or with pending work)."""
        self._check_open()
        topics.unsubscribe(self.connection, name)

    def _subscribe(self, topic: Topic, kind: str, name: str | None, selector: str | None,
                   no_local: bool) -> "MessageConsumer":
        self._check_open()
        if not isinstance(topic, Topic):
            raise InvalidDestinationError(f"{topic} is not a topic")
        owner = topics.temporary_owner(topic.name)
        if owner is not None and owner != self.connection.client_id:
            raise InvalidDestinationError(f"{topic} is a temporary topic of another connection")
        selector_obj = parse_selector(selector)  # invalid selector: error before anything is created
        sub, attachment = topics.open_subscription(self.connection, topic, kind, name, selector, no_local)
        consumer = MessageConsumer(self, sub.box, topic, selector, None)
        consumer._subscription, consumer._attachment = sub, attachment
        del selector_obj  # applied at fan-out: unmatched messages never reach the subscription
        self._consumers.append(consumer)
        return consumer

    def create_temporary_queue(self) -> "TemporaryQueue":
        """A queue removed by ``delete()`` or when this connection closes; only this
        connection may consume."""
        q = TemporaryQueue(topics.temporary_name(self.connection.client_id), self.connection)
        layout.queue_box(self.connection.root, q).ensure()
        self.connection._temporary.append(q)
        return q

    def create_temporary_topic(self) -> "TemporaryTopic":
        t = TemporaryTopic(topics.temporary_name(self.connection.client_id), self.connection)
        os.makedirs(layout.subscriptions_dir(self.connection.root, t), exist_ok=True)
        self.connection._temporary.append(t)
        return t

    def create_browser(self, queue: Queue, selector: str | None = None) -> "QueueBrowser":
        self._check_open()
        if topics.temporary_owner(queue.name) is None:
            self.connection.queue_box(queue)  # a typo is an error, not an empty browse
        return QueueBrowser(self, queue, selector)

    def create_text_message(self, text: str = "") -> TextMessage:
        return TextMessage(body=text.encode("utf-8"))

    def create_bytes_message(self, data: bytes = b"") -> BytesMessage:
        return BytesMessage(body=bytes(data))

    def create_map_message(self, values: dict | None = None) -> MapMessage:
        m = MapMessage()
        m.map = values or {}
        return m

    def create_stream_message(self, items: list | None = None) -> StreamMessage:
        m = StreamMessage()
        m.items = items or []
        return m

    def create_object_message(self, data: bytes = b"") -> ObjectMessage:
        return ObjectMessage(body=bytes(data))

    def create_message(self) -> Message:
        return Message()

    # --- acknowledgement
    def acknowledge(self, *messages: Message) -> None:
        """CLIENT_ACKNOWLEDGE: ack every message this session has consumed (JMS, not 1.2).
        Given messages, only those (ActiveMQ's individual acknowledge): a worker pool that
        finishes messages out of order acks each one as it is done."""
        with self._lock:
            self._check_open()
            if self.transacted:
                raise IllegalStateError("acknowledge() is not allowed in a transacted session")
            chosen, kept = self._held(messages)
            self.connection._check_lease("acknowledge")
            try:
                self._ack(chosen)
            except MessageTakenError:
                self._unacked = kept  # the others are acknowledged; the taken ones are not ours
                raise
            self._unacked = kept

    def _held(self, messages: tuple[Message, ...]) -> tuple[list[Delivery], list[Delivery]]:
        """The unacked deliveries of ``messages`` (all of them when none is given), and the rest."""
        if not messages:
            return self._unacked, []
        wanted = {id(m) for m in messages}
        chosen = [d for d in self._unacked if id(d.message) in wanted]
        if len(chosen) != len(wanted):
            raise IllegalStateError("a message given is not held by this session: it was never received here, "
                                    "or is already acknowledged, recovered or dead-lettered")
        return chosen, [d for d in self._unacked if id(d.message) not in wanted]

    def dead_letter(self, *messages: Message) -> None:
        """Give up on these unacknowledged messages: move them to error/ (DEAD_LETTER), where an
        operator finds them (``dropboxmq`` lists and requeues error/)."""
        with self._lock:
            self._check_open()
            if self.transacted:
                raise IllegalStateError("dead_letter() is not allowed in a transacted session")
            if not messages:
                raise ValueError("dead_letter() needs the messages to give up on")
            chosen, kept = self._held(messages)
            for d in chosen:
                d.box.move(Move.DEAD_LETTER, State.DELIVERED, d.processing_name)
            self._unacked = kept

    def _ack(self, deliveries: list[Delivery], durable: bool = True) -> None:
        """ACK each delivery; fsync processed/ once per directory for persistent ones.
        MessageTakenError (after the others are acked) for a claim that recovery took away."""
        touched, taken = [], []
        for d in deliveries:
            moved = claims.finish(d.box, Move.ACK, d.processing_name)
            if not moved and not os.path.isdir(d.box.dir(State.DELIVERED)):
                continue  # its subscription was removed (by another connection): nothing to ack
            if not moved and not d.acked and not _acked_under_own_name(d):
                taken.append(d)  # fenced by construction: recovery renamed our claim away
                continue
            d.acked = True
            # not moved = acked by an earlier acknowledge() whose sync failed: sync again
            if (moved or self.ack_mode is AckMode.CLIENT_ACKNOWLEDGE) and \
                    d.message.delivery_mode == DeliveryMode.PERSISTENT:
                touched.append((d.box, State.ACKNOWLEDGED))
        if durable and touched:
            try:
                sync_many(touched)
            except OSError as exc:
                if self.ack_mode is AckMode.CLIENT_ACKNOWLEDGE:
                    # acknowledge() must not return before its acks are durable (issue 6: a
                    # power loss undid CLIENT acks whose fsync had failed with EIO); the
                    # session keeps them in its unacked list, so a retry syncs again.
                    err = StoreError(f"acknowledgement of {len(touched)} message(s) is not durable: {exc}")
                    err.errno = exc.errno  # type: ignore[attr-defined]
                    raise err from exc
                # The renames are done: the messages are acknowledged.  Should a crash undo
                # them, they come back redelivered (at-least-once), so raising here would only
                # make the caller drop a message it was given (stress fail-at-N, claim call 5).
                log.warning("acknowledgement of %d message(s) may not survive a crash: %s", len(touched), exc)
        if taken and self.ack_mode is not AckMode.DUPS_OK_ACKNOWLEDGE:  # (DUPS_OK promises no more)
            ids = tuple(d.message.message_id or d.original_name for d in taken)
            raise MessageTakenError(
                f"{len(taken)} message(s) not acknowledged: recovery took them back from this client "
                f"(presumed dead: lease or lock lost) and they are delivered again: {', '.join(ids[:5])}"
                f"{' ...' if len(ids) > 5 else ''}", ids)

    def recover(self, *messages: Message, back_off: bool = False) -> None:
        """Stop, and redeliver every unacknowledged message from the oldest on; given
        messages, only those.  With ``back_off`` (processing failed), each consumer holds them
        back for its redelivery delay first, as it does when a listener raises."""
        with self._lock:
            self._check_open()
            if self.transacted:
                raise IllegalStateError("recover() is not allowed in a transacted session; use rollback()")
            chosen, kept = self._held(messages)
            self._redeliver(chosen, back_off)
            self._unacked = kept

    def _redeliver(self, deliveries: list[Delivery], back_off: bool = False) -> None:
        for d in deliveries:
            d.box.move(Move.REDELIVER, State.DELIVERED, d.processing_name, d.original_name)
        if back_off:
            self._back_off(deliveries)
        for c in self._consumers:
            c._scanner.invalidate()

    def _back_off(self, deliveries: list[Delivery]) -> None:
        """Each consumer of a redelivered message waits its redelivery delay before retrying it."""
        for c in self._consumers:
            for d in deliveries:
                if c.box.path == d.box.path:
                    c._back_off(d.original_name, d.message.delivery_count)

    # --- transactions
    def _tx_log(self) -> TransactionLog:
        if self._tx is None:
            self._tx_seq += 1
            self._tx = TransactionLog(self.connection.root, self.connection.client_id, self._tag, self._tx_seq)
        return self._tx

    def commit(self) -> None:
        with self._lock:
            self._check_open()
            if not self.transacted:
                raise IllegalStateError("commit() needs a transacted session")
            self.connection._check_lease("commit")
            tx, self._tx = self._tx, None
            self._unacked = []
            if tx is not None:
                tx.commit(durable=True)

    def rollback(self) -> None:
        with self._lock:
            self._check_open()
            if not self.transacted:
                raise IllegalStateError("rollback() needs a transacted session")
            self._rollback()

    def _rollback(self) -> None:
        tx, self._tx = self._tx, None
        self._unacked = []
        if tx is not None:
            tx.rollback()
        for c in self._consumers:
            c._scanner.invalidate()

    def close(self, grace: float | None = None) -> None:
        """Close: let a running listener finish (within ``grace`` seconds, see
        Connection.close), roll back an open transaction, redeliver unacked CLIENT messages,
        flush DUPS_OK acks."""
        if self._closed:
            return
        self._stopping = True
        self._wake.set()
        overran = False
        dispatcher = self._dispatcher
        if dispatcher is not None and dispatcher is not threading.current_thread():
            dispatcher.join(grace)
            overran = dispatcher.is_alive()
            running = self._in_listener
            if overran and running is not None:
                log.warning("message listener still running %s s after close: %s returned to the queue",
                            grace, running.message.message_id)
                self._redeliver([running])
        # an overrunning listener holds the lock: clean up without it (its late ack finds nothing)
        locked = self._lock.acquire(blocking=not overran)
        try:
            if self._closed:
                return
            self._closed = True
            if self.transacted:
                self._rollback()
            elif self.ack_mode is AckMode.DUPS_OK_ACKNOWLEDGE:
                self._ack(self._unacked)
            else:
                self._redeliver(self._unacked)
            self._unacked = []
            for consumer in list(self._consumers):
                consumer.close()  # ends non-durable subscriptions
            if self in self.connection._sessions:
                self.connection._sessions.remove(self)
        finally:
            if locked:
                self._lock.release()

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("session is closed")
        self.connection._check_open()

    def _forget(self, box: Dropbox) -> None:
        self._unacked = [d for d in self._unacked if d.box.path != box.path]

    # --- delivery bookkeeping (called by consumers)
    def _delivered(self, d: Delivery, *, by_listener: bool = False) -> None:
        mode = self.ack_mode
        if mode is AckMode.SESSION_TRANSACTED:
            try:
                self._tx_log().record("receive", d.box, d.processing_name)
            except OSError as exc:
                # Not in the log means nobody would ever redeliver it: put it back now.
                self._redeliver([d])
                raise StoreError(f"cannot record the receive in the transaction log: {exc}") from exc
            self._unacked.append(d)
        elif mode is AckMode.AUTO_ACKNOWLEDGE:
            if not by_listener:
                self._ack_or_return(d)  # receive(): acked as it returns
        elif mode is AckMode.DUPS_OK_ACKNOWLEDGE:
            if not by_listener:
                self._unacked.append(d)
                if len(self._unacked) >= self.settings.dups_ok_batch:
                    self._ack(self._unacked, durable=False)
                    self._unacked = []
        else:
            self._unacked.append(d)

    def _ack_or_return(self, d: Delivery) -> None:
        """AUTO ack of one delivery.  If the ack fails (ENOSPC...), the message goes back
        to target/ (or, if that fails too, close() redelivers it) and the error surfaces."""
        try:
            self._ack([d])
        except StoreError:
            try:
                self._redeliver([d])
            except StoreError:
                self._unacked.append(d)
            raise

    def _flush_lazy_acks(self) -> None:
        if self.ack_mode is AckMode.DUPS_OK_ACKNOWLEDGE and self._unacked:
            self._ack(self._unacked, durable=False)
            self._unacked = []

    # --- listeners: one dispatcher thread per session (JMS sessions are single-threaded)
    def _ensure_dispatcher(self) -> None:
        if self._dispatcher is None:
            self._dispatcher = threading.Thread(target=self._dispatch_loop, name=f"dropboxmq-{self._tag}",
                                                daemon=True)
            self._dispatcher.start()
        self._wake.set()

    def _dispatch_loop(self) -> None:
        wait = 0.001
        while not (self._closed or self._stopping):
            if not self.connection._started.is_set():
                self.connection._started.wait(self.settings.poll_interval)
                continue
            delivered = False
            for consumer in list(self._consumers):
                if consumer._listener is None or consumer._closed:
                    continue
                with self._lock:
                    if self._closed or self._stopping:
                        return
                    try:
                        d = consumer._claim_next()
                        if d is None:
                            continue
                        delivered = True
                        self._run_listener(consumer, d)
                    except (StoreError, MessageTakenError, LeaseExpiredError) as exc:  # keep the dispatcher alive
                        log.warning("listener delivery failed: %s", exc)
                        delivered = False
            if delivered:
                wait = 0.001
            else:
                with self._lock:
                    self._flush_lazy_acks()
                self._wake.wait(wait)
                self._wake.clear()
                wait = min(wait * 2, self.settings.poll_interval)

    def _run_listener(self, consumer: "MessageConsumer", d: Delivery) -> None:
        self._delivered(d, by_listener=True)
        self._in_listener = d
        try:
            consumer._listener(d.message)  # type: ignore[misc]  # set: the dispatcher checked
        except Exception:
            log.exception("message listener raised; the message will be redelivered")
            if self.ack_mode in (AckMode.AUTO_ACKNOWLEDGE, AckMode.DUPS_OK_ACKNOWLEDGE):
                self._redeliver([d], back_off=True)
            return
        finally:
            self._in_listener = None
        if self.ack_mode is AckMode.AUTO_ACKNOWLEDGE:
            self._ack_or_return(d)
        elif self.ack_mode is AckMode.DUPS_OK_ACKNOWLEDGE:
            self._unacked.append(d)
            if len(self._unacked) >= self.settings.dups_ok_batch:
                self._flush_lazy_acks()


# ---------------------------------------------------------------- producer


class MessageProducer:
    def __init__(self, session: Session, destination: Destination | None):
        self.session = session
        self.destination = destination
        self.delivery_mode = DeliveryMode.PERSISTENT
        self.priority = 4
        self.time_to_live = 0.0  # seconds; 0 = never expires
        self.delivery_delay = 0.0  # seconds

    def _prepare(self, msg: Message, destination: Destination | None, delivery_mode: DeliveryMode | None = None,
                 priority: int | None = None, time_to_live: float | None = None,
                 delivery_delay: float | None = None) -> tuple[Message, str, list[Dropbox]]:
        """Stamp the headers; return the message, its file name and the dropboxes it goes to."""
        dest = destination or self.destination
        if dest is None:
            raise InvalidDestinationError("no destination: give one to the producer or to send()")
        mode = self.delivery_mode if delivery_mode is None else delivery_mode
        if type(mode) is not DeliveryMode:
            mode = DeliveryMode(mode)
        prio = self.priority if priority is None else priority
        if isinstance(prio, bool) or not isinstance(prio, int) or not 0 <= prio <= 9:
            raise ValueError(f"priority must be an int from 0 to 9, got {prio!r}")
        ttl = self.time_to_live if time_to_live is None else time_to_live
        delay = self.delivery_delay if delivery_delay is None else delivery_delay
        if ttl < 0 or delay < 0:
            raise ValueError("time_to_live and delivery_delay must be >= 0")
        msg.message_id, msg.timestamp = ids.new_message_id_and_time()
        msg.priority, msg.delivery_mode, msg.destination = prio, mode, dest
        msg.expiration = msg.timestamp + int(ttl * 1000) if ttl > 0 else 0
        msg.delivery_time = msg.timestamp + int(delay * 1000) if delay > 0 else msg.timestamp
        msg.redelivered, msg.delivery_count = False, 1
        name = to_wire(msg)
        return msg, name, self.session.connection._boxes_for_send(dest, msg)

    def send(self, message: "Message | Destination | Body", destination: "Destination | Body | None" = None, *,
             delivery_mode: DeliveryMode | None = None, priority: int | None = None,
             time_to_live: float | None = None, delivery_delay: float | None = None) -> Message:
        """Send; returns when the message is NEW (or, transacted, NOT_COMMITTED until commit).
        On a topic, one copy goes to every matching subscription.

        Either ``send(message[, destination])`` (JMS) or ``send(destination, body)``; a body
        may be a Message or plain data: str -> TextMessage, bytes -> BytesMessage,
        dict -> MapMessage, list -> StreamMessage."""
        self.session._check_open()
        body, dest = (destination, message) if isinstance(message, (Queue, Topic)) else (message, destination)
        if body is None or isinstance(body, (Queue, Topic)) or not (dest is None or isinstance(dest, (Queue, Topic))):
            raise InvalidDestinationError("send(message[, destination]) or send(destination, body)")
        prepared = self._prepare(as_message(body), dest, delivery_mode, priority, time_to_live, delivery_delay)
        self._write([prepared])
        return prepared[0]

    def send_file(self, file: BinaryIO, message: Message | None = None, destination: Destination | None = None,
                  **headers: Any) -> Message:
        """Send the contents of an open regular file (from its start) without reading it into
        memory.  ``message`` (default: a BytesMessage) gives the class, headers and properties;
        its own body is ignored.  ``headers``: as send().  Returns ``message``, body empty."""
        self.session._check_open()
        msg = BytesMessage() if message is None else message
        msg.body = b""
        prepared = self._prepare(msg, destination, **headers)
        self._write([prepared], source=file)
        return prepared[0]

    def send_many(self, messages: list[Message], destination: Destination | None = None, **kw: Any) -> list[Message]:
        """Bulk send with group commit: fsync each file, rename all, fsync each target/ once."""
        self.session._check_open()
        prepared = [self._prepare(m, destination, **kw) for m in messages]
        self._write(prepared)
        return [m for m, _, _ in prepared]

    def _write(self, prepared: list[tuple[Message, str, list[Dropbox]]], source: BinaryIO | None = None) -> None:
        """CREATE every copy, then SEND them.  One copy: fsync the file and target/.
        Several (bulk send, topic fan-out): group commit — write them all, make them durable
        together (store.sync_files), rename them all, then one more sync for the directories.
        ``source``: an open file holding the (one) message's body."""
        session, root = self.session, self.session.connection.root
        group = sum(len(boxes) for _, _, boxes in prepared) > 1
        session.connection._check_lease("send")
        with session._lock:
            if session.transacted:  # NOT_COMMITTED until commit() syncs and SENDs them all
                for msg, name, boxes in prepared:
                    for box in boxes:
                        session._tx_log().record("send", box, name, _size(msg.body))
                        create_copy(box, name, msg, isinstance(msg.destination, Topic), durable=False,
                                    source=source)
                return
            created: list[tuple[Dropbox, str, bool, bool]] = []  # box, name, durable, topic copy
            with contextlib.ExitStack() as held:
                for box in {b.dir(State.NOT_COMMITTED): b for _, _, boxes in prepared for b in boxes}.values():
                    held.enter_context(box.working_lock())  # no orphan sweep while we CREATE..SEND
                try:
                    for msg, name, boxes in prepared:
                        durable = msg.delivery_mode == DeliveryMode.PERSISTENT
                        topic_copy = isinstance(msg.destination, Topic)
                        for box in boxes:
                            if create_copy(box, name, msg, topic_copy, durable=durable and not group,
                                           source=source):
                                created.append((box, name, durable, topic_copy))
                    durable_copies = [(box, name) for box, name, durable, _ in created if durable]
                    if group and durable_copies:  # every file durable before any rename is
                        sync_files(root, [box.file(State.NOT_COMMITTED, name) for box, name in durable_copies],
                                   sum(_size(m.body) * len(bs) for m, _, bs in prepared))
                    for box, name, _, topic_copy in created:
                        _send_created(box, name, topic_copy)
                except BaseException:
                    for box, name, *_ in created:  # those already SENT are gone from working/: no-op
                        box.move(Move.DISCARD, State.NOT_COMMITTED, name)
                    raise
            if durable_copies:
                sync_many((box, State.NEW) for box, _ in durable_copies)


def _acked_under_own_name(d: Delivery) -> bool:
    """Did an ACK whose rename answered "no such file" happen after all?  (NFS retransmits a
    RENAME whose reply was lost and answers the retry ENOENT.)  Then the message is in processed/
    under the name the ACK gives it: this claim's own name, or for an alias claim its message's
    name with the alias's inode."""
    box, pname = d.box, d.processing_name
    inode = claims.alias_inode(pname)
    try:
        if inode is None:
            box.stat(State.ACKNOWLEDGED, pname)
            return True
        return box.stat(State.ACKNOWLEDGED, d.original_name).st_ino == inode
    except FileNotFoundError:
        return False


def _store_error_of(action: str, name: str, exc: OSError) -> StoreError:
    err = StoreError(f"cannot {action} {name}: {exc.strerror or exc}")
    err.errno = exc.errno  # type: ignore[attr-defined]
    return err


def _size(body: object) -> int:
    return len(body) if isinstance(body, (bytes, bytearray, memoryview)) else 0


def _send_created(box: Dropbox, name: str, topic_copy: bool) -> None:
    """SEND a file this producer just created.  Gone from working/ means someone else moved
    or deleted it (a purge, a foreign sweep): the send failed and must not be reported as done.
    (A subscription removed while we publish takes its working/ with it: that copy is skipped.)"""
    moved = box.move(Move.SEND, State.NOT_COMMITTED, name)
    if not moved and not (topic_copy and not os.path.isdir(box.dir(State.NOT_COMMITTED))):
        raise StoreError(f"cannot send {box.file(State.NOT_COMMITTED, name)}: it left working/ before it "
                         "was sent (moved or deleted by another program)")


def temporary_gone(dest: Destination | None) -> InvalidDestinationError:
    return InvalidDestinationError(f"{dest} does not exist: the connection that created it has closed")


def create_copy(box: Dropbox, name: str, msg: Message, topic_copy: bool, durable: bool,
                source: BinaryIO | None = None) -> bool:
    """CREATE one copy (the body from ``source`` if given); a subscription removed while we
    publish is skipped (False)."""
    try:
        box.create(name, msg.body if source is None else source, durable)
    except StoreError as exc:
        if getattr(exc, "errno", None) == errno.ENOENT:
            if topic_copy:
                return False
            if topics.temporary_owner(box.path.parent.name) is not None:  # deleted while we send
                raise temporary_gone(msg.destination) from exc
        raise
    return True


#: What send() and receive_body() accept and return besides Message objects.
Body = Union[str, bytes, dict[str, Any], list[Any]]


def as_message(body: "Message | Body") -> Message:
    """The message for a plain body: str -> TextMessage, bytes -> BytesMessage,
    dict -> MapMessage, list -> StreamMessage; a Message stays itself."""
    if isinstance(body, Message):
        return body
    if isinstance(body, str):
        return TextMessage(body)
    if isinstance(body, (bytes, bytearray, memoryview)):
        return BytesMessage(bytes(body))
    if isinstance(body, dict):
        m = MapMessage()
        m.map = body
        return m
    if isinstance(body, list):
        s = StreamMessage()
        s.items = body
        return s
    raise TypeError(f"a message body is a Message, str, bytes, dict or list, not {type(body).__name__}")


def body_of(msg: Message) -> "Body":
    """A message's body as Python data: str, bytes, dict (MapMessage) or list (StreamMessage)."""
    if isinstance(msg, TextMessage):
        return msg.text
    if isinstance(msg, MapMessage):
        return msg.map
    if isinstance(msg, StreamMessage):
        return msg.items
    return msg.body


# ---------------------------------------------------------------- consumer side


class _Scanner:
    """Which name to try next: the names of the last listing of ``target/``, in delivery order.

    A fresh listing is taken when the walk reaches its end or ``scan_interval`` passed
    (scaled by how long a listing takes: at most a tenth of the time goes to listing), so
    newly arrived higher-priority messages overtake the backlog within one scan interval
    and a listing's cost is shared by every message it found.
    """

    def __init__(self, box: Dropbox, settings: Settings):
        self.box = box
        self.settings = settings
        self._walk: list[str] = []  # the listing in delivery order, less the skipped names
        self._pos = 0  # the next name of the walk to try
        self._fresh_until = -1e9  # monotonic time after which the listing is taken again
        # codec.sort_rank of every listed name, so that a relisting keys only the new names (one
        # int a name, not a tuple: a 1M backlog's keys cost ~50 MB instead of ~120 MB)
        self._ranks: dict[str, int] = {}
        self._order: list[str] = []  # every name of the last listing, in delivery order
        self.skip: set[str] = set()  # names this consumer must not try again (selector, poison)
        self.registered: frozenset[int] = frozenset()  # inodes of the claim register (claims.py)

    @property
    def names_listed(self) -> int:
        """Names in the last listing of target/ (what a relisting costs)."""
        return len(self._ranks)

    @property
    def walk_length(self) -> int:
        """Names the last listing gave to try, at most one claim each, before the next listing."""
        return len(self._walk)

    def invalidate(self) -> None:
        self._walk, self._pos = [], 0

    def lost_race(self) -> None:
        """A competing consumer claimed the name just tried: it is working through the same
        listing in the same order, so following it name by name would lose every race.  Jump
        to a random place among the remaining names of the same priority instead; names
        jumped over stay for the others or the next listing.  (A lone consumer never loses
        a race, so its order is untouched.)"""
        walk, lo = self._walk, self._pos
        if lo >= len(walk):
            return
        ranks, priority_of = self._ranks, codec.rank_priority
        hi = bisect.bisect_right(walk, priority_of(ranks[walk[lo]]), lo=lo, key=lambda n: priority_of(ranks[n]))
        if hi - lo > 1:
            self._pos = random.randrange(lo, hi)

    def relist(self) -> None:
        """List target/ and walk it from the head.  Only names new since the last listing are
        ranked and sorted; they are merged into the kept order (timsort merges two sorted
        runs in linear time), so a relisting of a large backlog costs O(listing), not
        O(n log n) rank computations.  Equal ranks (foreign names of one priority) keep the
        order they were first listed in."""
        started = time.monotonic()
        self.registered = claims.registered(self.box)  # (before the listing: no entry is missed)
        names = self.box.list(State.NEW)
        ranks = self._ranks
        listed = set(names)
        del names
        gone = ranks.keys() - listed
        for n in gone:
            del ranks[n]
        fresh = sorted(listed.difference(ranks))  # by name first: equal ranks in name order
        del listed
        rank = codec.sort_rank
        for n in fresh:
            ranks[n] = rank(n)
        fresh.sort(key=ranks.__getitem__)
        order = [n for n in self._order if n in ranks] if gone else self._order
        if fresh:
            order = order + fresh if order else fresh
            if len(order) > len(fresh):
                order.sort(key=ranks.__getitem__)
        self._order = order
        if self.skip:
            self.skip &= ranks.keys()
            order = [n for n in order if n not in self.skip]
        self._walk, self._pos = order, 0
        listed_at = time.monotonic()
        # a tenth of the time at most goes to listing; a new high priority waits one scan interval
        self._fresh_until = listed_at + max(self.settings.scan_interval, 10 * (listed_at - started))

    def next(self) -> str | None:
        walk = self._walk
        if self._pos >= len(walk) or time.monotonic() > self._fresh_until:
            self.relist()
            walk = self._walk
        skip = self.skip
        while self._pos < len(walk):
            name = walk[self._pos]
            self._pos += 1
            if name not in skip:
                return name
        return None


def parse_selector(text: str | None) -> "Selector | None":
    return selector_for(text) if text and text.strip() else None


def delete_temporary(root: Path, dest: Destination) -> None:
    import shutil

    path = Path(root) / dest.name if isinstance(dest, Queue) else layout.topic_dir(root, dest)
    shutil.rmtree(path, ignore_errors=True)


class MessageListener(Protocol):
    def on_message(self, message: Message) -> Any: ...


class MessageConsumer:
    def __init__(self, session: Session, box: Dropbox, destination: Destination, selector: str | None,
                 selector_obj: "Selector | None" = None):
        self.session = session
        self.box = box.hold_dirs()  # claim, read and ack by name in held directories (closed with the consumer)
        self.destination = destination
        self.message_selector = selector or None
        # the claim policy (decision.decide); a selector here on queues only: topics filter at fan-out
        self._policy = ClaimSettings(selector_obj, session.settings.max_delivery_attempts)
        self._subscription: topics.Subscription | None = None
        self._attachment: topics.Attachment | None = None
        self._scanner = _Scanner(box, session.settings)
        self._listener: Callable[[Message], Any] | None = None
        self._closed = False
        self._last_recovery = -1e9
        self._deferred: dict[str, int] = {}  # names with a future delivery time or retry -> ms
        settings = session.settings
        self.redelivery_delay = settings.redelivery_delay  # s; 0 = retry at once
        self.redelivery_backoff = settings.redelivery_backoff
        self.max_redelivery_delay = settings.max_redelivery_delay

    # --- JMS surface
    def receive(self, timeout: float | None = None) -> Message | None:
        """Wait up to ``timeout`` seconds (None: forever, 0: don't wait) for a message."""
        d = self._receive(timeout, read_body=True)
        return None if d is None else d.message

    def receive_body(self, timeout: float | None = None) -> "Body | None":
        """receive(), returning just the body as Python data (str for a TextMessage, bytes,
        dict for a MapMessage, list for a StreamMessage); None when no message came."""
        msg = self.receive(timeout)
        return None if msg is None else body_of(msg)

    def receive_streamed(self, timeout: float | None = None) -> tuple[Message, BinaryIO] | None:
        """receive() for large bodies: the message without its body, and the body as an open
        binary file to read in chunks (close it when done).  Acknowledged as receive() is."""
        d = self._receive(timeout, read_body=False)
        return None if d is None or d.body_file is None else (d.message, d.body_file)

    def messages(self, timeout: float | None = None) -> Iterator[Message]:
        """Iterate over messages as they arrive; stop when none arrives within ``timeout``
        seconds (None: never stop).  ``for m in consumer`` does not wait at all."""
        while (m := self.receive(timeout)) is not None:
            yield m

    def next_retry_in(self) -> float | None:
        """Seconds until a message this consumer holds back (redelivery backoff, delivery
        delay) is due again; None when it holds none back."""
        if not self._deferred:
            return None
        return max(0.0, (min(self._deferred.values()) - now_ms()) / 1000)

    def _receive(self, timeout: float | None, read_body: bool) -> Delivery | None:
        self._check_receive()
        session = self.session
        deadline = None if timeout is None else time.monotonic() + timeout
        wait = 0.001
        while True:
            if session.connection._started.is_set():
                with session._lock:
                    d = self._claim_next(read_body)
                    if d is not None:
                        try:
                            session._delivered(d)
                        except BaseException:
                            if d.body_file is not None:
                                d.body_file.close()
                            raise
                        return d
                    session._flush_lazy_acks()
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            time.sleep(wait if remaining is None else min(wait, remaining))
            wait = min(wait * 2, self.session.settings.poll_interval)
            self._check_receive()

    def receive_no_wait(self) -> Message | None:
        return self.receive(0)

    def set_message_listener(self, listener: "Callable[[Message], Any] | MessageListener | None") -> None:
        """Deliver messages to ``listener``: a callable taking the message, or an object with
        an ``on_message(message)`` method (JMS style).  None stops delivery."""
        self.session._check_open()
        if listener is None or callable(listener):
            self._listener = listener
        elif callable(getattr(listener, "on_message", None)):
            self._listener = listener.on_message
        else:
            raise TypeError(f"a message listener is a callable or has an on_message(message) method; "
                            f"{type(listener).__name__} is neither")
        if listener is not None:
            self.session._ensure_dispatcher()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.box.close()
        if self in self.session._consumers:
            self.session._consumers.remove(self)
        if self._subscription is not None and self._attachment is not None:
            if self._subscription.info.durable is False:
                # Unacked messages of a non-durable subscription die with it.
                self.session._forget(self.box)
            topics.close_consumer(self._subscription, self._attachment)

    def __enter__(self) -> "MessageConsumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[Message]:
        while (m := self.receive(0)) is not None:
            yield m

    def _back_off(self, name: str, deliveries: int) -> None:
        """Hold ``name`` (just redelivered after its ``deliveries``-th delivery) back for the
        exponential redelivery delay."""
        if self.redelivery_delay <= 0:
            return
        delay = min(self.max_redelivery_delay, self.redelivery_delay * self.redelivery_backoff ** (deliveries - 1))
        self._deferred[name] = now_ms() + int(delay * 1000)
        self._scanner.skip.add(name)

    def _check_receive(self) -> None:
        self.session._check_open()
        if self._closed:
            raise IllegalStateError("consumer is closed")
        if self._listener is not None:
            raise IllegalStateError("receive() is not allowed while a message listener is set")

    # --- the claim
    def _claim_next(self, read_body: bool = True) -> Delivery | None:
        """Try names in order until one claim succeeds; None when target/ has nothing for us."""
        self.session.connection._check_lease("receive")
        now_mono = time.monotonic()
        if now_mono - self._last_recovery > self.session.settings.recovery_interval:
            self._last_recovery = now_mono
            finish_dead_commits(self.session.connection.root)  # e.g. a publisher killed mid fan-out
            reclaim_dead_owners(self.session.connection.root, self.box)
            if self.session.settings.retention is not None:
                retention.prune(self.box, ["processed", "expired"], self.session.settings.retention,
                                root=self.session.connection.root)
        scanner = self._scanner
        if self._deferred:  # delayed messages whose delivery time has come are eligible again
            now = now_ms()
            due = [n for n, t in self._deferred.items() if t <= now]
            for n in due:
                del self._deferred[n]
                scanner.skip.discard(n)
            if due:
                scanner.invalidate()
        while (name := scanner.next()) is not None:
            d = self._try_claim(name, read_body)
            if d is not None:
                return d
        return None

    def _try_claim(self, name: str, read_body: bool = True) -> Delivery | None:
        """Execute decision.decide's verdict on ``name``: one lifecycle move each."""
        box, scanner = self.box, self._scanner
        now = now_ms()
        # a name that cannot carry its delivery count has it in the claim register
        entry = claims.lookup(box, State.NEW, name, scanner.registered) if scanner.registered else None
        attempted = 0 if entry is None else entry.count
        verdict, header, count, claimed, until, dead_letter = decide(name, now, self._policy, attempted)
        if verdict is not Verdict.CLAIM:
            if verdict is Verdict.EXPIRE:
                box.move(Move.EXPIRE, State.NEW, name)
            else:  # SKIP: a name never changes, it will never match; DEFER: not before `until`
                if verdict is Verdict.DEFER:
                    self._deferred[name] = until
                scanner.skip.add(name)
            return None
        try:
            try:
                pname = claims.claim_name(box, self.session.connection.client_id, name, claimed, count,
                                          entry is not None)
            except FileNotFoundError:
                pname = ""  # claimed by another consumer before we could register it
            except claims.StaleCount:
                scanner.invalidate()  # the next walk lists the register again and reads the count
                return None
            except OSError as exc:
                raise _store_error_of("register the claim of", name, exc) from exc
            if not pname or not box.move(Move.CLAIM, State.NEW, name, pname):
                scanner.lost_race()
                return None  # lost the race: normal, silent
        except StoreError as exc:
            if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                raise  # the whole store is affected (nothing moved): tell the caller
            log.warning("cannot claim %s, skipping it: %s", name, exc)
            scanner.skip.add(name)
            return None
        if entry is not None and claims.alias_inode(pname) is None:
            claims.forget(box, box.stat(State.DELIVERED, pname).st_ino)  # the count is in the name now
        if dead_letter:
            log.warning("%s delivered %d times: dead-lettered to error/",
                        header.message_id if header is not None else name, count - 1)
            claims.finish(box, Move.DEAD_LETTER, pname)
            return None
        assert header is not None  # decide() decodes every name it claims
        body_file = None
        try:
            if read_body:
                header.body = box.read(State.DELIVERED, pname)
            else:
                body_file = box.open_body(State.DELIVERED, pname)
        except (NotARegularFile, OSError) as exc:
            log.warning("unreadable message %s quarantined to error/: %s", name, exc)
            try:
                claims.finish(box, Move.DEAD_LETTER, pname)
            except StoreError:
                # Not left in processing/: after a clean close() nobody would reclaim it
                # (stress faults case: EIO on the read, then on the rename into error/).
                box.move(Move.REDELIVER, State.DELIVERED, pname, claimed)
                raise
            return None
        header.destination = self.destination  # (from_wire set JMSXDeliveryCount = count)
        header._session = self.session  # type: ignore[attr-defined]
        return Delivery(box, pname, claimed, header, body_file)


class QueueBrowser:
    """Look at a queue's NEW messages in delivery order without moving anything.
    Expired and not-yet-deliverable messages are not shown."""

    def __init__(self, session: Session, queue: Queue, selector: str | None = None):
        self.session = session
        self.queue = queue
        self.box = layout.queue_box(session.connection.root, queue)
        self._selector = parse_selector(selector)

    def __iter__(self) -> Iterator[Message]:
        now = now_ms()
        names = sorted(self.box.list(State.NEW), key=codec.sort_key)
        for name in names:
            msg = from_wire(name, now)
            if msg.is_expired(now) or msg.delivery_time > now:
                continue
            if self._selector is not None and not self._selector.matches(msg):
                continue
            try:
                msg.body = self.box.read(State.NEW, name)
            except OSError:
                continue  # claimed meanwhile, or not a regular file
            msg.destination = self.queue
            yield msg

    def get_enumeration(self) -> Iterator[Message]:
        return iter(self)

    def close(self) -> None:
        pass
