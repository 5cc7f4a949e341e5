"""JMS message selectors: a pure parser and evaluator (no I/O).

A selector is the SQL-92 conditional-expression subset of Jakarta Messaging
§3.8.1.  ``parse(text)`` checks it completely (syntax and every type error that
can be seen without a message) and raises :class:`InvalidSelectorError` with the
0-based position of the problem; the returned :class:`Selector` is compiled to
Python closures once and then evaluated per message:

* ``Selector.matches(message)``  -> bool, True only when the expression is TRUE;
* ``Selector.evaluate(env)``     -> True / False / None (None = UNKNOWN) on a plain
  mapping identifier -> value (values: bool, int, float, str or None);
* ``Selector.matches_values(values)`` -> bool on such a mapping (Property objects
  and DeliveryMode values are unwrapped first);
* ``str(selector)`` / ``selector.to_text()`` -> canonical, fully parenthesised
  text that parses back to an equal selector (``parse(s.to_text()) == s``).

An empty, whitespace-only or ``None`` selector means "no selector": ``parse``
returns a selector that matches every message (``.empty`` is True, its text is
``''``); :func:`selector_for` returns ``None`` for it instead.

Grammar (EBNF; keywords are case-insensitive, identifiers case-sensitive)
-------------------------------------------------------------------------
::

    selector     = or_expr EOF ;                       (* must be boolean *)
    or_expr      = and_expr { "OR" and_expr } ;
    and_expr     = not_expr { "AND" not_expr } ;
    not_expr     = "NOT" not_expr | predicate ;
    predicate    = additive [ cmp_op additive
                            | [ "NOT" ] "BETWEEN" additive "AND" additive
                            | [ "NOT" ] "IN" "(" string { "," string } ")"
                            | [ "NOT" ] "LIKE" string [ "ESCAPE" string ]
                            | "IS" [ "NOT" ] "NULL" ] ;
    cmp_op       = "=" | "<>" | "<" | "<=" | ">" | ">=" ;
    additive     = multiplicative { ( "+" | "-" ) multiplicative } ;
    multiplicative = unary { ( "*" | "/" ) unary } ;
    unary        = ( "+" | "-" ) unary | primary ;
    primary      = "(" or_expr ")" | identifier | string | exact | approx
                 | "TRUE" | "FALSE" ;
    identifier   = java_ident_start { java_ident_part }  (* not a keyword *) ;
    string       = "'" { char | "''" } "'" ;
    exact        = decimal [ "L" | "l" ] | "0" ("x"|"X") hexdigit {hexdigit} [ "L" | "l" ]
                 | "0" octdigit {octdigit} [ "L" | "l" ] ;
    approx       = digits "." [digits] [exp] [fd] | "." digits [exp] [fd]
                 | digits exp [fd] | digits fd ;
    exp          = ("e"|"E") ["+"|"-"] digits ;   fd = "f" | "F" | "d" | "D" ;

Keywords: NOT AND OR BETWEEN LIKE IN IS NULL ESCAPE TRUE FALSE (only ASCII
spellings, any case).  Whitespace: space, tab, form feed, CR, LF.
The left operand of IN, LIKE and IS [NOT] NULL must be an identifier (spec).
Comparisons do not chain: ``a = b = c`` is an error, write ``(a = b) = c``.

Precedence (highest first)
--------------------------
==========  =====================================  =============
level       operators                              associativity
==========  =====================================  =============
1           unary ``+`` ``-``                      right
2           ``*`` ``/``                            left
3           binary ``+`` ``-``                     left
4           ``= <> < <= > >=``, [NOT] BETWEEN,     none
            [NOT] IN, [NOT] LIKE, IS [NOT] NULL
5           NOT                                    right
6           AND                                    left
7           OR                                     left
==========  =====================================  =============

Three-valued logic (U = UNKNOWN, i.e. NULL)
-------------------------------------------
::

    AND | T  F  U        OR | T  F  U        NOT |
    ----+---------       ---+---------       ----+--
     T  | T  F  U         T | T  T  T         T  | F
     F  | F  F  F         F | T  F  U         F  | T
     U  | U  F  U         U | T  U  U         U  | U

A selector selects a message only when it evaluates to TRUE.

Values and typing
-----------------
* Missing properties, and headers whose value is None, are NULL.  Any
  comparison or arithmetic with NULL is NULL/UNKNOWN; ``IS [NOT] NULL`` is
  never UNKNOWN.  ``x [NOT] IN (...)`` and ``x [NOT] LIKE ...`` with x NULL
  are UNKNOWN.
* ``a BETWEEN l AND h`` is exactly ``a >= l AND a <= h`` and
  ``a NOT BETWEEN l AND h`` is exactly ``a < l OR a > h`` (spec §3.8.1.2,
  SQL-92), each operand evaluated once; so NULL operands give UNKNOWN unless the
  other half already decides (``5 BETWEEN NULL AND 3`` is FALSE).
* Only like types compare; exact and approximate numbers are alike (Java
  numeric promotion: a long compared with a double is converted to double).
  A runtime type mismatch (string vs number, boolean vs number, string vs
  boolean) makes a comparison FALSE, as the spec says (so ``NOT (s = 1)`` with
  s a string is TRUE).  Strings and booleans only support ``=`` and ``<>``; an
  ordering comparison of two runtime strings/booleans is FALSE.
  Following the spec's stated equivalences, ``x IN (...)`` / ``x LIKE p`` on a
  non-string x is FALSE and their NOT forms are TRUE (NOT IN = NOT (x = .. OR
  ..)), while BETWEEN *and* NOT BETWEEN on a non-number are FALSE.
* An identifier used as a condition (``flag AND x > 1``) is TRUE/FALSE if its
  value is a boolean and UNKNOWN otherwise.  Arithmetic on a runtime
  non-number gives NULL.
* Static type errors are rejected by ``parse``: arithmetic, unary sign,
  BETWEEN or ``< <= > >=`` on a string/boolean literal or on a condition
  (``a + (b = 1)``); ``=``/``<>`` between operands of statically different
  types (``'a' = 1``, ``TRUE = 0``, ``JMSPriority = 'x'``); a non-boolean as a
  condition (the whole selector ``5``, ``x AND 3``); IN items that are not
  string literals, an empty IN list; a LIKE pattern that is not a string
  literal; an ESCAPE that is not exactly one character; an escape character in
  the pattern not followed by ``%``, ``_`` or itself (SQL-92 "invalid escape
  sequence"); ``NULL`` outside IS [NOT] NULL; numbers out of range.
  JMSPriority/JMSTimestamp are statically numeric, JMSDeliveryMode,
  JMSMessageID, JMSCorrelationID, JMSType statically strings.

Decisions
---------
* Integers are Java ``long``: 64-bit two's complement, ``+ - *`` wrap on
  overflow.  (int/short/byte properties are widened to long; we do not emulate
  32-bit int overflow.)  ``float`` properties and ``F`` literals are float32
  values held as doubles; all approximate arithmetic is double.
* Division: long / long truncates toward zero (Java; ``-7 / 2 = -3``, ``Long.MIN
  / -1`` wraps).  Integer division by zero (Java: ArithmeticException) gives
  NULL, so the comparison using it is UNKNOWN.  Double division by zero follows
  IEEE 754 / Java: ±Infinity, ``0.0 / 0.0`` is NaN (NaN compares unequal to
  everything, itself included).
* Literals: decimal longs (``57``, ``-957``, ``+62``; ``L`` suffix allowed);
  hex ``0x1F`` and octal ``017`` (Java syntax, so a leading 0 means octal) in
  0 .. 2**63-1; ``-9223372036854775808`` is accepted.  Approximate: ``7E3``,
  ``-57.9E2``, ``7.``, ``.5``, with optional ``F``/``D`` suffix (``F`` rounds
  to float32).  Out-of-range numbers are rejected.
* Header identifiers: JMSDeliveryMode ('PERSISTENT' / 'NON_PERSISTENT'),
  JMSPriority, JMSMessageID, JMSTimestamp, JMSCorrelationID, JMSType come from
  the message headers.  JMSDestination, JMSReplyTo, JMSExpiration,
  JMSRedelivered and JMSDeliveryTime are not selectable in JMS: they are always
  NULL (in ``matches`` and ``evaluate`` alike).  Every other identifier,
  including JMSX* and JMS_*, is a property looked up by exact name;
  JMSXDeliveryCount falls back to the message's delivery count when it is not
  set as a property.
* ``_`` matches one Unicode code point (Java: one UTF-16 unit); ``%`` any
  sequence, newlines included.  String equality is exact and case-sensitive.
* Nesting is limited (parentheses/NOT/signs 50 deep, tree depth 200) so that
  a hostile selector cannot exhaust the stack; AND/OR chains are flat.

Speed: on CPython 3.11 the selector ``JMSPriority > 4 AND color IN ('red','blue')
AND weight BETWEEN 1 AND 10`` takes about 0.9 µs per ``matches(message)`` when
all three terms are evaluated (0.4 µs when the first is false); parsing it
(done once per consumer) takes about 0.25 ms.
"""

