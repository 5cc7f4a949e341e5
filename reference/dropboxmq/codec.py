"""The codec: DropboxMQ 1.2's file-name grammar, pure (no file-system access).

A message's headers and properties are its file name (spec/PROTOCOL.md N-1 .. N-9)::

    priority.messageId.class[.expiration[.correlationId[.replyTo[.JMSType[.properties]]]]]

e.g. ``4.1140429201295000-9262574723.T.1140429211295.corr1283.TestQueue1.XYZType.prop1S=hello``
(seed 000).  A name is parsed in one place, :func:`split_name`: (priority, id, *tail*), the tail
being the fields after the id.  One producer's names differ in priority and id only, so a tail is
read (:func:`_read_tail`) and stamped with a delivery count (:func:`_stamped_tail`) once, not once
a message.  Values are written as 1.2 writes them (Java's ``Double.toString``/``Float.toString``
with the shortest round-trip digits, :mod:`~dropboxmq.javanum`) and read in Java's whole syntax;
an unknown type letter, or a typed value that does not parse, reads as a String.

Decisions marked [ours]:

* A missing or unknown class letter reads as BytesMessage (1.2's documentation; its code reads
  Text: pass ``default_class="T"``): only Bytes carries any foreign file's content unchanged.
* Reply-to: the first character is the kind (``Q`` queue, ``T`` topic), as 1.2's code reads it,
  so the seed's ``TestQueue1`` is the topic ``estQueue1``; any other first character: a queue of
  the whole text; a name that is no valid destination: no reply-to.
* An unparseable name (N-8) never raises: JMSMessageID ``"ID:" + name``, timestamp now,
  priority 4, the default class.  A bad expiration reads as 0, a malformed property pair is skipped.
* Names over 255 bytes are an error to the sender (:class:`NameTooLongError`).
* Delivery count (N-7): our claim stamps the *current* count into the name
  (:func:`with_delivery_count`); 1.2's ack appends it (both correct: ``trace_rules.COUNT_RULES``).
  Read from ``target/``, a stored ``n`` means delivery ``n + 1`` (redelivered); read from a claim
  (``claimed=True``) it is delivery ``n`` (redelivered when ``n > 1``), as 1.2's consumer reported
  for the fixtures.  The decoded message carries ``JMSXDeliveryCount`` (in the pair's position,
  else last) and :func:`encode_name` writes ``delivery_count - 1``, so ``encode(decode(n)) == n``.
"""

from __future__ import annotations

import functools
import re
import time
from typing import Any
from urllib.parse import quote_plus

from .errors import MessageFormatError, NameTooLongError
from .message import CLASS_LETTERS, DEFAULT_PRIORITY, DeliveryMode, Message, Queue, TextMessage, Topic, name_bytes
from .values import INT_BITS, Property, coerce

__all__ = [
    "DEFAULT_CLASS_LETTER", "DELIVERY_COUNT", "MAX_NAME_BYTES", "DELIVERY_TIME_PROP", "DELIVERY_MODE_PROP",
    "ALIAS_MARK", "TEMP_PREFIX", "now_ms", "encode_field", "decode_field", "encode_properties",
    "decode_properties", "split_name", "decode_name", "from_wire", "claim_reading", "encode_name", "to_wire",
    "with_delivery_count", "without_delivery_count", "name_delivery_count", "processing_name",
    "split_processing_name", "needs_alias", "alias_inode", "temporary_owner", "sort_key", "key_priority",
]

#: [ours] class of a message whose name has no (or an unknown) class letter.
DEFAULT_CLASS_LETTER = "B"
#: The JMS-defined delivery count property, stored by 1.2 as ``JMSXDeliveryCountI=<n>``.
DELIVERY_COUNT = "JMSXDeliveryCount"
#: The longest file name (bytes of UTF-8) on the file systems we support (N-3).
MAX_NAME_BYTES = 255
#: [ours] provider properties (the JMS_<vendor>_ prefix) for what 1.2's grammar has no field for:
DELIVERY_TIME_PROP = "JMS_DropboxMQ_DeliveryTime"  # L, ms since epoch (delivery delay)
DELIVERY_MODE_PROP = "JMS_DropboxMQ_DeliveryMode"  # I, written only for NON_PERSISTENT

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def now_ms() -> int:
    """The clock, ms since the epoch (the pure parts take the time as an argument)."""
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------- fields (N-2)

