"""The codec: DropboxMQ 1.2's default filename transcoder.

Pure functions, no file-system access.  Message ids are made by
:mod:`~dropboxmq.ids`, Java number text by :mod:`~dropboxmq.javanum`, Map and
Stream bodies by :mod:`~dropboxmq.bodies`.  The store and session code call
:func:`~dropboxmq.ids.new_message_id`, :func:`encode_name`, :func:`decode_name`,
:func:`with_delivery_count`, :func:`processing_name`,
:func:`split_processing_name` and :func:`sort_key`.

File name = metadata
====================

A message's headers and properties live in its file name; the file holds only
the body.  The name has up to eight ``.``-separated fields::

    priority.messageId.class[.expiration[.correlationId[.replyTo[.JMSType[.properties]]]]]

Trailing empty fields are omitted, inner empty fields stay (``..``).  Every
field is escaped with :func:`encode_field`: Java's
``URLEncoder.encode(s, "UTF-8")`` (``A-Z a-z 0-9 . - * _`` kept, space -> ``+``,
every other character -> ``%XX`` per UTF-8 byte, upper-case hex; unlike
Python's ``quote_plus``, ``~`` becomes ``%7E``), then ``.`` -> ``%2E``.  So an
encoded field never contains ``.``, ``~``, ``&`` or ``=``, and an encoded
name is pure ASCII.

==============  ==============================================================
field           content
==============  ==============================================================
priority        decimal Java int (JMS uses 0-9; 4 is the default)
messageId       the JMS id without its ``ID:`` prefix.  Ours and 1.2's are
                ``<epochMillis><3-digit per-ms counter>-<10 random digits>``;
                JMSTimestamp = numeric prefix // 1000 (it is not stored apart)
class           ``M`` Message, ``B`` Bytes, ``S`` Stream, ``P`` Map,
                ``O`` Object, ``T`` Text
expiration      ms since the epoch; empty = 0 = never
correlationId   empty = none (so ``""`` and ``None`` both read back as ``None``)
replyTo         ``Q<queue name>`` or ``T<topic name>``
JMSType         empty = none (``""`` reads back as ``None``)
properties      ``enc(name) + letter + "=" + enc(value)`` joined by ``&``;
                letters ``B`` boolean, ``Y`` byte, ``H`` short, ``I`` int,
                ``L`` long, ``F`` float, ``D`` double, ``S`` String
==============  ==============================================================

The two examples of the DropboxMQ documentation (seed 000)::

    4.1140429201295000-9262574723.T.1140429211295.corr1283.TestQueue1.XYZType.prop1S=hello

is a TextMessage, priority 4, JMSMessageID ``ID:1140429201295000-9262574723``,
JMSTimestamp 1140429201295, expiring at 1140429211295, correlation id
``corr1283``, reply-to ``TestQueue1`` (read as the *topic* ``estQueue1``, see
below), JMSType ``XYZType`` and one String property ``prop1 = "hello"``;
``4.1140429201295000-9262574723.T`` is the same message with only the three
required fields.

Values are written as 1.2 writes them: booleans ``true``/``false``, integers
in decimal, doubles as Java's ``Double.toString`` and floats as
``Float.toString`` (``NaN``, ``Infinity``, ``-Infinity``, ``0.5``, ``1.0E10``,
``1.0E-5``) with the shortest digits that read back to the same value (the
JDK 19+ algorithm; for ``F`` the shortest that round-trips through float32),
so 1.2's ``Float.parseFloat``/``Double.parseDouble`` read back the exact
value.  Reading accepts Java's whole syntax (``+1``, ``1e3``, ``1.5f``,
``0x1p3``).  An unknown type letter reads as a String; a typed value that does
not parse (``xI=abc``) reads as the String ``"abc"``.

Decisions marked [ours]
-----------------------

* **Missing or unknown class letter -> BytesMessage** (:data:`DEFAULT_CLASS_LETTER`),
  as 1.2's documentation says (its code reads Text).  Bytes is the only class
  that can carry any foreign file's content unchanged (a TextMessage needs
  UTF-8).  Readers wanting 1.2's code behaviour pass ``default_class="T"`` to
  :func:`decode_name`.
* **Reply-to: the first character is the kind, always.**  ``Q`` -> Queue,
  ``T`` -> Topic, the rest is the name, exactly as 1.2's code reads it, so one
  file means the same reply destination to both implementations.  The seed's
  ``TestQueue1`` predates the prefix and therefore reads as the topic
  ``estQueue1``.  A reply-to starting with any other character is a Queue of
  the whole text; one that is not a valid destination name is dropped (None).
* **Unparseable names** (fewer than 3 or more than 8 fields, a priority that is
  not a Java int, an empty message id): JMSMessageID = ``"ID:" + whole name``,
  timestamp = now, priority 4, default class, no other headers.  Such files are
  consumable; :func:`decode_name` never raises for a ``str``.  Other fields are
  read tolerantly (a bad expiration reads as 0, a bad reply-to as none,
  malformed property pairs are skipped).
* **Names over 255 bytes are an error to the sender** (:class:`NameTooLongError`).
* Float formatting: see above (shortest round-trip digits in Java's layout).

Delivery count (1.2)
--------------------

1.2 keeps the delivery count in the name as the property
``JMSXDeliveryCountI=<n>``.  Our claim (target -> processing rename) writes the
*current* delivery count into the name (:func:`with_delivery_count`), so the
name always counts the deliveries that have been *attempted*; 1.2's claim keeps
the name and its ack appends the count (recorded in
``fixtures/dropboxmq12-traces``).  Both are correct: ``trace_rules.COUNT_RULES``
is the family of correct placements.  Reading a name
from ``target/`` (the default), ``n`` present means the message is being
redelivered: ``redelivered = True`` and ``delivery_count = n + 1``; absent
means first delivery (``False``, 1).  Reading a name that a claim produced
(``processing/`` or ``processed/``) pass ``claimed=True``: ``delivery_count =
n`` and ``redelivered = n > 1`` -- which is what 1.2's consumer reported for
the fixtures.  Either way the decoded message carries
``properties["JMSXDeliveryCount"] = Property("I", delivery_count)`` (in the
position the name had it, else last), and :func:`encode_name` writes
``JMSXDeliveryCountI=<delivery_count - 1>`` when ``delivery_count > 1``
(ignoring the property's value), so ``encode_name(decode_name(n)) == n`` for
names written by 1.2 or by us.

Processing names
----------------

A consumer's claim renames ``target/<name>`` to
``processing/<enc(clientId)>~<name>``; :func:`processing_name` gives ``<name>`` alone
when that exceeds 255 bytes, as 1.2 does, but our consumers then claim under an alias
that still names the owner (``claims.py``).  ``~`` never occurs in an encoded field.

Ordering
--------

:func:`sort_key` orders names by priority descending, then the id's numeric
prefix ``millis * 1000 + counter`` ascending (send order, including sends in
one millisecond); names with an equal key by name.  Within a priority, names with a
foreign (non-1.2) message id come after the 1.2 ids and unparseable names after those.
"""

