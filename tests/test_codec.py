"""The codec: 1.2's filename transcoder, message ids, ordering, body encodings."""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import struct
import threading

import pytest
from unittest import mock
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dropboxmq import codec, javanum
from dropboxmq import ids as message_ids
from dropboxmq.browser import in_delivery_order
from dropboxmq.bodies import decode_map, decode_stream, encode_map, encode_stream
from dropboxmq.codec import (
    decode_field,
    from_wire,
    decode_properties,
    encode_field,
    encode_name,
    processing_name,
    split_processing_name,
    key_priority,
    sort_key,
    with_delivery_count,
)
from dropboxmq.errors import MessageFormatError, NameTooLongError
from dropboxmq.ids import new_message_id
from dropboxmq.bodies import MESSAGE_CLASSES, BytesMessage, MapMessage, StreamMessage
from dropboxmq.message import Message, Queue, TextMessage, Topic
from dropboxmq.values import Property

# Deterministic hypothesis runs (no example database, fixed derivation of examples).
DET = settings(derandomize=True, database=None, deadline=None, max_examples=300,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

SEED_FULL = "4.1140429201295000-9262574723.T.1140429211295.corr1283.TestQueue1.XYZType.prop1S=hello"
SEED_MIN = "4.1140429201295000-9262574723.T"
DC = "JMSXDeliveryCount"

# ---------------------------------------------------------------- strategies

_specials = st.sampled_from(list(".%&=~+ *-_/\\:ü€😀\x00\t") + ["%2E", "..", "&=", "ID:"])
_chars = st.characters(blacklist_categories=("Cs",))  # any code point but lone surrogates
texts = st.lists(st.one_of(_specials, _chars), max_size=8).map("".join)
nonempty_texts = st.lists(st.one_of(_specials, _chars), min_size=1, max_size=8).map("".join)


def key_parts(key: int) -> tuple[int, int, int]:
    """(priority, kind, id prefix) of a sort key, what it compares in turn: kind 0 is a 1.2-style
    id, 1 a foreign id, 2 an unparseable name."""
    return -key_priority(key) - codec._INT_MIN, (key >> codec._KEY_ID_BITS) & 3, key & ((1 << codec._KEY_ID_BITS) - 1)


def _dest(cls):
    def build(name):
        try:
            return cls(name)
        except Exception:
            return None

    return st.builds(build, nonempty_texts).filter(lambda d: d is not None)


destinations = st.one_of(st.none(), _dest(Queue), _dest(Topic))

typed_values = st.one_of(
    st.booleans().map(lambda v: Property("B", v)),
    st.integers(-(2**7), 2**7 - 1).map(lambda v: Property("Y", v)),
    st.integers(-(2**15), 2**15 - 1).map(lambda v: Property("H", v)),
    st.integers(-(2**31), 2**31 - 1).map(lambda v: Property("I", v)),
    st.integers(-(2**63), 2**63 - 1).map(lambda v: Property("L", v)),
    st.floats(width=32).map(lambda v: Property("F", v)),
    st.floats().map(lambda v: Property("D", v)),
    texts.map(lambda v: Property("S", v)),
)
prop_names = nonempty_texts.filter(lambda n: n != DC)
properties = st.dictionaries(prop_names, typed_values, max_size=4)
msg_ids = st.one_of(
    st.builds(new_message_id),
    nonempty_texts.map(lambda t: "ID:" + t),
    st.tuples(st.integers(0, 10**16), st.integers(0, 10**10)).map(lambda t: f"ID:{t[0]}-{t[1]}"),
)


@st.composite
def messages(draw):
    cls = draw(st.sampled_from(sorted(MESSAGE_CLASSES.values(), key=lambda c: c.class_letter)))
    return cls(
        message_id=draw(msg_ids),
        priority=draw(st.one_of(st.integers(0, 9), st.integers(-(2**31), 2**31 - 1))),
        expiration=draw(st.one_of(st.just(0), st.integers(-(2**63), 2**63 - 1))),
        correlation_id=draw(st.one_of(st.none(), texts)),
        reply_to=draw(destinations),
        jms_type=draw(st.one_of(st.none(), texts)),
        delivery_count=draw(st.one_of(st.just(1), st.integers(1, 2**31 - 1))),
        properties=draw(properties),
    )


def same_value(a, b) -> bool:
    """Equality that tells -0.0 from 0.0 and treats NaN as equal to NaN."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return struct.pack("<d", a) == struct.pack("<d", b)
    return type(a) is type(b) and a == b


def same_props(a: dict, b: dict) -> bool:
    return list(a) == list(b) and all(
        a[k].letter == b[k].letter and same_value(a[k].value, b[k].value) for k in a
    )


def encode_or_too_long(msg):
    """encode_name, or None when it (correctly) refuses a name over 255 bytes."""
    try:
        return encode_name(msg)
    except NameTooLongError as exc:
        size = int(re.search(r"is (\d+) bytes", str(exc)).group(1))
        assert size > 255 and "255" in str(exc)
        return None


# ---------------------------------------------------------------- escaping

# Java 17: URLEncoder.encode(s, "UTF-8").replace(".", "%2E")
JAVA_ESCAPES = {
    "a b.c~d*e-f_g&h=i%j+k/ü": "a+b%2Ec%7Ed*e-f_g%26h%3Di%25j%2Bk%2F%C3%BC",
    "corr.0": "corr%2E0",
    "v&0=x y": "v%260%3Dx+y",
    "😀€": "%F0%9F%98%80%E2%82%AC",
    "Q1": "Q1",
    "\t\n!'()": "%09%0A%21%27%28%29",
    "": "",
}


@pytest.mark.parametrize("plain,escaped", sorted(JAVA_ESCAPES.items()))
def test_encode_field_matches_java(plain, escaped):
    assert encode_field(plain) == escaped
    assert decode_field(escaped) == plain


@DET
@given(texts)
def test_field_round_trip_and_alphabet(s):
    enc = encode_field(s)
    assert re.fullmatch(r"[A-Za-z0-9*_%+\-]*", enc), enc
    assert decode_field(enc) == s


def test_field_escaping_edge_cases():
    assert decode_field("a%zzb%4") == "a%zzb%4"  # invalid escapes stay
    assert decode_field("%C3") == "\ufffd"  # invalid UTF-8 -> U+FFFD, like Java
    assert decode_field("%2e") == "."
    assert encode_field("\udcff") == "%FF"  # os.listdir's surrogate-escaped byte
    with pytest.raises(MessageFormatError):
        encode_field("\ud800")
    with pytest.raises(MessageFormatError):
        encode_field(5)  # type: ignore[arg-type]


# ---------------------------------------------------------------- numbers as Java writes them

# Java 17 Float.toString / Double.toString for these values (JDK 19+ agrees).
JAVA_FLOATS = [(0.1, "0.1"), (1e10, "1.0E10"), (1.0e-5, "1.0E-5"), (3.4028235e38, "3.4028235E38"),
               (1.4e-45, "1.4E-45"), (16777216.0, "1.6777216E7"), (0.001, "0.001"),
               (9999999.0, "9999999.0"), (1.0e7, "1.0E7"), (-2.5, "-2.5"), (0.25, "0.25"),
               (-0.0, "-0.0"), (math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity")]
JAVA_DOUBLES = [(0.1, "0.1"), (1e10, "1.0E10"), (1e-5, "1.0E-5"),
                (1.7976931348623157e308, "1.7976931348623157E308"), (4.9e-324, "4.9E-324"),
                (1e7, "1.0E7"), (0.001, "0.001"), (123456789.125, "1.23456789125E8"),
                (-1e-300, "-1.0E-300"), (1.0 / 3, "0.3333333333333333"), (0.5, "0.5"),
                (0.0, "0.0"), (math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity")]
# Java 17's (not shortest) strings; 1.2 may have written these: we must read the exact value.
JAVA17_LONG_STRINGS = [("F", "-2.12353048E15", 3639700191), ("F", "4.18768352E8", 1304932143),
                       ("D", "1.04428143782600154E18", 4876549645920521813),
                       ("D", "-1.10581784609780787E18", 14100402435964921108)]


@pytest.mark.parametrize("value,text", JAVA_FLOATS)
def test_float_to_string_like_java(value, text):
    assert javanum.java_float_str(value) == text
    assert same_value(javanum.parse_java_float(text, True), javanum.to_f32(value))


@pytest.mark.parametrize("value,text", JAVA_DOUBLES)
def test_double_to_string_like_java(value, text):
    assert javanum.java_double_str(value) == text
    assert same_value(javanum.parse_java_float(text, False), value)


@pytest.mark.parametrize("letter,text,bits", JAVA17_LONG_STRINGS)
def test_reads_java17_strings_exactly(letter, text, bits):
    prop = decode_properties(f"x{letter}={encode_field(text)}")["x"]
    fmt = "<f" if letter == "F" else "<d"
    ifmt = "<I" if letter == "F" else "<Q"
    assert struct.unpack(ifmt, struct.pack(fmt, prop.value))[0] == bits


@DET
@given(st.floats(width=32))
def test_float_text_is_shortest_round_trip(x):
    text = javanum.java_float_str(x)
    back = javanum.parse_java_float(text, True)
    assert same_value(back, x)
    if math.isfinite(x) and x != 0:
        digits = re.sub(r"E.*|[-.]", "", text).strip("0")
        assert len(digits) <= 9
        if len(digits) > 2:  # one digit fewer would not read back as x
            m = f"{abs(x):.{len(digits) - 2}e}"
            assert javanum._decimal_to_f32(m) != abs(x)


@DET
@given(st.floats())
def test_double_text_round_trip(x):
    assert same_value(javanum.parse_java_float(javanum.java_double_str(x), False), x)


def test_java_number_syntax_is_read():
    props = decode_properties("aF=1%2E5f&bD=0x1p3&cD=%2B1e3&dI=%2B7&eB=TRUE&fB=yes&gD=+NaN+&hF=1e40")
    assert props["a"] == Property("F", 1.5)
    assert props["b"] == Property("D", 8.0)
    assert props["c"] == Property("D", 1000.0)
    assert props["d"] == Property("I", 7)
    assert props["e"] == Property("B", True)
    assert props["f"] == Property("B", False)  # Boolean.parseBoolean
    assert props["g"] == Property("D", math.nan)  # '+' is a space: trimmed like Java
    assert props["h"] == Property("F", math.inf)  # float overflow -> Infinity, like Java
    # Python-only syntax is not Java's: these read as Strings
    bad = decode_properties("aD=1_0&bD=inf&cI=1_0&dY=128&eI=%D9%A1")
    assert all(p.letter == "S" for p in bad.values()), bad


# ---------------------------------------------------------------- message ids

ID_RE = re.compile(r"ID:(\d{13,})(\d{3})-(\d{10})")


def test_message_id_format_and_strict_order():
    ids = [new_message_id() for _ in range(5000)]
    for i in ids:
        assert ID_RE.fullmatch(i), i
    prefixes = [int(i[3:].split("-")[0]) for i in ids]
    assert all(a < b for a, b in itertools.pairwise(prefixes))
    assert len(set(ids)) == len(ids)


def test_message_id_borrows_next_millisecond(monkeypatch):
    saved = (message_ids._id_ms, message_ids._id_seq)
    frozen_ms = max(message_ids._id_ms + 10, 1_800_000_000_000)
    try:
        monkeypatch.setattr(message_ids.time, "time_ns", lambda: frozen_ms * 1_000_000)
        pairs = [message_ids.new_message_id_and_time() for _ in range(2500)]
    finally:
        monkeypatch.undo()
        message_ids._id_ms, message_ids._id_seq = saved
    parts = [ID_RE.fullmatch(i).groups() for i, _ in pairs]
    assert parts[0][:2] == (str(frozen_ms), "000")
    assert parts[999][:2] == (str(frozen_ms), "999")
    assert parts[1000][:2] == (str(frozen_ms + 1), "000")
    assert parts[2499][:2] == (str(frozen_ms + 2), "499")
    prefixes = [int(a + b) for a, b, _ in parts]
    assert all(x < y for x, y in itertools.pairwise(prefixes))
    # the timestamp a sender stamps is the (borrowed) millisecond, and a reader derives the same
    ids = [i for i, _ in pairs]
    assert [t for _, t in pairs] == [int(p) // 1000 for p in prefixes]
    assert from_wire(f"4.{ids[1000][3:]}.T").timestamp == pairs[1000][1] == frozen_ms + 1


def test_message_id_thread_safe():
    results: list[list[str]] = [[] for _ in range(8)]

    def work(out):
        for _ in range(2000):
            out.append(new_message_id())

    threads = [threading.Thread(target=work, args=(r,)) for r in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for r in results for i in r]
    prefixes = [int(i[3:].split("-")[0]) for i in every]
    assert len(set(prefixes)) == len(every)  # the counter never repeats
    for r in results:
        p = [int(i[3:].split("-")[0]) for i in r]
        assert p == sorted(p)


def test_message_id_fork_safe():
    new_message_id()
    message_ids._id_rng.seed(12345)  # parent and an un-reseeded child would draw the same digits
    saved = (message_ids._id_ms, message_ids._id_seq)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.write(w, new_message_id().encode())
        finally:
            os._exit(0)
    os.close(w)
    child_id = os.read(r, 100).decode()
    os.close(r)
    os.waitpid(pid, 0)
    message_ids._id_ms, message_ids._id_seq = saved
    parent_id = new_message_id()
    assert ID_RE.fullmatch(child_id), child_id
    assert child_id.split("-")[1] != parent_id.split("-")[1]


# ---------------------------------------------------------------- names: round trips


@DET
@given(messages())
def test_name_round_trip(msg):
    name = encode_or_too_long(msg)
    if name is None:
        return
    assert name.isascii() and len(name) <= 255
    assert "~" not in name and name.count(".") <= 7
    back = from_wire(name)
    assert type(back) is type(msg)
    assert back.message_id == msg.message_id
    assert back.priority == msg.priority
    assert back.expiration == msg.expiration
    assert back.correlation_id == (msg.correlation_id or None)
    assert back.jms_type == (msg.jms_type or None)
    assert back.reply_to == msg.reply_to
    assert back.delivery_count == msg.delivery_count
    assert back.redelivered == (msg.delivery_count > 1)
    assert back.properties[DC] == Property("I", msg.delivery_count)
    expected = {k: Property(p.letter, javanum.to_f32(p.value) if p.letter == "F" else p.value)
                for k, p in msg.properties.items()}
    got = {k: p for k, p in back.properties.items() if k != DC}
    assert same_props(got, expected)
    m = re.fullmatch(r"ID:(\d{1,30})-\d{1,30}", msg.message_id)
    if m:
        assert back.timestamp == int(m.group(1)) // 1000
    assert encode_name(back) == name  # stable: decode then encode is byte-identical
    assert key_parts(sort_key(name))[0] == msg.priority


def test_name_layout_and_escapes():
    msg = TextMessage(message_id="ID:1-2", priority=7, correlation_id="a.b~c",
                      reply_to=Queue("R.Q"), jms_type="t y&p=e")
    msg.set_property("d", math.nan, "D")
    msg.set_property("f", -math.inf, "F")
    msg.set_property("g", math.inf, "D")
    msg.set_property("n.m", "x.y%", "S")
    msg.set_property("s", "", "S")
    assert encode_name(msg) == (
        "7.1-2.T..a%2Eb%7Ec.QR%2EQ.t+y%26p%3De."
        "dD=NaN&fF=-Infinity&gD=Infinity&n%2EmS=x%2Ey%25&sS="
    )
    assert encode_name(BytesMessage(message_id="ID:x", expiration=5)) == "4.x.B.5"
    assert encode_name(Message(message_id="ID:x", jms_type="t")) == "4.x.M....t"
    assert encode_name(MapMessage(message_id="ID:x", reply_to=Topic("a.b"))) == "4.x.P...Ta%2Eb"
    assert encode_name(StreamMessage(message_id="x", correlation_id="")) == "4.x.S"


def test_encode_rejects_bad_headers():
    with pytest.raises(MessageFormatError):
        encode_name(TextMessage())  # no id yet
    with pytest.raises(MessageFormatError):
        encode_name(TextMessage(message_id="ID:"))
    with pytest.raises(MessageFormatError):
        encode_name(TextMessage(message_id="ID:x", priority=2**31))
    with pytest.raises(MessageFormatError):
        encode_name(TextMessage(message_id="ID:x", properties={"p": Property("Q", 1)}))
    with pytest.raises(MessageFormatError):
        encode_name(TextMessage(message_id="ID:x", properties={"p": Property("Y", 300)}))
    with pytest.raises(MessageFormatError):
        encode_name(TextMessage(message_id="ID:x", properties={"": Property("I", 1)}))
    with pytest.raises(MessageFormatError):
        encode_name(TextMessage(message_id="ID:x", delivery_count=0))


def test_name_length_limit_is_exact():
    base = encode_name(TextMessage(message_id="ID:1795308179679000-1476094893"))
    room = 255 - len(base) - 2  # two dots: the empty expiration and the correlation field
    ok = TextMessage(message_id="ID:1795308179679000-1476094893", correlation_id="c" * room)
    assert len(encode_name(ok).encode()) == 255
    ok.correlation_id += "c"
    with pytest.raises(NameTooLongError, match=r"256 bytes.*255"):
        encode_name(ok)
    multi = TextMessage(message_id="ID:x", correlation_id="ü" * 42)  # 6 bytes each escaped: 252 + 8
    with pytest.raises(NameTooLongError):
        encode_name(multi)


@DET
@given(nonempty_texts.map(lambda t: (t * 300)[:300]))
def test_too_long_names_raise(t):
    msg = TextMessage(message_id="ID:1-1", jms_type=t)
    assume(len(encode_field(t)) > 255)
    with pytest.raises(NameTooLongError):
        encode_name(msg)


# ---------------------------------------------------------------- names: decoding

def test_seed_example_full():
    msg = from_wire(SEED_FULL)
    assert type(msg) is TextMessage
    assert msg.priority == 4
    assert msg.message_id == "ID:1140429201295000-9262574723"
    assert msg.timestamp == 1140429201295
    assert msg.expiration == 1140429211295
    assert msg.correlation_id == "corr1283"
    # [ours] the first character is the kind, as 1.2's code reads it: T -> Topic "estQueue1"
    assert msg.reply_to == Topic("estQueue1")
    assert msg.jms_type == "XYZType"
    assert msg.properties == {"prop1": Property("S", "hello"), DC: Property("I", 1)}
    assert msg.delivery_count == 1 and msg.redelivered is False
    assert encode_name(msg) == "4.1140429201295000-9262574723.T.1140429211295.corr1283.TestQueue1.XYZType.prop1S=hello"


def test_seed_example_minimal():
    msg = from_wire(SEED_MIN)
    assert type(msg) is TextMessage
    assert (msg.priority, msg.message_id, msg.timestamp) == (4, "ID:1140429201295000-9262574723", 1140429201295)
    assert msg.expiration == 0 and msg.correlation_id is None and msg.reply_to is None
    assert msg.jms_type is None and msg.properties == {DC: Property("I", 1)}
    assert encode_name(msg) == SEED_MIN


@pytest.mark.parametrize("name", ["4.foreign-id.", "4.foreign-id.Z", "4.foreign-id.t", "4.foreign-id.TT"])
def test_missing_class_letter_reads_as_bytes(name):
    assert type(from_wire(name, now=7)) is BytesMessage  # [ours]: 1.2's docs (its code reads Text)
    msg = from_wire(name, now=7)
    assert msg.message_id == "ID:foreign-id" and msg.timestamp == 7  # not 1.2's id format


@pytest.mark.parametrize("name", [
    "report.csv", "garbage", "", ".", "..", "...", "4.id", "x.y.z", "4..T", "99999999999.id.T",
    "2147483648.id.T", "4.1-2.T.0.c.Qq.t.p.extra", "4 .1-2.T", "٤.1-2.T", "~.~.~", ".nfs0001.x",
])
def test_unparseable_names(name):
    msg = from_wire(name, now=1234)
    assert type(msg) is BytesMessage
    assert msg.message_id == "ID:" + name
    assert msg.timestamp == 1234 and msg.priority == 4
    assert msg.expiration == 0 and msg.correlation_id is None and msg.reply_to is None
    assert msg.jms_type is None and msg.delivery_count == 1 and not msg.redelivered
    assert key_parts(sort_key(name)) == (4, 2, 0)


def test_unparseable_timestamp_defaults_to_clock():
    import time

    before = time.time_ns() // 1_000_000
    msg = from_wire("report.csv")
    assert before <= msg.timestamp <= time.time_ns() // 1_000_000


def test_tolerant_fields():
    msg = from_wire("-3.1000-1.T.soon.c.Qa%2F%2Fb.t.xI=abc&yZ=v&noeq&&=1&I=2&zY=5", now=1)
    assert msg.priority == -3 and msg.timestamp == 1
    assert msg.expiration == 0  # unparseable expiration
    assert msg.reply_to is None  # 'a//b' is not a valid queue name
    assert msg.properties == {"x": Property("S", "abc"), "y": Property("S", "v"),
                              "z": Property("Y", 5), DC: Property("I", 1)}
    assert from_wire("4.i.T...noprefix").reply_to == Queue("noprefix")  # [ours]
    assert from_wire("4.i.T...T").reply_to is None  # empty topic name
    assert from_wire("+4.i.T").priority == 4  # Integer.parseInt syntax


def unguarded(name: str) -> Message:
    """claim_reading's message, failing if its safety net (``except Exception``) catches an error."""
    with mock.patch.object(codec, "with_delivery_count", side_effect=AssertionError(f"safety net used: {name!r}")):
        return codec.claim_reading(name, 99)[0]


@DET
@given(st.text(max_size=300))
def test_from_wire_never_raises(name):
    msg = unguarded(name)
    assert isinstance(msg, Message)
    assert from_wire(name, claimed=True).message_id.startswith("ID:")
    key = key_parts(sort_key(name))
    assert key[0] == msg.priority
    assert (key[1] == 2) == (msg.message_id == "ID:" + name)
    if key[1] == 0:
        assert key[2] // 1000 == msg.timestamp


near_names = st.from_regex(
    r"\A[-+0-9]{0,3}\.[0-9%A-F\-]{0,8}\.[A-Z]?(\.[a-zA-Z0-9%&=+~*\-]{0,12}){0,6}\Z"
)


@DET
@given(near_names)
def test_decode_near_valid_names(name):
    msg = unguarded(name)
    key = key_parts(sort_key(name))
    assert key[0] == msg.priority
    assert (key[1] == 2) == (msg.message_id == "ID:" + name)
    if key[1] == 0:
        assert key[2] // 1000 == msg.timestamp
    if key[1] != 2 and msg.delivery_count < 2**31 - 1:
        encode_or_too_long(msg)  # whatever we read, we can write


# ---------------------------------------------------------------- delivery count


def test_delivery_count_read_from_target_and_claimed_names():
    first = "4.1-2.T"
    assert (from_wire(first).delivery_count, from_wire(first).redelivered) == (1, False)
    again = "4.1-2.T.....aI=1&JMSXDeliveryCountI=2&bI=2"
    m = from_wire(again)
    assert (m.delivery_count, m.redelivered) == (3, True)
    assert list(m.properties) == ["a", DC, "b"] and m.properties[DC] == Property("I", 3)
    assert encode_name(m) == again
    c = from_wire(again, claimed=True)
    assert (c.delivery_count, c.redelivered) == (2, True)
    c1 = from_wire("4.1-2.T.....JMSXDeliveryCountI=1", claimed=True)
    assert (c1.delivery_count, c1.redelivered) == (1, False)
    assert from_wire("4.1-2.T", claimed=True).delivery_count == 1
    # a garbage count is no count
    assert from_wire("4.1-2.T.....JMSXDeliveryCountS=x").delivery_count == 1
    assert from_wire("4.1-2.T.....JMSXDeliveryCountI=0").redelivered is False


def test_encode_writes_delivery_count_minus_one():
    msg = TextMessage(message_id="ID:1-2", delivery_count=3, properties={"a": Property("I", 1)})
    assert encode_name(msg) == "4.1-2.T.....aI=1&JMSXDeliveryCountI=2"
    msg.properties = {DC: Property("I", 99), "a": Property("I", 1)}  # the value is not used
    assert encode_name(msg) == "4.1-2.T.....JMSXDeliveryCountI=2&aI=1"
    msg.delivery_count = 1
    assert encode_name(msg) == "4.1-2.T.....aI=1"


def test_with_delivery_count():
    assert with_delivery_count("4.1-2.T", 1) == "4.1-2.T.....JMSXDeliveryCountI=1"
    assert with_delivery_count("4.1-2.T.5", 2) == "4.1-2.T.5....JMSXDeliveryCountI=2"
    assert with_delivery_count("4.1-2.T.....aI=1&JMSXDeliveryCountI=1&bS=x", 2) == \
        "4.1-2.T.....aI=1&JMSXDeliveryCountI=2&bS=x"
    assert with_delivery_count("4.1-2.T.....JMSXDeliveryCountI=1&aI=1&JMSXDeliveryCountL=7", 3) == \
        "4.1-2.T.....JMSXDeliveryCountI=3&aI=1"
    assert with_delivery_count("4.1-2.T.....aI=1", 1) == "4.1-2.T.....aI=1&JMSXDeliveryCountI=1"
    assert with_delivery_count("report.csv", 2) == "report.csv"
    # a count pair whose name a foreign writer escaped is still the count: replaced, not doubled
    assert with_delivery_count("4.1-2.T.....aI=1&JMSX%44eliveryCountI=1", 2) == \
        "4.1-2.T.....aI=1&JMSXDeliveryCountI=2"
    long_name = encode_name(TextMessage(message_id="ID:1-2", jms_type="t" * 240))
    assert with_delivery_count(long_name, 1) == long_name  # would exceed 255 bytes
    with pytest.raises(ValueError):
        with_delivery_count("4.1-2.T", -1)


@DET
@given(messages(), st.integers(1, 1000))
def test_with_delivery_count_round_trip(msg, k):
    msg.delivery_count = 1
    name = encode_or_too_long(msg)
    if name is None:
        return
    claimed = with_delivery_count(name, k)
    if claimed == name:  # no room left for the pair
        assert len(name) + len(f"&JMSXDeliveryCountI={k}") > 250
        return
    assert from_wire(claimed, claimed=True).delivery_count == k
    back = from_wire(claimed)
    assert (back.delivery_count, back.redelivered) == (k + 1, True)
    assert same_props({n: p for n, p in back.properties.items() if n != DC},
                      {n: p for n, p in from_wire(name).properties.items() if n != DC})
    assert with_delivery_count(claimed, k) == claimed
    assert sort_key(claimed) == sort_key(name)


# ---------------------------------------------------------------- processing names


@DET
@given(texts, messages())
def test_processing_name_round_trip(client_id, msg):
    name = encode_or_too_long(msg)
    if name is None:
        return
    pname = processing_name(client_id, name)
    if pname == name:
        assert len(encode_field(client_id)) + 1 + len(name) > 255
        assert split_processing_name(pname) == (None, name)
    else:
        assert len(pname.encode()) <= 255
        assert split_processing_name(pname) == (client_id, name)


def test_processing_name_examples():
    assert processing_name("c~1.x", "4.1-2.T") == "c%7E1%2Ex~4.1-2.T"
    assert split_processing_name("c%7E1%2Ex~4.1-2.T") == ("c~1.x", "4.1-2.T")
    assert split_processing_name("4.1-2.T") == (None, "4.1-2.T")
    assert split_processing_name("~x~y") == ("", "x~y")
    long_name = "4.1-2.T...." + "c" * 240
    assert processing_name("client", long_name) == long_name


# ---------------------------------------------------------------- ordering


def test_sort_key_order():
    names = [
        "4.1795308179679001-1.T",
        "report.csv",
        "4.1795308179679000-9.B",
        "9.1795308179690000-1.T",
        "4.zzz.T",  # foreign id
        "0.1795308179600000-1.T",
        "4.1795308179680000-0.T.....p",
        "aaa",
        "4.1795308179679000-1.T",
    ]
    assert in_delivery_order(names) == [
        "9.1795308179690000-1.T",
        "4.1795308179679000-1.T",
        "4.1795308179679000-9.B",
        "4.1795308179679001-1.T",
        "4.1795308179680000-0.T.....p",
        "4.zzz.T",
        "aaa",
        "report.csv",
        "0.1795308179600000-1.T",
    ]
    # fast path and slow path agree (escaped digits take the slow path)
    assert sort_key("4.%31%32-3.T") == sort_key("4.12-3.T")
    assert key_priority(sort_key("4.zzz.T")) == key_priority(sort_key("4.1-1.T")) < key_priority(sort_key("3.1-1.T"))


_rank_names = st.one_of(
    st.tuples(msg_ids, st.one_of(st.integers(0, 9), st.integers(-(2**31), 2**31 - 1))).map(
        lambda t: encode_name(TextMessage(message_id=t[0], priority=t[1]))),
    st.tuples(st.integers(-(2**31) - 2, 2**31 + 1), st.integers(0, 10**30), st.integers(0, 10**30),
              st.text(".T%1~xyz", max_size=12)).map(lambda t: f"{t[0]}.{t[1]}-{t[2]}.{t[3]}"),
    st.text("0123456789.-T%~+", max_size=30),
)


@given(_rank_names)
def test_sort_key_reads_what_the_full_decode_reads(name):
    """The key's cheap reading of a name's head (and its general one, for any other name)
    agrees with decode_name: the priority, whether the id is 1.2's, and its numeric prefix."""
    msg = from_wire(name, now=0)
    priority, kind, ident = key_parts(sort_key(name))
    assert priority == msg.priority
    m = re.fullmatch(r"ID:(\d{1,30})-\d{1,30}", msg.message_id or "")
    if msg.message_id == "ID:" + name:
        assert (kind, ident) == (2, 0)  # unparseable
    elif m is not None:
        assert (kind, ident) == (0, int(m.group(1)))
    else:
        assert (kind, ident) == (1, 0)


def test_sort_key_keeps_send_order_within_a_millisecond():
    ids = [new_message_id() for _ in range(3000)]
    names = [encode_name(TextMessage(message_id=i, priority=5)) for i in ids]
    shuffled = sorted(names, key=lambda n: n.split("-")[1])  # any other order
    assert sorted(shuffled, key=sort_key) == names
    assert in_delivery_order(shuffled) == names


# ---------------------------------------------------------------- bodies

plain_values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(), texts, st.binary(max_size=20)
)
body_typed = st.one_of(
    typed_values,
    st.characters(max_codepoint=0xFFFF, blacklist_categories=("Cs",)).map(lambda c: Property("C", c)),
    st.binary(max_size=20).map(lambda b: Property("X", b)),
)