_ASCII_ESCAPES = {  # ASCII -> escaped, for str.translate (every name we and 1.2 write is ASCII)
    i: chr(i) if chr(i).isalnum() or chr(i) in "-*_" else "+" if i == 0x20 else f"%{i:02X}" for i in range(128)}
_PCT_RUN = re.compile(r"(?:%[0-9A-Fa-f]{2})+")


def encode_field(s: str) -> str:
    """Java's ``URLEncoder.encode(s, "UTF-8")``, then ``.`` -> ``%2E``.  Lone surrogates
    ``\\udc80``-``\\udcff`` (``os.listdir``'s undecodable bytes) are written as their byte;
    any other raises :class:`MessageFormatError`."""
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
    """``+`` -> space, each run of ``%XX`` -> UTF-8; never raises: an invalid ``%`` stays as it
    is, invalid UTF-8 becomes U+FFFD (as Java's decoder does)."""
    if "+" in s:
        s = s.replace("+", " ")
    if "%" in s:
        s = _PCT_RUN.sub(lambda m: bytes.fromhex(m.group().replace("%", "")).decode("utf-8", "replace"), s)
    return s


# ---------------------------------------------------------------- properties


def _encode_pair(name: str, prop: Any) -> str:
    if isinstance(prop, Property) and type(name) is str:
        value = prop.value
        try:  # the key tells apart values that compare equal: True == 1 == 1.0, and 0.0 == -0.0
            return _encoded_pair(name, prop.letter, type(value).__qualname__,
                                 repr(value) if type(value) is float else None, value)
        except TypeError:  # an unhashable value: rejected below
            pass
    return _pair_text(name, prop)


@functools.lru_cache(maxsize=4096)
def _encoded_pair(name: str, letter: str, _value_type: str, _float_repr: str | None, value: Any) -> str:
    """A producer's messages mostly carry the same pairs (its delivery mode): each is validated
    and encoded once (3.4 against 4.5 µs a non-persistent send; 4.8 against 13 with three
    properties).  Exceptions are never cached."""
    return _pair_text(name, Property(letter, value))


def _pair_text(name: str, prop: Any) -> str:
    if not isinstance(name, str) or not name:
        raise MessageFormatError(f"property name must be a non-empty string, got {name!r}")
    if not isinstance(prop, Property):
        prop = Property.of(prop)
    letter, value = prop.letter, coerce(prop.letter, prop.value)  # validates type and range
    if letter == "B":
        text = "true" if value else "false"
    elif letter in INT_BITS:
        text = str(value)
    elif letter in ("F", "D"):
        from .javanum import java_double_str, java_float_str  # (float properties: rare, and cached)

        text = encode_field(java_float_str(value) if letter == "F" else java_double_str(value))
    else:
        text = encode_field(value)
    return f"{encode_field(name)}{letter}={text}"


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


def _parse_value(letter: str, text: str) -> Property:
    if letter == "B":
        return Property("B", text.lower() == "true")  # Boolean.parseBoolean
    if letter in INT_BITS or letter in ("F", "D"):
        from .javanum import parse_java_float, parse_java_int  # (Java's number syntax: read once a tail)

        v = parse_java_int(text, INT_BITS[letter]) if letter in INT_BITS else parse_java_float(text, letter == "F")
        return Property(letter, v) if v is not None else Property("S", text)
    return Property("S", text)


def decode_properties(field: str) -> dict[str, Property]:
    """The properties field as typed values, never raising: a pair without ``=`` or a name is
    skipped; a repeated name keeps its first position and its last value."""
    props: dict[str, Property] = {}
    for pair in field.split("&") if field else ():
        key, eq, raw = pair.partition("=")
        key = decode_field(key)
        if eq and len(key) >= 2:
            props[key[:-1]] = _parse_value(key[-1], decode_field(raw))
    return props


# ---------------------------------------------------------------- names: one parse

