"""The judge's own reading of names and places, written from spec/PROTOCOL.md rules L, N and S (not from
the reference's codec: the suite must judge the reference too).  tests/test_grammar.py keeps it
honest against the reference codec over generated names and every DropboxMQ 1.2 fixture name.

* :func:`parse` — N-1: the fields of a name, or None for an unparseable one (N-8).
* :func:`decode_field` / :func:`encode_field` — N-2.
* :func:`order_key` — N-6: the delivery order of names.
* :func:`delivery_count` — N-7: the ``JMSXDeliveryCountI=<n>`` a name carries.
* :func:`split_claimed` — N-9: (owner, name) of a claimed name.
* :func:`locate` — L-1 .. L-6: the (dropbox, state, name) a path relative to the root stands for.
* :func:`format_name` / :func:`new_message_id` — names the suite plants itself.
"""

from __future__ import annotations

import random
import re
import threading
import time
from dataclasses import dataclass, field

from dropboxmq.lifecycle import STATE_DIRS, State
from dropboxmq.trace_rules import state_of_directory

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
MAX_NAME_BYTES = 255  # N-3
#: the trace record of a process death the suite caused (the trace format, conformance/README)
KILL = "kill"
DEFAULT_PRIORITY = 4  # N-8
DELIVERY_COUNT = "JMSXDeliveryCount"  # N-7
INTEGER_TYPES = "YHIL"  # byte, short, int, long: the types a count may be written in
CLASS_LETTERS = "MBSPOT"

_PRIORITY = re.compile(r"[+-]?[0-9]{1,12}")
_EXPIRATION = re.compile(r"[+-]?[0-9]{1,25}")
_INTEGER = re.compile(r"[+-]?[0-9]{1,40}")
#: N-5: <epochMillis><3-digit counter>-<digits>
ID_FORM = re.compile(r"([0-9]{1,30})-[0-9]{1,30}")
#: an escaped client id (N-2 output; '.' kept for ids written before the escape of '.')
_OWNER = re.compile(r"(?:[A-Za-z0-9.*_+-]|%[0-9A-Fa-f]{2})*")
_HEX = frozenset("0123456789abcdefABCDEF")
_KEPT = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-*_")


def encode_field(text: str) -> str:
    """N-2: URL form encoding of the UTF-8 bytes (A-Z a-z 0-9 - * _ kept, space as '+'),
    so '.' becomes %2E (an undecodable byte Python carries as a lone surrogate is written as is)."""
    out = []
    for byte in text.encode("utf-8", "surrogateescape"):
        ch = chr(byte)
        out.append(ch if ch in _KEPT else "+" if byte == 0x20 else f"%{byte:02X}")
    return "".join(out)


def decode_field(text: str) -> str:
    """N-2, leniently: '+' is a space, each run of %XX is UTF-8 bytes (invalid UTF-8 reads as
    U+FFFD), a '%' not followed by two hex digits stays as it is."""
    out: list[str] = []
    pending = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "%" and i + 2 < len(text) and text[i + 1] in _HEX and text[i + 2] in _HEX:
            pending.append(int(text[i + 1:i + 3], 16))
            i += 3
            continue
        if pending:
            out.append(pending.decode("utf-8", "replace"))
            pending.clear()
        out.append(" " if ch == "+" else ch)
        i += 1
    if pending:
        out.append(pending.decode("utf-8", "replace"))
    return "".join(out)


@dataclass(frozen=True)
class Name:
    """The fields of a parseable name (N-1), decoded."""

    priority: int
    message_id: str  # without "ID:"
    class_letter: str  # as written (may be empty or unknown: then BytesMessage, N-8)
    expiration: int  # 0: never
    properties: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (type letter, value text)
    raw_fields: tuple[str, ...] = ()

    @property
    def delivery_count(self) -> int:
        """N-7: the n of JMSXDeliveryCountI=<n> (0: none, or not a count)."""
        return _count_of(self.properties)