from __future__ import annotations

import functools
import re
import time
from typing import Any, Iterable
from urllib.parse import quote_plus

from .errors import MessageFormatError, NameTooLongError
from .message import (
    CLASS_LETTERS,
    DEFAULT_PRIORITY,
    MESSAGE_CLASSES,
    DeliveryMode,
    Message,
    Queue,
    Topic,
    name_bytes,
)
from .values import INT_BITS, Property, coerce

__all__ = [
    "DEFAULT_CLASS_LETTER",
    "DELIVERY_COUNT",
    "MAX_NAME_BYTES",
    "encode_field",
    "decode_field",
    "encode_properties",
    "decode_properties",
    "encode_name",
    "decode_name",
    "split_name",
    "with_delivery_count",
    "DELIVERY_TIME_PROP",
    "DELIVERY_MODE_PROP",
    "to_wire",
    "from_wire",
    "first_delivery",
    "now_ms",
    "name_delivery_count",
    "without_delivery_count",
    "processing_name",
    "split_processing_name",
    "ALIAS_MARK",
    "TEMP_PREFIX",
    "temporary_owner",
    "needs_alias",
    "alias_inode",
    "sort_key",
    "key_priority",
    "in_delivery_order",
]

#: [ours] class of a message whose name has no (or an unknown) class letter.
DEFAULT_CLASS_LETTER = "B"
#: The JMS-defined delivery count property, stored by 1.2 as ``JMSXDeliveryCountI=<n>``.
DELIVERY_COUNT = "JMSXDeliveryCount"
#: The longest file name (bytes of UTF-8) on the file systems we support.
MAX_NAME_BYTES = 255

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