_DIGIT_PRIORITY = {str(p): p for p in range(10)}
_PRIO_RE = re.compile(r"[+-]?[0-9]{1,12}")
_ID12_RE = re.compile(r"([0-9]{1,30})-[0-9]{1,30}")  # N-5: <epochMillis><3-digit counter>-<digits>
_LONG_RE = re.compile(r"[+-]?[0-9]{1,25}")


def split_name(name: str) -> tuple[int, str, str] | None:
    """(priority, id field, tail) of a parseable name (N-1: 3 to 8 fields, a Java int priority,
    an id), else None.  The tail is the fields after the id, without its leading ``.``."""
    parts = name.split(".", 2)
    if len(parts) != 3 or not parts[1] or parts[2].count(".") > 5:
        return None
    prio_text, mid, tail = parts
    prio = _DIGIT_PRIORITY.get(prio_text)
    if prio is None:
        if _PRIO_RE.fullmatch(prio_text) is None or not _INT_MIN <= int(prio_text) <= _INT_MAX:
            return None
        prio = int(prio_text)
    return prio, mid, tail


def _class_for(letter: str, default_class: str) -> type[Message]:
    if letter == "T" or letter not in CLASS_LETTERS and default_class == "T":
        return TextMessage
    if letter == "M":
        return Message
    from .bodies import message_for_letter  # (non-text bodies)

    return message_for_letter(letter if letter in CLASS_LETTERS else default_class)


def _reply_to(text: str) -> Queue | Topic | None:
    try:
        return Queue(text[1:]) if text[0] == "Q" else Topic(text[1:]) if text[0] == "T" else Queue(text)
    except Exception:  # not a valid destination name: no reply-to
        return None


@functools.lru_cache(maxsize=1024)
def _read_tail(tail: str, default_class: str, wire: bool, claimed: bool) -> tuple[type[Message], dict[str, Any], int,
                                                                               str]:
    """(class, headers, stored delivery count, tail stamped with the delivery count) of every name
    ending in ``tail``, read once a tail: a consume decodes a name in 3 µs, not 8.  The headers hold
    every field but the id, timestamp and priority; ``wire``: the provider properties read as the
    headers they carry (:func:`from_wire`).  Shared: callers copy them, never change them."""
    letter, raw_exp, raw_corr, raw_reply, raw_type, raw_props = (tail.split(".") + [""] * 5)[:6]
    cls = _class_for(letter, default_class)
    props = decode_properties(raw_props)
    stored = props.get(DELIVERY_COUNT)
    n = stored.value if stored is not None and stored.letter in INT_BITS and 0 < stored.value < _INT_MAX else 0
    exp = int(raw_exp) if raw_exp and _LONG_RE.fullmatch(raw_exp) else 0
    count = max(n, 1) if claimed else n + 1
    props[DELIVERY_COUNT] = Property("I", count)
    headers = vars(cls(
        expiration=exp if _LONG_MIN <= exp <= _LONG_MAX else 0,
        correlation_id=decode_field(raw_corr) or None,
        reply_to=_reply_to(decode_field(raw_reply)) if raw_reply else None,
        jms_type=decode_field(raw_type) or None,
        properties=props, delivery_count=count, redelivered=count > 1,
    ))
    if wire:
        dt, dm = props.pop(DELIVERY_TIME_PROP, None), props.pop(DELIVERY_MODE_PROP, None)
        if dt is not None and isinstance(dt.value, int):
            headers["delivery_time"] = dt.value
        if dm is not None and dm.value == int(DeliveryMode.NON_PERSISTENT):
            headers["delivery_mode"] = DeliveryMode.NON_PERSISTENT
    return cls, headers, n, _stamped_tail(tail, count)


def _unparseable(name: str, now: int | None, default_class: str) -> Message:
    msg = _class_for("", default_class)(message_id="ID:" + name, timestamp=now_ms() if now is None else now)
    msg.properties[DELIVERY_COUNT] = Property("I", 1)
    return msg