def _properties(field_text: str) -> dict[str, tuple[str, str]]:
    """N-1 properties: enc(name) type '=' enc(value) joined by '&'; pairs without '=' or with
    no name are skipped; a repeated name keeps its last value."""
    props: dict[str, tuple[str, str]] = {}
    if not field_text:
        return props
    for pair in field_text.split("&"):
        head, eq, value = pair.partition("=")
        if not eq:
            continue
        key = decode_field(head)
        if len(key) < 2:
            continue
        props[key[:-1]] = (key[-1], decode_field(value))
    return props


def _count_of(props: dict[str, tuple[str, str]]) -> int:
    stored = props.get(DELIVERY_COUNT)
    if stored is None or stored[0] not in INTEGER_TYPES:
        return 0
    letter, text = stored
    if _INTEGER.fullmatch(text) is None:
        return 0
    n = int(text)
    bits = {"Y": 8, "H": 16, "I": 32, "L": 64}[letter]
    if not -(2 ** (bits - 1)) <= n < 2 ** (bits - 1):
        return 0  # does not parse as its type: a String, not a count
    return n if 0 < n < INT_MAX else 0


def parse(name: str) -> Name | None:
    """N-1: the fields of ``name``; None when it is unparseable (N-8): fewer than three or more
    than eight fields, an empty message id, or a priority that is not a Java int."""
    fields = name.split(".")
    if not 3 <= len(fields) <= 8 or not fields[1] or _PRIORITY.fullmatch(fields[0]) is None:
        return None
    priority = int(fields[0])
    if not INT_MIN <= priority <= INT_MAX:
        return None
    padded = fields + [""] * (8 - len(fields))
    expiration = 0
    if _EXPIRATION.fullmatch(padded[3]) is not None and LONG_MIN <= int(padded[3]) <= LONG_MAX:
        expiration = int(padded[3])
    return Name(priority, decode_field(padded[1]), padded[2], expiration, _properties(padded[7]), tuple(fields))


def message_id(name: str) -> str:
    """The JMSMessageID (with "ID:") of a name as sent, or of a claimed name (N-8: an unparseable
    name's id is the whole name)."""
    original = split_claimed(name)[1]
    parsed = parse(original)
    return "ID:" + (parsed.message_id if parsed is not None else original)


def bare_id(name: str) -> str:
    """message_id without "ID:"."""
    return message_id(name)[3:]


def priority_of(name: str) -> int:
    parsed = parse(name)
    return parsed.priority if parsed is not None else DEFAULT_PRIORITY


def delivery_count(name: str) -> int:
    """N-7: the count a name (or a claimed name) carries; 0 when it has none."""
    parsed = parse(split_claimed(name)[1])
    return parsed.delivery_count if parsed is not None and len(parsed.raw_fields) == 8 else 0


def redelivered(name: str) -> bool:
    """N-7: a name in target/ with a count was delivered before: its next delivery is a redelivery."""
    return delivery_count(name) > 0


def has_ordered_id(name: str) -> bool:
    """N-5: the id has the form <epochMillis><3-digit counter>-<digits>."""
    parsed = parse(name)
    return parsed is not None and ID_FORM.fullmatch(parsed.message_id) is not None


def order_key(name: str) -> tuple[int, int, int, str]:
    """N-6: (-priority, kind, number, name): kind 0 for an N-5 id (number: its numeric prefix),
    1 for another parseable name, 2 for an unparseable one (priority 4)."""
    parsed = parse(name)
    if parsed is None:
        return (-DEFAULT_PRIORITY, 2, 0, name)
    m = ID_FORM.fullmatch(parsed.message_id)
    if m is not None:
        return (-parsed.priority, 0, int(m.group(1)), name)
    return (-parsed.priority, 1, 0, name)


def split_claimed(name: str) -> tuple[str | None, str]:
    """N-9: (owner client id, name as sent) of a claimed name; (None, name) for a bare claim
    (no '~', nothing after it, or what precedes it cannot be an escaped client id)."""
    head, sep, rest = name.partition("~")
    if not sep or not rest or _OWNER.fullmatch(head) is None:
        return None, name
    return decode_field(head), rest


