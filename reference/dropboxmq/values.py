"""Typed values: the JMS types of 1.2's transcoder, by type letter, and :class:`Property`,
a value that keeps its type (so a message read from a 1.2 file and written again gets the same name)."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any, Union

from .errors import MessageFormatError

__all__ = ["PROPERTY_TYPES", "INT_BITS", "type_letter", "infer_letter", "coerce", "Property", "PropertyValue"]

#: What a property holds in Python: JMS boolean, byte/short/int/long, float/double, string.
PropertyValue = Union[bool, int, float, str]

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
        a, b = self.value, other.value
        return self.letter == other.letter and (a == b or isinstance(a, float) and isinstance(b, float)
                                                and math.isnan(a) and math.isnan(b))

    def __hash__(self) -> int:
        return hash((self.letter, repr(self.value)))
