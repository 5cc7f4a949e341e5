""":class:`Property`, a value that keeps its JMS type (so a message read from a 1.2 file and written
again gets the same name); the types and their checks are :mod:`~dropboxmq.properties`'s."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Union

__all__ = ["Property", "PropertyValue"]

#: What a property holds in Python: JMS boolean, byte/short/int/long, float/double, string.
PropertyValue = Union[bool, int, float, str]


@dataclass(frozen=True)
class Property:
    """A typed property value: ``letter`` is one of ``properties.PROPERTY_TYPES``."""

    letter: str
    value: Any

    @classmethod
    def of(cls, value: Any, type_: str | None = None) -> "Property":
        """``value`` checked as JMS type ``type_`` (a letter or a name), else as the type it gets."""
        from .properties import coerce, infer_letter, type_letter  # (messages with properties)

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
