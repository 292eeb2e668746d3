"""Solution text: the lab's completion format, reference solutions in three styles, SFT data.

The model answers ``<think>{reasoning}</think><answer>{answer}</answer>`` (:func:`completion_text`;
the tags are single tokens of the lab's character tokenizer). :func:`solution_text` writes a
correct completion of a problem as ``direct`` (empty think), ``worked`` (compact steps a small
transformer can follow left to right) or ``verbose`` (the worked steps plus narration that adds
nothing); :func:`sft_examples` mixes them into warm-start data. The worked steps of each family
are described in :mod:`labkit.tasks`.
"""

from __future__ import annotations

import random
import re

from labkit.tasks.expressions import evaluate, parse_expression
from labkit.tasks.problems import Problem, eval_problems, generate_problems

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"

STYLES = ("direct", "worked", "verbose")
DEFAULT_STYLE_WEIGHTS = {"direct": 0.4, "worked": 0.4, "verbose": 0.2}
#: The style mix the shipped tiny Qwen was warm-started on (``python -m labkit build_tiny``), which
#: the PTX loss replays (:mod:`labkit.finetune.ptx`).
WARM_START_STYLE_WEIGHTS = {"direct": 0.45, "worked": 0.4, "verbose": 0.15}


def _add_steps(a: int, b: int) -> str:
    xs, ys = str(a)[::-1], str(b)[::-1]
    steps, carry = [], 0
    for i in range(max(len(xs), len(ys))):
        terms = [s[i] for s in (xs, ys) if i < len(s)] + (["1"] if carry else [])
        total = sum(map(int, terms))
        carry = total // 10
        steps.append(f"{'+'.join(terms)}={total}" + (" c1" if carry else ""))
    return ",".join(steps)


def _sub_steps(a: int, b: int) -> str:
    """Column subtraction of b from a (a >= b >= 0) from the rightmost digit, with borrows."""
    xs, ys = str(a)[::-1], str(b)[::-1].ljust(len(str(a)), "0")
    steps, borrow = [], 0
    for x, y in zip(xs, ys):
        value = int(x) - int(y) - borrow
        top = x if value >= 0 else f"1{x}"
        text = f"{top}-{y}" + ("-1" if borrow else "")
        borrow = int(value < 0)
        steps.append(f"{text}={value + 10 * borrow}" + (" b1" if borrow else ""))
    return ",".join(steps)


def _mul_steps(a: int, b: int) -> str:
    """Partial products: split b by its digits (or a, when b has one digit), then sum."""
    split, whole = (b, a) if b >= 10 else (a, b)
    parts = [int(d) * 10**k for k, d in enumerate(str(split)[::-1]) if d != "0"]
    products = [(f"{whole}*{p}" if split == b else f"{p}*{whole}", p * whole) for p in parts]
    steps = [f"{text}={value}" for text, value in products]
    total = products[0][1]
    for _, value in products[1:]:
        steps.append(f"{total}+{value}={total + value}")
        total += value
    return ",".join(steps)


def _tree_steps(tree: int | tuple) -> list[str]:
    """One ``a op b = c`` step per operation of the tree, innermost first."""
    if isinstance(tree, int):
        return []
    op, left, right = tree
    return (_tree_steps(left) + _tree_steps(right)
            + [f"{evaluate(left)}{op}{evaluate(right)}={evaluate(tree)}"])


def _sum_tree(numbers) -> int | tuple:
    tree = numbers[0]
    for n in numbers[1:]:
        tree = ("+", tree, n)
    return tree


def _sort_steps(values: list[int]) -> str:
    """Take the smallest out, write it and what is left, until one number is left."""
    rest, steps = list(values), []
    while True:
        smallest = min(rest)
        rest.remove(smallest)
        steps.append(f"{smallest}:{','.join(map(str, rest))}")
        if len(rest) == 1:
            return " ".join(steps)