# ---------------------------------------------------------------- field escaping


_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-*_")
#: ASCII -> escaped ASCII, for str.translate (the common, all-ASCII case)
_ASCII_ESCAPES = {
    i: (chr(i) if chr(i) in _UNRESERVED else "+" if i == 0x20 else f"%{i:02X}") for i in range(128)
}
_PCT_RUN = re.compile(r"(?:%[0-9A-Fa-f]{2})+")


def encode_field(s: str) -> str:
    """Java's ``URLEncoder.encode(s, "UTF-8")`` followed by ``.`` -> ``%2E``.

    Lone surrogates ``\\udc80``-``\\udcff`` (how Python's ``os.listdir`` carries
    undecodable bytes) are written as the byte they stand for; any other lone
    surrogate raises :class:`MessageFormatError`.
    """
    if not isinstance(s, str):
        raise MessageFormatError(f"can only encode str, not {type(s).__name__}")
    if s.isascii():
        return s.translate(_ASCII_ESCAPES)
    try:
        out = quote_plus(s, safe="*", encoding="utf-8", errors="surrogateescape")
    except UnicodeEncodeError as exc:
        raise MessageFormatError(f"{s!r} is not valid Unicode: {exc.reason}") from None
    return out.replace("~", "%7E").replace(".", "%2E")


def _pct_run(m: re.Match[str]) -> str:
    return bytes.fromhex(m.group().replace("%", "")).decode("utf-8", "replace")


def decode_field(s: str) -> str:
    """Inverse of :func:`encode_field` (``+`` -> space, ``%XX`` -> byte, UTF-8).

    Lenient like a browser, never raises: an invalid ``%`` sequence stays as it
    is, invalid UTF-8 becomes U+FFFD (as Java's decoder does).
    """
    if "+" in s:
        s = s.replace("+", " ")
    if "%" in s:
        s = _PCT_RUN.sub(_pct_run, s)
    return s


# ---------------------------------------------------------------- properties


def _format_value(letter: str, value: Any) -> str:
    if letter == "B":
        return "true" if value else "false"
    if letter in INT_BITS:
        return str(value)
    if letter in ("F", "D"):  # Java's text of a float or double (cached with the pair: _encoded_pair)
        from .javanum import java_double_str, java_float_str

        return encode_field(java_float_str(value) if letter == "F" else java_double_str(value))
    return encode_field(value)


def _encode_pair(name: str, prop: Any) -> str:
    if isinstance(prop, Property) and type(name) is str:
        value = prop.value
        try:  # the key tells apart values that compare equal: True == 1 == 1.0, and 0.0 == -0.0
            return _encoded_pair(name, prop.letter, type(value).__qualname__,
                                 repr(value) if type(value) is float else None, value)
        except TypeError:  # an unhashable value: encoded (and rejected) below
            pass
    return _encode_pair_uncached(name, prop)


@functools.lru_cache(maxsize=4096)
def _encoded_pair(name: str, letter: str, _value_type: str, _float_repr: str | None, value: Any) -> str:
    """_encode_pair, cached: one producer's messages mostly carry the same properties (e.g.
    its delivery mode), so a producer validates and encodes each pair once, not once a send.
    (Exceptions are never cached: an invalid pair raises every time.)"""
    return _encode_pair_uncached(name, Property(letter, value))


def _encode_pair_uncached(name: str, prop: Any) -> str:
    if not isinstance(name, str) or not name:
        raise MessageFormatError(f"property name must be a non-empty string, got {name!r}")
    if not isinstance(prop, Property):
        prop = Property.of(prop)
    value = coerce(prop.letter, prop.value)  # validates type and range
    return f"{encode_field(name)}{prop.letter}={_format_value(prop.letter, value)}"


def encode_properties(properties: dict[str, Any], delivery_count: int = 1) -> str:
    """The properties field: ``enc(name)+letter=enc(value)`` joined by ``&``.

    ``JMSXDeliveryCount`` is not taken from ``properties``: it is written as
    ``JMSXDeliveryCountI=<delivery_count - 1>`` when ``delivery_count > 1``, in
    the position the property has in ``properties`` (else last).
    """
    stored = delivery_count - 1 if delivery_count > 1 else 0
    parts: list[str] = []
    wrote_count = False
    for name, prop in properties.items():
        if name == DELIVERY_COUNT:
            if stored and not wrote_count:
                parts.append(f"{DELIVERY_COUNT}I={stored}")
                wrote_count = True
            continue
        parts.append(_encode_pair(name, prop))
    if stored and not wrote_count:
        parts.append(f"{DELIVERY_COUNT}I={stored}")
    return "&".join(parts)


