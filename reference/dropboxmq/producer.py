"""MessageProducer: send (CREATE in working/, then SEND to target/; PROTOCOL.md §6 for fsyncs),
send_many (one group commit) and send_file (a body streamed from a file)."""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING, Any, BinaryIO, Union

from . import codec, ids
from .codec import to_wire
from .errors import InvalidDestinationError, StoreError
from .lifecycle import Move, State
from .message import DeliveryMode, Destination, Message, Queue, Topic
from .store import Dropbox, sync_many

if TYPE_CHECKING:
    from .session import Session

__all__ = ["MessageProducer", "stamp_send", "create_copy", "Body"]

#: What send() and receive_body() accept and return besides Message objects (bodies.as_message).
Body = Union[str, bytes, dict[str, Any], list[Any]]


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
        msg.priority, msg.delivery_mode, msg.destination = prio, mode, dest
        name = stamp_send(msg, ttl, delay)
        return msg, name, self.session.connection.boxes_for_send(dest, msg)

    def send(self, message: "Message | Destination | Body", destination: "Destination | Body | None" = None, *,
             delivery_mode: DeliveryMode | None = None, priority: int | None = None,
             time_to_live: float | None = None, delivery_delay: float | None = None) -> Message:
        """``send(message[, destination])`` (JMS) or ``send(destination, body)``, a body being a
        Message or plain data (bodies.as_message); returns when the message is NEW (transacted:
        at commit).  On a topic, one copy goes to every matching subscription."""
        self.session.check_open()
        body, dest = (destination, message) if isinstance(message, (Queue, Topic)) else (message, destination)
        if body is None or isinstance(body, (Queue, Topic)) or not (dest is None or isinstance(dest, (Queue, Topic))):
            raise InvalidDestinationError("send(message[, destination]) or send(destination, body)")
        if not isinstance(body, Message):
            from .bodies import as_message  # (plain Python data)

            body = as_message(body)
        prepared = self._prepare(body, dest, delivery_mode, priority, time_to_live, delivery_delay)
        self._write([prepared])
        return prepared[0]

    def send_file(self, file: BinaryIO, message: Message | None = None, destination: Destination | None = None,
                  **headers: Any) -> Message:
        """Send an open regular file's contents without reading them into memory; ``message``
        (default: a BytesMessage) gives all but the body.  Returns it, body empty."""
        self.session.check_open()
        from .bodies import BytesMessage  # (non-text bodies)
        msg = BytesMessage() if message is None else message
        msg.body = b""
        prepared = self._prepare(msg, destination, **headers)
        self._write([prepared], source=file)
        return prepared[0]

    def send_many(self, messages: list[Message], destination: Destination | None = None, **kw: Any) -> list[Message]:
        """Bulk send with group commit: fsync each file, rename all, fsync each target/ once."""
        self.session.check_open()
        prepared = [self._prepare(m, destination, **kw) for m in messages]
        self._write(prepared)
        return [m for m, _, _ in prepared]

    def _write(self, prepared: list[tuple[Message, str, list[Dropbox]]], source: BinaryIO | None = None) -> None:
        """CREATE every copy, then SEND them; several (bulk send, fan-out) are one group commit."""
        session, root = self.session, self.session.connection.root
        group = sum(len(boxes) for _, _, boxes in prepared) > 1
        if (registration := session.connection.registration).leased:
            registration.check("send")
        with session.lock:
            if session.transacted:  # NOT_COMMITTED until commit() syncs and SENDs them all
                from .transaction import session_log

                for msg, name, boxes in prepared:
                    for box in boxes:
                        session_log(session).record("send", box, name, _size(msg.body))
                        create_copy(box, name, msg, durable=False, source=source)
                return
            created: list[tuple[Dropbox, str, Message]] = []
            locks: list[int] = []
            try:
                for box in {b.dir(State.NOT_COMMITTED): b for _, _, boxes in prepared for b in boxes}.values():
                    if (fd := box.lock_working()) >= 0:  # no orphan sweep while we CREATE..SEND
                        locks.append(fd)
                for msg, name, boxes in prepared:
                    durable = msg.delivery_mode == DeliveryMode.PERSISTENT and not group
                    for box in boxes:
                        if create_copy(box, name, msg, durable, source):
                            created.append((box, name, msg))
                durable_copies = [(box, name) for box, name, msg in created
                                  if msg.delivery_mode == DeliveryMode.PERSISTENT]
                if group and durable_copies:  # every file durable before any rename is
                    from .groupsync import sync_files  # (batches and fan-out only)

                    sync_files(root, [box.file(State.NOT_COMMITTED, name) for box, name in durable_copies],
                               sum(_size(m.body) * len(bs) for m, _, bs in prepared))
                for box, name, msg in created:
                    # gone from working/ (a purge, a foreign sweep) fails the send, unless its
                    # subscription went away with its working/ while we publish
                    if not box.move(Move.SEND, State.NOT_COMMITTED, name) and not (
                            isinstance(msg.destination, Topic) and not os.path.isdir(box.dir(State.NOT_COMMITTED))):
                        raise StoreError(f"cannot send {box.file(State.NOT_COMMITTED, name)}: it left working/ "
                                         "before it was sent (moved or deleted by another program)")
            except BaseException:
                for box, name, _ in created:  # those already SENT are gone from working/: no-op
                    box.move(Move.DISCARD, State.NOT_COMMITTED, name)
                raise
            finally:
                for fd in locks:
                    os.close(fd)
            if durable_copies:
                sync_many((box, State.NEW) for box, _ in durable_copies)


def stamp_send(msg: Message, time_to_live: float = 0.0, delivery_delay: float = 0.0,
               id_and_time: tuple[str, int] | None = None) -> str:
    """Stamp the headers every send sets (MessageProducer's and the Spark writers'); the file name."""
    msg.message_id, msg.timestamp = ids.new_message_id_and_time() if id_and_time is None else id_and_time
    msg.expiration = msg.timestamp + int(time_to_live * 1000) if time_to_live > 0 else 0
    msg.delivery_time = msg.timestamp + int(delivery_delay * 1000) if delivery_delay > 0 else msg.timestamp
    msg.redelivered, msg.delivery_count = False, 1
    return to_wire(msg)


def _size(body: object) -> int:
    return len(body) if isinstance(body, (bytes, bytearray, memoryview)) else 0


def create_copy(box: Dropbox, name: str, msg: Message, durable: bool, source: BinaryIO | None = None) -> bool:
    """CREATE one copy (the body from ``source`` if given); a subscription removed while we
    publish is skipped (False)."""
    try:
        box.create(name, msg.body if source is None else source, durable)
    except StoreError as exc:
        if getattr(exc, "errno", None) == errno.ENOENT:
            if isinstance(msg.destination, Topic):
                return False
            if codec.temporary_owner(box.path.parent.name) is not None:  # deleted while we send
                from .temporary import temporary_gone

                raise temporary_gone(msg.destination) from exc
        raise
    return True
