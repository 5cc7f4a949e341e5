"""The codec: DropboxMQ 1.2's file-name grammar (spec/PROTOCOL.md section 2, N-1..N-9), pure.
A name is parsed in one place (:func:`split_name`); one producer's names differ in priority and id
only, so a tail is read and stamped once (:func:`_read_tail`).

[ours] Reply-to is ``Q``/``T`` + name as 1.2's code reads it (the seed's ``TestQueue1`` is the
topic ``estQueue1``), else a queue of the whole text.  A bad expiration reads as 0, a malformed
pair is skipped, an unknown type letter or a value that does not parse reads as a String.  A
count read from a claim is delivery ``n``, as 1.2's consumer reported (``trace_rules.COUNT_RULES``).
"""

from __future__ import annotations

import functools
import re
import time
from typing import Any
from urllib.parse import quote_plus

from .errors import MessageFormatError, NameTooLongError
from .message import CLASS_LETTERS, DEFAULT_PRIORITY, DeliveryMode, Message, Queue, TextMessage, Topic, name_bytes
from .values import Property

__all__ = [
    "DELIVERY_COUNT", "MAX_NAME_BYTES", "DELIVERY_TIME_PROP", "DELIVERY_MODE_PROP", "ALIAS_MARK", "TEMP_PREFIX",
    "now_ms", "encode_field", "decode_field", "encode_properties", "decode_properties", "split_name",
    "from_wire", "claim_reading", "encode_name", "to_wire", "with_delivery_count", "name_delivery_count",
    "processing_name", "claim_as", "split_processing_name", "temporary_owner", "sort_key",
    "key_priority",
]

#: The JMS-defined delivery count property, stored by 1.2 as ``JMSXDeliveryCountI=<n>``.
DELIVERY_COUNT = "JMSXDeliveryCount"
#: The longest file name (bytes of UTF-8) on the file systems we support (N-3).
MAX_NAME_BYTES = 255
#: [ours] provider properties (the JMS_<vendor>_ prefix) for what 1.2's grammar has no field for:
DELIVERY_TIME_PROP = "JMS_DropboxMQ_DeliveryTime"  # L, ms since epoch (delivery delay)
DELIVERY_MODE_PROP = "JMS_DropboxMQ_DeliveryMode"  # I, written only for NON_PERSISTENT

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def now_ms() -> int:  # (the pure parts take the time as an argument)
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------- fields (N-2)

_ASCII_ESCAPES = {  # ASCII -> escaped, for str.translate (every name we and 1.2 write is ASCII)
    i: chr(i) if chr(i).isalnum() or chr(i) in "-*_" else "+" if i == 0x20 else f"%{i:02X}" for i in range(128)}
_PCT_RUN = re.compile(r"(?:%[0-9A-Fa-f]{2})+")


def encode_field(s: str) -> str:
    """N-2's escape.  A lone surrogate ``\\udc80``-``\\udcff`` (an undecodable byte from
    ``os.listdir``) is written as its byte; any other raises :class:`MessageFormatError`."""
    if not isinstance(s, str):
        raise MessageFormatError(f"can only encode str, not {type(s).__name__}")
    if s.isascii():
        return s.translate(_ASCII_ESCAPES)
    try:  # (quote_plus keeps "~" and ".", URLEncoder does not)
        out = quote_plus(s, safe="*", encoding="utf-8", errors="surrogateescape")
    except UnicodeEncodeError as exc:
        raise MessageFormatError(f"{s!r} is not valid Unicode: {exc.reason}") from None
    return out.replace("~", "%7E").replace(".", "%2E")


def decode_field(s: str) -> str:
    """N-2's decoding; never raises: invalid UTF-8 becomes U+FFFD (as Java's decoder does)."""
    if "+" in s:
        s = s.replace("+", " ")
    if "%" in s:
        s = _PCT_RUN.sub(lambda m: bytes.fromhex(m.group().replace("%", "")).decode("utf-8", "replace"), s)
    return s


# ---------------------------------------------------------------- properties


