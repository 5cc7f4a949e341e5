"""The non-text message classes (Bytes, Map, Stream, Object) and the body encodings of Map and
Stream messages [ours].

1.2 used Java serialization; we use UTF-8 JSON of typed values, readable from
any language and never executed.  A value is ``null`` or a two-element array
``[letter, value]``:

======  ===============  ====================================================
letter  JMS type         JSON value
======  ===============  ====================================================
``B``   boolean          ``true`` / ``false``
``Y``   byte             integer, -128..127
``H``   short            integer, -32768..32767
``I``   int              integer, 32-bit
``L``   long             decimal *string* (exact beyond 2**53), e.g. ``"10000000000"``;
                         readers also accept an integer
``F``   float            number (the float32 value) or ``"NaN"``, ``"Infinity"``, ``"-Infinity"``
``D``   double           number or ``"NaN"``, ``"Infinity"``, ``"-Infinity"``
``S``   String           string
``C``   char             string of one UTF-16 code unit (U+0000..U+FFFF, no surrogate)
``X``   byte[]           standard base64 string
======  ===============  ====================================================

A MapMessage body is a JSON object ``{"name": [letter, value], ...}``
(``{"a": ["I", 1], "b": ["X", "AAE="]}``); a StreamMessage body is a JSON array
``[[letter, value], ...]`` (``[["S", "x"], null, ["D", "NaN"]]``).  Python values
map bool -> B, int -> I (or L outside 32 bits), float -> D, str -> S,
bytes -> X, None -> null; pass :class:`~dropboxmq.values.Property` (e.g.
``Property("F", 0.5)``, ``Property("C", "x")``) for the other letters.
Decoding returns plain Python values, or with ``typed=True`` every non-null
value as a ``Property`` (so the type survives a round trip).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass
from typing import Any, Callable

from .errors import MessageFormatError
from .javanum import JAVA_INT_RE, to_f32
from .message import Message, TextMessage
from .properties import INT_BITS, coerce, infer_letter
from .values import Property

__all__ = ["encode_map", "decode_map", "encode_stream", "decode_stream", "BytesMessage", "MapMessage", "StreamMessage",
           "ObjectMessage", "MESSAGE_CLASSES", "message_for_letter", "as_message", "body_of"]

_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _json_float(x: float) -> Any:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def _check_text(what: str, s: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise MessageFormatError(f"{what} {s!r} contains a lone surrogate") from None


def _encode_value(v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, Property):
        letter, value = v.letter, v.value
    elif isinstance(v, bool):
        letter, value = "B", v
    elif isinstance(v, int):
        letter, value = infer_letter(v), v
    elif isinstance(v, float):
        letter, value = "D", v
    elif isinstance(v, str):
        letter, value = "S", v
    elif isinstance(v, (bytes, bytearray, memoryview)):
        letter, value = "X", bytes(v)
    else:
        raise MessageFormatError(
            f"body values must be None, bool, int, float, str, bytes or Property, "
            f"not {type(v).__name__}"
        )
    if letter == "C":
        if not isinstance(value, str) or len(value) != 1 or ord(value) > 0xFFFF:
            raise MessageFormatError(f"char value must be one BMP character, got {value!r}")
        _check_text("char", value)
        return ["C", value]
    if letter == "X":
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise MessageFormatError(f"bytes value must be bytes, got {value!r}")
        return ["X", base64.b64encode(bytes(value)).decode("ascii")]
    value = coerce(letter, value)  # B Y H I L F D S, ranges and float32 rounding
    if letter == "S":
        _check_text("string", value)
        return ["S", value]
    if letter in ("F", "D"):
        return [letter, _json_float(value)]
    if letter == "L":
        return ["L", str(value)]
    return [letter, value]


def _decode_value(item: Any, typed: bool) -> Any:
    if item is None:
        return None
    if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str):
        raise MessageFormatError(f"body value must be null or [letter, value], got {item!r}")
    letter, raw = item
    value: Any
    if letter == "B":
        if not isinstance(raw, bool):
            raise MessageFormatError(f"boolean value must be true/false, got {raw!r}")
        value = raw
    elif letter in INT_BITS:
        if letter == "L" and isinstance(raw, str) and JAVA_INT_RE.fullmatch(raw):
            raw = int(raw)
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise MessageFormatError(f"{letter} value must be an integer, got {raw!r}")
        bits = INT_BITS[letter]
        if not -(2 ** (bits - 1)) <= raw < 2 ** (bits - 1):
            raise MessageFormatError(f"{raw} does not fit type {letter}")
        value = raw
    elif letter in ("F", "D"):
        if isinstance(raw, str) and raw in _SPECIAL_FLOATS:
            value = _SPECIAL_FLOATS[raw]
        elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
            value = float(raw)
        else:
            raise MessageFormatError(f"{letter} value must be a number, got {raw!r}")
        if letter == "F":
            value = to_f32(value)
    elif letter == "S":
        if not isinstance(raw, str):
            raise MessageFormatError(f"string value must be a string, got {raw!r}")
        value = raw
    elif letter == "C":
        if not isinstance(raw, str) or len(raw) != 1 or ord(raw) > 0xFFFF:
            raise MessageFormatError(f"char value must be one BMP character, got {raw!r}")
        value = raw
    elif letter == "X":
        if not isinstance(raw, str):
            raise MessageFormatError(f"bytes value must be a base64 string, got {raw!r}")
        try:
            value = base64.b64decode(raw.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise MessageFormatError(f"bytes value is not valid base64: {raw[:40]!r}") from None
    else:
        raise MessageFormatError(f"unknown body value type letter {letter!r}")
    return Property(letter, value) if typed else value


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode(
        "utf-8"
    )


def _loads(data: bytes) -> Any:
    if isinstance(data, str):
        raise MessageFormatError("body must be bytes, not str")
    try:
        return json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise MessageFormatError(f"body is not UTF-8 JSON: {exc}") from None


def encode_map(values: dict[str, Any]) -> bytes:
    """MapMessage body: ``{"name": [letter, value] | null, ...}`` as UTF-8 JSON."""
    if not isinstance(values, dict):
        raise MessageFormatError(f"map body must be a dict, not {type(values).__name__}")
    out = {}
    for name, v in values.items():
        if not isinstance(name, str) or not name:
            raise MessageFormatError(f"map names must be non-empty strings, got {name!r}")
        _check_text("map name", name)
        out[name] = _encode_value(v)
    return _dumps(out)


def decode_map(data: bytes, typed: bool = False) -> dict[str, Any]:
    """Inverse of :func:`encode_map`; ``typed=True`` gives every non-null value as a Property."""
    obj = _loads(data)
    if not isinstance(obj, dict):
        raise MessageFormatError("map body must be a JSON object")
    out = {}
    for name, item in obj.items():
        if not name:
            raise MessageFormatError("map body has an empty name")
        out[name] = _decode_value(item, typed)
    return out


def encode_stream(values: list[Any]) -> bytes:
    """StreamMessage body: ``[[letter, value] | null, ...]`` as UTF-8 JSON."""
    if not isinstance(values, (list, tuple)):
        raise MessageFormatError(f"stream body must be a list, not {type(values).__name__}")
    return _dumps([_encode_value(v) for v in values])


def decode_stream(data: bytes, typed: bool = False) -> list[Any]:
    """Inverse of :func:`encode_stream`; ``typed=True`` gives every non-null value as a Property."""
    obj = _loads(data)
    if not isinstance(obj, list):
        raise MessageFormatError("stream body must be a JSON array")
    return [_decode_value(item, typed) for item in obj]


@dataclass
class BytesMessage(Message):
    class_letter = "B"


@dataclass
class MapMessage(Message):
    """Body: a JSON object of typed values (:func:`encode_map`)."""

    class_letter = "P"

    @property
    def map(self) -> dict[str, Any]:
        return decode_map(self.body)

    @map.setter
    def map(self, value: dict[str, Any]) -> None:
        self.body = encode_map(value)


@dataclass
class StreamMessage(Message):
    """Body: a JSON array of typed values (:func:`encode_stream`)."""

    class_letter = "S"

    @property
    def items(self) -> list[Any]:
        return decode_stream(self.body)

    @items.setter
    def items(self, value: list[Any]) -> None:
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
    """The class of a 1.2 class letter; BytesMessage for an unknown one ([ours], see codec)."""
    return MESSAGE_CLASSES.get(letter, BytesMessage)


def as_message(body: Any) -> Message:
    """The message for a plain body (send(destination, body)): str -> TextMessage,
    bytes -> BytesMessage, dict -> MapMessage, list -> StreamMessage; a Message stays itself."""
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


def body_of(msg: Message) -> Any:
    """A message's body as Python data (receive_body()): str, bytes, dict (MapMessage) or list
    (StreamMessage)."""
    if isinstance(msg, TextMessage):
        return msg.text
    if isinstance(msg, MapMessage):
        return msg.map
    if isinstance(msg, StreamMessage):
        return msg.items
    return msg.body