from __future__ import annotations

import functools
import math
import operator
import struct
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from .errors import JMSException
from .message import DeliveryMode, Message
from .values import Property

__all__ = ["parse", "selector_for", "Selector", "HEADER_FIELDS", "NULL_HEADERS", "InvalidSelectorError"]


class InvalidSelectorError(JMSException):
    """A message selector that does not parse; ``position`` is the 0-based offset of the problem."""

    def __init__(self, message: str, position: int | None = None, selector: str | None = None):
        self.position = position
        self.selector = selector
        where = f" at position {position}" if position is not None else ""
        super().__init__(f"invalid selector{where}: {message}")


# ---------------------------------------------------------------- constants

KEYWORDS = frozenset(
    {"NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "NULL", "ESCAPE", "TRUE", "FALSE"}
)
_WHITESPACE = " \t\f\r\n"
_LONG_MIN = -(2**63)
_LONG_MAX = 2**63 - 1
_MAX_NESTING = 50
_MAX_DEPTH = 200

#: selectable headers and their static type ('num' or 'str')
HEADER_FIELDS: dict[str, str] = {
    "JMSDeliveryMode": "str",
    "JMSPriority": "num",
    "JMSMessageID": "str",
    "JMSTimestamp": "num",
    "JMSCorrelationID": "str",
    "JMSType": "str",
}
#: headers JMS does not allow in selectors: always NULL
NULL_HEADERS = frozenset(
    {"JMSDestination", "JMSReplyTo", "JMSExpiration", "JMSRedelivered", "JMSDeliveryTime"}
)

_DELIVERY_MODE_NAMES: dict[Any, str] = {
    DeliveryMode.PERSISTENT: "PERSISTENT",
    DeliveryMode.NON_PERSISTENT: "NON_PERSISTENT",
    "PERSISTENT": "PERSISTENT",
    "NON_PERSISTENT": "NON_PERSISTENT",
}

# ---------------------------------------------------------------- AST


@dataclass(frozen=True)
class Node:
    pos: int = field(compare=False, repr=False, kw_only=True, default=0)


@dataclass(frozen=True)
class Lit(Node):
    kind: str  # 'int' | 'float' | 'str' | 'bool'
    value: Any


@dataclass(frozen=True)
class Ident(Node):
    name: str


@dataclass(frozen=True)
class Unary(Node):
    op: str  # '+' | '-'
    operand: Node


@dataclass(frozen=True)
class Arith(Node):
    op: str  # '+' '-' '*' '/'
    left: Node
    right: Node


@dataclass(frozen=True)
class Cmp(Node):
    op: str  # '=' '<>' '<' '<=' '>' '>='
    left: Node
    right: Node


@dataclass(frozen=True)
class Between(Node):
    operand: Node
    low: Node
    high: Node
    negated: bool


@dataclass(frozen=True)
class In(Node):
    ident: Ident
    values: tuple[str, ...]
    negated: bool


@dataclass(frozen=True)
class Like(Node):
    ident: Ident
    pattern: str
    escape: Optional[str]
    negated: bool


@dataclass(frozen=True)
class IsNull(Node):
    ident: Ident
    negated: bool


@dataclass(frozen=True)
class Not(Node):
    operand: Node


@dataclass(frozen=True)
class And(Node):
    operands: tuple[Node, ...]


@dataclass(frozen=True)
class Or(Node):
    operands: tuple[Node, ...]


def static_type(node: Node) -> str:
    """'num', 'str', 'bool' or 'any' (an identifier of unknown type)."""
    if isinstance(node, Lit):
        return {"int": "num", "float": "num", "str": "str", "bool": "bool"}[node.kind]
    if isinstance(node, Ident):
        return HEADER_FIELDS.get(node.name, "any")
    if isinstance(node, (Unary, Arith)):
        return "num"
    return "bool"


_TYPE_WORDS = {"num": "a number", "str": "a string", "bool": "a boolean", "any": "a value"}

# ---------------------------------------------------------------- printing


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _float_text(v: float) -> str:
    text = repr(v)
    if not any(c in text for c in ".eE"):
        text += ".0"
    return text


def to_text(node: Node) -> str:
    """Canonical, fully parenthesised text of ``node``."""
    if isinstance(node, Lit):
        if node.kind == "str":
            return _quote(node.value)
        if node.kind == "bool":
            return "TRUE" if node.value else "FALSE"
        if node.kind == "float":
            return _float_text(node.value)
        return str(node.value)
    if isinstance(node, Ident):
        return node.name
    if isinstance(node, Unary):
        return f"({node.op}{to_text(node.operand)})"
    if isinstance(node, (Arith, Cmp)):
        return f"({to_text(node.left)} {node.op} {to_text(node.right)})"
    if isinstance(node, Between):
        neg = "NOT " if node.negated else ""
        return f"({to_text(node.operand)} {neg}BETWEEN {to_text(node.low)} AND {to_text(node.high)})"
    if isinstance(node, In):
        neg = "NOT " if node.negated else ""
        items = ", ".join(_quote(v) for v in node.values)
        return f"({node.ident.name} {neg}IN ({items}))"
    if isinstance(node, Like):
        neg = "NOT " if node.negated else ""
        esc = f" ESCAPE {_quote(node.escape)}" if node.escape is not None else ""
        return f"({node.ident.name} {neg}LIKE {_quote(node.pattern)}{esc})"
    if isinstance(node, IsNull):
        neg = "NOT " if node.negated else ""
        return f"({node.ident.name} IS {neg}NULL)"
    if isinstance(node, Not):
        return f"(NOT {to_text(node.operand)})"
    if isinstance(node, And):
        return "(" + " AND ".join(to_text(o) for o in node.operands) + ")"
    if isinstance(node, Or):
        return "(" + " OR ".join(to_text(o) for o in node.operands) + ")"
    raise TypeError(f"not a selector node: {node!r}")


# ---------------------------------------------------------------- lexer


@dataclass(frozen=True)
class Token:
    kind: str  # 'ID' 'KW' 'STR' 'INT' 'FLOAT' 'OP' 'EOF'
    value: Any
    pos: int
    end: int


def _is_ident_start(c: str) -> bool:
    if c.isascii():
        return c.isalpha() or c == "_" or c == "$"
    cat = unicodedata.category(c)
    return cat[0] == "L" or cat in ("Nl", "Sc", "Pc")


def _is_ident_part(c: str) -> bool:
    if c.isascii():
        return c.isalnum() or c == "_" or c == "$"
    cat = unicodedata.category(c)
    return cat[0] == "L" or cat in ("Nl", "Sc", "Pc", "Nd", "Mn", "Mc", "Cf")


_OPERATORS = ("<>", "<=", ">=", "=", "<", ">", "+", "-", "*", "/", "(", ")", ",")
_BAD_OPERATORS = ("!=", "==", "&&", "||", "!", "&", "|", "^", "%")


def _to_float32(v: float) -> float:
    return struct.unpack("<f", struct.pack("<f", v))[0]


def tokenize(text: str) -> list[Token]:
    def fail(msg: str, pos: int) -> InvalidSelectorError:
        return InvalidSelectorError(msg, pos, text)

    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in _WHITESPACE:
            i += 1
            continue
        start = i
        if c == "'":
            parts = []
            i += 1
            while True:
                j = text.find("'", i)
                if j < 0:
                    raise fail("unterminated string literal", start)
                parts.append(text[i:j])
                if j + 1 < n and text[j + 1] == "'":
                    parts.append("'")
                    i = j + 2
                    continue
                i = j + 1
                break
            tokens.append(Token("STR", "".join(parts), start, i))
            continue
        if c.isdigit() and c.isascii() or (c == "." and i + 1 < n and text[i + 1].isascii() and text[i + 1].isdigit()):
            tokens.append(_lex_number(text, i, fail))
            i = tokens[-1].end
            continue
        if _is_ident_start(c):
            i += 1
            while i < n and _is_ident_part(text[i]):
                i += 1
            word = text[start:i]
            up = word.upper()
            if word.isascii() and up in KEYWORDS:
                tokens.append(Token("KW", up, start, i))
            else:
                tokens.append(Token("ID", word, start, i))
            continue
        for bad in _BAD_OPERATORS:
            if text.startswith(bad, i):
                hint = {"!=": " (use <>)", "==": " (use =)", "&&": " (use AND)", "||": " (use OR)", "!": " (use NOT)"}
                raise fail(f"unknown operator {bad!r}{hint.get(bad, '')}", i)
        for op in _OPERATORS:
            if text.startswith(op, i):
                tokens.append(Token("OP", op, start, i + len(op)))
                i += len(op)
                break
        else:
            raise fail(f"unexpected character {c!r}", i)
    tokens.append(Token("EOF", None, n, n))
    return tokens


def _lex_number(text: str, i: int, fail) -> Token:
    n = len(text)
    start = i
    value: int | float

    def digits(j: int, ok: str) -> int:
        while j < n and text[j] in ok:
            j += 1
        return j

    dec = "0123456789"
    if text.startswith(("0x", "0X"), i):
        j = digits(i + 2, "0123456789abcdefABCDEF")
        if j == i + 2:
            raise fail("hexadecimal literal needs digits after 0x", start)
        if len(text[i + 2 : j].lstrip("0")) > 16:
            raise fail(f"numeric literal {text[start:j]} is out of the range of long", start)
        value = int(text[i + 2 : j], 16)
        if j < n and text[j] in "lL":
            j += 1
        kind = "int"
    else:
        j = digits(i, dec)
        int_part = text[i:j]
        is_float = False
        if j < n and text[j] == ".":
            is_float = True
            j = digits(j + 1, dec)
        if j < n and text[j] in "eE":
            k = j + 1
            if k < n and text[k] in "+-":
                k += 1
            m = digits(k, dec)
            if m == k:
                raise fail("malformed exponent in numeric literal", start)
            is_float = True
            j = m
        float32 = False
        if j < n and text[j] in "fFdD":
            float32 = text[j] in "fF"
            is_float = True
            lexeme = text[start:j]
            j += 1
        else:
            lexeme = text[start:j]
        if is_float:
            value = float(lexeme)
            if math.isinf(value):
                raise fail(f"numeric literal {lexeme} is out of the range of double", start)
            if float32:
                try:
                    value = _to_float32(value)
                except OverflowError:
                    raise fail(f"numeric literal {lexeme} is out of the range of float", start) from None
            kind = "float"
        else:
            # checked before int(): Python refuses to convert over 4,300 digits (ValueError)
            if len(int_part.lstrip("0")) > 22:
                raise fail(f"numeric literal {text[start:j]} is out of the range of long", start)
            if len(int_part) > 1 and int_part[0] == "0":
                if any(ch in "89" for ch in int_part):
                    raise fail(f"invalid octal literal {int_part}", start)
                value = int(int_part, 8)
            else:
                value = int(int_part)
            if j < n and text[j] in "lL":
                j += 1
            kind = "int"
    if j < n and _is_ident_part(text[j]) or (j < n and text[j] == "."):
        raise fail(f"malformed numeric literal {text[start:j + 1]!r}", start)
    if kind == "int" and value > 2**63:
        raise fail(f"numeric literal {text[start:j]} is out of the range of long", start)
    return Token("INT" if kind == "int" else "FLOAT", value, start, j)


# ---------------------------------------------------------------- parser


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0
        self.nesting = 0

    # -- helpers
    def fail(self, msg: str, pos: int) -> InvalidSelectorError:
        return InvalidSelectorError(msg, pos, self.text)

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def advance(self) -> Token:
        t = self.tokens[self.i]
        self.i += 1
        return t

    def is_kw(self, *words: str) -> bool:
        t = self.tokens[self.i]
        return t.kind == "KW" and t.value in words

    def is_op(self, *ops: str) -> bool:
        t = self.tokens[self.i]
        return t.kind == "OP" and t.value in ops

    def describe(self, t: Token) -> str:
        if t.kind == "EOF":
            return "end of selector"
        return repr(self.text[t.pos : t.end])

    def unexpected(self, expected: str | None = None) -> InvalidSelectorError:
        t = self.tok
        msg = f"unexpected {self.describe(t)}"
        if expected:
            msg += f", expected {expected}"
        return self.fail(msg, t.pos)

    def enter(self, pos: int) -> None:
        self.nesting += 1
        if self.nesting > _MAX_NESTING:
            raise self.fail(f"selector nested more than {_MAX_NESTING} levels deep", pos)

    # -- type checks
    def need_cond(self, node: Node, what: str) -> Node:
        t = static_type(node)
        if t not in ("bool", "any"):
            raise self.fail(f"{what} must be a boolean expression, not {_TYPE_WORDS[t]}", node.pos)
        return node

    def need_num(self, node: Node, what: str) -> Node:
        t = static_type(node)
        if t not in ("num", "any"):
            raise self.fail(f"{what} must be numeric, not {_TYPE_WORDS[t]}", node.pos)
        return node

    def need_ident(self, node: Node, op: str, op_pos: int) -> Ident:
        if not isinstance(node, Ident):
            raise self.fail(f"the left operand of {op} must be an identifier", node.pos)
        return node

    # -- grammar
    def selector(self) -> Node:
        node = self.or_expr()
        if self.tok.kind != "EOF":
            if self.is_op(*_CMP_OPS):
                raise self.fail("comparisons cannot be chained; use parentheses", self.tok.pos)
            raise self.unexpected("AND, OR or end of selector")
        return self.need_cond(node, "a selector")

    def or_expr(self) -> Node:
        first = self.and_expr()
        items = [first]
        while self.is_kw("OR"):
            self.advance()
            items.append(self.and_expr())
        if len(items) == 1:
            return first
        for it in items:
            self.need_cond(it, "an operand of OR")
        return Or(tuple(items), pos=first.pos)

    def and_expr(self) -> Node:
        first = self.not_expr()
        items = [first]
        while self.is_kw("AND"):
            self.advance()
            items.append(self.not_expr())
        if len(items) == 1:
            return first
        for it in items:
            self.need_cond(it, "an operand of AND")
        return And(tuple(items), pos=first.pos)

    def not_expr(self) -> Node:
        if self.is_kw("NOT"):
            t = self.advance()
            self.enter(t.pos)
            operand = self.not_expr()
            self.nesting -= 1
            self.need_cond(operand, "the operand of NOT")
            return Not(operand, pos=t.pos)
        return self.predicate()

    def predicate(self) -> Node:
        left = self.additive()
        t = self.tok
        if t.kind == "OP" and t.value in _CMP_OPS:
            self.advance()
            right = self.additive()
            self.check_comparison(t, left, right)
            node = Cmp(t.value, left, right, pos=left.pos)
            if self.is_op(*_CMP_OPS):
                raise self.fail("comparisons cannot be chained; use parentheses", self.tok.pos)
            return node
        if t.kind != "KW":
            return left
        negated = False
        if t.value == "NOT":
            nxt = self.tokens[self.i + 1]
            if not (nxt.kind == "KW" and nxt.value in ("BETWEEN", "IN", "LIKE")):
                self.advance()
                raise self.unexpected("BETWEEN, IN or LIKE after NOT")
            self.advance()
            negated = True
            t = self.tok
        if t.value == "BETWEEN":
            self.advance()
            low = self.additive()
            if not self.is_kw("AND"):
                raise self.unexpected("AND of BETWEEN")
            self.advance()
            high = self.additive()
            self.need_num(left, "the operand of BETWEEN")
            self.need_num(low, "the lower bound of BETWEEN")
            self.need_num(high, "the upper bound of BETWEEN")
            return Between(left, low, high, negated, pos=left.pos)
        if t.value == "IN":
            ident = self.need_ident(left, "IN", t.pos)
            self.need_string_ident(ident, "IN")
            self.advance()
            if not self.is_op("("):
                raise self.unexpected("'(' after IN")
            self.advance()
            values: list[str] = []
            while True:
                item = self.tok
                if item.kind != "STR":
                    if item.kind == "OP" and item.value == ")" and not values:
                        raise self.fail("IN list must not be empty", item.pos)
                    if item.kind == "EOF":
                        raise self.unexpected("a string literal")
                    raise self.fail(
                        f"IN list items must be string literals, not {self.describe(item)}", item.pos
                    )
                self.advance()
                values.append(item.value)
                if self.is_op(","):
                    self.advance()
                    continue
                if self.is_op(")"):
                    self.advance()
                    break
                raise self.unexpected("',' or ')' in IN list")
            return In(ident, tuple(values), negated, pos=left.pos)
        if t.value == "LIKE":
            ident = self.need_ident(left, "LIKE", t.pos)
            self.need_string_ident(ident, "LIKE")
            self.advance()
            pat = self.tok
            if pat.kind != "STR":
                raise self.fail(
                    f"LIKE pattern must be a string literal, not {self.describe(pat)}", pat.pos
                )
            self.advance()
            escape = None
            esc_tok = None
            if self.is_kw("ESCAPE"):
                self.advance()
                esc_tok = self.tok
                if esc_tok.kind != "STR":
                    raise self.fail(
                        f"ESCAPE must be a single-character string literal, not {self.describe(esc_tok)}",
                        esc_tok.pos,
                    )
                if len(esc_tok.value) != 1:
                    raise self.fail(
                        f"ESCAPE must be a single character, got {len(esc_tok.value)} characters",
                        esc_tok.pos,
                    )
                escape = esc_tok.value
                self.advance()
            try:
                _like_parts(pat.value, escape)
            except _BadEscape as e:
                raise self.fail(str(e), _string_char_pos(self.text, pat.pos, e.index)) from None
            return Like(ident, pat.value, escape, negated, pos=left.pos)
        if t.value == "IS" and not negated:
            ident = self.need_ident(left, "IS NULL", t.pos)
            self.advance()
            neg = False
            if self.is_kw("NOT"):
                self.advance()
                neg = True
            if not self.is_kw("NULL"):
                raise self.unexpected("NULL")
            self.advance()
            return IsNull(ident, neg, pos=left.pos)
        return left

    def need_string_ident(self, ident: Ident, op: str) -> None:
        st = static_type(ident)
        if st not in ("str", "any"):
            raise self.fail(f"{op} needs a string operand; {ident.name} is {_TYPE_WORDS[st]}", ident.pos)

    def check_comparison(self, op: Token, left: Node, right: Node) -> None:
        if op.value in ("=", "<>"):
            lt, rt = static_type(left), static_type(right)
            if lt != "any" and rt != "any" and lt != rt:
                raise self.fail(
                    f"cannot compare {_TYPE_WORDS[lt]} with {_TYPE_WORDS[rt]} using {op.value}", op.pos
                )
        else:
            for side in (left, right):
                st = static_type(side)
                if st not in ("num", "any"):
                    raise self.fail(
                        f"{op.value} needs numeric operands ({_TYPE_WORDS[st]} only supports = and <>)",
                        side.pos,
                    )

    def additive(self) -> Node:
        left = self.multiplicative()
        while self.is_op("+", "-"):
            t = self.advance()
            right = self.multiplicative()
            self.need_num(left, f"the left operand of {t.value}")
            self.need_num(right, f"the right operand of {t.value}")
            left = Arith(t.value, left, right, pos=left.pos)
        return left

    def multiplicative(self) -> Node:
        left = self.unary()
        while self.is_op("*", "/"):
            t = self.advance()
            right = self.unary()
            self.need_num(left, f"the left operand of {t.value}")
            self.need_num(right, f"the right operand of {t.value}")
            left = Arith(t.value, left, right, pos=left.pos)
        return left

    def unary(self) -> Node:
        node = self._unary()
        self._check_long(node)
        return node

    def _unary(self) -> Node:
        if self.is_op("+", "-"):
            t = self.advance()
            self.enter(t.pos)
            operand = self._unary()
            self.nesting -= 1
            if isinstance(operand, Lit) and operand.kind in ("int", "float"):
                value = -operand.value if t.value == "-" else operand.value
                node = Lit(operand.kind, value, pos=t.pos)
                if operand.kind == "int" and operand.value == 2**63 and t.value == "-":
                    return node  # Long.MIN_VALUE
                self._check_long(operand)
                return node
            self._check_long(operand)
            self.need_num(operand, f"the operand of unary {t.value}")
            return Unary(t.value, operand, pos=t.pos)
        return self.primary()

    def _check_long(self, node: Node) -> None:
        if isinstance(node, Lit) and node.kind == "int" and not _LONG_MIN <= node.value <= _LONG_MAX:
            raise self.fail(f"numeric literal {node.value} is out of the range of long", node.pos)

    def primary(self) -> Node:
        t = self.tok
        if t.kind == "OP" and t.value == "(":
            self.advance()
            self.enter(t.pos)
            node = self.or_expr()
            self.nesting -= 1
            if not self.is_op(")"):
                if self.is_op(*_CMP_OPS):
                    raise self.fail("comparisons cannot be chained; use parentheses", self.tok.pos)
                raise self.unexpected("')'")
            self.advance()
            return node
        if t.kind == "STR":
            self.advance()
            return Lit("str", t.value, pos=t.pos)
        if t.kind == "INT":
            self.advance()
            return Lit("int", t.value, pos=t.pos)
        if t.kind == "FLOAT":
            self.advance()
            return Lit("float", t.value, pos=t.pos)
        if t.kind == "ID":
            self.advance()
            return Ident(t.value, pos=t.pos)
        if t.kind == "KW":
            if t.value in ("TRUE", "FALSE"):
                self.advance()
                return Lit("bool", t.value == "TRUE", pos=t.pos)
            if t.value == "NULL":
                raise self.fail("NULL can only be used in IS NULL / IS NOT NULL", t.pos)
            raise self.fail(f"unexpected keyword {t.value}; a value was expected", t.pos)
        if t.kind == "EOF":
            raise self.fail("unexpected end of selector; a value was expected", t.pos)
        raise self.fail(f"unexpected {self.describe(t)}; a value was expected", t.pos)


_CMP_OPS = ("=", "<>", "<", "<=", ">", ">=")


def _depth(node: Node) -> int:
    stack = [(node, 1)]
    best = 0
    while stack:
        n, d = stack.pop()
        best = max(best, d)
        for child in _children(n):
            stack.append((child, d + 1))
    return best


def _children(n: Node) -> tuple[Node, ...]:
    if isinstance(n, Unary):
        return (n.operand,)
    if isinstance(n, (Arith, Cmp)):
        return (n.left, n.right)
    if isinstance(n, Between):
        return (n.operand, n.low, n.high)
    if isinstance(n, (In, Like, IsNull)):
        return (n.ident,)
    if isinstance(n, Not):
        return (n.operand,)
    if isinstance(n, (And, Or)):
        return n.operands
    return ()


# ---------------------------------------------------------------- LIKE


class _BadEscape(ValueError):
    def __init__(self, msg: str, index: int):
        super().__init__(msg)
        self.index = index


def _like_parts(pattern: str, escape: Optional[str]) -> list[tuple[str, str]]:
    """Split a LIKE pattern into ('lit', text) / ('any', '') / ('one', '') parts."""
    parts: list[tuple[str, str]] = []
    lit: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if escape is not None and c == escape:
            if i + 1 >= n:
                raise _BadEscape("escape character at the end of the LIKE pattern", i)
            nxt = pattern[i + 1]
            if nxt not in ("%", "_", escape):
                raise _BadEscape(
                    f"escape character must be followed by '%', '_' or itself, not {nxt!r}", i
                )
            lit.append(nxt)
            i += 2
            continue
        if c in "%_":
            if lit:
                parts.append(("lit", "".join(lit)))
                lit = []
            if c == "%":
                if not parts or parts[-1][0] != "any":
                    parts.append(("any", ""))
            else:
                parts.append(("one", ""))
        else:
            lit.append(c)
        i += 1
    if lit:
        parts.append(("lit", "".join(lit)))
    return parts


def _string_char_pos(text: str, quote_pos: int, index: int) -> int:
    """Source offset of character ``index`` of the string literal opening at ``quote_pos``."""
    pos = quote_pos + 1
    for _ in range(index):
        pos += 2 if text[pos] == "'" else 1
    return pos


def _like_matcher(pattern: str, escape: Optional[str]) -> Callable[[str], bool]:
    parts = _like_parts(pattern, escape)
    kinds = [k for k, _ in parts]
    if not parts:
        return lambda s: s == ""
    if kinds == ["lit"]:
        lit = parts[0][1]
        return lambda s: s == lit
    if kinds == ["any"]:
        return lambda s: True
    if kinds == ["lit", "any"]:
        lit = parts[0][1]
        return lambda s: s.startswith(lit)
    if kinds == ["any", "lit"]:
        lit = parts[1][1]
        return lambda s: s.endswith(lit)
    if kinds == ["any", "lit", "any"]:
        lit = parts[1][1]
        return lambda s: lit in s
    return _segments_matcher(parts)


def _segments_matcher(parts: list[tuple[str, str]]) -> Callable[[str], bool]:
    """The general case without backtracking (a regex's ``.*`` backtracks exponentially on
    ``%a%a%a%b``): the pattern is segments of literals and ``_`` separated by ``%``; the
    first segment is anchored at the start, the last at the end, and each middle one taken
    at its leftmost match, which is never worse than a later one.  O(len(s) * len(pattern))."""
    segments: list[list[tuple[str, str]]] = [[]]
    for kind, text in parts:
        if kind == "any":
            segments.append([])
        elif kind == "lit":
            segments[-1].extend(("lit", c) for c in text)
        else:
            segments[-1].append(("one", ""))
    seg_texts = ["".join(c if k == "lit" else "\0" for k, c in seg) for seg in segments]
    wild = [[k == "one" for k, _ in seg] for seg in segments]

    def fits(s: str, at: int, i: int) -> bool:
        text, w = seg_texts[i], wild[i]
        return all(w[j] or s[at + j] == text[j] for j in range(len(text)))

    def find(s: str, start: int, stop: int, i: int) -> int:
        n = len(seg_texts[i])
        if not any(wild[i]):
            return s.find(seg_texts[i], start, stop)
        for at in range(start, stop - n + 1):
            if fits(s, at, i):
                return at
        return -1

    last = len(segments) - 1

    def match(s: str) -> bool:
        first_len, last_len = len(seg_texts[0]), len(seg_texts[last])
        if last == 0:
            return len(s) == first_len and fits(s, 0, 0)
        if len(s) < first_len + last_len:
            return False
        if not fits(s, 0, 0) or not fits(s, len(s) - last_len, last):
            return False
        pos, stop = first_len, len(s) - last_len
        for i in range(1, last):
            at = find(s, pos, stop, i)
            if at < 0:
                return False
            pos = at + len(seg_texts[i])
        return True

    return match


# ---------------------------------------------------------------- evaluation

_NUM_TYPES = (int, float)


def _kind(v: Any) -> Optional[str]:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "num"
    if isinstance(v, str):
        return "str"
    return None


def _num(v: Any) -> Any:
    """``v`` as a plain int/float if it is a number (not a bool), else None."""
    t = type(v)
    if t is int or t is float:
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if isinstance(v, float) else int(v)


def _wrap(v: int) -> int:
    if _LONG_MIN <= v <= _LONG_MAX:
        return v
    return ((v - _LONG_MIN) % 2**64) + _LONG_MIN


def _arith(op: str, a: Any, b: Any) -> Any:
    """Java long/double arithmetic; NULL (None) for NULL or non-numeric operands."""
    a = _num(a)
    if a is None:
        return None
    b = _num(b)
    if b is None:
        return None
    if type(a) is int and type(b) is int:
        if op == "+":
            return _wrap(a + b)
        if op == "-":
            return _wrap(a - b)
        if op == "*":
            return _wrap(a * b)
        if b == 0:
            return None  # Java: ArithmeticException -> UNKNOWN
        q = abs(a) // abs(b)
        return _wrap(-q if (a < 0) != (b < 0) else q)
    a = float(a)
    b = float(b)
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0.0:
        if a == 0.0 or a != a:
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _compare(op: str, a: Any, b: Any) -> Optional[bool]:
    """Spec comparison: NULL -> None, type mismatch -> False, long vs double promoted."""
    if a is None or b is None:
        return None
    ta, tb = type(a), type(b)
    if ta is not tb or ta not in (int, float, str, bool):
        ka, kb = _kind(a), _kind(b)
        if ka is None or ka != kb:
            return False
        if ka == "num":
            a, b = _num(a), _num(b)
            if type(a) is not type(b):
                a, b = float(a), float(b)
        elif ka == "str":
            a, b = str(a), str(b)
        else:
            a, b = bool(a), bool(b)
        ta = type(a)
    if op == "=":
        return a == b
    if op == "<>":
        return a != b
    if ta is str or ta is bool:
        return False  # strings and booleans only support = and <>
    if op == "<":
        return a < b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    return a >= b


Leaf = Callable[[str], Callable[[Any], Any]]
Fn = Callable[[Any], Any]


def _compile(node: Node, leaf: Leaf, cond: bool) -> Fn:
    """Closure computing ``node`` from the evaluation context.

    ``cond`` is True where a condition is needed: an identifier then yields
    its value only when it is a boolean (else None = UNKNOWN).
    """
    if isinstance(node, Lit):
        v = node.value
        return lambda ctx: v
    if isinstance(node, Ident):
        get = leaf(node.name)
        if not cond:
            return get

        def cond_ident(ctx, get=get):
            v = get(ctx)
            return v if v is True or v is False else None

        return cond_ident
    if isinstance(node, Unary):
        f = _compile(node.operand, leaf, False)
        if node.op == "-":

            def neg(ctx):
                v = _num(f(ctx))
                if v is None:
                    return None
                return _wrap(-v) if type(v) is int else -v

            return neg

        def pos(ctx):
            return _num(f(ctx))

        return pos
    if isinstance(node, Arith):
        f = _compile(node.left, leaf, False)
        g = _compile(node.right, leaf, False)
        op = node.op
        return lambda ctx: _arith(op, f(ctx), g(ctx))
    if isinstance(node, Cmp):
        return _compile_cmp(node, leaf)
    if isinstance(node, Between):
        return _compile_between(node, leaf)
    if isinstance(node, In):
        get = leaf(node.ident.name)
        values = frozenset(node.values)
        hit = not node.negated

        def in_(ctx):
            v = get(ctx)
            if type(v) is str:
                return (v in values) is hit
            if v is None:
                return None
            if isinstance(v, str):
                return (str(v) in values) is hit
            return not hit  # mismatch: IN false, NOT IN true

        return in_
    if isinstance(node, Like):
        get = leaf(node.ident.name)
        match = _like_matcher(node.pattern, node.escape)
        hit = not node.negated

        def like(ctx):
            v = get(ctx)
            if type(v) is str:
                return bool(match(v)) is hit
            if v is None:
                return None
            if isinstance(v, str):
                return bool(match(str(v))) is hit
            return not hit  # mismatch: LIKE false, NOT LIKE true

        return like
    if isinstance(node, IsNull):
        get = leaf(node.ident.name)
        if node.negated:
            return lambda ctx: get(ctx) is not None
        return lambda ctx: get(ctx) is None
    if isinstance(node, Not):
        f = _compile(node.operand, leaf, True)

        def not_(ctx):
            v = f(ctx)
            return None if v is None else not v

        return not_
    if isinstance(node, And):
        fs = tuple(_compile(o, leaf, True) for o in node.operands)
        if len(fs) == 2:
            f, g = fs

            def and2(ctx):
                a = f(ctx)
                if a is False:
                    return False
                b = g(ctx)
                if b is False:
                    return False
                return None if a is None or b is None else True

            return and2

        if len(fs) == 3:
            f, g, h = fs

            def and3(ctx):
                a = f(ctx)
                if a is False:
                    return False
                b = g(ctx)
                if b is False:
                    return False
                c = h(ctx)
                if c is False:
                    return False
                return None if a is None or b is None or c is None else True

            return and3

        def and_n(ctx):
            unknown = False
            for f in fs:
                v = f(ctx)
                if v is False:
                    return False
                if v is None:
                    unknown = True
            return None if unknown else True

        return and_n
    if isinstance(node, Or):
        fs = tuple(_compile(o, leaf, True) for o in node.operands)
        if len(fs) == 2:
            f, g = fs

            def or2(ctx):
                a = f(ctx)
                if a is True:
                    return True
                b = g(ctx)
                if b is True:
                    return True
                return None if a is None or b is None else False

            return or2

        def or_n(ctx):
            unknown = False
            for f in fs:
                v = f(ctx)
                if v is True:
                    return True
                if v is None:
                    unknown = True
            return None if unknown else False

        return or_n
    raise TypeError(f"not a selector node: {node!r}")


def _compile_cmp(node: Cmp, leaf: Leaf) -> Fn:
    op = node.op
    f = _compile(node.left, leaf, False)
    right = node.right
    # fast path: <expression> op <numeric literal>
    if isinstance(right, Lit) and right.kind in ("int", "float") and op in ("<", "<=", ">", ">=", "=", "<>"):
        c = right.value
        c_float = float(c)
        pyop = {
            "<": operator.lt,
            "<=": operator.le,
            ">": operator.gt,
            ">=": operator.ge,
            "=": operator.eq,
            "<>": operator.ne,
        }[op]
        c_is_int = right.kind == "int"

        def cmp_num_const(ctx):
            a = f(ctx)
            t = type(a)
            if t is int:
                return pyop(a, c) if c_is_int else pyop(float(a), c)
            if t is float:
                return pyop(a, c_float)
            if a is None:
                return None
            return _compare(op, a, c)

        return cmp_num_const
    if isinstance(right, Lit) and right.kind == "str" and op in ("=", "<>"):
        s = right.value
        eq = op == "="

        def cmp_str_const(ctx):
            a = f(ctx)
            if type(a) is str:
                return (a == s) is eq
            if a is None:
                return None
            return _compare(op, a, s)

        return cmp_str_const
    g = _compile(right, leaf, False)
    return lambda ctx: _compare(op, f(ctx), g(ctx))


def _compile_between(node: Between, leaf: Leaf) -> Fn:
    f = _compile(node.operand, leaf, False)
    if all(isinstance(b, Lit) for b in (node.low, node.high)):
        return _compile_between_const(node, f)
    lo = _compile(node.low, leaf, False)
    hi = _compile(node.high, leaf, False)
    if not node.negated:

        def between(ctx):
            v = f(ctx)
            a = _compare(">=", v, lo(ctx))
            if a is False:
                return False
            b = _compare("<=", v, hi(ctx))
            if b is False:
                return False
            return None if a is None or b is None else True

        return between

    def not_between(ctx):
        v = f(ctx)
        a = _compare("<", v, lo(ctx))
        if a is True:
            return True
        b = _compare(">", v, hi(ctx))
        if b is True:
            return True
        return None if a is None or b is None else False

    return not_between


def _compile_between_const(node: Between, f: Fn) -> Fn:
    """BETWEEN with two numeric literal bounds: no generic comparisons."""
    lo, hi = node.low.value, node.high.value  # type: ignore[attr-defined]
    lo_int, hi_int = type(lo) is int, type(hi) is int
    lo_f, hi_f = float(lo), float(hi)
    negated = node.negated

    def slow(v):
        if negated:
            a, b = _compare("<", v, lo), _compare(">", v, hi)
            return True if a is True or b is True else (None if a is None or b is None else False)
        a, b = _compare(">=", v, lo), _compare("<=", v, hi)
        return False if a is False or b is False else (None if a is None or b is None else True)

    if not negated:

        def between_const(ctx):
            v = f(ctx)
            t = type(v)
            if t is int:
                return (v >= lo if lo_int else float(v) >= lo_f) and (v <= hi if hi_int else float(v) <= hi_f)
            if t is float:
                return lo_f <= v <= hi_f
            if v is None:
                return None
            return slow(v)

        return between_const

    def not_between_const(ctx):
        v = f(ctx)
        t = type(v)
        if t is int:
            return (v < lo if lo_int else float(v) < lo_f) or (v > hi if hi_int else float(v) > hi_f)
        if t is float:
            return v < lo_f or v > hi_f
        if v is None:
            return None
        return slow(v)

    return not_between_const


# ---------------------------------------------------------------- leaves


def _mapping_leaf(name: str) -> Fn:
    if name in NULL_HEADERS:
        return lambda env: None

    def get(env, name=name):
        return env.get(name)

    return get


def _message_leaf(name: str) -> Fn:
    if name in NULL_HEADERS:
        return lambda m: None
    if name == "JMSDeliveryMode":
        names = _DELIVERY_MODE_NAMES
        return lambda m: names.get(m.delivery_mode)
    if name == "JMSPriority":
        return lambda m: m.priority
    if name == "JMSMessageID":
        return lambda m: m.message_id
    if name == "JMSTimestamp":
        return lambda m: m.timestamp
    if name == "JMSCorrelationID":
        return lambda m: m.correlation_id
    if name == "JMSType":
        return lambda m: m.jms_type
    if name == "JMSXDeliveryCount":

        def delivery_count(m):
            p = m.properties.get("JMSXDeliveryCount")
            return m.delivery_count if p is None else p.value

        return delivery_count

    def prop(m, name=name):
        p = m.properties.get(name)
        return None if p is None else p.value

    return prop


def _plain(v: Any) -> Any:
    if isinstance(v, Property):
        return v.value
    if isinstance(v, DeliveryMode):
        return v.name
    return v


# ---------------------------------------------------------------- public API


class Selector:
    """A parsed, type-checked selector.  Immutable; equal iff canonical texts are equal."""

    __slots__ = ("text", "ast", "_env_fn", "_msg_fn")

    def __init__(self, text: str, ast: Optional[Node]):
        self.text = text
        self.ast = ast
        if ast is None:
            self._env_fn = self._msg_fn = lambda ctx: True
        else:
            self._env_fn = _compile(ast, _mapping_leaf, True)
            self._msg_fn = _compile(ast, _message_leaf, True)

    @property
    def empty(self) -> bool:
        """True for the empty selector, which selects everything."""
        return self.ast is None

    @property
    def identifiers(self) -> frozenset[str]:
        """Names of the headers and properties the selector refers to."""
        if self.ast is None:
            return frozenset()
        names = set()
        stack = [self.ast]
        while stack:
            n = stack.pop()
            if isinstance(n, Ident):
                names.add(n.name)
            stack.extend(_children(n))
        return frozenset(names)

    def evaluate(self, env: Mapping[str, Any]) -> Optional[bool]:
        """True, False or None (UNKNOWN) against a mapping identifier -> value."""
        return self._env_fn(env)

    def matches_values(self, values: Mapping[str, Any]) -> bool:
        """True iff TRUE against a mapping of identifier -> value (Property/DeliveryMode unwrapped)."""
        return self._env_fn({k: _plain(v) for k, v in values.items()}) is True

    def matches(self, message: Any) -> bool:
        """True iff the selector is TRUE for ``message`` (a dropboxmq Message)."""
        if isinstance(message, Message):
            return self._msg_fn(message) is True
        if isinstance(message, Mapping):
            return self.matches_values(message)
        return self._msg_fn(message) is True

    __call__ = matches

    def to_text(self) -> str:
        return "" if self.ast is None else to_text(self.ast)

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return f"Selector({self.to_text()!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Selector):
            return NotImplemented
        return self.ast == other.ast

    def __hash__(self) -> int:
        return hash(self.to_text())


def parse(text: Optional[str]) -> Selector:
    """Parse and type-check ``text``; raise InvalidSelectorError with a position."""
    if text is None:
        return Selector("", None)
    if not isinstance(text, str):
        raise InvalidSelectorError(f"a selector must be a string, not {type(text).__name__}")
    if text.strip(_WHITESPACE) == "":
        return Selector(text, None)
    try:
        ast = _Parser(text).selector()
    except RecursionError:
        raise InvalidSelectorError("selector nested too deeply", None, text) from None
    if _depth(ast) > _MAX_DEPTH:
        raise InvalidSelectorError(f"selector expression deeper than {_MAX_DEPTH} levels", 0, text)
    return Selector(text, ast)


@functools.lru_cache(maxsize=256)
def selector_for(text: Optional[str]) -> Optional[Selector]:
    """The selector every part of the library uses: ``parse``d once per text (a subscription's
    selector is evaluated at every fan-out), ``None`` for an absent or blank one (= no selector)."""
    if text is None or not text.strip():
        return None
    sel = parse(text)
    return None if sel.empty else sel
