"""Java number text: ``Float.parseFloat``/``Double.parseDouble``/``Integer.parseInt`` and
``Float.toString``/``Double.toString`` (JDK 19+ shortest digits), as 1.2 reads and writes property values."""

from __future__ import annotations

import math
import re
import struct
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from fractions import Fraction

__all__ = ["JAVA_INT_RE", "to_f32", "parse_java_float", "parse_java_int", "java_double_str", "java_float_str"]

_JAVA_WHITESPACE = "".join(map(chr, range(33)))  # String.trim(): every char <= ' '
JAVA_INT_RE = re.compile(r"[+-]?[0-9]{1,40}")
_JAVA_DEC_RE = re.compile(
    r"([+-]?)(?:(NaN)|(Infinity)|((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?))[fFdD]?"
)
_JAVA_HEX_RE = re.compile(
    r"([+-]?)(0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?"
)


def to_f32(x: float) -> float:
    """Round a double to the nearest float32 (overflow -> infinity, as Java's cast)."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def _decimal_to_f32(text: str) -> float:
    """Correctly rounded decimal -> float32 (no double-rounding error)."""
    d = float(text)
    f = to_f32(d)
    if f == d or not math.isfinite(f) or len(text) > 400:
        return f
    # decimal -> double -> float32 only goes wrong when the double is exactly
    # halfway between two float32 values; then the exact decimal decides.
    other = to_f32(2 * d - f)
    if other != f and (f + other) / 2 == d:
        exact = Fraction(text)
        if exact != Fraction(d):
            return max(f, other) if exact > Fraction(d) else min(f, other)
    return f


def parse_java_float(text: str, single: bool) -> float | None:
    """``Float.parseFloat`` / ``Double.parseDouble``; None when Java would throw."""
    if text and text[-1] in "0123456789" and text.isascii() and "_" not in text and len(text) < 100:
        # Python's float() takes exactly Java's decimal syntax for such text
        # (no inf/nan words, no underscores, no suffix letter, no non-ASCII digits).
        try:
            return _decimal_to_f32(text) if single else float(text)
        except ValueError:
            pass
    s = text.strip(_JAVA_WHITESPACE)
    m = _JAVA_DEC_RE.fullmatch(s)
    if m is not None:
        sign, nan, inf, num = m.groups()
        if nan:
            return math.nan
        if inf:
            return -math.inf if sign == "-" else math.inf
        if len(num) > 2000:  # pathological; keep int/float conversion cheap
            return None
        body = sign + num
        return _decimal_to_f32(body) if single else float(body)
    m = _JAVA_HEX_RE.fullmatch(s)
    if m is not None and len(s) < 400:
        try:
            v = float.fromhex(m.group(1) + m.group(2))
        except (ValueError, OverflowError):
            v = math.copysign(math.inf, -1.0 if m.group(1) == "-" else 1.0)
        return to_f32(v) if single else v
    return None


def _shortest_digits(x: float, single: bool) -> tuple[str, int]:
    """Digits (no trailing zeros) and exponent e with x = d.ddd x 10**e, x > 0 finite.

    JDK 19+ ``Double.toString``/``Float.toString``: among the decimals that read
    back to x, those of the shortest length (but at least 2 digits), the one
    closest to x (ties: even last digit).
    """
    if math.frexp(x)[0] == 0.5:
        return _shortest_digits_exact(x, single)
    # Not a power of two: the values reading back to x form an interval
    # symmetric around x, so the correctly rounded n-digit decimal reads back
    # whenever any n-digit decimal does.
    if single:
        n = 2
        while n < 9 and _decimal_to_f32(f"{x:.{n - 1}e}") != x:
            n += 1
    else:
        mant = repr(x).partition("e")[0].replace(".", "").strip("0")
        n = max(len(mant), 2)
    mant, _, exp = f"{x:.{n - 1}e}".partition("e")
    return (mant[0] + mant[2:]).rstrip("0") or "0", int(exp)


def _shortest_digits_exact(x: float, single: bool) -> tuple[str, int]:
    """The same by exact decimal arithmetic (for powers of two, whose interval is lopsided)."""
    exact = Decimal(x)
    adjusted = exact.adjusted()
    for n in range(2, 18):
        quantum = Decimal(1).scaleb(adjusted - n + 1)
        best = None
        for cand in (exact.quantize(quantum, ROUND_FLOOR), exact.quantize(quantum, ROUND_CEILING)):
            text = str(cand)
            back = _decimal_to_f32(text) if single else float(text)
            if back != x:
                continue
            if best is None:
                best = cand
            else:
                db, dc = abs(best - exact), abs(cand - exact)
                if dc < db or (dc == db and cand.as_tuple().digits[-1] % 2 == 0):
                    best = cand
        if best is not None:
            d = best.normalize()
            return "".join(map(str, d.as_tuple().digits)), d.adjusted()
    raise AssertionError(f"no decimal reads back as {x!r}")  # pragma: no cover


def _java_fp_str(x: float, single: bool) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0.0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    digits, e = _shortest_digits(abs(x), single)
    if -3 <= e < 7:  # 10^-3 <= |x| < 10^7: plain notation
        if e >= 0:
            ip = digits[: e + 1].ljust(e + 1, "0")
            fp = digits[e + 1 :] or "0"
        else:
            ip, fp = "0", "0" * (-e - 1) + digits
        return f"{sign}{ip}.{fp}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{e}"


def java_double_str(x: float) -> str:
    """``Double.toString(x)`` (JDK 19+ shortest digits)."""
    return _java_fp_str(float(x), False)


def java_float_str(x: float) -> str:
    """``Float.toString((float) x)`` (JDK 19+ shortest digits that round-trip through float32)."""
    return _java_fp_str(to_f32(float(x)), True)


def parse_java_int(text: str, bits: int) -> int | None:
    """``Byte/Short/Integer/Long.parseX`` for a ``bits``-bit Java integer; None when Java would throw."""
    if text.isdigit() and text.isascii() and len(text) < 19:
        v = int(text)  # the common case
    elif JAVA_INT_RE.fullmatch(text) is None:
        return None
    else:
        v = int(text)
    if -(2 ** (bits - 1)) <= v < 2 ** (bits - 1):
        return v
    return None