def _encode_pair(name: str, prop: Any) -> str:
    if not isinstance(name, str) or not name:
        raise MessageFormatError(f"property name must be a non-empty string, got {name!r}")
    if not isinstance(prop, Property):
        prop = Property.of(prop)
    letter, value = prop.letter, prop.value
    try:  # the key tells apart values that compare equal: True == 1 == 1.0, and 0.0 == -0.0
        return _pair_text(name, letter, type(value).__qualname__, repr(value) if type(value) is float else None, value)
    except TypeError:  # an unhashable value: checked (and rejected) uncached
        return _pair_text.__wrapped__(name, letter, "", None, value)


@functools.lru_cache(maxsize=4096)
def _pair_text(name: str, letter: str, _value_type: str, _float_repr: str | None, value: Any) -> str:
    """A producer's messages mostly carry the same pairs (its delivery mode): each is checked once."""
    from .properties import value_text  # (messages with properties)

    return f"{encode_field(name)}{letter}={encode_field(value_text(letter, value))}"


def encode_properties(properties: dict[str, Any], delivery_count: int = 1) -> str:
    """The properties field, ``enc(name)+letter=enc(value)`` joined by ``&``.  ``JMSXDeliveryCount``
    is written as ``delivery_count - 1`` when that is positive (in the property's position, else
    last), whatever ``properties`` holds for it."""
    stored = f"{DELIVERY_COUNT}I={delivery_count - 1}" if delivery_count > 1 else ""
    parts = []
    for name, prop in properties.items():
        if name != DELIVERY_COUNT:
            parts.append(_encode_pair(name, prop))
        elif stored:
            parts.append(stored)
            stored = ""
    return "&".join(parts + [stored] if stored else parts)


def decode_properties(field: str) -> dict[str, Property]:
    """The properties field as typed values, never raising: a pair without ``=`` or a name is
    skipped; a repeated name keeps its first position and its last value."""
    if not field:
        return {}
    from .properties import parse_value  # (messages with properties; a tail once, cached)

    props: dict[str, Property] = {}
    for pair in field.split("&"):
        key, eq, raw = pair.partition("=")
        key = decode_field(key)
        if eq and len(key) >= 2:
            props[key[:-1]] = Property(*parse_value(key[-1], decode_field(raw)))
    return props


# ---------------------------------------------------------------- names: one parse

_DIGIT_PRIORITY = {str(p): p for p in range(10)}
_PRIO_RE = re.compile(r"[+-]?[0-9]{1,12}")
_ID12_RE = re.compile(r"([0-9]{1,30})-[0-9]{1,30}")  # N-5: <epochMillis><3-digit counter>-<digits>
_LONG_RE = re.compile(r"[+-]?[0-9]{1,25}")


def split_name(name: str) -> tuple[int, str, str, int | None] | None:
    """(priority, id (unescaped), tail, the numeric prefix of an N-5 id else None) of a parseable
    name (N-1: 3 to 8 fields, a Java int priority, an id), else None.  The tail is the fields after
    the id, without its leading ``.``."""
    try:
        prio_text, mid, tail = name.split(".", 2)
    except ValueError:
        return None
    prio = _DIGIT_PRIORITY.get(prio_text)
    if prio is None:
        if _PRIO_RE.fullmatch(prio_text) is None or not _INT_MIN <= int(prio_text) <= _INT_MAX:
            return None
        prio = int(prio_text)
    if not mid or tail.count(".") > 5:
        return None
    m = _ID12_RE.fullmatch(mid)  # (an N-5 id has nothing to unescape)
    if m is None:
        m = _ID12_RE.fullmatch(mid := decode_field(mid))
    return prio, mid, tail, None if m is None else int(m[1])


def _class_for(letter: str) -> type[Message]:
    if letter == "T":
        return TextMessage
    if letter == "M":
        return Message
    from .bodies import message_for_letter  # (non-text bodies)

    return message_for_letter(letter if letter in CLASS_LETTERS else "B")  # N-8: Bytes carries it unchanged


def _reply_to(text: str) -> Queue | Topic | None:
    try:
        return Queue(text[1:]) if text[0] == "Q" else Topic(text[1:]) if text[0] == "T" else Queue(text)
    except Exception:  # not a valid destination name: no reply-to
        return None