def _decode(name: str, now: int | None, default_class: str, claimed: bool, wire: bool) -> tuple[Message, str]:
    """The message and ``with_delivery_count(name, its delivery count)``, from one parse."""
    parsed = split_name(name)
    if parsed is None:
        return _unparseable(name, now, default_class), name
    prio, mid, tail = parsed
    cls, headers, _, stamped = _read_tail(tail, default_class, wire, claimed)
    stamped = name[:len(name) - len(tail)] + stamped
    mid = decode_field(mid)
    m = _ID12_RE.fullmatch(mid)
    msg = cls.__new__(cls)  # (the cached headers, not __init__'s defaults)
    fields = msg.__dict__
    fields.update(headers)
    fields["properties"] = headers["properties"].copy()
    fields["message_id"] = "ID:" + mid
    fields["priority"] = prio
    fields["timestamp"] = int(m.group(1)) // 1000 if m is not None else now_ms() if now is None else now
    return msg, name if _name_bytes(stamped) > MAX_NAME_BYTES else stamped


def _safe_decode(name: str, now: int | None, default_class: str, claimed: bool, wire: bool) -> tuple[Message, str]:
    if not isinstance(name, str):
        raise TypeError(f"file name must be str, not {type(name).__name__}")
    try:
        return _decode(name, now, default_class, claimed, wire)
    except Exception:  # defensive: a foreign file must stay consumable
        return _unparseable(name, now, default_class), with_delivery_count(name, 1)


def decode_name(name: str, now_ms: int | None = None, *, default_class: str = DEFAULT_CLASS_LETTER,
                claimed: bool = False) -> Message:
    """The message a file name describes (headers and typed properties, empty body); never raises
    for a ``str`` (see above).  ``now_ms``: the timestamp of a name whose id has none (default:
    the clock).  ``claimed``: a name in ``processing/`` or ``processed/`` (owner prefix removed),
    whose delivery count is the current one."""
    return _safe_decode(name, now_ms, default_class, claimed, False)[0]


def from_wire(name: str, now: int | None = None, claimed: bool = False) -> Message:
    """:func:`decode_name` with the provider properties read as the headers they carry."""
    return _safe_decode(name, now, DEFAULT_CLASS_LETTER, claimed, True)[0]


def claim_reading(name: str, now: int) -> tuple[Message, str]:
    """``from_wire(name, now)`` and ``with_delivery_count(name, its delivery_count)``, from one
    parse: what a claim of ``target/<name>`` reads (``decision.decide``)."""
    return _safe_decode(name, now, DEFAULT_CLASS_LETTER, False, True)


