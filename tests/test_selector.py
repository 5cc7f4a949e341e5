"""JMS message selectors: parser, type checks, three-valued evaluation, printing."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dropboxmq.selector import InvalidSelectorError
from dropboxmq.message import DeliveryMode, Message, TextMessage
from dropboxmq.values import Property
from dropboxmq.selector import Selector, parse, selector_for

T, F, U = True, False, None

#: the environment most table rows evaluate against ('missing' and friends are absent)
ENV = {
    "i": 5,
    "j": 10,
    "neg": -3,
    "f": 2.5,
    "one_f": 1.0,
    "big": 2**62,
    "s": "abc",
    "S": "ABC",
    "empty": "",
    "q": "it's",
    "pct": "100%",
    "us": "a_b",
    "esc": "a!b",
    "bs": "a\\b",
    "nl": "a\nb",
    "num_str": "1",
    "t": True,
    "fl": False,
    "nan": math.nan,
}

# ------------------------------------------------------------------ truth tables
# Written out by hand (not computed) so that the table can catch a wrong evaluator.
_TV = {T: "TRUE", F: "FALSE", U: "missing"}
_AND = {
    (T, T): T, (T, F): F, (T, U): U,
    (F, T): F, (F, F): F, (F, U): F,
    (U, T): U, (U, F): F, (U, U): U,
}  # fmt: skip
_OR = {
    (T, T): T, (T, F): T, (T, U): T,
    (F, T): T, (F, F): F, (F, U): U,
    (U, T): T, (U, F): U, (U, U): U,
}  # fmt: skip
_NOT = {T: F, F: T, U: U}

TRUTH_CASES = (
    [(f"{_TV[a]} AND {_TV[b]}", None, r) for (a, b), r in _AND.items()]
    + [(f"{_TV[a]} OR {_TV[b]}", None, r) for (a, b), r in _OR.items()]
    + [(f"NOT {_TV[a]}", None, r) for a, r in _NOT.items()]
    # the same with UNKNOWN coming from a comparison with NULL instead of a NULL boolean
    + [
        ("(missing = 1) AND TRUE", None, U),
        ("(missing = 1) AND FALSE", None, F),
        ("FALSE AND (missing > 1)", None, F),
        ("(missing = 1) OR TRUE", None, T),
        ("(missing = 1) OR FALSE", None, U),
        ("TRUE OR (missing < 1)", None, T),
        ("NOT (missing = 1)", None, U),
        ("NOT NOT (missing = 1)", None, U),
        ("TRUE AND TRUE AND missing", None, U),
        ("TRUE AND missing AND FALSE", None, F),
        ("FALSE OR missing OR TRUE", None, T),
        ("FALSE OR FALSE OR missing", None, U),
    ]
)

CASES = TRUTH_CASES + [
    # --- literals, boolean identifiers
    ("TRUE", None, T),
    ("FALSE", None, F),
    ("true", None, T),
    ("False", None, F),
    ("t", None, T),
    ("fl", None, F),
    ("missing", None, U),
    ("i", None, U),  # a number used as a condition is UNKNOWN
    ("NOT i", None, U),
    ("NOT t", None, F),
    ("s", None, U),
    # --- precedence: NOT > AND > OR
    ("TRUE OR TRUE AND FALSE", None, T),
    ("FALSE AND TRUE OR TRUE", None, T),
    ("(TRUE OR TRUE) AND FALSE", None, F),
    ("NOT FALSE AND FALSE", None, F),
    ("NOT (FALSE AND FALSE)", None, T),
    ("NOT TRUE OR TRUE", None, T),
    ("NOT (TRUE OR TRUE)", None, F),
    ("NOT i = 5", None, F),
    ("NOT i > 6", None, T),
    ("i + 1 > 5 AND s = 'abc'", None, T),
    ("i = 1 OR i = 5 AND s = 'zzz'", None, F),
    ("(i = 1 OR i = 5) AND s = 'abc'", None, T),
    # --- precedence: unary > * / > + -; left associativity
    ("2 + 3 * 4 = 14", None, T),
    ("(2 + 3) * 4 = 20", None, T),
    ("2 * 3 + 4 = 10", None, T),
    ("10 - 4 - 3 = 3", None, T),
    ("10 - (4 - 3) = 9", None, T),
    ("100 / 10 / 5 = 2", None, T),
    ("-2 * 3 = -6", None, T),
    ("- i = -5", None, T),
    ("- - i = 5", None, T),
    ("-i * -i = 25", None, T),
    ("+i = 5", None, T),
    ("i - -5 = 10", None, T),
    ("j - i * 2 = 0", None, T),
    # --- arithmetic semantics
    ("7 / 2 = 3", None, T),  # long / long truncates
    ("-7 / 2 = -3", None, T),  # toward zero (Java), not floor
    ("7 / -2 = -3", None, T),
    ("7 / 2.0 = 3.5", None, T),
    ("7.0 / 2 = 3.5", None, T),
    ("i / 0 = 0", None, U),  # long division by zero -> NULL
    ("i / 0 = 0 OR TRUE", None, T),
    ("f / 0 > 1000000", None, T),  # double division by zero -> Infinity
    ("-f / 0 < -1000000", None, T),
    ("0.0 / 0 = 0.0 / 0", None, F),  # NaN
    ("9223372036854775807 + 1 < 0", None, T),  # long wraps
    ("-9223372036854775808 - 1 > 0", None, T),
    ("i + missing = 5", None, U),
    ("missing * 0 = 0", None, U),
    ("i * f = 12.5", None, T),
    ("s + 1 = 2", None, U),  # arithmetic on a runtime string -> NULL
    ("t + 1 = 2", None, U),
    # --- numeric promotion
    ("1 = 1.0", None, T),
    ("one_f = 1", None, T),
    ("i = 5.0", None, T),
    ("5.0 = i", None, T),
    ("f > 2", None, T),
    ("f < 3", None, T),
    ("big = 4611686018427387904", None, T),
    ("big + 0.0 = 4611686018427387904", None, T),
    ("f <> 2.5", None, F),
    ("neg < i", None, T),
    ("nan = nan", None, F),
    ("nan <> nan", None, T),
    # --- exact and approximate literals
    ("7E3 = 7000", None, T),
    ("-57.9E2 = -5790", None, T),
    ("7. = 7", None, T),
    (".5 = 0.5", None, T),
    ("1.5F = 1.5", None, T),
    ("1.1F = 1.1", None, F),  # F literals are float32
    ("1e-2 = 0.01", None, T),
    ("2.5e+1 = 25", None, T),
    ("6.2D = +6.2", None, T),
    ("0x1F = 31", None, T),
    ("0X1f = 31", None, T),
    ("010 = 8", None, T),  # Java octal
    ("0 = 0", None, T),
    ("57L = 57", None, T),
    ("-957 < +62", None, T),
    ("-9223372036854775808 < 9223372036854775807", None, T),
    # --- comparisons with NULL
    ("missing = 1", None, U),
    ("missing <> 1", None, U),
    ("missing > 1", None, U),
    ("1 < missing", None, U),
    ("missing = missing", None, U),
    ("s = missing", None, U),
    ("NOT missing = 1", None, U),
    ("missing = 'x' OR TRUE", None, T),
    ("missing = 'x' AND FALSE", None, F),
    # --- IS [NOT] NULL
    ("missing IS NULL", None, T),
    ("missing IS NOT NULL", None, F),
    ("i IS NULL", None, F),
    ("i IS NOT NULL", None, T),
    ("empty IS NULL", None, F),
    ("fl IS NOT NULL", None, T),
    ("missing is null", None, T),
    ("missing Is Not Null", None, F),
    ("NOT missing IS NULL", None, F),
    # --- type-mismatched comparisons are FALSE (not UNKNOWN)
    ("s = 1", None, F),
    ("s <> 1", None, F),
    ("NOT s = 1", None, T),
    ("i = 'abc'", None, F),
    ("num_str = 1", None, F),  # no string->number conversion in selectors
    ("num_str > 0", None, F),
    ("t = 1", None, F),
    ("t = 'TRUE'", None, F),
    ("t = TRUE", None, T),
    ("fl <> TRUE", None, T),
    ("fl = FALSE", None, T),
    ("s > S", None, F),  # strings only compare with = and <>
    ("s < S", None, F),
    ("t > fl", None, F),
    ("(i = 5) = TRUE", None, T),
    ("(i = 5) <> (j = 10)", None, F),
    ("(missing = 1) = TRUE", None, U),
    # --- strings
    ("s = 'abc'", None, T),
    ("s = 'ABC'", None, F),  # case-sensitive equality
    ("S = 'ABC'", None, T),  # identifiers are case-sensitive: S is not s
    ("s <> 'abd'", None, T),
    ("q = 'it''s'", None, T),
    ("'it''s' = q", None, T),
    ("empty = ''", None, T),
    ("s = 'abc '", None, F),
    ("'abc' = 'abc'", None, T),
    # --- LIKE
    ("s LIKE 'abc'", None, T),
    ("s LIKE 'ab'", None, F),
    ("s LIKE 'a%'", None, T),
    ("s LIKE '%c'", None, T),
    ("s LIKE '%b%'", None, T),
    ("s LIKE '%x%'", None, F),
    ("s LIKE 'a_c'", None, T),
    ("s LIKE 'a_'", None, F),
    ("s LIKE '___'", None, T),
    ("s LIKE '____'", None, F),
    ("s LIKE '%'", None, T),
    ("s LIKE 'a%c%'", None, T),
    ("s LIKE '_%_%_'", None, T),
    ("s LIKE '_%_%_%_'", None, F),
    ("empty LIKE '%'", None, T),
    ("empty LIKE '_'", None, F),
    ("empty LIKE ''", None, T),
    ("s LIKE 'A%'", None, F),  # case-sensitive
    ("s LIKE '.*'", None, F),  # regex metacharacters are literal
    ("s NOT LIKE 'a%'", None, F),
    ("s NOT LIKE 'z%'", None, T),
    ("pct LIKE '100!%' ESCAPE '!'", None, T),
    ("pct LIKE '100\\%' ESCAPE '\\'", None, T),
    ("s LIKE 'ab!%' ESCAPE '!'", None, F),  # escaped % is a literal %
    ("us LIKE 'a!_b' ESCAPE '!'", None, T),
    ("s LIKE 'a!_c' ESCAPE '!'", None, F),  # escaped _ is a literal _
    ("esc LIKE 'a!!b' ESCAPE '!'", None, T),  # the escape character itself
    ("esc LIKE 'a!%' ESCAPE '!'", None, F),
    ("esc LIKE 'a!b'", None, T),  # without ESCAPE, ! is ordinary
    ("bs LIKE 'a\\b'", None, T),  # no default escape character
    ("q LIKE 'it''%'", None, T),
    ("q LIKE '%''_'", None, T),
    ("pct LIKE '%!%' ESCAPE '!'", None, T),
    ("pct NOT LIKE '%!%' ESCAPE '!'", None, F),
    ("missing LIKE 'a%'", None, U),
    ("missing NOT LIKE 'a%'", None, U),
    ("i LIKE '5'", None, F),  # LIKE on a non-string: false ...
    ("i NOT LIKE '5'", None, T),  # ... and NOT LIKE is its negation
    ("nl LIKE 'a%b'", None, T),  # % spans newlines
    ("nl LIKE 'a_b'", None, T),
    ("s like 'A%' or s like 'a%'", None, T),
    # --- BETWEEN
    ("i BETWEEN 1 AND 10", None, T),
    ("i BETWEEN 5 AND 5", None, T),
    ("i BETWEEN 6 AND 10", None, F),
    ("i BETWEEN 10 AND 1", None, F),
    ("i NOT BETWEEN 6 AND 10", None, T),
    ("i NOT BETWEEN 1 AND 10", None, F),
    ("i NOT BETWEEN 5 AND 5", None, F),
    ("f BETWEEN 2 AND 3", None, T),
    ("f BETWEEN 2.5 AND 2.5", None, T),  # bounds are inclusive (double)
    ("one_f BETWEEN 1 AND 2", None, T),  # ... and with long bounds
    ("f NOT BETWEEN 2.5 AND 3", None, F),
    ("f NOT BETWEEN 1 AND 2.5", None, F),
    ("i BETWEEN neg AND i", None, T),  # non-literal bounds, inclusive
    ("i NOT BETWEEN neg AND i", None, F),
    ("i BETWEEN 4.5 AND 5.5", None, T),
    ("i BETWEEN 1 AND j", None, T),
    ("i + 1 BETWEEN 2 * 3 AND j - 4", None, T),
    ("missing BETWEEN 1 AND 10", None, U),
    ("missing NOT BETWEEN 1 AND 10", None, U),
    ("i BETWEEN missing AND 10", None, U),
    ("i BETWEEN missing AND 3", None, F),  # i <= 3 is already false
    ("i NOT BETWEEN missing AND 3", None, T),  # i > 3 is already true
    ("i NOT BETWEEN missing AND 10", None, U),
    ("s BETWEEN 1 AND 10", None, F),  # mismatch: false ...
    ("s NOT BETWEEN 1 AND 10", None, F),  # ... both ways (s < 1 OR s > 10)
    ("nan BETWEEN 1 AND 10", None, F),
    ("nan NOT BETWEEN 1 AND 10", None, F),
    ("i between 1 and 10 and s = 'abc'", None, T),
    ("NOT i BETWEEN 1 AND 10", None, F),
    # --- IN
    ("s IN ('abc', 'def')", None, T),
    ("s IN ('ABC')", None, F),
    ("s IN ('ab', 'abcd')", None, F),
    ("s NOT IN ('abc')", None, F),
    ("s NOT IN ('x', 'y')", None, T),
    ("missing IN ('a')", None, U),
    ("missing NOT IN ('a')", None, U),
    ("i IN ('5')", None, F),  # mismatch: false ...
    ("i NOT IN ('5')", None, T),  # ... NOT IN = NOT (i = '5')
    ("q IN ('it''s')", None, T),
    ("empty IN ('')", None, T),
    ("s in ('abc')", None, T),
    ("NOT s IN ('abc')", None, F),
    # --- keywords are case-insensitive, identifiers case-sensitive
    ("TRUE aNd NoT FALSE", None, T),
    ("t And t", None, T),
    ("t or fl", None, T),
    ("T = 1", None, U),  # T is an identifier (absent), not TRUE
    ("ANDROID = 1", {"ANDROID": 1}, T),  # keyword prefix is still an identifier
    ("notes IS NULL", None, T),
    ("isbn = 'x'", {"isbn": "x"}, T),
    ("Inx = 1", {"Inx": 1, "inx": 2}, T),
    ("inx = 1", {"Inx": 1, "inx": 2}, F),
    # --- identifiers: Java identifier characters
    ("$price > 3", {"$price": 4}, T),
    ("_x = 1", {"_x": 1}, T),
    ("ñame = 'x'", {"ñame": "x"}, T),
    ("a1_b2$ = 2", {"a1_b2$": 2}, T),
    ("JMS_IBM_Format = 'MQSTR'", {"JMS_IBM_Format": "MQSTR"}, T),
    ("JMSXGroupID = 'g'", {"JMSXGroupID": "g"}, T),
    # --- header fields in a plain environment
    ("JMSPriority > 4", {"JMSPriority": 7}, T),
    ("JMSDeliveryMode = 'PERSISTENT'", {"JMSDeliveryMode": "PERSISTENT"}, T),
    ("JMSType IS NULL", {}, T),
    ("JMSRedelivered IS NULL", {"JMSRedelivered": True}, T),  # not selectable: NULL
    ("JMSExpiration > 0", {"JMSExpiration": 5}, U),
    ("JMSDestination IS NULL", {"JMSDestination": "queue://q"}, T),
    # --- whitespace
    ("\ti\n=\r5\f", None, T),
    ("i=5 AND(s='abc')AND'abc'=s", None, T),
]


def _ids(cases):
    return [f"{n:03d}:{c[0]}" for n, c in enumerate(cases)]


def test_table_is_large_enough():
    assert len(CASES) >= 100
    assert len(INVALID) >= 20


@pytest.mark.parametrize("text,env,expected", CASES, ids=_ids(CASES))
def test_selector_table(text, env, expected):
    sel = parse(text)
    env = ENV if env is None else env
    result = sel.evaluate(env)
    assert result is expected, f"{text!r} gave {result!r}, expected {expected!r}"
    # matches is TRUE-only, and the canonical text evaluates identically
    assert sel.matches_values(env) is (expected is True)
    again = parse(str(sel))
    assert again == sel
    assert again.evaluate(env) is expected


# ------------------------------------------------------------------ invalid selectors

INVALID = [
    ("a = ", 4),
    ("a = 'abc", 4),
    ("'unterminated ''", 0),
    ("'a' + 1", 0),
    ("1 + 'a' = 2", 4),
    ("5", 0),
    ("'text'", 0),
    ("i + 1", 0),
    ("a + (b = 1)", 5),
    ("(a = 1) < 3", 1),
    ("- 'a' = 1", 2),
    ("- TRUE = 1", 2),
    ("x IN (1, 2)", 6),
    ("x IN ('a', b)", 11),
    ("x IN ()", 6),
    ("x IN ('x' 'y')", 10),
    ("x IN 'a'", 5),
    ("1 + 2 IN ('a')", 0),
    ("x LIKE 5", 7),
    ("x LIKE y", 7),
    ("'abc' LIKE 'a%'", 0),
    ("x LIKE 'a' ESCAPE 'ab'", 18),
    ("x LIKE 'a' ESCAPE ''", 18),
    ("x LIKE 'a' ESCAPE 1", 18),
    ("x LIKE '!a' ESCAPE '!'", 8),
    ("x LIKE 'ab!' ESCAPE '!'", 10),
    ("x LIKE 'it''s!' ESCAPE '!'", 13),
    ("a != 1", 2),
    ("a == 1", 2),
    ("a = b = c", 6),
    ("a < b > c", 6),
    ("NULL = a", 0),
    ("a = NULL", 4),
    ("a IS 5", 5),
    ("a NOT NULL", 6),
    ("5 IS NULL", 0),
    ("9223372036854775808 = a", 0),
    ("a = 0x8000000000000000", 4),
    ("a = 1e999", 4),
    ("a = 0x", 4),
    ("a = 1e", 4),
    ("a = 08", 4),
    ("a = 1.2.3", 4),
    ("a = 12abc", 4),
    ("'a' < 'b'", 0),
    ("a >= 'b'", 5),
    ("TRUE = 1", 5),
    ("'a' = 1", 4),
    ("TRUE < FALSE", 0),
    ("a AND 3", 6),
    ("NOT 5", 4),
    ("'x' OR a", 0),
    ("(a = 1", 6),
    ("a = 1)", 5),
    ("a # 1", 2),
    ("a = b c", 6),
    ("a BETWEEN 1", 11),
    ("a BETWEEN 'x' AND 'y'", 10),
    ("a BETWEEN 1 AND TRUE", 16),
    ("AND = 1", 0),
    ("a = 1 AND", 9),
    ("a.b = 1", 1),
    ("JMSPriority = 'high'", 12),
    ("JMSType > 1", 0),
    ("JMSPriority LIKE '1%'", 0),
    ("JMSDeliveryMode + 1 = 2", 0),
    ("(" * 60 + "TRUE" + ")" * 60, 50),
    ("NOT " * 60 + "TRUE", 200),
    ("a = " + "-" * 60 + "1", 54),
    ("a = 1 @", 6),
    ("i=5AND s='abc'", 2),
]


@pytest.mark.parametrize("text,position", INVALID, ids=_ids(INVALID))
def test_invalid_selectors(text, position):
    with pytest.raises(InvalidSelectorError) as info:
        parse(text)
    err = info.value
    assert err.position == position, f"{text!r}: {err} (expected position {position})"
    assert err.selector == text
    assert f"position {position}" in str(err)


def test_invalid_selector_messages_are_clear():
    cases = {
        "a = 'abc": "unterminated string",
        "a != 1": "use <>",
        "x IN (1)": "string literals",
        "x LIKE 'a' ESCAPE 'ab'": "single character",
        "5": "boolean expression",
        "a + (b = 1)": "numeric",
        "a = b = c": "chained",
        "NULL = a": "IS NULL",
        "x IN ()": "empty",
    }
    for text, words in cases.items():
        with pytest.raises(InvalidSelectorError, match=words):
            parse(text)


def test_too_deep_arithmetic_is_rejected_but_long_and_chains_are_fine():
    with pytest.raises(InvalidSelectorError):
        parse(" + ".join(["1"] * 400) + " = 400")
    long_and = " AND ".join(f"p{n} = {n}" for n in range(2000))
    sel = parse(long_and)
    env = {f"p{n}": n for n in range(2000)}
    assert sel.evaluate(env) is True
    env["p1999"] = 0
    assert sel.evaluate(env) is False
    assert parse(str(sel)) == sel


# ------------------------------------------------------------------ empty selector, API


@pytest.mark.parametrize("text", ["", "   ", "\t\n", None])
def test_empty_selector_selects_everything(text):
    sel = parse(text)
    assert sel.empty
    assert sel.matches(TextMessage())
    assert sel.evaluate({}) is True
    assert str(sel) == ""
    assert parse(str(sel)) == sel
    assert selector_for(text) is None


def test_non_string_selector_is_rejected():
    with pytest.raises(InvalidSelectorError):
        parse(42)  # type: ignore[arg-type]


def test_canonical_text_is_fully_parenthesised():
    sel = parse("a=1 and b<>'it''s' or not c")
    assert str(sel) == "(((a = 1) AND (b <> 'it''s')) OR (NOT c))"
    assert sel.to_text() == str(sel)
    assert repr(sel) == f"Selector({str(sel)!r})"
    assert str(parse("x not between -1 and 2.5e3")) == "(x NOT BETWEEN -1 AND 2500.0)"
    assert str(parse("x like '5!%' escape '!'")) == "(x LIKE '5!%' ESCAPE '!')"
    assert str(parse("x not in ('a','b')")) == "(x NOT IN ('a', 'b'))"
    assert str(parse("x is not null")) == "(x IS NOT NULL)"
    assert str(parse("-x * 2 + 0x10 = 010")) == "((((-x) * 2) + 16) = 8)"
    assert parse("A = 1") != parse("a = 1")
    assert parse("a = 1 AND b = 2") == parse("(a=1)and(b=2)")
    assert hash(parse("a = 1")) == hash(parse("a=1"))
    assert parse("a = 1 OR b = 2 AND c").identifiers == {"a", "b", "c"}


def test_selector_for_returns_selector():
    sel = selector_for("a = 1")
    assert isinstance(sel, Selector)
    assert sel.evaluate({"a": 1}) is True


# ------------------------------------------------------------------ real messages


def _message(**headers):
    msg = TextMessage()
    msg.text = "body is never visible to selectors"
    for k, v in headers.items():
        setattr(msg, k, v)
    return msg


def test_header_fields_map_from_message():
    msg = _message(
        priority=7,
        delivery_mode=DeliveryMode.NON_PERSISTENT,
        message_id="ID:abc-1",
        correlation_id="corr-9",
        jms_type="order",
        timestamp=1_700_000_000_000,
        expiration=1_800_000_000_000,
        redelivered=True,
        delivery_count=3,
    )
    msg.set_property("color", "red")
    msg.set_property("weight", 2.5, "float")
    msg.set_property("count", 12, "short")
    msg.set_property("big", 2**40, "long")
    msg.set_property("urgent", True)
    msg.set_property("JMSXGroupID", "g1")
    msg.set_property("JMSPriority", 1)  # a property cannot shadow a header
    yes = [
        "JMSPriority = 7",
        "JMSPriority > 4",
        "JMSDeliveryMode = 'NON_PERSISTENT'",
        "JMSDeliveryMode <> 'PERSISTENT'",
        "JMSMessageID = 'ID:abc-1'",
        "JMSMessageID LIKE 'ID:%'",
        "JMSCorrelationID = 'corr-9'",
        "JMSCorrelationID IN ('corr-8', 'corr-9')",
        "JMSType = 'order'",
        "JMSTimestamp = 1700000000000",
        "JMSTimestamp BETWEEN 1600000000000 AND 1800000000000",
        "color = 'red'",
        "weight = 2.5",
        "weight > 2",
        "count = 12",
        "big = 1099511627776",
        "urgent",
        "urgent AND color IN ('red', 'blue')",
        "JMSXGroupID = 'g1'",
        "JMSXDeliveryCount = 3",
        "JMSRedelivered IS NULL",
        "JMSExpiration IS NULL",
        "JMSDestination IS NULL",
        "JMSReplyTo IS NULL",
        "missing IS NULL",
        "JMSPriority > 4 AND color IN ('red','blue') AND weight BETWEEN 1 AND 10",
    ]
    no = [
        "JMSPriority = 1",
        "JMSDeliveryMode = 'PERSISTENT'",
        "JMSDeliveryMode = 'non_persistent'",
        "Color = 'red'",  # case-sensitive name: missing -> UNKNOWN
        "NOT Color = 'red'",  # still UNKNOWN, so not selected
        "color = 'RED'",
        "JMSRedelivered = TRUE",
        "JMSType = 'ORDER'",
        "NOT urgent",
        "JMSXDeliveryCount < 2",
    ]
    for text in yes:
        assert parse(text).matches(msg), text
    for text in no:
        assert not parse(text).matches(msg), text


def test_default_message_headers():
    msg = Message()
    for text in [
        "JMSPriority = 4",
        "JMSDeliveryMode = 'PERSISTENT'",
        "JMSMessageID IS NULL",
        "JMSCorrelationID IS NULL",
        "JMSType IS NULL",
        "JMSXDeliveryCount = 1",
        "JMSTimestamp = 0",
    ]:
        assert parse(text).matches(msg), text
    for text in ["JMSType = 'x'", "JMSType <> 'x'", "NOT JMSType = 'x'", "JMSCorrelationID LIKE '%'"]:
        assert parse(text).matches(msg) is False, text


def test_jmsx_delivery_count_property_wins_over_header():
    msg = _message(delivery_count=2)
    msg.set_property("JMSXDeliveryCount", 5)
    assert parse("JMSXDeliveryCount = 5").matches(msg)


def test_matches_values_unwraps_properties_and_delivery_mode():
    sel = parse("JMSDeliveryMode = 'PERSISTENT' AND color = 'red' AND n > 1")
    assert sel.matches_values(
        {"JMSDeliveryMode": DeliveryMode.PERSISTENT, "color": Property.of("red"), "n": Property.of(2)}
    )
    assert not sel.matches_values({"JMSDeliveryMode": "PERSISTENT", "color": "red"})
    assert sel.matches({"JMSDeliveryMode": "PERSISTENT", "color": "red", "n": 2})


def test_matches_is_strictly_boolean():
    msg = _message()
    for text in ["x = 1", "NOT x = 1", "TRUE AND x", "x LIKE 'a'"]:
        assert parse(text).matches(msg) is False
    assert parse("TRUE").matches(msg) is True


# ------------------------------------------------------------------ hypothesis

NUM_VARS = ["n1", "n2", "x"]
STR_VARS = ["s1", "s2", "x"]
BOOL_VARS = ["b1", "x"]
ALL_VARS = sorted(set(NUM_VARS + STR_VARS + BOOL_VARS))

# levels: 0 atom, 1 unary, 2 * /, 3 + -, 4 predicate, 5 NOT, 6 AND, 7 OR


class Frag:
    """A generated expression in two renderings: minimal parentheses and full parentheses."""

    def __init__(self, text: str, full: str, level: int):
        self.text, self.full, self.level = text, full, level


def _wrap(frag: Frag, max_level: int, force: bool = False) -> str:
    return f"({frag.text})" if force or frag.level > max_level else frag.text


def _kw(draw, word: str) -> str:
    return draw(st.sampled_from([word, word.lower(), word.capitalize()]))


def _ws(draw) -> str:
    return draw(st.sampled_from([" ", "  ", "\t", "\n"]))


def _maybe_paren(draw, frag: Frag) -> Frag:
    if frag.level > 0 and draw(st.integers(0, 5)) == 0:
        return Frag(f"({frag.text})", frag.full, 0)
    return frag


INT_LITS = ["0", "1", "2", "3", "7", "10", "-1", "-4", "0x1F", "010", "9223372036854775807", "123L"]
FLOAT_LITS = ["0.5", "1.5", "2.", ".25", "1E1", "-2.5", "3.0F", "1e-3", "7.5D", "0.0"]
STR_LITS = ["''", "'a'", "'b'", "'ab'", "'A'", "'it''s'", "'%'", "'a_b'", "'abc'"]
LIKE_PATTERNS = [
    ("'a%'", None), ("'%b'", None), ("'_'", None), ("'%'", None), ("'a_b'", None),
    ("'%a%b%'", None), ("'ab'", None), ("''", None), ("'!%%'", "'!'"), ("'a!_b'", "'!'"),
    ("'!!%'", "'!'"), ("'%''%'", None), ("'it''_'", None), ("'x%'", "'x'"),
]  # fmt: skip


@st.composite
def num_expr(draw, depth=3):
    choice = draw(st.integers(0, 5 if depth > 0 else 2))
    if choice == 0:
        lit = draw(st.sampled_from(INT_LITS + FLOAT_LITS))
        return Frag(lit, lit, 1 if lit.startswith("-") else 0)
    if choice in (1, 2):
        name = draw(st.sampled_from(NUM_VARS))
        return Frag(name, name, 0)
    if choice == 3:
        op = draw(st.sampled_from(["-", "+"]))
        sub = draw(num_expr(depth - 1))
        sub = _maybe_paren(draw, sub)
        # "- -1" needs the space; "--1" is also valid (no comments in selectors)
        text = f"{op} {_wrap(sub, 1)}"
        return Frag(text, f"({op} {sub.full})", 1)
    op = draw(st.sampled_from(["+", "-", "*", "/"]))
    level = 2 if op in "*/" else 3
    left = _maybe_paren(draw, draw(num_expr(depth - 1)))
    right = _maybe_paren(draw, draw(num_expr(depth - 1)))
    text = f"{_wrap(left, level)}{_ws(draw)}{op}{_ws(draw)}{_wrap(right, level - 1)}"
    return Frag(text, f"({left.full} {op} {right.full})", level)


@st.composite
def str_operand(draw):
    if draw(st.booleans()):
        name = draw(st.sampled_from(STR_VARS))
        return Frag(name, name, 0)
    lit = draw(st.sampled_from(STR_LITS))
    return Frag(lit, lit, 0)


@st.composite
def cond_expr(draw, depth=3):
    choice = draw(st.integers(0, 11 if depth > 0 else 8))
    if choice == 0:
        word = draw(st.sampled_from(["TRUE", "FALSE"]))
        lit = _kw(draw, word)
        return Frag(lit, word, 0)
    if choice == 1:
        name = draw(st.sampled_from(BOOL_VARS))
        return Frag(name, name, 0)
    if choice == 2:
        op = draw(st.sampled_from(["=", "<>", "<", "<=", ">", ">="]))
        left, right = draw(num_expr(depth)), draw(num_expr(depth))
        text = f"{_wrap(left, 3)} {op} {_wrap(right, 3)}"
        return Frag(text, f"({left.full} {op} {right.full})", 4)
    if choice == 3:
        op = draw(st.sampled_from(["=", "<>"]))
        left, right = draw(str_operand()), draw(str_operand())
        return Frag(f"{left.text} {op} {right.text}", f"({left.full} {op} {right.full})", 4)
    if choice == 4:
        neg = draw(st.booleans())
        v, lo, hi = draw(num_expr(depth - 1)), draw(num_expr(depth - 1)), draw(num_expr(depth - 1))
        kw = (_kw(draw, "NOT") + " " if neg else "") + _kw(draw, "BETWEEN")
        text = f"{_wrap(v, 3)} {kw} {_wrap(lo, 3)} {_kw(draw, 'AND')} {_wrap(hi, 3)}"
        full = f"({v.full} {'NOT ' if neg else ''}BETWEEN {lo.full} AND {hi.full})"
        return Frag(text, full, 4)
    if choice == 5:
        neg = draw(st.booleans())
        name = draw(st.sampled_from(STR_VARS))
        items = draw(st.lists(st.sampled_from(STR_LITS), min_size=1, max_size=4))
        kw = (_kw(draw, "NOT") + " " if neg else "") + _kw(draw, "IN")
        inner = ",".join(items)
        return Frag(f"{name} {kw} ({inner})", f"({name} {'NOT ' if neg else ''}IN ({inner}))", 4)
    if choice == 6:
        neg = draw(st.booleans())
        name = draw(st.sampled_from(STR_VARS))
        pattern, escape = draw(st.sampled_from(LIKE_PATTERNS))
        kw = (_kw(draw, "NOT") + " " if neg else "") + _kw(draw, "LIKE")
        esc = f" {_kw(draw, 'ESCAPE')} {escape}" if escape else ""
        esc_full = f" ESCAPE {escape}" if escape else ""
        return Frag(
            f"{name} {kw} {pattern}{esc}", f"({name} {'NOT ' if neg else ''}LIKE {pattern}{esc_full})", 4
        )
    if choice == 7:
        neg = draw(st.booleans())
        name = draw(st.sampled_from(ALL_VARS))
        text = f"{name} {_kw(draw, 'IS')} {_kw(draw, 'NOT') + ' ' if neg else ''}{_kw(draw, 'NULL')}"
        return Frag(text, f"({name} IS {'NOT ' if neg else ''}NULL)", 4)
    if choice == 8:
        op = draw(st.sampled_from(["=", "<>"]))
        left = draw(st.sampled_from(BOOL_VARS + ["TRUE", "FALSE"]))
        right = draw(st.sampled_from(BOOL_VARS + ["TRUE", "FALSE"]))
        return Frag(f"{left} {op} {right}", f"({left} {op} {right})", 4)
    if choice == 9:
        sub = _maybe_paren(draw, draw(cond_expr(depth - 1)))
        return Frag(f"{_kw(draw, 'NOT')} {_wrap(sub, 5)}", f"(NOT {sub.full})", 5)
    word, level = draw(st.sampled_from([("AND", 6), ("OR", 7)]))
    left = _maybe_paren(draw, draw(cond_expr(depth - 1)))
    right = _maybe_paren(draw, draw(cond_expr(depth - 1)))
    text = f"{_wrap(left, level)} {_kw(draw, word)} {_wrap(right, level - 1)}"
    return Frag(text, f"({left.full} {word} {right.full})", level)


LONGS = st.integers(min_value=-(2**63), max_value=2**63 - 1)
VALUES = st.one_of(
    st.none(),
    st.integers(-12, 12),
    LONGS,
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.5, 1.5, -2.5, 2.0, 10.0, 0.0, -0.0]),
    st.text(alphabet="ab_%'!A", max_size=4),
    st.sampled_from(["a", "ab", "abc", "it's", "%", "a_b", "!%x"]),
    st.booleans(),
)
ENVS = st.dictionaries(st.sampled_from(ALL_VARS), VALUES)

HYPO = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@HYPO
@given(cond_expr(), st.lists(ENVS, min_size=1, max_size=6))
def test_printed_selector_parses_back_and_evaluates_identically(frag, envs):
    original = parse(frag.text)
    printed = str(original)
    reparsed = parse(printed)
    assert reparsed == original
    assert str(reparsed) == printed  # the canonical form is a fixed point
    for env in envs:
        result = original.evaluate(env)
        assert result in (True, False, None)
        assert reparsed.evaluate(env) is result


@HYPO
@given(cond_expr(), st.lists(ENVS, min_size=1, max_size=6))
def test_precedence_minimal_parentheses_equal_full_parentheses(frag, envs):
    """The same tree written with as few parentheses as precedence allows, and fully bracketed."""
    minimal, full = parse(frag.text), parse(frag.full)
    for env in envs:
        assert minimal.evaluate(env) is full.evaluate(env), (frag.text, frag.full, env)


@HYPO
@given(cond_expr(), ENVS)
def test_message_evaluation_agrees_with_plain_environment(frag, env):
    sel = parse(frag.text)
    msg = TextMessage()
    for name, value in env.items():
        if value is not None:
            msg.set_property(name, value)
    assert sel.matches(msg) is (sel.evaluate(env) is True)
