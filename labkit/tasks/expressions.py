"""Arithmetic expressions from untrusted text: one tokenizer and one parser for the whole lab.

Two readers need them. Countdown answers (:func:`parse_expression`) are non-negative integers
with binary ``+ - *`` and parentheses, read into a tree that the grader walks for the numbers
used; the calculator tool (:mod:`labkit.agents.calculator`) adds ``/`` and unary minus and
computes exact values. Both come from a policy, so neither goes near ``eval``, ``exec``,
``compile`` or ``ast``: :func:`tokenize` and :func:`parse` are a tokenizer and a
recursive-descent parser over the grammar::

    expression := term (("+" | "-") term)*
    term       := unary (("*" | "/") unary)*
    unary      := "-"* primary          (only when the reader takes unary minus)
    primary    := integer | "(" expression ")"

The reader says what a number and an operation become (``number``, ``combine``, ``negate``):
a tree for countdown, a checked :class:`fractions.Fraction` for the calculator. Applying each
operation as soon as it is read lets the calculator refuse an oversized intermediate value
before it computes the next one. Every limit is checked before the work it bounds: the digits
of each literal and the depth of parentheses while tokenizing (so the recursion is bounded).
A refused text raises :class:`ExpressionError`, whose message says what and where.

A countdown tree is an int (a number) or a tuple ``(op, left, right)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

#: Parentheses open at once; beyond it :func:`tokenize` refuses the text (the parser recurses
#: once per level).
MAX_DEPTH = 32
MAX_EXPRESSION_CHARS = 64  # the countdown checker rejects longer expressions unread
_COUNTDOWN_LITERAL_DIGITS = 6
_COUNTDOWN_OPERATORS = "+-*()"
_DIGITS = "0123456789"
_SPLIT_NUMBER_RE = re.compile(r"[0-9]\s+[0-9]")


class ExpressionError(ValueError):
    """A text that is not an expression of the grammar; the message is the reason."""


def tokenize(text: str, operators: str, max_digits: int) -> list[tuple[str, int]]:
    """(token, position) pairs of ``text``: ASCII integers of at most ``max_digits`` digits and
    the characters of ``operators``, spaces between them skipped. Refuses any other character,
    a longer literal, ``)`` without its ``(`` and parentheses deeper than :data:`MAX_DEPTH`."""
    allowed = f"use 0-9 {' '.join(operators)}"
    tokens, depth, i = [], 0, 0
    while i < len(text):
        char = text[i]
        if char == " ":
            i += 1
        elif char in _DIGITS:
            end = i
            while end < len(text) and text[end] in _DIGITS:
                end += 1
            if end - i > max_digits:
                raise ExpressionError(f"number at {i} has {end - i} digits; the limit is "
                                      f"{max_digits}")
            tokens.append((text[i:end], i))
            i = end
        elif char in operators:
            depth += (char == "(") - (char == ")")
            if depth > MAX_DEPTH:
                raise ExpressionError(f"parentheses nest over {MAX_DEPTH} deep at {i}")
            if depth < 0:
                raise ExpressionError(f"unmatched ')' at {i}")
            tokens.append((char, i))
            i += 1
        elif char.isdigit():  # str.isdigit accepts other scripts' digits: say so, not "unknown"
            raise ExpressionError(f"digit {char!a} at {i} is not ASCII; use 0-9")
        else:
            raise ExpressionError(f"character {char!a} at {i} is not allowed; {allowed}")
    return tokens


def parse(tokens: list[tuple[str, int]], number: Callable, combine: Callable,
          negate: Callable | None = None):
    """Read ``tokens`` (from :func:`tokenize`) by the grammar above. ``number(text)`` makes a
    literal's value, ``combine(op, left, right, position)`` an operation's, ``negate(value)`` a
    unary minus's (None: unary minus is refused). Raises :class:`ExpressionError`."""
    return _Parser(tokens, number, combine, negate).parse()


class _Parser:
    """Recursive descent over the tokens, one method per grammar rule; depth is bounded by the
    tokenizer's parenthesis limit, and chains of unary minus are read in a loop."""

    def __init__(self, tokens, number, combine, negate):
        self.tokens, self.number, self.combine, self.negate = tokens, number, combine, negate
        self.pos = 0

    def parse(self):
        value = self.expression()
        if self.pos < len(self.tokens):
            token, at = self.tokens[self.pos]
            raise ExpressionError(f"unexpected {token!r} at {at}; expected an operator or end")
        return value

    def expression(self):
        value = self.term()
        while self._peek() in ("+", "-"):
            operator, at = self.tokens[self.pos]
            self.pos += 1
            value = self.combine(operator, value, self.term(), at)
        return value

    def term(self):
        value = self.unary()
        while self._peek() in ("*", "/"):
            operator, at = self.tokens[self.pos]
            self.pos += 1
            value = self.combine(operator, value, self.unary(), at)
        return value

    def unary(self):
        if self.negate is None:
            return self.primary()
        negative = False
        while self._peek() == "-":
            negative = not negative
            self.pos += 1
        value = self.primary()
        return self.negate(value) if negative else value

    def primary(self):
        if self.pos >= len(self.tokens):
            raise ExpressionError("expression ends early; expected a number or '('")
        token, at = self.tokens[self.pos]
        self.pos += 1
        if token[0] in _DIGITS:
            return self.number(token)
        if token == "(":
            value = self.expression()
            if self._peek() != ")":
                raise ExpressionError(f"'(' at {at} is not closed")
            self.pos += 1
            return value
        raise ExpressionError(f"unexpected {token!r} at {at}; expected a number or '('")

    def _peek(self) -> str | None:
        return self.tokens[self.pos][0] if self.pos < len(self.tokens) else None


# ---- countdown expressions -----------------------------------------------------------------------
def parse_expression(text: str) -> int | tuple | None:
    """Parse a countdown expression into a tree, or return None when it is not one.

    Accepts non-negative integers, binary ``+ - *`` and parentheses, with whitespace anywhere but
    inside a number. Unary signs, other operators (``/``, ``**``), other characters, literals
    over 6 digits and texts over :data:`MAX_EXPRESSION_CHARS` characters (whitespace aside) are
    rejected.
    """
    if not isinstance(text, str) or _SPLIT_NUMBER_RE.search(text):
        return None
    text = "".join(text.split())
    if not text or len(text) > MAX_EXPRESSION_CHARS:
        return None
    try:
        tokens = tokenize(text, _COUNTDOWN_OPERATORS, _COUNTDOWN_LITERAL_DIGITS)
        return parse(tokens, int, lambda op, left, right, _: (op, left, right))
    except ExpressionError:
        return None


def evaluate(tree: int | tuple) -> int:
    """Value of an expression tree from :func:`parse_expression`."""
    if isinstance(tree, int):
        return tree
    op, left, right = tree
    a, b = evaluate(left), evaluate(right)
    return a + b if op == "+" else a - b if op == "-" else a * b


def _leaves(tree: int | tuple) -> list[int]:
    if isinstance(tree, int):
        return [tree]
    return _leaves(tree[1]) + _leaves(tree[2])


def format_expression(tree: int | tuple) -> str:
    """Write an expression tree with the fewest parentheses that keep its value."""
    if isinstance(tree, int):
        return str(tree)
    op, left, right = tree
    left_text, right_text = format_expression(left), format_expression(right)
    if op == "*" and isinstance(left, tuple) and left[0] in "+-":
        left_text = f"({left_text})"
    if isinstance(right, tuple) and (op == "*" and right[0] in "+-" or op == "-"
                                     and right[0] in "+-"):
        right_text = f"({right_text})"
    return f"{left_text}{op}{right_text}"
