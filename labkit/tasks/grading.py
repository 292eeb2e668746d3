"""Grading: whether an answer is right, by rule, for every checkable family.

:func:`check_answer` compares a predicted answer with a row's (or problem's) answer by the
family's rule: an integer, a sorted list, a countdown expression that makes the target from the
given numbers (:func:`check_countdown`), or GSM8K's number. It never raises on a malformed
prediction: bad text is a wrong answer.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from fractions import Fraction
from numbers import Integral, Real

from labkit.tasks.expressions import _leaves, evaluate, parse_expression
from labkit.tasks.problems import FAMILIES

#: families :func:`check_answer` can judge: the task suite plus GSM8K (see :mod:`labkit.tasks.gsm8k`)
CHECKABLE_FAMILIES = (*FAMILIES, "gsm8k")

_MAX_INT_DIGITS = 40  # integer answers with more digits are wrong without being parsed

_INT_RE = re.compile(r"[+-]?[0-9]+")
_DECIMAL_RE = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?")


def _as_int(value) -> int | None:
    """``value`` as an int when it is a whole number (int, numpy int, or float like 16.0)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        return None
    if isinstance(value, Integral):
        return int(value)
    return int(value) if math.isfinite(value) and value == int(value) else None


def check_countdown(expression: str, numbers, target) -> bool:
    """True when ``expression`` is a valid countdown expression that makes ``target``.

    Valid: parsed by :func:`parse_expression`, and each number used at most as many times as it
    appears in ``numbers``. Never raises on bad input.
    """
    tree, target = parse_expression(expression), _as_int(target)
    if tree is None or target is None:
        return False
    used, given = Counter(_leaves(tree)), Counter(_as_int(n) for n in numbers)
    if any(count > given[n] for n, count in used.items()):
        return False
    return evaluate(tree) == target


def _field(row_or_problem, name: str):
    if isinstance(row_or_problem, dict):
        return row_or_problem.get(name)
    return getattr(row_or_problem, name, None)


def _parse_decimal(text: str) -> Fraction | None:
    """The value of a decimal like ``-1234.50``, or None for anything else."""
    if len(text) > _MAX_INT_DIGITS or not _DECIMAL_RE.fullmatch(text):
        return None
    return Fraction(text)


def _gsm8k_equal(predicted: str, answer: str) -> bool:
    def clean(text: str) -> str:
        text = re.sub(r"[\s,$]", "", text)
        return text.removesuffix(".")

    mine, theirs = _parse_decimal(clean(predicted)), _parse_decimal(clean(str(answer)))
    return mine is not None and mine == theirs


def _int_or_none(text: str) -> int | None:
    text = text.replace(" ", "")
    if len(text) > _MAX_INT_DIGITS or not _INT_RE.fullmatch(text):
        return None
    return int(text)


def check_answer(family: str, predicted: str, row_or_problem) -> bool:
    """Whether ``predicted`` (the text inside the answer tags) solves the problem, by rule.

    ``row_or_problem`` is a :class:`Problem` or a row dict with ``answer`` (and, for countdown,
    ``numbers`` and ``target``; without them they are recovered from the canonical answer, which
    uses every given number). Rules: add/sub/mul compare integers after removing spaces and a
    leading ``+``; sort compares the comma-separated integer lists; countdown runs
    :func:`check_countdown`; gsm8k compares numbers, ignoring ``$``, commas and a trailing ``.0``.
    Malformed answers are wrong, never an error; an unknown family raises ValueError.
    """
    if family not in CHECKABLE_FAMILIES:
        raise ValueError(f"cannot check family {family!r}; known: {CHECKABLE_FAMILIES}")
    answer = _field(row_or_problem, "answer")
    if not isinstance(predicted, str) or answer is None:
        return False
    if family == "gsm8k":
        return _gsm8k_equal(predicted, answer)
    if family == "countdown":
        numbers, target = _field(row_or_problem, "numbers"), _field(row_or_problem, "target")
        if numbers is None or len(numbers) == 0 or _as_int(target) is None:
            tree = parse_expression(answer)
            if tree is None:
                return False
            numbers, target = _leaves(tree), evaluate(tree)
        return check_countdown(predicted, numbers, target)
    if family == "sort":
        items = predicted.replace(" ", "").split(",")
        if len(items) > 100:
            return False
        values = [_int_or_none(item) for item in items]
        return None not in values and values == [int(v) for v in answer.split(",")]
    value = _int_or_none(predicted)
    return value is not None and value == int(answer)
