"""The JMS session: what it makes, and its ack mode's steps (the table of ``ackmode.py``).  What
only some sessions do lives where it is first used (transaction, redelivery, topics, listeners).
"""

from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING, Any

from . import codec
from .ackmode import POLICY, AckMode
from .claim import Delivery, finish
from .consumer import MessageConsumer
from .errors import IllegalStateError, MessageTakenError, StoreError
from .lifecycle import Move, State
from .message import DeliveryMode, Destination, Message, Queue, TextMessage, Topic
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


class Session:
    def __init__(self, connection: Connection, ack_mode: AckMode):
        self.connection = connection
        self.ack_mode = ack_mode
        self.policy = POLICY[ack_mode]  # what an ack, a failure, a recover and a close do (ackmode.py)
        self.settings = connection.settings
        self.tag = uuid.uuid4().hex[:12]
        self.tx_seq = 0
        self.tx: TransactionLog | None = None
        self.unacked: list[Delivery] = []  # CLIENT, DUPS_OK (lazy) and transacted receives
        self.consumers: list[MessageConsumer] = []
        self.closed = False
        self.lock = threading.RLock()
        self.dispatcher: Dispatcher | None = None  # made when the first listener is set (listeners.py)

    # --- JMS surface
    @property
    def transacted(self) -> bool:
        return self.policy.transacted

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def create_producer(self, destination: Destination | None = None) -> "MessageProducer":
        self.check_open()
        return MessageProducer(self, destination)

    def create_consumer(self, destination: Destination, selector: str | None = None,
                        no_local: bool = False) -> "MessageConsumer":
        """A queue consumer, or a topic consumer on a new non-durable subscription."""
        self.check_open()
        if isinstance(destination, Topic):
            return self._subscribe(destination, None, selector, no_local)
        if codec.temporary_owner(destination.name) is not None:
            from .temporary import consumer_box  # (temporary destinations only)

            box = consumer_box(self.connection, destination)
        else:
            box = self.connection.queue_box(destination)
        consumer = MessageConsumer(self, box, destination, selector)
        self.consumers.append(consumer)
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

    def _subscribe(self, topic: Topic, name: str | None, selector: str | None, no_local: bool,
                   durable: bool = False, shared: bool = False) -> "MessageConsumer":
        self.check_open()
        from .topics import subscribed_consumer  # (subscriptions: imported when first used)

        return subscribed_consumer(self, topic, name, selector, no_local, durable, shared)

    def unsubscribe(self, name: str) -> None:
        """Remove a durable subscription and its messages (error if active or with pending work)."""
        self.check_open()
        from .topics import unsubscribe

        unsubscribe(self.connection, name)

    def create_temporary_queue(self) -> "TemporaryQueue":
        """A queue removed by ``delete()`` or with this connection; only it may consume."""
        from . import temporary  # (rarely used: not imported with the session)

        return temporary.create_queue(self)

    def create_temporary_topic(self) -> "TemporaryTopic":
        from . import temporary

        return temporary.create_topic(self)

    def create_browser(self, queue: Queue, selector: str | None = None) -> "QueueBrowser":
        self.check_open()
        from .browser import QueueBrowser  # (rarely used: not imported with the session)

        return QueueBrowser(self, queue, selector)

    def create_text_message(self, text: str = "") -> TextMessage:
        return TextMessage(body=text.encode("utf-8"))

    def create_bytes_message(self, data: bytes = b"") -> BytesMessage:
        from .bodies import BytesMessage  # (non-text bodies)
        return BytesMessage(body=bytes(data))

    def create_map_message(self, values: dict | None = None) -> MapMessage:
        from .bodies import as_message  # (non-text bodies: a dict makes a MapMessage)
        return as_message(values or {})  # type: ignore[return-value]

    def create_stream_message(self, items: list | None = None) -> StreamMessage:
        from .bodies import as_message  # (non-text bodies: a list makes a StreamMessage)
        return as_message(items or [])  # type: ignore[return-value]

    def create_object_message(self, data: bytes = b"") -> ObjectMessage:
        from .bodies import ObjectMessage  # (non-text bodies)
        return ObjectMessage(body=bytes(data))

    def create_message(self) -> Message:
        return Message()

    # --- acknowledgement
    def acknowledge(self, *messages: Message) -> None:
        """CLIENT_ACKNOWLEDGE: ack every message this session consumed; given messages, only those
        (ActiveMQ's individual acknowledge: a pool's workers each ack theirs)."""
        with self.lock:
            self.check_open()
            if self.transacted:
                raise IllegalStateError("acknowledge() is not allowed in a transacted session")
            if messages:
                from .redelivery import held  # (individual acknowledge: imported when first used)

                chosen, kept = held(self, messages)
            else:
                chosen, kept = self.unacked, []
            if (registration := self.connection.registration).leased:
                registration.check("acknowledge")
            try:
                self._ack(chosen)
            except MessageTakenError:
                self.unacked = kept  # the others are acknowledged; the taken ones are not ours
                raise
            self.unacked = kept

    def dead_letter(self, *messages: Message) -> None:
        """Give up on these unacknowledged messages: DEAD_LETTER them to error/."""
        from .redelivery import dead_letter  # (giving messages back: imported when first used)

        dead_letter(self, messages)

    def _ack(self, deliveries: list[Delivery], durable: bool = True) -> None:
        """ACK each delivery, then fsync processed/ once for the persistent ones.
        MessageTakenError (the others acked) for a claim that recovery took away."""
        touched = []
        taken: list[Delivery] = []  # (claims.acked_before adds to it)
        for d in deliveries:
            moved = finish(d.box, Move.ACK, d.processing_name)
            if not moved:
                from .claims import acked_before  # (no file to ACK: acked, unsubscribed or taken)

                if not acked_before(d, taken):
                    continue
            d.acked = True
            # not moved = acked by an earlier acknowledge() whose sync failed: sync again
            if (moved or self.policy.durable_ack) and d.message.delivery_mode == DeliveryMode.PERSISTENT:
                touched.append((d.box, State.ACKNOWLEDGED))
        if durable and touched:
            try:
                sync_many(touched)
            except OSError as exc:
                from .redelivery import ack_not_durable

                ack_not_durable(exc, len(touched), self.policy.durable_ack)
        if taken and self.policy.taken_is_error:
            from .redelivery import taken_error

            raise taken_error(taken)

    def recover(self, *messages: Message, back_off: bool = False) -> None:
        """Redeliver every unacknowledged message (given messages: those), oldest first; with
        ``back_off`` (processing failed) after each consumer's redelivery delay, as for a listener."""
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
        """Let a running listener finish (see Connection.close), then the *close* step."""
        if self.closed:
            return
        overran = self.dispatcher is not None and self.dispatcher.stop(grace)
        # an overrunning listener holds the lock: clean up without it (its late ack finds nothing)
        locked = self.lock.acquire(blocking=not overran)
        try:
            if self.closed:
                return
            self.closed = True
            if self.policy.close == "rollback":
                from .transaction import rollback_session

                rollback_session(self)
            elif self.policy.close == "ack":
                self._ack(self.unacked)
            elif self.unacked:
                from .redelivery import redeliver

                redeliver(self, self.unacked)
            self.unacked = []
            for consumer in list(self.consumers):
                consumer.close()  # ends non-durable subscriptions
            if self in self.connection.sessions:
                self.connection.sessions.remove(self)
        finally:
            if locked:
                self.lock.release()

    def check_open(self) -> None:
        if self.closed:  # (a closed connection has closed its sessions)
            raise IllegalStateError("session is closed")

    # --- the ack mode's steps (called by consumers and listeners)
    def delivered(self, d: Delivery, *, take: bool = True, done: bool = True) -> None:
        """The *take* step as ``d`` is claimed, and *done* when the application is done with it:
        both at once for receive(), a listener's *done* when it returns."""
        policy = self.policy
        if take and policy.take == "log":
            from .transaction import record_receive

            record_receive(self, d)
        elif take and policy.take == "hold":
            self.unacked.append(d)
        if done and policy.done == "ack":
            try:
                self._ack([d])
            except StoreError:  # (ENOSPC...): back to target/, and the error surfaces
                from .redelivery import return_failed_ack

                return_failed_ack(self, d)
                raise
        elif done and policy.done == "batch":
            self.unacked.append(d)
            if len(self.unacked) >= self.settings.dups_ok_batch:
                self.flush_lazy_acks()

    def flush_lazy_acks(self) -> None:
        """Ack the batch a DUPS_OK session keeps, without fsync (duplicates are allowed)."""
        if self.policy.done == "batch" and self.unacked:
            self._ack(self.unacked, durable=False)
            self.unacked = []