def _strict_json(data: bytes):
    def no_constants(token):
        raise AssertionError(f"non-standard JSON token {token}")

    return json.loads(data.decode("utf-8"), parse_constant=no_constants)


@DET
@given(st.dictionaries(nonempty_texts, plain_values, max_size=6))
def test_map_round_trip_plain(values):
    data = encode_map(values)
    _strict_json(data)
    back = decode_map(data)
    assert list(back) == list(values)
    assert all(same_value(back[k], values[k]) for k in values)


@DET
@given(st.lists(plain_values, max_size=8))
def test_stream_round_trip_plain(values):
    data = encode_stream(values)
    _strict_json(data)
    back = decode_stream(data)
    assert len(back) == len(values) and all(same_value(a, b) for a, b in zip(back, values, strict=True))


@DET
@given(st.lists(st.one_of(st.none(), body_typed), max_size=8))
def test_stream_round_trip_typed(values):
    data = encode_stream(values)
    back = decode_stream(data, typed=True)
    assert len(back) == len(values)
    for got, want in zip(back, values, strict=True):
        if want is None:
            assert got is None
            continue
        wv = javanum.to_f32(want.value) if want.letter == "F" else want.value
        assert got.letter == want.letter and same_value(got.value, wv)
    assert encode_stream(back) == data


