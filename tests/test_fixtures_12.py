"""Ground truth: 30 messages written and read by the real DropboxMQ 1.2 (see shared/fixtures)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from dropboxmq.codec import (
    from_wire,
    decode_properties,
    encode_name,
    sort_key,
    split_processing_name,
    with_delivery_count,
)
from dropboxmq.bodies import MESSAGE_CLASSES
from dropboxmq.message import Queue, TextMessage, Topic
from dropboxmq.values import Property

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
FIXTURES = SHARED / "fixtures"
PRODUCED_FILE = FIXTURES / "dropboxmq12-produced.jsonl"
CONSUMED_FILE = FIXTURES / "dropboxmq12-consumed.jsonl"
DC = "JMSXDeliveryCount"

# Fail loudly (not skip) when the ground truth is missing.
for _f in (PRODUCED_FILE, CONSUMED_FILE):
    if not _f.is_file():
        raise RuntimeError(f"1.2 fixture {_f} is missing: the shared directory must sit next to the repo")


def _load(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(rows) == 30, f"{path} should hold 30 messages, has {len(rows)}"
    return rows


PRODUCED = _load(PRODUCED_FILE)
CONSUMED = _load(CONSUMED_FILE)
BY_ID = {r["id"]: r for r in PRODUCED}

JAVA_TYPES = {"Integer": "I", "Byte": "Y", "Short": "H", "Long": "L",
              "Float": "F", "Double": "D", "Boolean": "B", "String": "S"}


def java_prop(java_type: str, text: str) -> Property:
    letter = JAVA_TYPES[java_type]
    if letter in "IYHL":
        return Property(letter, int(text))
    if letter in "FD":
        return Property(letter, float(text))
    if letter == "B":
        assert text in ("true", "false")
        return Property(letter, text == "true")
    return Property(letter, text)


def java_props(rec: dict) -> dict[str, Property]:
    return {name: java_prop(t, v) for name, (t, v) in rec["props"].items()}


def java_reply_to(text: str | None):
    """1.2's toString, e.g. ``[net.sf.dropboxmq.destinations.QueueImpl@368239c8, name = Q1]``."""
    if text is None:
        return None
    m = re.fullmatch(r"\[[\w.]*\.(QueueImpl|TopicImpl)@\w+, name = (.*)\]", text)
    assert m, text
    return (Queue if m.group(1) == "QueueImpl" else Topic)(m.group(2))


def test_fixtures_cover_what_they_claim():
    letters = {java_prop(t, v).letter for r in PRODUCED for t, v in r["props"].values()}
    assert letters == set("BYHILFDS")
    assert {r["class"] for r in PRODUCED} == {"T", "B"}
    assert {r["priority"] for r in PRODUCED} == set(range(10))
    assert any(r["replyTo"] for r in PRODUCED) and any(r["expiration"] for r in PRODUCED)
    assert sorted(r["id"] for r in CONSUMED) == sorted(BY_ID)


@pytest.mark.parametrize("rec", PRODUCED, ids=lambda r: r["id"])
def test_decode_produced_name(rec):
    msg = from_wire(rec["filename"])
    assert type(msg) is MESSAGE_CLASSES[rec["class"]]
    assert msg.message_id == rec["id"]
    assert msg.timestamp == int(rec["id"][3:].split("-")[0]) // 1000
    assert msg.priority == rec["priority"]
    assert msg.correlation_id == rec["correlation"]
    assert msg.jms_type == rec["type"]
    assert msg.expiration == rec["expiration"]
    assert msg.reply_to == java_reply_to(rec["replyTo"])
    assert msg.redelivered is rec["redelivered"] is False
    assert msg.delivery_count == 1
    props = {k: p for k, p in msg.properties.items() if k != DC}
    assert props == java_props(rec)
    assert list(props) == list(rec["props"])  # the order 1.2 wrote them in
    assert msg.properties[DC] == Property("I", 1)


@pytest.mark.parametrize("rec", PRODUCED, ids=lambda r: r["id"])
def test_encode_recorded_message_gives_1_2_name(rec):
    cls = MESSAGE_CLASSES[rec["class"]]
    msg = cls(
        message_id=rec["id"],
        priority=rec["priority"],
        expiration=rec["expiration"],
        correlation_id=rec["correlation"],
        reply_to=java_reply_to(rec["replyTo"]),
        jms_type=rec["type"],
        properties=java_props(rec),
    )
    assert encode_name(msg) == rec["filename"]
    assert encode_name(from_wire(rec["filename"])) == rec["filename"]


@pytest.mark.parametrize("rec", PRODUCED, ids=lambda r: r["id"])
def test_file_bodies(rec):
    body = bytes.fromhex(rec["file_body_hex"])
    msg = from_wire(rec["filename"])
    msg.body = body
    if rec["class"] == "T":
        assert isinstance(msg, TextMessage) and msg.text == rec["body"]
    else:
        assert body == rec["body"].encode("utf-8")


@pytest.mark.parametrize("rec", CONSUMED, ids=lambda r: r["id"])
def test_decode_processed_name(rec):
    client_id, original = split_processing_name(rec["processed_filename"])
    assert client_id == "1795308187331000-1950066721"
    produced = BY_ID[rec["id"]]

    # the count is found wherever Java's hash order put it
    stored = decode_properties(original.split(".")[7])
    assert stored[DC] == Property("I", 1)
    assert list(stored).index(DC) not in (0, len(stored) - 1)

    # as a claimed name: exactly what 1.2's consumer reported
    msg = from_wire(original, claimed=True)
    assert msg.message_id == rec["id"]
    assert msg.delivery_count == 1
    assert msg.redelivered is rec["redelivered"] is False
    assert msg.properties == java_props(rec)  # includes JMSXDeliveryCount = 1
    assert msg.properties[DC] == Property("I", 1)
    assert msg.reply_to == java_reply_to(rec["replyTo"])
    assert (msg.priority, msg.correlation_id, msg.jms_type, msg.expiration) == (
        rec["priority"], rec["correlation"], rec["type"], rec["expiration"])

    # back in target/ (recover, orphan reclaim) the same name is a redelivery
    again = from_wire(original)
    assert (again.delivery_count, again.redelivered) == (2, True)
    assert again.properties[DC] == Property("I", 2)
    assert encode_name(again) == original  # byte-for-byte, count in place

    # the claim only added the count: same message as the produced name
    first = from_wire(produced["filename"])
    assert first.properties == msg.properties  # reading target/ gives the consumer's view
    claimed_by_us = with_delivery_count(produced["filename"], 1)
    assert set(claimed_by_us.split(".")[7].split("&")) == set(original.split(".")[7].split("&"))
    assert claimed_by_us.split(".")[:7] == original.split(".")[:7]


def test_sort_key_gives_1_2_receive_order():
    expected = [r["id"] for r in CONSUMED]
    names = [r["filename"] for r in PRODUCED]
    for order in (names, names[::-1], sorted(names)):
        got = [from_wire(n).message_id for n in sorted(order, key=sort_key)]
        assert got == expected
    processed = [split_processing_name(r["processed_filename"])[1] for r in CONSUMED]
    got = [from_wire(n).message_id for n in sorted(processed[::-1], key=sort_key)]
    assert got == expected


def test_float_and_double_values_are_exact():
    for rec in PRODUCED:
        props = from_wire(rec["filename"]).properties
        f, d = props["fprop"].value, props["dprop"].value
        assert f == float(rec["props"]["fprop"][1]) and not math.isnan(f)
        assert d == float(rec["props"]["dprop"][1])