def _parse_value(letter: str, text: str) -> Property:
    if letter == "B":
        return Property("B", text.lower() == "true")  # Boolean.parseBoolean
    if letter in INT_BITS:  # Java's number syntax (cached per field: _decoded_properties)
        from .javanum import parse_java_int

        v = parse_java_int(text, INT_BITS[letter])
        return Property(letter, v) if v is not None else Property("S", text)
    if letter in ("F", "D"):
        from .javanum import parse_java_float

        f = parse_java_float(text, letter == "F")
        return Property(letter, f) if f is not None else Property("S", text)
    return Property("S", text)


def decode_properties(field: str) -> dict[str, Property]:
    """The properties field as typed values, in name order; never raises.

    Pairs without ``=`` or with an empty name are skipped; an unknown type
    letter or a value that does not parse as its type reads as a String; a
    repeated name keeps its first position and its last value.
    """
    if not field:
        return {}
    return dict(_decoded_properties(field))


@functools.lru_cache(maxsize=1024)
def _decoded_properties(field: str) -> tuple[tuple[str, Property], ...]:
    """decode_properties, cached: one producer's messages mostly carry the same properties
    field (e.g. its delivery mode), so a consumer parses it once, not once per message.
    (Property is frozen: the cached values are shared safely; each caller gets its own dict.)"""
    props: dict[str, Property] = {}
    for pair in field.split("&"):
        key, eq, raw = pair.partition("=")
        if not eq:
            continue
        key = decode_field(key)
        if len(key) < 2:
            continue
        props[key[:-1]] = _parse_value(key[-1], decode_field(raw))
    return tuple(props.items())


# ---------------------------------------------------------------- names

_PRIO_RE = re.compile(r"[+-]?[0-9]{1,12}")
_ID12_RE = re.compile(r"([0-9]{1,30})-[0-9]{1,30}")
_LONG_RE = re.compile(r"[+-]?[0-9]{1,25}")
# priority . 1.2-style id . (at least a third field): the usual name, for sort_key
_SORT_RE = re.compile(r"([+-]?[0-9]{1,12})\.([0-9]{1,30})-[0-9]{1,30}\.")


def split_name(name: str) -> tuple[int, list[str]] | None:
    """(priority, fields) for a parseable name, else None."""
    fields = name.split(".")
    if not 3 <= len(fields) <= 8 or not fields[1]:
        return None
    if _PRIO_RE.fullmatch(fields[0]) is None:
        return None
    prio = int(fields[0])
    if not _INT_MIN <= prio <= _INT_MAX:
        return None
    return prio, fields


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


now_ms = _now_ms  # the clock, ms since the epoch (the pure parts take the time as an argument)


def _class_for(letter: str, default_class: str) -> type[Message]:
    cls = MESSAGE_CLASSES.get(letter)
    if cls is None:
        cls = MESSAGE_CLASSES.get(default_class, MESSAGE_CLASSES[DEFAULT_CLASS_LETTER])
    return cls


def _reply_to(text: str) -> Queue | Topic | None:
    if not text:
        return None
    try:
        if text[0] == "Q":
            return Queue(text[1:])
        if text[0] == "T":
            return Topic(text[1:])
        return Queue(text)  # [ours] no kind prefix: a queue
    except Exception:  # not a valid destination name: no reply-to
        return None


def _unparseable(name: str, now_ms: int | None, default_class: str) -> Message:
    cls = _class_for("", default_class)
    msg = cls(
        message_id="ID:" + name,
        timestamp=_now_ms() if now_ms is None else now_ms,
        priority=DEFAULT_PRIORITY,
    )
    msg.properties[DELIVERY_COUNT] = Property("I", 1)
    return msg