@DET
@given(st.dictionaries(nonempty_texts, body_typed, max_size=6))
def test_map_round_trip_typed(values):
    data = encode_map(values)
    back = decode_map(data, typed=True)
    assert list(back) == list(values)
    assert encode_map(back) == data


def test_body_format_is_documented_json():
    data = encode_map({"a": 1, "b": 2**40, "c": math.nan, "d": b"\x00\x01", "e": None,
                       "f": Property("F", 0.1), "g": Property("C", "x"), "h": True, "i": "s"})
    assert json.loads(data) == {
        "a": ["I", 1], "b": ["L", "1099511627776"], "c": ["D", "NaN"], "d": ["X", "AAE="],
        "e": None, "f": ["F", javanum.to_f32(0.1)], "g": ["C", "x"], "h": ["B", True], "i": ["S", "s"],
    }
    assert encode_stream([-math.inf, Property("Y", -1)]) == b'[["D","-Infinity"],["Y",-1]]'
    assert decode_stream(b'[["L",5],["F",0.1]]') == [5, javanum.to_f32(0.1)]


@pytest.mark.parametrize("data", [
    b"not json", b"\xff", b'{"a":1}', b'[["Q",1]]', b'[["Y",128]]', b'[["I",1.5]]', b'[["B",1]]',
    b'[["X","!!"]]', b'[["C","ab"]]', b'[["D","nan"]]', b'[["S",1]]', b'[["I"]]', b"{}",
])
def test_bad_stream_bodies_raise(data):
    with pytest.raises(MessageFormatError):
        decode_stream(data)