def _worked_and_verbose(problem: Problem) -> tuple[str, str]:
    """The worked steps, and the verbose text: the question, the same steps, the answer, a check."""
    family, answer = problem.family, problem.answer
    if family == "countdown":
        target = problem.target
        first, final = _sum_tree(problem.numbers), parse_expression(answer)
        worked = ",".join(_tree_steps(first))
        if evaluate(first) != target:
            worked += f" no;{','.join(_tree_steps(final))}"
        worked += " ok"
        check = f"{answer}={target}"
    elif family == "sort":
        values = [int(v) for v in problem.question.split(": ")[1].split(",")]
        worked = _sort_steps(values)
        check = f"{len(values)} numbers in order"
    else:
        a, _, b = re.fullmatch(r"([0-9]+)([-+*])([0-9]+)=\?", problem.question).groups()
        a, b = int(a), int(b)
        if family == "add":
            worked, check = _add_steps(a, b), f"{answer}-{b}={a}"
        elif family == "sub":
            worked = _sub_steps(a, b) if a >= b else f"-({b}-{a}):{_sub_steps(b, a)}"
            check = f"{answer}+{b}={a}"
        else:
            worked = _mul_steps(a, b) if a >= 10 or b >= 10 else f"{a}*{b}={answer}"
            check = f"{answer}/{b}={a}"
    question = problem.question.removesuffix("=?").replace(":", "")
    verbose = f"{question}: {worked}. So the answer is {answer}. Check: {check} ok."
    return worked, verbose


def completion_text(think: str, answer: str) -> str:
    """A completion in the lab's format: ``<think>{think}</think><answer>{answer}</answer>``."""
    return f"{THINK_OPEN}{think}{THINK_CLOSE}{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"


def solution_text(problem: Problem, style: str = "worked") -> str:
    """A correct reference completion for ``problem`` in ``style`` (direct, worked or verbose)."""
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    if style == "direct":
        return completion_text("", problem.answer)
    worked, verbose = _worked_and_verbose(problem)
    return completion_text(worked if style == "worked" else verbose, problem.answer)


def problem_from_row(row: dict) -> Problem:
    """The :class:`Problem` a dataset row (:func:`to_row`) was made from."""
    return Problem(id=row["id"], family=row["family"], difficulty=int(row["difficulty"]),
                   question=row["question"], answer=row["answer"],
                   numbers=tuple(row.get("numbers") or ()), target=row.get("target"))


def worked_solution(row: dict) -> str:
    """A correct worked completion of a task-suite row (RL-PLUS's external demonstration)."""
    return solution_text(problem_from_row(row), "worked")


def sft_examples(n: int, seed: int = 0, style_weights: dict | None = None) -> list[dict]:
    """``n`` supervised warm-start examples, each a solution in a randomly drawn style.

    Returns dicts with ``prompt`` (the question), ``completion`` (:func:`solution_text`),
    ``family``, ``difficulty`` and ``style``. Styles are drawn with ``style_weights`` (default
    :data:`DEFAULT_STYLE_WEIGHTS`; missing styles get weight 0). Problems come from a random
    stream of their own (seeded ``"sft-{seed}"``), balanced across family x difficulty, and
    never repeat an eval question. Train questions may appear.
    """
    weights = dict(DEFAULT_STYLE_WEIGHTS if style_weights is None else style_weights)
    unknown = set(weights) - set(STYLES)
    if unknown:
        raise ValueError(f"style_weights has unknown styles {sorted(unknown)}; use {STYLES}")
    values = [weights.get(style, 0.0) for style in STYLES]
    if any(not w >= 0 for w in values) or sum(values) <= 0:
        raise ValueError(f"style_weights must be >= 0 with a positive sum, got {weights}")
    held_out = {p.question for p in eval_problems()}
    problems = generate_problems(n, f"sft-{seed}", exclude=held_out)
    rng = random.Random(f"sft-styles-{seed}")
    examples = []
    for problem in problems:
        style = rng.choices(STYLES, weights=values)[0]
        examples.append({"prompt": problem.question, "completion": solution_text(problem, style),
                         "family": problem.family, "difficulty": problem.difficulty,
                         "style": style})
    return examples
