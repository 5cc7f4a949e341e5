"""Messages and destinations: plain values, no I/O.

Headers follow JMS names in Python style.  Property values keep their JMS type
(one of the eight letters of 1.2's transcoder) so that a message read from a
1.2 file and written again gets the same name.
"""

from __future__ import annotations

import enum
import math
import struct
from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import InvalidDestinationError, MessageFormatError

__all__ = [
    "validate_name", "name_bytes", "Queue", "Topic", "Destination", "DeliveryMode", "DEFAULT_PRIORITY",
    "PROPERTY_TYPES", "type_letter", "infer_letter", "coerce", "Property", "CLASS_LETTERS", "Message",
    "TextMessage", "BytesMessage", "MapMessage", "StreamMessage", "ObjectMessage", "MESSAGE_CLASSES",
    "message_for_letter",
]


# ---------------------------------------------------------------- destinations

_FORBIDDEN_CHARS = ("/", "\\", "\x00")


def validate_name(kind: str, name: str) -> str:
    """Reject names that could escape the root or collide with the layout."""
    if not isinstance(name, str) or not name:
        raise InvalidDestinationError(f"{kind} name must be a non-empty string")
    if name.startswith("."):
        raise InvalidDestinationError(f"{kind} name {name!r} must not start with '.'")
    if ".." in name:
        raise InvalidDestinationError(f"{kind} name {name!r} must not contain '..'")
    for bad in _FORBIDDEN_CHARS:
        if bad in name:
            raise InvalidDestinationError(f"{kind} name {name!r} must not contain {bad!r}")
    size = name_bytes(name)
    if size is None:
        raise InvalidDestinationError(f"{kind} name {name!r} is not valid Unicode (a lone surrogate)")
    if size > 200:
        raise InvalidDestinationError(f"{kind} name {name!r} is {size} bytes, longer than 200 bytes")
    return name


def name_bytes(name: str) -> int | None:
    """The length on disk of a name, in bytes: names are bytes-safe text, an undecodable
    byte travels as the surrogate ``os.fsdecode`` gives it.  None if ``name`` holds any
    other lone surrogate (no byte stands for it)."""
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


# ---------------------------------------------------------------- typed values

#: JMS property types by 1.2 type letter.
PROPERTY_TYPES: dict[str, str] = {
    "B": "boolean",
    "Y": "byte",
    "H": "short",
    "I": "int",
    "L": "long",
    "F": "float",
    "D": "double",
    "S": "string",
}
_LETTER_BY_TYPE = {v: k for k, v in PROPERTY_TYPES.items()}
_INT_RANGES = {"Y": 8, "H": 16, "I": 32, "L": 64}


def type_letter(type_: str) -> str:
    """Accept a letter ('I') or a type name ('int')."""
    if type_ in PROPERTY_TYPES:
        return type_
    try:
        return _LETTER_BY_TYPE[type_]
    except KeyError:
        raise MessageFormatError(f"unknown property type {type_!r}") from None


def infer_letter(value: Any) -> str:
    """The JMS type Python values get when none is named."""
    if isinstance(value, bool):
        return "B"
    if isinstance(value, int):
        return "I" if -(2**31) <= value < 2**31 else "L"
    if isinstance(value, float):
        return "D"
    if isinstance(value, str):
        return "S"
    raise MessageFormatError(
        f"property values must be bool, int, float or str, not {type(value).__name__}"
    )


