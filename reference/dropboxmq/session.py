"""The JMS session: the producers, consumers and browsers it makes, and its ack mode.

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

import logging
import os
import threading
import uuid
from typing import TYPE_CHECKING, Any

from . import codec, layout
from .ackmode import POLICY, AckMode, Close, Done, Take
from .claim import finish
from .consumer import Delivery, MessageConsumer, compile_selector
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
from .store import Dropbox, sync_many

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
            from . import topics  # (subscriptions: imported when first used)

            return self._subscribe(destination, topics.NON_DURABLE, None, selector, no_local)
        owner = codec.temporary_owner(destination.name)
        if owner is not None and owner != self.connection.client_id:
            raise InvalidDestinationError(f"{destination} is a temporary queue of another connection")
        selector_obj = compile_selector(selector)
        if owner is not None:  # a temporary queue of this connection
            from .dirs import ensure_dropbox

            box = ensure_dropbox(layout.queue_box(self.connection.root, destination))
        else:
            box = self.connection.queue_box(destination)
        consumer = MessageConsumer(self, box, destination, selector, selector_obj)
        self._consumers.append(consumer)
        return consumer

    def create_durable_consumer(self, topic: Topic, name: str, selector: str | None = None,
                                no_local: bool = False) -> "MessageConsumer":
        """Unshared durable subscription: needs a client id; one active consumer at a time."""
        from . import topics  # (subscriptions: imported when first used)

        return self._subscribe(topic, topics.DURABLE, name, selector, no_local)

    def create_shared_consumer(self, topic: Topic, name: str, selector: str | None = None) -> "MessageConsumer":
        """Shared non-durable subscription: consumers compete; it ends with its last consumer."""
        from . import topics  # (subscriptions: imported when first used)

        return self._subscribe(topic, topics.SHARED_NON_DURABLE, name, selector, False)

    def create_shared_durable_consumer(self, topic: Topic, name: str,
                                       selector: str | None = None) -> "MessageConsumer":
        """Shared durable subscription: consumers compete; it stays until unsubscribed."""
        from . import topics  # (subscriptions: imported when first used)

        return self._subscribe(topic, topics.SHARED_DURABLE, name, selector, False)

    def unsubscribe(self, name: str) -> None:
        """Remove a durable subscription and its messages (error if active or with pending work)."""
        self._check_open()
        from . import topics  # (subscriptions: imported when first used)

        topics.unsubscribe(self.connection, name)

    def _subscribe(self, topic: Topic, kind: str, name: str | None, selector: str | None,
                   no_local: bool) -> "MessageConsumer":
        self._check_open()
        if not isinstance(topic, Topic):
            raise InvalidDestinationError(f"{topic} is not a topic")
        owner = codec.temporary_owner(topic.name)
        if owner is not None and owner != self.connection.client_id:
            raise InvalidDestinationError(f"{topic} is a temporary topic of another connection")
        selector_obj = compile_selector(selector)  # invalid selector: error before anything is created
        from . import topics  # (subscriptions: imported when first used)

        sub, attachment = topics.open_subscription(self.connection, topic, kind, name, selector, no_local)
        consumer = MessageConsumer(self, sub.box, topic, selector, None)
        consumer._subscription, consumer._attachment = sub, attachment
        del selector_obj  # applied at fan-out: unmatched messages never reach the subscription
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
        if codec.temporary_owner(queue.name) is None:
            self.connection.queue_box(queue)  # a typo is an error, not an empty browse
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
            chosen, kept = self._held(messages)
            self.connection.check_lease("acknowledge")
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
            moved = finish(d.box, Move.ACK, d.processing_name)
            if not moved and not os.path.isdir(d.box.dir(State.DELIVERED)):
                continue  # its subscription was removed (by another connection): nothing to ack
            if not moved and not d.acked and not _acked_under_own_name(d):
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
            from .transaction import TransactionLog  # (transacted sessions only)

            self._tx = TransactionLog(self.connection.root, self.connection.client_id, self._tag, self._tx_seq)
        return self._tx

    def commit(self) -> None:
        with self._lock:
            self._check_open()
            if not self.transacted:
                raise IllegalStateError("commit() needs a transacted session")
            self.connection.check_lease("commit")
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
        overran = self._dispatcher is not None and self._dispatcher.stop(grace)
        # an overrunning listener holds the lock: clean up without it (its late ack finds nothing)
        locked = self._lock.acquire(blocking=not overran)
        try:
            if self._closed:
                return
            self._closed = True
            close = self.policy.close
            if close is Close.ROLLBACK:
                self._rollback()
            elif close is Close.ACK:
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
        """A consumer claimed ``d`` for this session: the ack mode's *take* step, and for
        receive() its *done* step too (a listener's comes when the listener returns)."""
        take = self.policy.take
        if take is Take.LOG:
            try:
                self._tx_log().record("receive", d.box, d.processing_name)
            except OSError as exc:
                # Not in the log means nobody would ever redeliver it: put it back now.
                self._redeliver([d])
                raise StoreError(f"cannot record the receive in the transaction log: {exc}") from exc
            self._unacked.append(d)
        elif take is Take.HOLD:
            self._unacked.append(d)
        if not by_listener:
            self._done(d)  # receive(): done as it returns

    def _done(self, d: Delivery) -> None:
        """The application is done with ``d``: the ack mode's *done* step."""
        done = self.policy.done
        if done is Done.ACK:
            self._ack_or_return(d)
        elif done is Done.BATCH:
            self._unacked.append(d)
            if len(self._unacked) >= self.settings.dups_ok_batch:
                self._flush_lazy_acks()

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
        """Ack the batch a DUPS_OK session keeps, without fsync (duplicates are allowed)."""
        if self.policy.done is Done.BATCH and self._unacked:
            self._ack(self._unacked, durable=False)
            self._unacked = []

    def _ensure_dispatcher(self) -> None:
        """A listener was set: the session's dispatcher thread delivers to it (listeners.py)."""
        if self._dispatcher is None:
            from .listeners import Dispatcher  # (listeners: imported when the first is set)

            self._dispatcher = Dispatcher(self)
        self._dispatcher.wake.set()


def _acked_under_own_name(d: Delivery) -> bool:
    """Did an ACK whose rename answered "no such file" happen after all?  (NFS retransmits a
    RENAME whose reply was lost and answers the retry ENOENT.)  Then the message is in processed/
    under the name the ACK gives it: this claim's own name, or for an alias claim its message's
    name with the alias's inode."""
    box, pname = d.box, d.processing_name
    inode = codec.alias_inode(pname)
    try:
        if inode is None:
            box.stat(State.ACKNOWLEDGED, pname)
            return True
        return box.stat(State.ACKNOWLEDGED, d.original_name).st_ino == inode
    except FileNotFoundError:
        return False
