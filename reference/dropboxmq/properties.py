"""Typed property values, for messages that have properties (the codec and ``Property.of`` import
this where a value is checked, written or read): the JMS types by 1.2's type letter, a value's check,
and its text in a name, Java's ``toString`` and ``parse`` (floats: :mod:`~dropboxmq.javanum`)."""

from __future__ import annotations

import math
import struct
from typing import Any

from .errors import MessageFormatError

__all__ = ["PROPERTY_TYPES", "INT_BITS", "type_letter", "infer_letter", "coerce", "value_text", "parse_value"]

#: JMS property types by 1.2 type letter.
PROPERTY_TYPES = {"B": "boolean", "Y": "byte", "H": "short", "I": "int", "L": "long", "F": "float", "D": "double",
                  "S": "string"}
_LETTER_BY_TYPE = {v: k for k, v in PROPERTY_TYPES.items()}
#: bits of each Java integer type, by type letter
INT_BITS = {"Y": 8, "H": 16, "I": 32, "L": 64}


def type_letter(type_: str) -> str:
    """Accept a letter ('I') or a type name ('int')."""
    if type_ in PROPERTY_TYPES:
        return type_
    if type_ not in _LETTER_BY_TYPE:
        raise MessageFormatError(f"unknown property type {type_!r}")
    return _LETTER_BY_TYPE[type_]


def infer_letter(value: Any) -> str:
    """The JMS type Python values get when none is named."""
    if isinstance(value, bool):
        return "B"
    if isinstance(value, int):
        return "I" if -(2**31) <= value < 2**31 else "L"
    if isinstance(value, (float, str)):
        return "D" if isinstance(value, float) else "S"
    raise MessageFormatError(f"property values must be bool, int, float or str, not {type(value).__name__}")


#: what each type letter accepts, and how an error says it
_ACCEPTS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "B": (bool, "a bool"), "S": (str, "a str"), "F": ((int, float), "a float"), "D": ((int, float), "a float"),
    **{letter: (int, "an int") for letter in INT_BITS}}


def coerce(letter: str, value: Any) -> Any:
    """Check ``value`` fits JMS type ``letter``; floats are rounded to float32 for 'F'."""
    if letter not in _ACCEPTS:
        raise MessageFormatError(f"unknown property type letter {letter!r}")
    types, what = _ACCEPTS[letter]
    fits = isinstance(value, types) and isinstance(value, bool) == (letter == "B")  # (a bool is an int)
    if not fits:
        raise MessageFormatError(f"{PROPERTY_TYPES[letter]} property needs {what}, got {value!r}")
    if letter in INT_BITS and not -(2 ** (INT_BITS[letter] - 1)) <= value < 2 ** (INT_BITS[letter] - 1):
        raise MessageFormatError(f"{value} does not fit a {PROPERTY_TYPES[letter]}")
    if letter in ("F", "D"):
        value = float(value)
        if letter == "F" and math.isfinite(value):
            try:
                value = struct.unpack("<f", struct.pack("<f", value))[0]
            except OverflowError:
                raise MessageFormatError(f"{value} does not fit a float") from None
    return value


def value_text(letter: str, value: Any) -> str:
    """The text of a checked value in a name (before the field escape), as 1.2 writes it."""
    value = coerce(letter, value)  # validates type and range
    if letter == "B":
        return "true" if value else "false"
    if letter in ("F", "D"):
        from .javanum import java_double_str, java_float_str  # (float properties: rare, and cached)

        return java_float_str(value) if letter == "F" else java_double_str(value)
    return str(value)


def parse_value(letter: str, text: str) -> tuple[str, Any]:
    """(letter, value) of a value read in Java's whole syntax; ("S", text) for an unknown type letter
    or a value that does not parse."""
    if letter == "B":
        return "B", text.lower() == "true"  # Boolean.parseBoolean
    if letter in INT_BITS or letter in ("F", "D"):
        from .javanum import parse_java_float, parse_java_int  # (Java's number syntax: read once a tail)

        v = parse_java_int(text, INT_BITS[letter]) if letter in INT_BITS else parse_java_float(text, letter == "F")
        return (letter, v) if v is not None else ("S", text)
    return "S", text
