"""QueueBrowser: a queue's NEW messages in delivery order, nothing moved."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Iterable, Iterator

from . import codec, layout
from .codec import from_wire, now_ms
from .lifecycle import State
from .message import (
    Message,
    Queue,
)

if TYPE_CHECKING:
    from .selector import Selector
    from .session import Session

__all__ = ["QueueBrowser", "in_delivery_order"]

log = logging.getLogger("dropboxmq")


class QueueBrowser:
    """Look at a queue's NEW messages in delivery order without moving anything.
    Expired and not-yet-deliverable messages are not shown."""

    def __init__(self, session: Session, queue: Queue, selector: str | None = None):
        if codec.temporary_owner(queue.name) is None:
            session.connection.queue_box(queue)  # a typo is an error, not an empty browse
        self.session = session
        self.queue = queue
        self.box = layout.queue_box(session.connection.root, queue)
        self.matcher: Selector | None = None
        if selector:
            from .selector import selector_for  # (the parser is imported only for a selector)

            self.matcher = selector_for(selector)

    def __iter__(self) -> Iterator[Message]:
        now = now_ms()
        names = in_delivery_order(self.box.list(State.NEW))
        for name in names:
            msg = from_wire(name, now)
            if msg.is_expired(now) or msg.delivery_time > now:
                continue
            if self.matcher is not None and not self.matcher.matches(msg):
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


def in_delivery_order(names: Iterable[str]) -> list[str]:
    """``names`` in delivery order (``codec.sort_key``; equal keys by name)."""
    ordered = sorted(names)
    ordered.sort(key=codec.sort_key)
    return ordered
