"""Messages and destinations: plain values, no I/O.  Headers follow JMS names in Python style;
the non-text message classes are in :mod:`~dropboxmq.bodies`."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from .errors import IllegalStateError, InvalidDestinationError, MessageFormatError
from .values import Property, PropertyValue

_Default = TypeVar("_Default")

__all__ = ["validate_name", "name_bytes", "Queue", "Topic", "Destination", "DeliveryMode", "DEFAULT_PRIORITY",
           "CLASS_LETTERS", "Message", "TextMessage"]


def validate_name(kind: str, name: str) -> str:
    """Reject names that could escape the root or collide with the layout."""
    if not isinstance(name, str) or not name:
        raise InvalidDestinationError(f"{kind} name must be a non-empty string")
    if name.startswith("."):
        raise InvalidDestinationError(f"{kind} name {name!r} must not start with '.'")
    if ".." in name:
        raise InvalidDestinationError(f"{kind} name {name!r} must not contain '..'")
    for bad in ("/", "\\", "\x00"):  # a path separator, or what no path holds
        if bad in name:
            raise InvalidDestinationError(f"{kind} name {name!r} must not contain {bad!r}")
    size = name_bytes(name)
    if size is None:
        raise InvalidDestinationError(f"{kind} name {name!r} is not valid Unicode (a lone surrogate)")
    if size > 200:
        raise InvalidDestinationError(f"{kind} name {name!r} is {size} bytes, longer than 200 bytes")
    return name


def name_bytes(name: str) -> int | None:
    """The length on disk of a name, in bytes (an undecodable byte travels as the surrogate
    ``os.fsdecode`` gives it); None if ``name`` holds another lone surrogate (no byte stands for it)."""
    if name.isascii():  # (O(1): CPython keeps the flag) every name we and 1.2 write is ASCII
        return len(name)
    try:
        return len(name.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:
        return None


@dataclass(frozen=True)
class Queue:
    name: str

    def __post_init__(self) -> None:
        validate_name("queue", self.name)
        if self.name in ("topic-root", "dropboxmq"):
            raise InvalidDestinationError(f"queue name {self.name!r} is reserved by the layout")

    def __str__(self) -> str:
        return f"queue://{self.name}"


@dataclass(frozen=True)
class Topic:
    name: str

    def __post_init__(self) -> None:
        validate_name("topic", self.name)
        if self.name.endswith("."):
            raise InvalidDestinationError(f"topic name {self.name!r} must not end with '.'")

    @property
    def levels(self) -> tuple[str, ...]:
        """1.2 splits topic names on '.' into a directory hierarchy."""
        return tuple(self.name.split("."))

    def __str__(self) -> str:
        return f"topic://{self.name}"


Destination = Queue | Topic


class DeliveryMode(enum.IntEnum):
    """[ours] delivery mode is durability: PERSISTENT fsyncs, NON_PERSISTENT does not."""

    NON_PERSISTENT = 1
    PERSISTENT = 2


DEFAULT_PRIORITY = 4

#: 1.2 class letters.
CLASS_LETTERS = {"M": "Message", "B": "BytesMessage", "S": "StreamMessage", "P": "MapMessage", "O": "ObjectMessage",
                 "T": "TextMessage"}


@dataclass
class Message:
    """A JMS message.  ``body`` is bytes on the wire; subclasses give it a type."""

    class_letter = "M"

    body: bytes = b""
    message_id: str | None = None  # "ID:..." once sent
    timestamp: int = 0  # ms since the epoch, set at send
    priority: int = DEFAULT_PRIORITY
    delivery_mode: DeliveryMode = DeliveryMode.PERSISTENT
    expiration: int = 0  # ms since the epoch; 0 = never
    delivery_time: int = 0  # ms since the epoch; earliest delivery (delivery delay)
    correlation_id: str | None = None
    reply_to: Destination | None = None
    jms_type: str | None = None
    redelivered: bool = False
    delivery_count: int = 1
    destination: Destination | None = None
    properties: dict[str, Property] = field(default_factory=dict)

    # --- properties, JMS style
    def set_property(self, name: str, value: Any, type_: str | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise MessageFormatError("property name must be a non-empty string")
        self.properties[name] = Property.of(value, type_)

    @overload
    def get_property(self, name: str) -> PropertyValue | None: ...

    @overload
    def get_property(self, name: str, default: _Default) -> PropertyValue | _Default: ...

    def get_property(self, name: str, default: object = None) -> object:
        prop = self.properties.get(name)
        return default if prop is None else prop.value

    @property
    def property_values(self) -> dict[str, Any]:
        return {k: p.value for k, p in self.properties.items()}

    def is_expired(self, now_ms: int) -> bool:
        return self.expiration != 0 and self.expiration <= now_ms

    def acknowledge(self) -> None:
        """CLIENT_ACKNOWLEDGE: ack every message its session consumed (PROTOCOL.md J-2); else a no-op."""
        session = getattr(self, "_session", None)
        if session is None:
            raise IllegalStateError("this message was not received from a session")
        if session.ack_mode == 2:  # CLIENT_ACKNOWLEDGE
            session.acknowledge()


@dataclass(init=False)
class TextMessage(Message):
    """``TextMessage("hello", priority=7)``: the body is str (stored as UTF-8) or UTF-8 bytes."""

    class_letter = "T"

    def __init__(self, body: str | bytes = b"", **headers: Any) -> None:
        if isinstance(body, str):
            body = body.encode("utf-8")
        elif not isinstance(body, (bytes, bytearray)):
            raise MessageFormatError(f"a TextMessage body is str or UTF-8 bytes, not {type(body).__name__}")
        super().__init__(body=bytes(body), **headers)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")

    @text.setter
    def text(self, value: str) -> None:
        self.body = value.encode("utf-8")