def is_alias(name: str) -> bool:
    """N-10: a claimed name (or its path) that is an alias claim's: ``#<inode>`` after the owner's ``~``.
    It carries no count (the claim register holds it) and no message id of its own."""
    rest = split_claimed(leaf(name))[1]
    return rest[:1] == "#" and rest[1:].isdigit()


def claimed_name(client_id: str, name: str) -> str:
    """N-9: the processing/ name of ``client_id``'s claim of ``name``."""
    return f"{encode_field(client_id)}~{name}"


def format_name(priority: int, mid: str, class_letter: str = "T", expiration: int = 0,
                properties: dict[str, tuple[str, str]] | None = None) -> str:
    """N-1: a name; trailing empty fields left out."""
    props = "&".join(f"{encode_field(k + t)}={encode_field(v)}" for k, (t, v) in (properties or {}).items())
    fields = [str(priority), encode_field(mid.removeprefix("ID:")), class_letter,
              str(expiration) if expiration else "", "", "", "", props]
    while len(fields) > 3 and not fields[-1]:
        fields.pop()
    name = ".".join(fields)
    if len(name.encode()) > MAX_NAME_BYTES:
        raise ValueError(f"name of {len(name.encode())} bytes, over {MAX_NAME_BYTES} (N-3)")
    return name


_id_lock = threading.Lock()
_last_ms = [0, 0]  # the millisecond of the last id, and the counter within it


def new_message_id() -> str:
    """N-5: <epochMillis><3-digit counter>-<10 random digits>, increasing in call order (N-6)."""
    with _id_lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms[0]:
            ms = _last_ms[0]
            _last_ms[1] += 1
            if _last_ms[1] > 999:  # a thousand ids in one millisecond: borrow the next one
                ms, _last_ms[1] = ms + 1, 0
        else:
            _last_ms[1] = 0
        _last_ms[0] = ms
        return f"{ms}{_last_ms[1]:03d}-{random.randrange(10**10):010d}"


# ------------------------------------------------------------------ places (PROTOCOL.md L-1 .. L-6, S-1)


@dataclass(frozen=True)
class Loc:
    box: str  # the dropbox directory, relative to the root ("Q1/incoming")
    state: State
    name: str


def locate(rel: str | None) -> Loc | None:
    """The (dropbox, state, name) a path relative to the root stands for, or None when it is no
    message's place: anything under dropboxmq/ (L-6) and the files of a dropbox whose own
    directory is a dot-name other than .incoming (a subscription being created or removed)."""
    if not rel:
        return None
    parts = rel.split("/")
    if len(parts) < 3 or parts[0] == "dropboxmq" or parts[-2] not in STATE_DIRS:
        return None
    if parts[-3].startswith(".") and parts[-3] != ".incoming":
        return None
    if any(p.startswith(".") and p not in (".incoming", ".subscriptions") for p in parts[:-3]):
        return None
    return Loc("/".join(parts[:-2]), state_of_directory(parts[-2]), parts[-1])


#: the directories a transaction log passes through (X-1): created in associated/, renamed into
#: committing/ (or rolling-back/), deleted once applied
LOG_DIRS = ("associated", "committing", "rolling-back")


def locate_log(rel: str | None) -> tuple[str, str] | None:
    """(log directory, log name) of a transaction log's path under ``dropboxmq/transaction/``, or None."""
    parts = [p for p in (rel or "").split("/") if p]
    if len(parts) >= 3 and parts[-2] in LOG_DIRS and "transaction" in parts[:-2]:
        return parts[-2], parts[-1]
    return None


def leaf(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def owner_of(loc: Loc | None) -> str | None:
    """The client id a processing/ name carries (None: not in processing/, or a bare claim)."""
    if loc is None or loc.state is not State.DELIVERED:
        return None
    return split_claimed(loc.name)[0]