def _decode_name_strict(
    name: str, now_ms: int | None, default_class: str, claimed: bool
) -> Message:
    parsed = split_name(name)
    if parsed is None:
        return _unparseable(name, now_ms, default_class)
    prio, fields = parsed
    fields += [""] * (8 - len(fields))
    _, raw_id, letter, raw_exp, raw_corr, raw_reply, raw_type, raw_props = fields

    mid = decode_field(raw_id)
    m = _ID12_RE.fullmatch(mid)
    if m is not None:
        timestamp = int(m.group(1)) // 1000
    else:
        timestamp = _now_ms() if now_ms is None else now_ms

    expiration = 0
    if raw_exp and _LONG_RE.fullmatch(raw_exp):
        v = int(raw_exp)
        if _LONG_MIN <= v <= _LONG_MAX:
            expiration = v

    props = decode_properties(raw_props)
    n = 0
    stored = props.get(DELIVERY_COUNT)
    if stored is not None and stored.letter in INT_BITS and 0 < stored.value < _INT_MAX:
        n = stored.value
    if claimed:
        delivery_count = max(n, 1)
        redelivered = n > 1
    else:
        delivery_count = n + 1
        redelivered = n > 0
    props[DELIVERY_COUNT] = Property("I", delivery_count)

    cls = _class_for(letter, default_class)
    return cls(
        message_id="ID:" + mid,
        timestamp=timestamp,
        priority=prio,
        expiration=expiration,
        correlation_id=decode_field(raw_corr) or None if raw_corr else None,
        reply_to=_reply_to(decode_field(raw_reply)) if raw_reply else None,
        jms_type=decode_field(raw_type) or None if raw_type else None,
        redelivered=redelivered,
        delivery_count=delivery_count,
        properties=props,
    )


def decode_name(
    name: str,
    now_ms: int | None = None,
    *,
    default_class: str = DEFAULT_CLASS_LETTER,
    claimed: bool = False,
) -> Message:
    """The message a file name describes (headers and typed properties, empty body).

    Never raises for a ``str``: an unparseable name gives JMSMessageID
    ``"ID:" + name``, timestamp ``now_ms`` (default: the clock), priority 4.
    ``default_class`` is the class letter used when the name has none or an
    unknown one ([ours] ``"B"``; 1.2's code used ``"T"``).  ``claimed=True``
    reads a name produced by a claim (in ``processing/`` or ``processed/``,
    client-id prefix removed), whose delivery count is the current one.
    """
    if not isinstance(name, str):
        raise TypeError(f"file name must be str, not {type(name).__name__}")
    try:
        return _decode_name_strict(name, now_ms, default_class, claimed)
    except Exception:  # defensive: a foreign file must stay consumable
        return _unparseable(name, now_ms, default_class)