def coerce(letter: str, value: Any) -> Any:
    """Check ``value`` fits JMS type ``letter``; floats are rounded to float32 for 'F'."""
    if letter == "B":
        if not isinstance(value, bool):
            raise MessageFormatError(f"boolean property needs a bool, got {value!r}")
        return value
    if letter in _INT_RANGES:
        if isinstance(value, bool) or not isinstance(value, int):
            raise MessageFormatError(f"{PROPERTY_TYPES[letter]} property needs an int, got {value!r}")
        bits = _INT_RANGES[letter]
        if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            raise MessageFormatError(f"{value} does not fit a {PROPERTY_TYPES[letter]}")
        return value
    if letter in ("F", "D"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise MessageFormatError(f"{PROPERTY_TYPES[letter]} property needs a float, got {value!r}")
        value = float(value)
        if letter == "F" and math.isfinite(value):
            try:
                value = struct.unpack("<f", struct.pack("<f", value))[0]
            except OverflowError:
                raise MessageFormatError(f"{value} does not fit a float") from None
        return value
    if letter == "S":
        if not isinstance(value, str):
            raise MessageFormatError(f"string property needs a str, got {value!r}")
        return value
    raise MessageFormatError(f"unknown property type letter {letter!r}")


@dataclass(frozen=True)
class Property:
    """A typed property value: ``letter`` is one of PROPERTY_TYPES."""

    letter: str
    value: Any

    @classmethod
    def of(cls, value: Any, type_: str | None = None) -> "Property":
        letter = type_letter(type_) if type_ is not None else infer_letter(value)
        return cls(letter, coerce(letter, value))

    def __eq__(self, other: object) -> bool:  # NaN equals NaN for round-trips
        if not isinstance(other, Property):
            return NotImplemented
        if self.letter != other.letter:
            return False
        a, b = self.value, other.value
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return True
        return a == b

    def __hash__(self) -> int:
        return hash((self.letter, repr(self.value)))


# ---------------------------------------------------------------- messages

#: 1.2 class letters.
CLASS_LETTERS = {
    "M": "Message",
    "B": "BytesMessage",
    "S": "StreamMessage",
    "P": "MapMessage",
    "O": "ObjectMessage",
    "T": "TextMessage",
}


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

    def get_property(self, name: str, default: Any = None) -> Any:
        prop = self.properties.get(name)
        return default if prop is None else prop.value

    @property
    def property_values(self) -> dict[str, Any]:
        return {k: p.value for k, p in self.properties.items()}

    def is_expired(self, now_ms: int) -> bool:
        return self.expiration != 0 and self.expiration <= now_ms

    def acknowledge(self) -> None:
        """CLIENT_ACKNOWLEDGE: ack every message consumed by this message's session
        (JMS; 1.2 acked only up to this one).  A no-op in the other ack modes."""
        session = getattr(self, "_session", None)
        if session is None:
            from .errors import IllegalStateError

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


@dataclass
class BytesMessage(Message):
    class_letter = "B"


@dataclass
class MapMessage(Message):
    """Body: a JSON object of typed values (see codec.encode_map)."""

    class_letter = "P"

    @property
    def map(self) -> dict[str, Any]:
        from .codec import decode_map

        return decode_map(self.body)

    @map.setter
    def map(self, value: dict[str, Any]) -> None:
        from .codec import encode_map

        self.body = encode_map(value)


@dataclass
class StreamMessage(Message):
    """Body: a JSON array of typed values (see codec.encode_stream)."""

    class_letter = "S"

    @property
    def items(self) -> list[Any]:
        from .codec import decode_stream

        return decode_stream(self.body)

    @items.setter
    def items(self, value: list[Any]) -> None:
        from .codec import encode_stream

        self.body = encode_stream(value)


@dataclass
class ObjectMessage(Message):
    """Body: opaque bytes.  Never unpickled by default: pass your own deserializer."""

    class_letter = "O"

    def get_object(self, deserializer: Callable[[bytes], Any]) -> Any:
        return deserializer(self.body)


MESSAGE_CLASSES: dict[str, type[Message]] = {
    cls.class_letter: cls
    for cls in (Message, TextMessage, BytesMessage, MapMessage, StreamMessage, ObjectMessage)
}


def message_for_letter(letter: str) -> type[Message]:
    return MESSAGE_CLASSES.get(letter, BytesMessage)