@functools.lru_cache(maxsize=1024)
def _read_tail(tail: str, claimed: bool) -> tuple[type[Message], dict[str, Any], str]:
    """(class, headers but id, timestamp and priority, tail stamped with the delivery count) of
    every name ending in ``tail``.  Shared: callers copy the headers, never change them."""
    letter, raw_exp, raw_corr, raw_reply, raw_type, raw_props = (tail.split(".") + [""] * 5)[:6]
    cls = _class_for(letter)
    props = decode_properties(raw_props)
    stored = props.get(DELIVERY_COUNT)
    n = stored.value if stored is not None and type(stored.value) is int and 0 < stored.value < _INT_MAX else 0
    exp = int(raw_exp) if raw_exp and _LONG_RE.fullmatch(raw_exp) else 0
    count = max(n, 1) if claimed else n + 1
    props[DELIVERY_COUNT] = Property("I", count)
    headers = dict(vars(cls(
        expiration=exp if _LONG_MIN <= exp <= _LONG_MAX else 0,
        correlation_id=decode_field(raw_corr) or None,
        reply_to=_reply_to(decode_field(raw_reply)) if raw_reply else None,
        jms_type=decode_field(raw_type) or None,
        properties=props, delivery_count=count, redelivered=count > 1,
    )))
    dt, dm = props.pop(DELIVERY_TIME_PROP, None), props.pop(DELIVERY_MODE_PROP, None)
    if dt is not None and isinstance(dt.value, int):
        headers["delivery_time"] = dt.value
    if dm is not None and dm.value == int(DeliveryMode.NON_PERSISTENT):
        headers["delivery_mode"] = DeliveryMode.NON_PERSISTENT
    return cls, headers, _stamped_tail(tail, count)


def _unparseable(name: str, now: int | None) -> Message:
    msg = _class_for("")(message_id="ID:" + name, timestamp=now_ms() if now is None else now)
    msg.properties[DELIVERY_COUNT] = Property("I", 1)
    return msg


def claim_reading(name: str, now: int | None = None, claimed: bool = False) -> tuple[Message, str]:
    """The message ``name`` describes (empty body) and ``with_delivery_count(name, its count)``;
    never raises for a ``str`` (N-8).  ``now``: the timestamp of a name whose id has none (default:
    the clock).  ``claimed``: a name in processing/ or processed/ without its owner prefix."""
    try:
        parsed = split_name(name)
        if parsed is None:
            return _unparseable(name, now), name
        prio, mid, tail, number = parsed
        cls, headers, stamped = _read_tail(tail, claimed)
        msg = cls.__new__(cls)  # (the cached headers, not __init__'s defaults)
        msg.__dict__ = fields = headers.copy()
        fields["properties"] = headers["properties"].copy()
        fields["message_id"] = "ID:" + mid
        fields["priority"] = prio
        fields["timestamp"] = number // 1000 if number is not None else now_ms() if now is None else now
        stamped = name[:len(name) - len(tail)] + stamped
        size = len(stamped) if name.isascii() else _name_bytes(stamped)  # (an ASCII tail stamps as ASCII)
        return msg, name if size > MAX_NAME_BYTES else stamped
    except Exception:  # defensive: a foreign file must stay consumable
        if not isinstance(name, str):
            raise TypeError(f"file name must be str, not {type(name).__name__}") from None
        return _unparseable(name, now), with_delivery_count(name, 1)


def from_wire(name: str, now: int | None = None, claimed: bool = False) -> Message:
    return claim_reading(name, now, claimed)[0]


