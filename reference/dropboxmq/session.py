"""The JMS session: the producers, consumers and browsers it makes, and its ack mode, whose
steps are the table of ``ackmode.py`` (JMS semantics, PROTOCOL.md §4, not 1.2's).  What only
some sessions do lives where it is first used: a transacted session's steps in
``transaction.py``, giving messages back (recover, dead letters) in ``redelivery.py``, topic
subscriptions in ``topics.py``, listeners in ``listeners.py``.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from typing import TYPE_CHECKING, Any

from . import codec, layout
from .ackmode import POLICY, AckMode
from .claim import finish
from .consumer import Delivery, MessageConsumer
from .errors import IllegalStateError, InvalidDestinationError, MessageTakenError, StoreError
from .lifecycle import Move, State
from .message import (
    DeliveryMode,
    Destination,
    Message,
    Queue,
    TextMessage,
    Topic,
)
from .producer import MessageProducer
from .store import sync_many

if TYPE_CHECKING:
    from .bodies import BytesMessage, MapMessage, ObjectMessage, StreamMessage
    from .browser import QueueBrowser
    from .connection import Connection
    from .listeners import Dispatcher
    from .temporary import TemporaryQueue, TemporaryTopic
    from .transaction import TransactionLog

__all__ = ["Session"]

log = logging.getLogger("dropboxmq")


class Session:
    def __init__(self, connection: Connection, ack_mode: AckMode):
        self.connection = connection
        self.ack_mode = ack_mode
        self.policy = POLICY[ack_mode]  # what an ack, a failure, a recover and a close do (ackmode.py)
        self.settings = connection.settings
        self._tag = uuid.uuid4().hex[:12]
        self._tx_seq = 0
        self._tx: TransactionLog | None = None
        self._unacked: list[Delivery] = []  # CLIENT, DUPS_OK (lazy) and transacted receives
        self._consumers: list[MessageConsumer] = []
        self._closed = False
        self._lock = threading.RLock()
        self._dispatcher: Dispatcher | None = None  # made when the first listener is set (listeners.py)

    # --- JMS surface
    @property
    def transacted(self) -> bool:
        return self.policy.transacted

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
            return self._subscribe(destination, None, selector, no_local)
        owner = codec.temporary_owner(destination.name)
        if owner is not None and owner != self.connection.client_id:
            raise InvalidDestinationError(f"{destination} is a temporary queue of another connection")
        if owner is not None:  # a temporary queue of this connection
            from .dirs import ensure_dropbox

            box = ensure_dropbox(layout.queue_box(self.connection.root, destination))
        else:
            box = self.connection.queue_box(destination)
        consumer = MessageConsumer(self, box, destination, selector)
        self._consumers.append(consumer)
        return consumer

    def create_durable_consumer(self, topic: Topic, name: str, selector: str | None = None,
                                no_local: bool = False) -> "MessageConsumer":
        """Unshared durable subscription: needs a client id; one active consumer at a time."""
        return self._subscribe(topic, name, selector, no_local, durable=True)

    def create_shared_consumer(self, topic: Topic, name: str, selector: str | None = None) -> "MessageConsumer":
        """Shared non-durable subscription: consumers compete; it ends with its last consumer."""
        return self._subscribe(topic, name, selector, False, shared=True)

    def create_shared_durable_consumer(self, topic: Topic, name: str,
                                       selector: str | None = None) -> "MessageConsumer":
        """Shared durable subscription: consumers compete; it stays until unsubscribed."""
        return self._subscribe(topic, name, selector, False, durable=True, shared=True)

    def unsubscribe(self, name: str) -> None:
        """Remove a durable subscription and its messages (error if active or with pending work)."""
        self._check_open()
        from . import topics  # (subscriptions: imported when first used)

        topics.unsubscribe(self.connection, name)

    def _subscribe(self, topic: Topic, name: str | None, selector: str | None, no_local: bool,
                   durable: bool = False, shared: bool = False) -> "MessageConsumer":
        self._check_open()
        from . import topics  # (subscriptions: imported when first used)

        sub, attachment = topics.subscribe(self.connection, topic, name, selector, no_local, durable, shared)
        consumer = MessageConsumer(self, sub.box, topic, selector, filter_here=False)  # filtered at fan-out
        consumer._subscription, consumer._attachment = sub, attachment
        self._consumers.append(consumer)
        return consumer

    def create_temporary_queue(self) -> "TemporaryQueue":
        """A queue removed by ``delete()`` or when this connection closes; only this
        connection may consume."""
        from . import temporary  # (rarely used: not imported with the session)

        return temporary.create_queue(self)

    def create_temporary_topic(self) -> "TemporaryTopic":
        from . import temporary

        return temporary.create_topic(self)

    def create_browser(self, queue: Queue, selector: str | None = None) -> "QueueBrowser":
        self._check_open()
        from .browser import QueueBrowser  # (rarely used: not imported with the session)

        return QueueBrowser(self, queue, selector)

    def create_text_message(self, text: str = "") -> TextMessage:
        return TextMessage(body=text.encode("utf-8"))

    def create_bytes_message(self, data: bytes = b"") -> BytesMessage:
        from .bodies import BytesMessage  # (non-text bodies)
        return BytesMessage(body=bytes(data))

    def create_map_message(self, values: dict | None = None) -> MapMessage:
        from .bodies import MapMessage  # (non-text bodies)
        m = MapMessage()
        m.map = values or {}
        return m

    def create_stream_message(self, items: list | None = None) -> StreamMessage:
        from .bodies import StreamMessage  # (non-text bodies)
        m = StreamMessage()
        m.items = items or []
        return m

    def create_object_message(self, data: bytes = b"") -> ObjectMessage:
        from .bodies import ObjectMessage  # (non-text bodies)
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
            if messages:
                from .redelivery import held  # (individual acknowledge: imported when first used)

                chosen, kept = held(self, messages)
            else:
                chosen, kept = self._unacked, []
            self.connection.check_lease("acknowledge")
            try:
                self._ack(chosen)
            except MessageTakenError:
                self._unacked = kept  # the others are acknowledged; the taken ones are not ours
                raise
            self._unacked = kept

    def dead_letter(self, *messages: Message) -> None:
        """Give up on these unacknowledged messages: move them to error/ (DEAD_LETTER), where an
        operator finds them (``dropboxmq`` lists and requeues error/)."""
        from .redelivery import dead_letter  # (giving messages back: imported when first used)

        dead_letter(self, messages)

    def _ack(self, deliveries: list[Delivery], durable: bool = True) -> None:
        """ACK each delivery; fsync processed/ once per directory for persistent ones.
        MessageTakenError (after the others are acked) for a claim that recovery took away."""
        touched, taken = [], []
        for d in deliveries:
            moved = finish(d.box, Move.ACK, d.processing_name)
            if not moved and not os.path.isdir(d.box.dir(State.DELIVERED)):
                continue  # its subscription was removed (by another connection): nothing to ack
            if not moved and not d.acked:
                from .claims import acked_after_all  # (an ACK's rename answered ENOENT)

                if not acked_after_all(d.box, d.processing_name, d.original_name):
                    taken.append(d)  # fenced by construction: recovery renamed our claim away
                    continue
            d.acked = True
            # not moved = acked by an earlier acknowledge() whose sync failed: sync again
            if (moved or self.policy.durable_ack) and \
                    d.message.delivery_mode == DeliveryMode.PERSISTENT:
                touched.append((d.box, State.ACKNOWLEDGED))
        if durable and touched:
            try:
                sync_many(touched)
            except OSError as exc:
                if self.policy.durable_ack:
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
        if taken and self.policy.taken_is_error:
            from .redelivery import taken_error

            raise taken_error(taken)

    def recover(self, *messages: Message, back_off: bool = False) -> None:
        """Stop, and redeliver every unacknowledged message from the oldest on; given
        messages, only those.  With ``back_off`` (processing failed), each consumer holds them
        back for its redelivery delay first, as it does when a listener raises."""
        from .redelivery import recover  # (giving messages back: imported when first used)

        recover(self, messages, back_off)

    # --- transactions (transaction.py: a session that is not transacted never imports it)
    def commit(self) -> None:
        from .transaction import end_transaction

        end_transaction(self, commit=True)

    def rollback(self) -> None:
        from .transaction import end_transaction

        end_transaction(self, commit=False)

    def close(self, grace: float | None = None) -> None:
        """Close: let a running listener finish (within ``grace`` seconds, see
        Connection.close), roll back an open transaction, redeliver unacked CLIENT messages,
        flush DUPS_OK acks."""
        if self._closed:
            return
        overran = self._dispatcher is not None and self._dispatcher.stop(grace)
        # an overrunning listener holds the lock: clean up without it (its late ack finds nothing)
        locked = self._lock.acquire(blocking=not overran)
        try:
            if self._closed:
                return
            self._closed = True
            close = self.policy.close
            if close == "rollback":
                from .transaction import rollback_session

                rollback_session(self)
            elif close == "ack":
                self._ack(self._unacked)
            elif self._unacked:
                from .redelivery import redeliver

                redeliver(self, self._unacked)
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

    # --- delivery bookkeeping (called by consumers)
    def _delivered(self, d: Delivery, *, by_listener: bool = False) -> None:
        """A consumer claimed ``d`` for this session: the ack mode's *take* step, and for
        receive() its *done* step too (a listener's comes when the listener returns)."""
        take = self.policy.take
        if take == "log":
            from .transaction import record_receive

            record_receive(self, d)
        elif take == "hold":
            self._unacked.append(d)
        if not by_listener:
            self._done(d)  # receive(): done as it returns

    def _done(self, d: Delivery) -> None:
        """The application is done with ``d``: the ack mode's *done* step."""
        done = self.policy.done
        if done == "ack":
            self._ack_or_return(d)
        elif done == "batch":
            self._unacked.append(d)
            if len(self._unacked) >= self.settings.dups_ok_batch:
                self._flush_lazy_acks()

    def _ack_or_return(self, d: Delivery) -> None:
        """AUTO ack of one delivery.  If the ack fails (ENOSPC...), the message goes back
        to target/ (or, if that fails too, close() redelivers it) and the error surfaces."""
        try:
            self._ack([d])
        except StoreError:
            from .redelivery import redeliver

            try:
                redeliver(self, [d])
            except StoreError:
                self._unacked.append(d)
            raise

    def _flush_lazy_acks(self) -> None:
        """Ack the batch a DUPS_OK session keeps, without fsync (duplicates are allowed)."""
        if self.policy.done == "batch" and self._unacked:
            self._ack(self._unacked, durable=False)
            self._unacked = []

