"""decision.decide: the pure claim policy, driven with a clock the test chooses."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from dropboxmq import codec, ids
from dropboxmq.decision import ClaimSettings, Verdict, claimable_unread, decide
from dropboxmq.message import DeliveryMode, TextMessage
from dropboxmq.values import Property
from dropboxmq.selector import parse

NOW = 1_800_000_000_000
PLAIN = ClaimSettings()


def wire(**kw) -> str:
    msg = TextMessage(body="x", message_id=ids.new_message_id(), timestamp=NOW - 1000, **kw)
    return codec.to_wire(msg)


def test_plain_name_is_claimed_without_a_decode():
    name = wire()
    d = decide(name, NOW, PLAIN)
    assert (d.verdict, d.header, d.delivery_count, d.dead_letter) == (Verdict.CLAIM, None, 1, False)
    assert d.claimed_name == codec.with_delivery_count(name, 1)
    assert codec.name_delivery_count(d.claimed_name) == 1


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
    assert d.verdict is Verdict.CLAIM and d.header is None and d.dead_letter


def test_names_that_could_hide_a_hold_back_are_decoded():
    assert claimable_unread(wire())
    assert claimable_unread(wire(delivery_mode=DeliveryMode.NON_PERSISTENT))
    assert not claimable_unread(wire(expiration=NOW + 10))
    assert not claimable_unread(wire(delivery_time=NOW + 10))
    assert not claimable_unread(codec.with_delivery_count(wire(), 1))
    assert not claimable_unread("4.1-2.T..%4Aunk")  # an escape could hide any field
    assert claimable_unread("not a dropboxmq name")  # foreign: decoded as priority 4, nothing held back


names = st.one_of(
    st.text(alphabet=st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1,
             max_size=60),
    st.builds(lambda p, exp, props: f"{p}.1763000000000123-0000000001.T.{exp}...." + props,
              st.integers(-3, 12), st.sampled_from(["", "0", str(NOW - 1), str(NOW + 1), "x"]),
              st.sampled_from(["", "aS=1", "JMSXDeliveryCountI=2", "JMS_DropboxMQ_DeliveryTimeL=" + str(NOW + 9),
                               "%4AMSXDeliveryCountI=5", "JMSXDeliveryCountI=x"])),
)


@settings(max_examples=300, deadline=None)
@given(names)
def test_fast_path_agrees_with_the_full_decode(name):
    """Without a selector the fast path must say exactly what decoding first would say
    (a selector that accepts everything forces the decode)."""
    fast = decide(name, NOW, PLAIN)
    slow = decide(name, NOW, ClaimSettings(parse("1 = 1")))
    assert (fast.verdict, fast.delivery_count, fast.claimed_name, fast.until, fast.dead_letter) == \
           (slow.verdict, slow.delivery_count, slow.claimed_name, slow.until, slow.dead_letter)