def _check_long(what: str, v: Any, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise MessageFormatError(f"{what} must be an int in [{lo}, {hi}], got {v!r}")
    return v


def encode_name(msg: Message, properties: dict[str, Any] | None = None, delivery_count: int | None = None) -> str:
    """The file name of ``msg`` (``properties`` and ``delivery_count`` in place of its own if given;
    a count given is to_wire's 1, not checked again): :class:`MessageFormatError` for headers that
    cannot be written, :class:`NameTooLongError` over 255 bytes."""
    prio = _check_long("priority", msg.priority, _INT_MIN, _INT_MAX)
    mid = msg.message_id
    if not isinstance(mid, str):
        raise MessageFormatError("message has no message id (assign one with new_message_id())")
    mid = mid[3:] if mid.startswith("ID:") else mid
    if not mid:
        raise MessageFormatError(f"message id {msg.message_id!r} is empty")
    if msg.class_letter not in CLASS_LETTERS:
        raise MessageFormatError(f"unknown message class letter {msg.class_letter!r}")
    exp = _check_long("expiration", msg.expiration, _LONG_MIN, _LONG_MAX)
    dc = _check_long("delivery_count", msg.delivery_count, 1, _INT_MAX) if delivery_count is None else delivery_count
    reply = msg.reply_to
    if reply is not None and not isinstance(reply, (Queue, Topic)):
        raise MessageFormatError(f"reply-to must be a Queue or Topic, got {reply!r}")
    fields = [
        str(prio), encode_field(mid), msg.class_letter, str(exp) if exp else "",
        encode_field(msg.correlation_id) if msg.correlation_id else "",
        encode_field(("Q" if isinstance(reply, Queue) else "T") + reply.name) if reply is not None else "",
        encode_field(msg.jms_type) if msg.jms_type else "",
        encode_properties(msg.properties if properties is None else properties, dc),
    ]
    while len(fields) > 3 and not fields[-1]:
        fields.pop()
    name = ".".join(fields)
    size = len(name.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        raise NameTooLongError(
            f"encoded file name of message {msg.message_id} is {size} bytes, over the {MAX_NAME_BYTES}-byte "
            f"limit; shorten its properties, correlation id, JMSType or reply-to")
    return name


_NON_PERSISTENT = Property("I", int(DeliveryMode.NON_PERSISTENT))


def to_wire(msg: Message) -> str:
    """The file name for ``msg``, the headers 1.2 has no field for as provider properties."""
    extra = dict(msg.properties)  # (a JMSXDeliveryCount in it: encode_properties drops it at count 1)
    if msg.delivery_time and msg.delivery_time > msg.timestamp:
        extra[DELIVERY_TIME_PROP] = Property("L", msg.delivery_time)
    if msg.delivery_mode == DeliveryMode.NON_PERSISTENT:
        extra[DELIVERY_MODE_PROP] = _NON_PERSISTENT
    return encode_name(msg, extra, 1)


# ---------------------------------------------------------------- delivery counts in names


def _name_bytes(s: str) -> int:
    size = name_bytes(s)
    return len(s.encode("utf-8", "surrogatepass")) if size is None else size


@functools.lru_cache(maxsize=1024)
def _stamped_tail(tail: str, count: int | None) -> str:
    """``tail`` with its properties carrying ``JMSXDeliveryCountI=<count>`` (in place of the first
    count pair, others dropped, else appended; empty fields added); ``None``: without the pairs
    (and the empty pairs and trailing fields left: a first delivery's name)."""
    fields = tail.split(".")
    if count is None and len(fields) < 6:
        return tail
    fields += [""] * (6 - len(fields))
    pairs = fields[5].split("&") if fields[5] else []
    out, new = [], [] if count is None else [f"{DELIVERY_COUNT}I={count}"]
    for pair in pairs:
        if "=" in pair and decode_field(pair.partition("=")[0])[:-1] == DELIVERY_COUNT:
            out += new
            new = []
        elif pair or count is not None:
            out.append(pair)
    fields[5] = "&".join(out + new)
    while count is None and len(fields) > 1 and not fields[-1]:
        fields.pop()
    return ".".join(fields)


def with_delivery_count(name: str, count: int | None) -> str:
    """``name`` with its tail stamped (:func:`_stamped_tail`); an unparseable name, or a result over
    255 bytes, unchanged."""
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise ValueError(f"delivery count must be a non-negative int, got {count!r}")
    parsed = split_name(name)
    if parsed is None:
        return name
    result = name[:len(name) - len(parsed[2])] + _stamped_tail(parsed[2], count)  # (tails repeat: cached)
    return name if count is not None and _name_bytes(result) > MAX_NAME_BYTES else result


def name_delivery_count(name: str) -> int:
    """The ``n`` of ``JMSXDeliveryCountI=<n>`` in a name (a ``<client>~`` prefix allowed); 0 for
    none.  What it means depends on where the name is (N-7, ``trace_rules.COUNT_RULES``)."""
    return from_wire(split_processing_name(name)[1], 0).delivery_count - 1


# ---------------------------------------------------------------- claimed and temporary names (N-9)


def processing_name(client_id: str, name: str) -> str:
    """``enc(client_id) + "~" + name``, or ``name`` when that exceeds 255 bytes (as 1.2)."""
    pname = _processing_prefix(client_id) + name
    return name if (len(pname) if pname.isascii() else _name_bytes(pname)) > MAX_NAME_BYTES else pname


def claim_as(client_id: str, name: str, claimed: str) -> str | None:
    """The processing/ name that claims ``target/<name>`` as ``claimed`` (stamped with this
    delivery's count, which always changes a name in target/ unless there is no room); None
    when there is no room for the count or the owner prefix: an alias claim (claims.py)."""
    pname = processing_name(client_id, claimed)
    return None if pname == claimed or claimed == name else pname


@functools.lru_cache(maxsize=64)
def _processing_prefix(client_id: str) -> str:
    return encode_field(client_id) + "~"  # a consumer's id never changes: encoded once


_PREFIX_RE = re.compile(r"(?:[A-Za-z0-9.*_+-]|%[0-9A-Fa-f]{2})*")  # what 1.2 or we write before "~"


def split_processing_name(pname: str) -> tuple[str | None, str]:
    """(client id, original name), split at the first ``~`` when what precedes it can be an
    encoded client id; else (None, pname): claimed bare (no room for a prefix), owner unknown."""
    head, sep, rest = pname.partition("~")
    if not sep or not rest or _PREFIX_RE.fullmatch(head) is None:
        return None, pname
    return decode_field(head), rest


#: what follows the owner's "~" in an alias claim (claims.py): never an encoded field's first character
ALIAS_MARK = "#"


#: a temporary destination's name (temporary.py): the prefix, its connection's client id, a random part
TEMP_PREFIX = "dropboxmq-temp~"


def temporary_owner(name: str) -> str | None:
    """The client id whose connection made the temporary destination ``name`` (None: not one)."""
    return decode_field(name[len(TEMP_PREFIX):].split("~", 1)[0]) if name.startswith(TEMP_PREFIX) else None


# ---------------------------------------------------------------- delivery order (N-6)

_KEY_ID_BITS = 100  # an id's numeric prefix has at most 30 digits: < 10**30 < 2**100
_KEY_PRIORITY_SHIFT = _KEY_ID_BITS + 2  # then two bits for the id's kind (1.2, foreign, unparseable)


_SORT_RE = re.compile(r"([+-]?[0-9]{1,12})\.([0-9]{1,30})-[0-9]{1,30}\.")  # the usual name's head


def sort_key(name: str) -> int:
    """N-6's order as one int a name (what a consumer keeps per listed name): priority descending,
    then N-5 ids by numeric prefix, then foreign ids, then unparseable names (priority 4).  Equal
    keys are ordered by name by whoever needs one order (``claim.Claimer``, the browser)."""
    m = _SORT_RE.match(name)  # the usual name: one match, no split_name
    if m is not None and name.count(".") <= 7 and _INT_MIN <= int(m[1]) <= _INT_MAX:
        return ((-int(m[1]) - _INT_MIN) << _KEY_PRIORITY_SHIFT) | int(m[2])
    parsed = split_name(name)
    if parsed is None:
        return ((-DEFAULT_PRIORITY - _INT_MIN) << _KEY_PRIORITY_SHIFT) | (2 << _KEY_ID_BITS)
    number = parsed[3]
    return ((-parsed[0] - _INT_MIN) << _KEY_PRIORITY_SHIFT) | (number if number is not None else 1 << _KEY_ID_BITS)


def key_priority(key: int) -> int:
    """What a :func:`sort_key` sorts by first (priority, descending): equal for names of one priority."""
    return key >> _KEY_PRIORITY_SHIFT
