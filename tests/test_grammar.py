"""The judge's own name grammar (dropboxmq_spec.grammar, written from PROTOCOL.md) agrees
with the reference codec: a differential property test over generated names and every name the
real DropboxMQ 1.2 wrote (fixtures).  Only this test imports both."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dropboxmq import codec
from dropboxmq.browser import in_delivery_order
from dropboxmq_spec import grammar

FIXTURES = Path(os.environ.get("DROPBOXMQ_FIXTURES", Path(__file__).resolve().parents[2] / "shared" / "fixtures"))


def _fixture_names() -> list[str]:
    names: list[str] = []
    for f in ("dropboxmq12-produced.jsonl", "dropboxmq12-consumed.jsonl"):
        p = FIXTURES / f
        if p.is_file():
            for line in p.read_text().splitlines():
                rec = json.loads(line)
                names += [n for n in (rec.get("filename"), rec.get("processed_filename")) if n]
    traces = FIXTURES / "dropboxmq12-traces"
    for p in sorted(traces.glob("*.jsonl")) if traces.is_dir() else []:
        for line in p.read_text().splitlines():
            rec = json.loads(line)
            for key in ("path", "src", "dst"):
                if rec.get(key):
                    names.append(rec[key].rsplit("/", 1)[-1])
    return sorted(set(names))


FIXTURE_NAMES = _fixture_names()


def agree(name: str) -> None:
    """Every reading the judge makes of ``name`` is the reference codec's."""
    owner, original = grammar.split_claimed(name)
    assert (owner, original) == codec.split_processing_name(name)
    ref = codec.from_wire(original, now=0)
    parsed = grammar.parse(original)
    assert (parsed is None) == (codec.split_name(original) is None), original
    assert grammar.message_id(name) == ref.message_id
    assert grammar.priority_of(original) == ref.priority
    if parsed is not None:
        assert parsed.expiration == ref.expiration
    assert grammar.delivery_count(name) == codec.name_delivery_count(name)
    assert grammar.redelivered(original) == ref.redelivered
    key = codec.sort_key(original)  # (the judge's (-priority, kind, number, name) packed in one int, less the name)
    priority, kind, number, _ = grammar.order_key(original)
    assert key == ((priority - codec._INT_MIN) << codec._KEY_PRIORITY_SHIFT) | (kind << codec._KEY_ID_BITS) | number


def test_the_fixtures_are_there():
    assert len(FIXTURE_NAMES) >= 60, f"no 1.2 fixtures under {FIXTURES} (set DROPBOXMQ_FIXTURES)"


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_every_12_fixture_name_reads_the_same(name):
    agree(name)


def test_fixture_order_is_the_reference_order():
    targets = [n for n in FIXTURE_NAMES if "~" not in n]
    assert sorted(targets, key=grammar.order_key) == in_delivery_order(targets)


# names built from the grammar's pieces, and from any text at all
_digits = st.text("0123456789", min_size=1, max_size=32)
_field_chars = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)  # names are valid Unicode
_priority = st.one_of(st.integers(-(2**31) - 5, 2**31 + 5).map(str), st.sampled_from(["+4", "-0", "", "x", "01"]))
_id = st.one_of(st.builds(lambda a, b: f"{a}-{b}", _digits, _digits), _field_chars.map(codec.encode_field),
                st.sampled_from(["", "%31-2", "1-2-3", "%zz", "a+b"]))
_count = st.sampled_from(["", "JMSXDeliveryCountI=3", "JMSXDeliveryCountL=2&aS=b", "JMSXDeliveryCountS=4",
                          "JMSXDeliveryCountI=99999999999", "JMSXDeliveryCountY=300", "JMSXDeliveryCountI=+2",
                          "JMSXDeliveryCountI=-1", "JMSXDeliveryCount%49=5", "x=1&JMSXDeliveryCountI=1"])


@st.composite
def names(draw) -> str:
    fields = [draw(_priority), draw(_id), draw(st.sampled_from(["T", "B", "", "Z", "M"]))]
    optional = [draw(st.sampled_from(["", "0", "1881708179696", "-5", "abc", "+12"])),
                draw(_field_chars.map(codec.encode_field)), draw(st.sampled_from(["", "QQ1", "TT%2Ea"])),
                draw(_field_chars.map(codec.encode_field)), draw(_count)]
    fields += optional[:draw(st.integers(0, 6))]
    name = ".".join(fields)
    if draw(st.booleans()):
        name = draw(st.sampled_from(["impl-1", "", "a%7Eb", "a b", "1795374849321000-0239609845"])) + "~" + name
    return name


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(names())
@example("4.1140429201295000-9262574723.T.1140429211295.corr1283.TestQueue1.XYZType.prop1S=hello")
@example("4..T")
@example("not-a-dropboxmq-name")
@example(".in-progress-by-someone")
def test_generated_names_read_the_same(name):
    agree(name)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=40))
def test_any_text_reads_the_same(name):
    agree(name)


@settings(max_examples=400, deadline=None)
@given(st.text(st.characters(exclude_categories=("Cs",)), max_size=30))
def test_fields_escape_and_unescape_as_the_reference(text):
    assert grammar.encode_field(text) == codec.encode_field(text)
    assert grammar.decode_field(grammar.encode_field(text)) == text
    assert grammar.decode_field(text) == codec.decode_field(text)


@settings(max_examples=200, deadline=None)
@given(st.lists(names(), min_size=2, max_size=8))
def test_order_is_the_reference_order(batch):
    assert sorted(batch, key=grammar.order_key) == in_delivery_order(batch)


def test_ids_the_judge_makes_sort_in_the_order_it_makes_them():
    made = [grammar.format_name(7, grammar.new_message_id()) for _ in range(3000)]  # > 1000 per ms
    assert sorted(made, key=codec.sort_key) == made
    assert all(codec.from_wire(n).priority == 7 and grammar.has_ordered_id(n) for n in made)