def _check_long(what: str, v: Any, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise MessageFormatError(f"{what} must be an int in [{lo}, {hi}], got {v!r}")
    return v


def encode_name(msg: Message) -> str:
    """The file name of ``msg``: :class:`MessageFormatError` for headers that cannot be written,
    :class:`NameTooLongError` over 255 bytes."""
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
    dc = _check_long("delivery_count", msg.delivery_count, 1, _INT_MAX)
    reply = msg.reply_to
    if reply is not None and not isinstance(reply, (Queue, Topic)):
        raise MessageFormatError(f"reply-to must be a Queue or Topic, got {reply!r}")
    fields = [
        str(prio), encode_field(mid), msg.class_letter, str(exp) if exp else "",
        encode_field(msg.correlation_id) if msg.correlation_id else "",
        encode_field(("Q" if isinstance(reply, Queue) else "T") + reply.name) if reply is not None else "",
        encode_field(msg.jms_type) if msg.jms_type else "",
        encode_properties(msg.properties, dc),
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
    extra = dict(msg.properties)
    extra.pop(DELIVERY_COUNT, None)
    if msg.delivery_time and msg.delivery_time > msg.timestamp:
        extra[DELIVERY_TIME_PROP] = Property("L", msg.delivery_time)
    if msg.delivery_mode == DeliveryMode.NON_PERSISTENT:
        extra[DELIVERY_MODE_PROP] = _NON_PERSISTENT
    # the wire's properties and count swapped in, not a dataclasses.replace() copy (body included)
    saved = msg.properties, msg.delivery_count
    msg.properties, msg.delivery_count = extra, 1
    try:
        return encode_name(msg)
    finally:
        msg.properties, msg.delivery_count = saved


# ---------------------------------------------------------------- delivery counts in names


def _name_bytes(s: str) -> int:
    size = name_bytes(s)
    return len(s.encode("utf-8", "surrogatepass")) if size is None else size


@functools.lru_cache(maxsize=1024)
def _stamped_tail(tail: str, count: int | None) -> str:
    """``tail`` with its properties carrying ``JMSXDeliveryCountI=<count>`` (in place of the first
    count pair, others dropped, else appended; empty fields added); ``None``: without the pairs
    (and the empty pairs and trailing fields left), a tail without properties unchanged."""
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


def with_delivery_count(name: str, count: int) -> str:
    """``name`` with its properties carrying ``JMSXDeliveryCountI=<count>`` (in place of the pair,
    else appended, adding empty fields); an unparseable name, or a result over 255 bytes, unchanged."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"delivery count must be a non-negative int, got {count!r}")
    parsed = split_name(name)
    if parsed is None:
        return name
    result = name[:len(name) - len(parsed[2])] + _stamped_tail(parsed[2], count)  # (tails repeat: cached)
    return name if _name_bytes(result) > MAX_NAME_BYTES else result


def without_delivery_count(name: str) -> str:
    """``name`` without its ``JMSXDeliveryCount`` pair: the name of a first delivery (recovery)."""
    parsed = split_name(name)
    return name if parsed is None else name[:len(name) - len(parsed[2])] + _stamped_tail(parsed[2], None)


def name_delivery_count(name: str) -> int:
    """The ``n`` of ``JMSXDeliveryCountI=<n>`` in a name (a ``<client>~`` prefix allowed); 0 for
    none.  What it means depends on where the name is (N-7, ``trace_rules.COUNT_RULES``)."""
    parsed = split_name(split_processing_name(name)[1])
    return 0 if parsed is None else _read_tail(parsed[2], DEFAULT_CLASS_LETTER, False, False)[2]


# ---------------------------------------------------------------- claimed and temporary names (N-9)


def processing_name(client_id: str, name: str) -> str:
    """``enc(client_id) + "~" + name``, or ``name`` when that exceeds 255 bytes (as 1.2)."""
    pname = _processing_prefix(client_id) + name
    return name if _name_bytes(pname) > MAX_NAME_BYTES else pname


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


def needs_alias(client_id: str, name: str, claimed: str) -> bool:
    """Can ``target/<name>`` not be claimed as ``<enc(client_id)>~<claimed>`` (``claimed``: the name
    with this delivery's count)?  ``with_delivery_count`` returns a name unchanged exactly when it
    cannot write the count, and a stamp always changes a name in target/ (its count is one less)."""
    return claimed == name or processing_name(client_id, claimed) == claimed


def alias_inode(pname: str) -> int | None:
    """The inode an alias claim names, or None for an ordinary processing/ name."""
    rest = split_processing_name(pname)[1]
    return int(rest[1:]) if rest[:1] == ALIAS_MARK and rest[1:].isdigit() else None


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
    keys are ordered by name by whoever needs one order (``claim.Claimer``, the browser).  Cheap:
    the usual name is a regex match on its head, no decode."""
    m = _SORT_RE.match(name)
    if m is not None and name.count(".") <= 7 and _INT_MIN <= int(m.group(1)) <= _INT_MAX:
        return ((-int(m.group(1)) - _INT_MIN) << _KEY_PRIORITY_SHIFT) | int(m.group(2))
    parsed = split_name(name)
    priority, kind, ident = DEFAULT_PRIORITY, 2, 0
    if parsed is not None:
        m = _ID12_RE.fullmatch(decode_field(parsed[1]))
        priority, kind, ident = parsed[0], 1 if m is None else 0, 0 if m is None else int(m.group(1))
    return ((-priority - _INT_MIN) << _KEY_PRIORITY_SHIFT) | (kind << _KEY_ID_BITS) | ident


def key_priority(key: int) -> int:
    """What a :func:`sort_key` sorts by first (priority, descending): equal for names of one priority."""
    return key >> _KEY_PRIORITY_SHIFT