def _check_long(what: str, v: Any, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise MessageFormatError(f"{what} must be an int in [{lo}, {hi}], got {v!r}")
    return v


def encode_name(msg: Message) -> str:
    """The file name of ``msg`` (see the module docstring).

    Raises :class:`MessageFormatError` for headers that cannot be written and
    :class:`NameTooLongError` when the name exceeds 255 bytes.
    """
    prio = _check_long("priority", msg.priority, _INT_MIN, _INT_MAX)
    mid = msg.message_id
    if not isinstance(mid, str):
        raise MessageFormatError("message has no message id (assign one with new_message_id())")
    if mid.startswith("ID:"):
        mid = mid[3:]
    if not mid:
        raise MessageFormatError(f"message id {msg.message_id!r} is empty")
    if msg.class_letter not in CLASS_LETTERS:
        raise MessageFormatError(f"unknown message class letter {msg.class_letter!r}")
    exp = _check_long("expiration", msg.expiration, _LONG_MIN, _LONG_MAX)
    dc = _check_long("delivery_count", msg.delivery_count, 1, _INT_MAX)
    reply = msg.reply_to
    if reply is None:
        reply_field = ""
    elif isinstance(reply, Queue):
        reply_field = encode_field("Q" + reply.name)
    elif isinstance(reply, Topic):
        reply_field = encode_field("T" + reply.name)
    else:
        raise MessageFormatError(f"reply-to must be a Queue or Topic, got {reply!r}")
    fields = [
        str(prio),
        encode_field(mid),
        msg.class_letter,
        str(exp) if exp else "",
        encode_field(msg.correlation_id) if msg.correlation_id else "",
        reply_field,
        encode_field(msg.jms_type) if msg.jms_type else "",
        encode_properties(msg.properties, dc),
    ]
    while len(fields) > 3 and not fields[-1]:
        fields.pop()
    name = ".".join(fields)
    size = len(name.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        raise NameTooLongError(
            f"encoded file name of message {msg.message_id} is {size} bytes, over the "
            f"{MAX_NAME_BYTES}-byte limit; shorten its properties, correlation id, "
            f"JMSType or reply-to"
        )
    return name


def with_delivery_count(name: str, count: int) -> str:
    """``name`` with its properties field carrying ``JMSXDeliveryCountI=<count>``.

    Replaces the pair in place (dropping duplicates) or appends it, adding empty
    fields as needed.  An unparseable name, or a result over 255 bytes, is
    returned unchanged.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"delivery count must be a non-negative int, got {count!r}")
    parsed = split_name(name)
    if parsed is None:
        return name
    fields = parsed[1]
    fields += [""] * (8 - len(fields))
    new = f"{DELIVERY_COUNT}I={count}"
    props = fields[7]
    if DELIVERY_COUNT not in props and "%" not in props:
        # A first delivery (no count pair, none hidden behind an escape): append, no re-parse.
        fields[7] = f"{props}&{new}" if props else new
        result = ".".join(fields)
        return name if _name_bytes(result) > MAX_NAME_BYTES else result
    out: list[str] = []
    done = False
    for pair in props.split("&") if props else ():
        key = decode_field(pair.partition("=")[0])
        if key[:-1] == DELIVERY_COUNT and "=" in pair:
            if not done:
                out.append(new)
                done = True
            continue
        out.append(pair)
    if not done:
        out.append(new)
    fields[7] = "&".join(out)
    result = ".".join(fields)
    if _name_bytes(result) > MAX_NAME_BYTES:
        return name
    return result


def name_delivery_count(name: str) -> int:
    """The ``n`` of ``JMSXDeliveryCountI=<n>`` in a name (a ``<client>~`` prefix is
    allowed); 0 when the name has none or is unparseable.  What a name *means* by it
    depends on where it is (see "Delivery count" above and ``trace_rules.COUNT_RULES``)."""
    parsed = split_name(split_processing_name(name)[1])
    if parsed is None or len(parsed[1]) < 8:
        return 0
    stored = decode_properties(parsed[1][7]).get(DELIVERY_COUNT)
    if stored is None or stored.letter not in INT_BITS or not 0 < stored.value < _INT_MAX:
        return 0
    return stored.value


def without_delivery_count(name: str) -> str:
    """``name`` without its ``JMSXDeliveryCount`` pair (and the empty fields that carried only
    it): the name of a first delivery.  An unparseable name is returned unchanged."""
    parsed = split_name(name)
    if parsed is None or len(parsed[1]) < 8:
        return name
    fields = parsed[1]
    fields[7] = "&".join(pair for pair in fields[7].split("&") if pair and not (
        "=" in pair and decode_field(pair.partition("=")[0])[:-1] == DELIVERY_COUNT))
    while len(fields) > 3 and not fields[-1]:
        fields.pop()
    return ".".join(fields)


def _name_bytes(s: str) -> int:
    size = name_bytes(s)
    return len(s.encode("utf-8", "surrogatepass")) if size is None else size


def processing_name(client_id: str, name: str) -> str:
    """``enc(client_id) + "~" + name``, or ``name`` when that exceeds 255 bytes (as 1.2)."""
    pname = _processing_prefix(client_id) + name
    return name if _name_bytes(pname) > MAX_NAME_BYTES else pname


@functools.lru_cache(maxsize=64)
def _processing_prefix(client_id: str) -> str:
    return encode_field(client_id) + "~"  # a consumer's id never changes: encode it once


#: what URLEncoder (1.2) or encode_field can write before the "~" of a processing name
_PREFIX_RE = re.compile(r"(?:[A-Za-z0-9.*_+-]|%[0-9A-Fa-f]{2})*")


def split_processing_name(pname: str) -> tuple[str | None, str]:
    """(client id or None, original name): split at the first ``~`` when what precedes it
    can be an encoded client id; otherwise the name was claimed bare (too long for a
    prefix) and its owner is unknown."""
    head, sep, rest = pname.partition("~")
    if not sep or not rest or _PREFIX_RE.fullmatch(head) is None:
        return None, pname
    return decode_field(head), rest


#: what follows the owner's "~" in an alias claim (claims.py, a name with no room for its count):
#: never the first character of an encoded field
ALIAS_MARK = "#"


def needs_alias(client_id: str, name: str, claimed: str) -> bool:
    """Can ``target/<name>`` not be claimed as ``<enc(client_id)>~<claimed>``, ``claimed`` being
    the name with this delivery's count stamped (decision.decide)?  ``with_delivery_count``
    returns the name unchanged exactly when it cannot write the count (no field for it, or
    no room), and a stamp always changes a name in target/ (its count there is one less)."""
    if claimed == name:
        return True
    return processing_name(client_id, claimed) == claimed  # no room for the owner


def alias_inode(pname: str) -> int | None:
    """The inode an alias claim names, or None for an ordinary processing/ name."""
    _, rest = split_processing_name(pname)
    if rest[:1] != ALIAS_MARK or not rest[1:].isdigit():
        return None
    return int(rest[1:])


#: a temporary destination's name (temporary.py): the prefix, its connection's client id, a random part
TEMP_PREFIX = "dropboxmq-temp~"


def temporary_owner(name: str) -> str | None:
    """The client id whose connection made the temporary destination ``name`` (None: not one)."""
    if not name.startswith(TEMP_PREFIX):
        return None
    return decode_field(name[len(TEMP_PREFIX):].split("~", 1)[0])


_KEY_ID_BITS = 100  # an id's numeric prefix has at most 30 digits: < 10**30 < 2**100
_KEY_PRIORITY_SHIFT = _KEY_ID_BITS + 2  # then two bits for the id's kind (1.2, foreign, unparseable)


def sort_key(name: str) -> int:
    """The delivery order, one int a name (what a consumer keeps for each listed name): priority
    descending, then 1.2-style ids by their numeric prefix (millis*1000+counter) ascending, then
    the names with a foreign id, then unparseable names (priority 4).  Names with an equal key
    (foreign names of one priority, sends of two processes in one millisecond) are ordered by
    name by whoever needs one order of them (:func:`in_delivery_order`, ``claim.Scanner``).

    Cheap: a regex match on the head of the name, no full decode.  Agrees with
    :func:`decode_name` on the priority.
    """
    m = _SORT_RE.match(name)
    if m is not None and name.count(".") <= 7:  # the usual name: priority . 1.2 id . ...
        priority_text, ident_text = m.groups()
        priority = int(priority_text)
        if _INT_MIN <= priority <= _INT_MAX:
            return ((-priority - _INT_MIN) << _KEY_PRIORITY_SHIFT) | int(ident_text)
    parsed = split_name(name)
    if parsed is None:
        priority, kind, ident = DEFAULT_PRIORITY, 2, 0
    else:
        priority = parsed[0]
        m = _ID12_RE.fullmatch(decode_field(parsed[1][1]))
        kind, ident = (0, int(m.group(1))) if m is not None else (1, 0)
    return ((-priority - _INT_MIN) << _KEY_PRIORITY_SHIFT) | (kind << _KEY_ID_BITS) | ident


def key_priority(key: int) -> int:
    """What a :func:`sort_key` sorts by first (priority, descending): equal for names of one priority."""
    return key >> _KEY_PRIORITY_SHIFT


def in_delivery_order(names: Iterable[str]) -> list[str]:
    """``names`` in delivery order (:func:`sort_key`; equal keys by name)."""
    ordered = sorted(names)
    ordered.sort(key=sort_key)
    return ordered


# ---------------------------------------------------------------- the wire mapping

#: [ours] provider properties (JMS_<vendor>_ prefix, reserved by JMS for providers)
#: carry what 1.2's name format has no field for.  Absent = the JMS default.
DELIVERY_TIME_PROP = "JMS_DropboxMQ_DeliveryTime"  # L, ms since epoch (delivery delay)
DELIVERY_MODE_PROP = "JMS_DropboxMQ_DeliveryMode"  # I, written only for NON_PERSISTENT


_NON_PERSISTENT = Property("I", int(DeliveryMode.NON_PERSISTENT))  # (frozen: one for every send)


def to_wire(msg: Message) -> str:
    """The file name for ``msg`` (headers that 1.2 has no field for become provider props)."""
    extra = dict(msg.properties)
    extra.pop(DELIVERY_COUNT, None)
    if msg.delivery_time and msg.delivery_time > msg.timestamp:
        extra[DELIVERY_TIME_PROP] = Property("L", msg.delivery_time)
    if msg.delivery_mode == DeliveryMode.NON_PERSISTENT:
        extra[DELIVERY_MODE_PROP] = _NON_PERSISTENT
    # Encode with the wire's properties and count swapped in, not a dataclasses.replace()
    # copy (a copy of the whole message, body included, per send).
    saved = msg.properties, msg.delivery_count
    msg.properties, msg.delivery_count = extra, 1
    try:
        return encode_name(msg)
    finally:
        msg.properties, msg.delivery_count = saved


def from_wire(name: str, now: int | None = None, claimed: bool = False) -> Message:
    """The message a file name describes; ``claimed``: a processing/processed name, which
    carries the current delivery count rather than the previous one."""
    msg = decode_name(name, now, claimed=claimed)
    props = msg.properties
    dt = props.pop(DELIVERY_TIME_PROP, None)
    if dt is not None and isinstance(dt.value, int):
        msg.delivery_time = dt.value
    dm = props.pop(DELIVERY_MODE_PROP, None)
    if dm is not None and dm.value == int(DeliveryMode.NON_PERSISTENT):
        msg.delivery_mode = DeliveryMode.NON_PERSISTENT
    return msg


# ---------------------------------------------------------------- the consume path's reading

#: priorities written as a plain digit: the only ones the first-delivery shortcut takes
_DIGIT_PRIORITY = {str(p): p for p in range(10)}
_TEMPLATE_HEAD = "4.0-0."  # a stand-in priority and id, to decode a tail on its own


class _Tail:
    """What every name ending in one tail (the fields after priority and id) reads as on its
    first delivery: the claimed tail and the decoded headers, minus priority, id and timestamp."""

    __slots__ = ("cls", "headers", "properties", "claimed_tail", "claimed_tail_bytes")

    def __init__(self, cls: type[Message], headers: dict[str, Any], properties: dict[str, Property],
                 claimed_tail: str, claimed_tail_bytes: int):
        self.cls, self.headers, self.properties = cls, headers, properties
        self.claimed_tail, self.claimed_tail_bytes = claimed_tail, claimed_tail_bytes


@functools.lru_cache(maxsize=1024)
def _first_delivery_tail(tail: str) -> _Tail | None:
    """The tail's reading, once per distinct tail (one producer's names mostly share it);
    None when the tail can hold a claim back or is not a plain first delivery (an expiration,
    a delivery time, a delivery count already there, more than eight fields): those names are
    decoded in full."""
    stand_in = _TEMPLATE_HEAD + tail
    if split_name(stand_in) is None:
        return None
    msg = from_wire(stand_in, 0)
    if msg.expiration or msg.delivery_time or msg.delivery_count != 1:
        return None
    claimed_tail = with_delivery_count(stand_in, 1)[len(_TEMPLATE_HEAD):]
    headers = dict(vars(msg))
    properties = headers.pop("properties")
    for varying in ("message_id", "timestamp", "priority"):
        del headers[varying]
    return _Tail(type(msg), headers, properties, claimed_tail, _name_bytes(claimed_tail))


def first_delivery(name: str) -> tuple[str, Message] | None:
    """``(with_delivery_count(name, 1), from_wire(name))`` for a name in ``target/`` that nothing
    can hold back (no expiration, delivery time or delivery count; a digit priority; a 1.2-style
    id), computed from a per-tail cache instead of a decode; None for any other name (decode it).

    The consume path's shortcut: names from one producer differ only in priority and id, so the
    rest is read once.  ``tests/test_decision.py`` checks it agrees with the full decode."""
    parts = name.split(".", 2)
    if len(parts) != 3:
        return None
    prio_text, mid, tail = parts
    priority = _DIGIT_PRIORITY.get(prio_text)
    m = _ID12_RE.fullmatch(mid)
    if priority is None or m is None:
        return None
    t = _first_delivery_tail(tail)
    if t is None:
        return None
    head = f"{prio_text}.{mid}."
    claimed = name if len(head) + t.claimed_tail_bytes > MAX_NAME_BYTES else head + t.claimed_tail
    msg = t.cls.__new__(t.cls)
    fields = msg.__dict__
    fields.update(t.headers)
    fields["message_id"] = "ID:" + mid
    fields["timestamp"] = int(m.group(1)) // 1000
    fields["priority"] = priority
    fields["properties"] = t.properties.copy()
    return claimed, msg