def test_bad_map_bodies_raise():
    for data in (b"[]", b'{"":["I",1]}', b'{"a":["L","x"]}'):
        with pytest.raises(MessageFormatError):
            decode_map(data)
    for values in ({"": 1}, {1: 1}, {"a": object()}, {"a": 2**64}, {"a": "\ud800"},
                   {"a": Property("C", "😀")}):
        with pytest.raises(MessageFormatError):
            encode_map(values)


def test_message_body_accessors_use_the_codec():
    m = MapMessage()
    m.map = {"x": 1, "y": "z"}
    assert m.map == {"x": 1, "y": "z"}
    s = StreamMessage()
    s.items = [1, b"b", None]
    assert s.items == [1, b"b", None]


@pytest.mark.parametrize("pairs", [
    [("B", True, "pB=true"), ("I", 1, "pI=1"), ("D", 1.0, "pD=1%2E0"), ("L", 1, "pL=1"), ("S", "1", "pS=1")],
    [("D", 0.0, "pD=0%2E0"), ("D", -0.0, "pD=-0%2E0"), ("F", -0.0, "pF=-0%2E0"), ("F", 0.0, "pF=0%2E0")],
    [("D", float("nan"), "pD=NaN"), ("D", float("inf"), "pD=Infinity"), ("D", float("-inf"), "pD=-Infinity")],
    [("I", True, None), ("I", 2**40, None), ("S", [1], None), ("I", 1, "pI=1")],  # None: must raise, every time
])
def test_cached_property_encoding_tells_apart_values_that_compare_equal(pairs):
    """A producer encodes each property pair once (cached): values equal to Python (True == 1 == 1.0,
    0.0 == -0.0) must still be written as their own type and sign, and invalid ones rejected each time."""
    for _ in range(2):  # the second round is answered by the cache
        for letter, value, want in pairs:
            if want is None:
                with pytest.raises(MessageFormatError):
                    codec.encode_properties({"p": Property(letter, value)})
            else:
                assert codec.encode_properties({"p": Property(letter, value)}) == want
