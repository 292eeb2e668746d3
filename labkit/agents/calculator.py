"""A calculator tool: exact arithmetic on untrusted text, and the environment that serves it.

Tool-integrated RL (ToRL, arXiv 2503.23383; ReTool, arXiv 2504.11536) lets the policy stop in the
middle of its reasoning, hand a computation to an interpreter and continue from the result. A
code interpreter is far more than the lab's tiny model can use; a calculator keeps the protocol
(call, reply, continue) with a tool whose every answer can be checked.

The expression comes from the policy, so it is read by the lab's one expression parser
(:mod:`labkit.tasks.expressions`, which also reads countdown answers), never by ``eval``,
``exec``, ``compile`` or ``ast``; the calculator takes its whole grammar: ``+ - * /``,
parentheses and unary minus. Integers are ASCII digits only; spaces are allowed between tokens. Division is exact
(:class:`fractions.Fraction`): a whole result prints as an integer, otherwise as the reduced
fraction ``a/b``. The task suite's answers are integers, so an integer reply can be copied into
the answer, and a fraction tells the policy exactly what it computed rather than a rounded
decimal it might copy as if it were right.

Every limit is checked before the work it bounds: the length first (a million characters cost one
``len``), then the digits of each literal and the depth of parentheses while tokenizing (so the
parser's recursion is bounded), and the size of every intermediate value after each operation
(there is no power operator, so values grow at most by a product of two bounded operands).
:func:`calculate` turns every failure into an ``error: <reason>`` reply and never raises.
"""

from __future__ import annotations

import operator
from fractions import Fraction

from labkit.agents.tool_calls import ERROR_PREFIX, format_tool_call
from labkit.tasks.expressions import MAX_DEPTH, ExpressionError, parse, tokenize
from labkit.tasks.solutions import THINK_CLOSE, THINK_OPEN, completion_text

__all__ = ["MAX_DEPTH", "MAX_EXPRESSION_CHARS", "MAX_LITERAL_DIGITS", "MAX_MAGNITUDE",
           "CalculatorEnv", "CalculatorError", "calculate", "calculator_demonstration",
           "evaluate_expression", "format_value"]

MAX_EXPRESSION_CHARS = 200
MAX_LITERAL_DIGITS = 30
#: Every intermediate value's magnitude and denominator stay below this.
MAX_MAGNITUDE = 10**60

_OPERATORS = "+-*/()"
# families whose question is an expression the calculator computes (countdown: its answer is one)
_ARITHMETIC_FAMILIES = ("add", "sub", "mul")


#: An expression the calculator refuses; the message is the reason the policy reads. The
#: parser's error (its refusals and the calculator's own share one class).
CalculatorError = ExpressionError


def calculate(expression) -> str:
    """The exact value of ``expression`` as text, or ``"error: <reason>"``; never raises."""
    try:
        return format_value(evaluate_expression(expression))
    except CalculatorError as error:
        return f"{ERROR_PREFIX}{error}"


def format_value(value: Fraction) -> str:
    """An integer's digits, or a reduced fraction ``a/b`` (the sign on ``a``)."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{value.numerator}/{value.denominator}"


def evaluate_expression(expression) -> Fraction:
    """The exact value of an arithmetic expression; raises :class:`CalculatorError`."""
    if not isinstance(expression, str):
        raise CalculatorError(f"expression must be a string, got {type(expression).__name__}")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression is {len(expression)} characters; the limit is "
                              f"{MAX_EXPRESSION_CHARS}")
    tokens = tokenize(expression, _OPERATORS, MAX_LITERAL_DIGITS)
    if not tokens:
        raise CalculatorError("empty expression")
    return parse(tokens, lambda text: Fraction(int(text)), _combine, operator.neg)


def _combine(op: str, left: Fraction, right: Fraction, at: int) -> Fraction:
    """One operation of the expression, exact, its result checked before the next is read."""
    if op == "/" and right == 0:
        raise CalculatorError(f"division by zero at {at}")
    value = (left + right if op == "+" else left - right if op == "-"
             else left * right if op == "*" else left / right)
    return _checked(value, at)


def _checked(value: Fraction, at: int) -> Fraction:
    if abs(value) >= MAX_MAGNITUDE:
        raise CalculatorError(f"result at {at} is too large (limit 10**60)")
    if value.denominator >= MAX_MAGNITUDE:
        raise CalculatorError(f"result at {at} has too many digits (limit 10**60)")
    return value


class CalculatorEnv:
    """The calculator as an environment in TRL's ``environment_factory`` contract.

    One instance per rollout: :meth:`reset` receives the dataset row's columns and remembers the
    row (the reward itself comes from the answer, scored by :func:`labkit.rewards.accuracy_reward`
    on the completion, so this class has no ``get_reward``). The only public method besides
    ``reset`` is the tool, because TRL exposes every public method as a tool. ``tool_calls``
    counts the calls of this episode and ``tool_errors`` those answered with an error.
    """

    def __init__(self):
        self.row: dict = {}
        self.answer: str | None = None
        self.tool_calls = 0
        self.tool_errors = 0

    def reset(self, **row) -> None:
        """Start an episode on a dataset row (its columns as keyword arguments)."""
        self.row = dict(row)
        self.answer = row.get("answer")
        self.tool_calls = 0
        self.tool_errors = 0

    def calculator(self, expression: str) -> str:
        """Evaluate an arithmetic expression exactly.

        Args:
            expression: Integers with + - * /, parentheses and unary minus, e.g. 425*13.

        Returns:
            The value (an integer or a reduced fraction a/b), or "error:" and the reason.
        """
        self.tool_calls += 1
        reply = calculate(expression)
        if reply.startswith(ERROR_PREFIX):
            self.tool_errors += 1
        return reply


def calculator_demonstration(row: dict, use_tool: bool) -> list[tuple[str, str | None]]:
    """A correct solution of a task-suite row as (assistant text, tool reply) turns.

    With ``use_tool`` the first turn calls the calculator once (an empty think, then the call;
    its reply is the calculator's) and the second answers with what the tool returned; without,
    one turn answers directly. The last turn's reply is None. add/sub/mul compute the question's
    expression; countdown checks its answer expression before answering with it. Think sections
    stay empty: the tiny model's context is 512 tokens and a call already takes about 90.
    """
    family, answer = row.get("family"), row.get("answer")
    if family in _ARITHMETIC_FAMILIES:
        expression = row.get("question", "").removesuffix("=?")
    elif family == "countdown":
        expression = answer
    else:
        raise ValueError(f"row['family'] is {family!r}; calculator demonstrations cover "
                         f"{(*_ARITHMETIC_FAMILIES, 'countdown')}")
    if not use_tool:
        return [(completion_text("", answer), None)]
    reply = calculate(expression)
    expected = answer if family in _ARITHMETIC_FAMILIES else str(row.get("target"))
    if reply != expected:
        raise ValueError(f"row {row.get('id')!r}: the calculator gives {reply!r} for "
                         f"{expression!r}, the row says {expected!r}")
    call = THINK_OPEN + THINK_CLOSE + format_tool_call("calculator", {"expression": expression})
    return [(call, reply), (completion_text("", answer), None)]
