"""JMS temporary destinations: a queue or topic that lives as long as the connection that made
it (its directory is removed when that connection closes).  Imported when a session first makes
one, or a send goes to one; whose a destination name is (``codec.temporary_owner``) is asked on
every send."""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from . import codec, layout, topics
from .making import ensure_dropbox
from .errors import IllegalStateError, InvalidDestinationError
from .message import (
    Destination,
    Message,
    Queue,
    Topic,
)

if TYPE_CHECKING:
    from .connection import Connection
    from .session import Session
    from .store import Dropbox

__all__ = [
    "TemporaryQueue", "TemporaryTopic", "create_queue", "create_topic", "consumer_box", "boxes_for_send",
    "temporary_gone", "delete", "delete_temporary", "temporary_name",
]

log = logging.getLogger("dropboxmq")


class _Temporary:
    """delete() for temporary destinations; equal to the plain destination of the same name."""

    name: str
    connection: Connection

    def delete(self) -> None:
        delete(self.connection, self)  # type: ignore[arg-type]  # a Queue or Topic too

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


def create_queue(session: Session) -> TemporaryQueue:
    """Session.create_temporary_queue(): a queue of this connection's, made now."""
    connection = session.connection
    q = TemporaryQueue(temporary_name(connection.client_id), connection)
    ensure_dropbox(layout.queue_box(connection.root, q))
    connection.temporary.append(q)
    return q


def create_topic(session: Session) -> TemporaryTopic:
    """Session.create_temporary_topic(): a topic of this connection's, made now."""
    connection = session.connection
    t = TemporaryTopic(temporary_name(connection.client_id), connection)
    os.makedirs(topics.subscriptions_dir(connection.root, t), exist_ok=True)
    connection.temporary.append(t)
    return t


def consumer_box(connection: Connection, queue: Queue) -> Dropbox:
    """The dropbox a consumer of the temporary queue ``queue`` reads: only its connection may."""
    if codec.temporary_owner(queue.name) != connection.client_id:
        raise InvalidDestinationError(f"{queue} is a temporary queue of another connection")
    return ensure_dropbox(layout.queue_box(connection.root, queue))


def boxes_for_send(connection: Connection, dest: Destination, header: Message) -> list[Dropbox]:
    """Where a send to a temporary destination writes.  It lives as long as its connection: once
    that closed (its directory is gone) a send is an error, and never re-creates the directory."""
    if isinstance(dest, Queue):
        box = layout.queue_box(connection.root, dest)
        if box.exists():
            return [box]
    elif topics.subscriptions_dir(connection.root, dest).is_dir():
        from .topics import fan_out_targets

        return fan_out_targets(connection.root, dest, header, connection.client_id)
    raise temporary_gone(dest)


def delete(connection: Connection, dest: Destination) -> None:
    """JMS TemporaryQueue/TemporaryTopic.delete(): refused while a consumer uses it."""
    if any(c.destination == dest and not c.closed for s in connection.sessions for c in s.consumers):
        raise IllegalStateError(f"{dest} still has an open consumer: close it before delete()")
    if dest in connection.temporary:
        connection.temporary.remove(dest)
        delete_temporary(connection.root, dest)


def temporary_gone(dest: Destination | None) -> InvalidDestinationError:
    return InvalidDestinationError(f"{dest} does not exist: the connection that created it has closed")


def delete_temporary(root: Path, dest: Destination) -> None:
    import shutil

    path = Path(root) / dest.name if isinstance(dest, Queue) else topics.topic_dir(root, dest)
    shutil.rmtree(path, ignore_errors=True)


def temporary_name(client_id: str) -> str:
    """A new temporary destination's name (``codec.temporary_owner`` reads the owner back)."""
    return f"{codec.TEMP_PREFIX}{codec.encode_field(client_id)}~{uuid.uuid4().hex[:12]}"
