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
#: bits of each Java integer type, by type letter
INT_BITS = {"Y": 8, "H": 16, "I": 32, "L": 64}


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
    if letter in INT_BITS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise MessageFormatError(f"{PROPERTY_TYPES[letter]} property needs an int, got {value!r}")
        bits = INT_BITS[letter]
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
