"""decision.decide: the pure claim policy, driven with a clock the test chooses."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from dropboxmq import codec, ids
from dropboxmq.decision import ClaimSettings, Verdict, decide
from dropboxmq.message import TextMessage
from dropboxmq.values import Property
from dropboxmq.selector import parse

NOW = 1_800_000_000_000
PLAIN = ClaimSettings()


def wire(**kw) -> str:
    msg = TextMessage(body="x", message_id=ids.new_message_id(), timestamp=NOW - 1000, **kw)
    return codec.to_wire(msg)


def test_plain_name_is_claimed_with_its_tail_read_once():
    name = wire()
    d = decide(name, NOW, PLAIN)
    assert (d.verdict, d.delivery_count, d.dead_letter) == (Verdict.CLAIM, 1, False)
    assert d.claimed_name == codec.with_delivery_count(name, 1)
    assert codec.name_delivery_count(d.claimed_name) == 1
    assert vars(d.header) == vars(codec.from_wire(name, NOW))
    codec._read_tail.cache_clear()
    for _ in range(3):
        decide(wire(priority=7), NOW, PLAIN)
    assert codec._read_tail.cache_info().misses == 1  # three names, one tail decoded


def test_selector_rejects_or_claims_with_the_decoded_header():
    name = wire(properties={"colour": Property("S", "red")})
    assert decide(name, NOW, ClaimSettings(parse("colour = 'blue'"))).verdict is Verdict.SKIP
    d = decide(name, NOW, ClaimSettings(parse("colour = 'red'")))
    assert d.verdict is Verdict.CLAIM and d.header is not None and d.header.properties["colour"].value == "red"


def test_delivery_time_defers_until_it_comes():
    name = wire(delivery_time=NOW + 5000)
    d = decide(name, NOW, PLAIN)
    assert (d.verdict, d.until) == (Verdict.DEFER, NOW + 5000)
    assert decide(name, NOW + 4999, PLAIN).verdict is Verdict.DEFER
    assert decide(name, NOW + 5000, PLAIN).verdict is Verdict.CLAIM


def test_expiration_passed_expires():
    name = wire(expiration=NOW + 10)
    assert decide(name, NOW + 9, PLAIN).verdict is Verdict.CLAIM
    assert decide(name, NOW + 10, PLAIN).verdict is Verdict.EXPIRE  # expired at its expiration ms


def test_redelivered_name_counts_on_and_dead_letters_past_the_last_attempt():
    name = codec.with_delivery_count(wire(), 3)  # delivered 3 times before
    d = decide(name, NOW, ClaimSettings(max_delivery_attempts=4))
    assert (d.verdict, d.delivery_count, d.dead_letter) == (Verdict.CLAIM, 4, False)
    assert codec.name_delivery_count(d.claimed_name) == 4
    d = decide(name, NOW, ClaimSettings(max_delivery_attempts=3))
    assert (d.verdict, d.delivery_count, d.dead_letter) == (Verdict.CLAIM, 4, True)


def test_no_attempt_allowed_dead_letters_even_the_fast_path():
    d = decide(wire(), NOW, ClaimSettings(max_delivery_attempts=0))
    assert d.verdict is Verdict.CLAIM and d.dead_letter


def test_names_sharing_a_tail_are_decoded_into_messages_of_their_own():
    """The tail is read once; what a caller does to one message never shows in the next."""
    first, second = wire(correlation_id="c", properties={"a": Property("I", 1)}), wire(correlation_id="c")
    second = first.replace(first.split(".")[1], second.split(".")[1])  # the same tail, another id
    d = decide(first, NOW, PLAIN)
    d.header.properties["a"] = Property("I", 2)
    d.header.correlation_id = "changed"
    again = decide(second, NOW, PLAIN).header
    assert (again.properties["a"], again.correlation_id) == (Property("I", 1), "c")
    assert again.message_id == "ID:" + second.split(".")[1] and again.properties is not d.header.properties


def test_a_name_with_no_room_for_the_count_is_claimed_unchanged():
    name = "4.1763000000000123-0000000001.T.....aS=" + "x" * (250 - 39)
    assert len(name) == 250 and codec.with_delivery_count(name, 1) == name  # 255 bytes at most
    assert decide(name, NOW, PLAIN).claimed_name == name


names = st.one_of(
    st.text(alphabet=st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1,
             max_size=60),
    st.builds(lambda p, exp, props: f"{p}.1763000000000123-0000000001.T.{exp}...." + props,
              st.integers(-3, 12), st.sampled_from(["", "0", str(NOW - 1), str(NOW + 1), "x"]),
              st.sampled_from(["", "aS=1", "JMSXDeliveryCountI=2", "JMS_DropboxMQ_DeliveryTimeL=" + str(NOW + 9),
                               "%4AMSXDeliveryCountI=5", "JMSXDeliveryCountI=x"])),
    # first deliveries of every shape: any class letter, escaped and non-ASCII fields, tails up to
    # and over the 255-byte limit once the count is stamped, too many fields
    st.builds(lambda p, mid, fields: f"{p}.{mid}." + ".".join(fields),
              st.sampled_from(["0", "4", "9", "04", "+4", "-1", "10"]),
              st.sampled_from(["1763000000000123-0000000001", "1-2", "x-1", "ID%3A1-2", "12"]),
              st.lists(st.one_of(st.sampled_from(["T", "B", "M", "P", "S", "O", "X", "", "Qq", "Tt", "%41",
                                                  "aS=1&bI=2", "é", "x" * 120, "a+b", "JMSXDeliveryCountI=3"]),
                                 st.text(alphabet="aZ09%&=.+-_~é", max_size=12)),
                       min_size=1, max_size=7)),
)


def full_decode(name: str, now: int, settings: ClaimSettings) -> tuple:
    """The claim policy spelled out on the full decode of every name (the oracle)."""
    header = codec.from_wire(name, now)
    if settings.selector is not None and not settings.selector.matches(header):
        return Verdict.SKIP, header
    if header.delivery_time > now:
        return Verdict.DEFER, header, header.delivery_time
    if header.is_expired(now):
        return Verdict.EXPIRE, header
    count = header.delivery_count
    return (Verdict.CLAIM, header, count, codec.with_delivery_count(name, count),
            count > settings.max_delivery_attempts)


@settings(max_examples=300, deadline=None)
@given(names, st.sampled_from([None, "1 = 1", "a = '1'", "a IS NULL", "JMSPriority > 4"]))
def test_decide_says_what_the_full_decode_says(name, selector):
    """With or without a selector, the fast path gives the verdict, header and claimed name
    that decoding every name in full gives."""
    settings_ = ClaimSettings(parse(selector) if selector else None)
    d = decide(name, NOW, settings_)
    want = full_decode(name, NOW, settings_)
    got = {Verdict.SKIP: (d.verdict, d.header), Verdict.EXPIRE: (d.verdict, d.header),
           Verdict.DEFER: (d.verdict, d.header, d.until),
           Verdict.CLAIM: (d.verdict, d.header, d.delivery_count, d.claimed_name, d.dead_letter)}[d.verdict]
    assert got[0] == want[0] and vars(got[1]) == vars(want[1]) and got[2:] == want[2:]


@settings(max_examples=300, deadline=None)
@given(names)
def test_a_cached_tail_reads_as_a_fresh_one(name):
    """A name decoded after another with its tail (whose message was then changed) reads as it
    does with nothing cached."""
    seen = codec.from_wire(name, NOW)
    seen.properties["x"] = Property("S", "y")
    seen.jms_type = "changed"
    cached = codec.from_wire(name, NOW)
    codec._read_tail.cache_clear()
    assert type(cached) is type(codec.from_wire(name, NOW)) and vars(cached) == vars(codec.from_wire(name, NOW))
