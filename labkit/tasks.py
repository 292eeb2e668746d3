"""The lab's verifiable task suite: five families of synthetic reasoning problems, checkable by rule.

Families (ids are stable), each with a one-line prompt and four difficulty levels:

- ``add``: ``347+285=?``; 1+1, 2+2, 3+3, 4+4 digits.
- ``sub``: ``645-378=?``; 1, 2, 3 digits with a >= b; 4 digits, where the result may be negative.
- ``mul``: ``347*85=?``; 1x1, 2x1, 2x2, 3x2 digits.
- ``countdown``: ``Make 16 from 5,3,2``; answer with an expression such as ``(5+3)*2`` using
  ``+ - *`` and parentheses, each given number at most once; 2 numbers 1-9, 3 numbers 1-9,
  3 numbers 2-25, 4 numbers 1-12. Every instance is built from a random expression, so it is
  solvable.
- ``sort``: ``Sort: 9,4,1``; answer ``1,4,9``; 3 numbers 0-9, then 4, 5, 6 numbers 0-99.

The model answers in the format ``<think>{reasoning}</think><answer>{answer}</answer>``; the tags are
single tokens of the lab's character tokenizer. :func:`solution_text` writes reference completions in
three styles of rising length: ``direct`` (empty think), ``worked`` (compact steps a small
transformer can follow left to right) and ``verbose`` (the worked steps plus narration that adds
nothing). The worked steps: add and sub go column by column from the rightmost digit, marking
carries and borrows (``7+5=12 c1,4+8+1=13 c1,3+2+1=6``; ``15-8=7 b1,14-7-1=6 b1,6-3-1=2``); mul
sums partial products (``347*5=1735,347*80=27760,1735+27760=29495``); sort takes out the smallest
number and writes what is left (``1:9,4,7 4:9,7 7:9``); countdown tries the plain sum, then an
expression that works (``5+3=8,8+2=10 no;5+3=8,8*2=16 ok``). Worked solutions are more reliable than direct answers for a small model, so
accuracy-only RL lengthens responses, and verbose ones waste tokens, so length control has
something to cut.

Every generated problem comes from a seeded :class:`random.Random`, so the suite is reproducible.
The shipped splits ``data/tasks/train.jsonl`` (2000 rows) and ``data/tasks/eval.jsonl``
(200 rows, 10 per family and level, questions disjoint from train) are rebuilt byte for byte by::

    python -m labkit.tasks --out data/tasks

:func:`load_split` reads them as a :class:`datasets.Dataset` in TRL's conversational format.
Set the environment variable ``LABKIT_DATA`` to read them from another data folder.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from numbers import Integral, Real
from pathlib import Path

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"

FAMILIES = ("add", "sub", "mul", "countdown", "sort")
DIFFICULTIES = (1, 2, 3, 4)
STYLES = ("direct", "worked", "verbose")
#: families :func:`check_answer` can judge: the task suite plus GSM8K (see :mod:`labkit.gsm8k`)
CHECKABLE_FAMILIES = (*FAMILIES, "gsm8k")

TRAIN_SEED = 1
EVAL_SEED = 0
TRAIN_SIZE = 2000
EVAL_PER_CELL = 10  # eval rows per family x difficulty
DEFAULT_STYLE_WEIGHTS = {"direct": 0.4, "worked": 0.4, "verbose": 0.2}
#: The style mix the shipped tiny Qwen was warm-started on (``python -m labkit.build_tiny``), which
#: the PTX loss replays (:mod:`labkit.tricks.ptx`).
WARM_START_STYLE_WEIGHTS = {"direct": 0.45, "worked": 0.4, "verbose": 0.15}

# countdown: (how many numbers, smallest, largest, largest allowed target) per difficulty
_COUNTDOWN_LEVELS = {1: (2, 1, 9, 81), 2: (3, 1, 9, 200), 3: (3, 2, 25, 500), 4: (4, 1, 12, 500)}
# sort: (how many numbers, largest value) per difficulty
_SORT_LEVELS = {1: (3, 9), 2: (4, 99), 3: (5, 99), 4: (6, 99)}
# mul: (digits of a, digits of b) per difficulty
_MUL_LEVELS = {1: (1, 1), 2: (2, 1), 3: (2, 2), 4: (3, 2)}

MAX_EXPRESSION_CHARS = 64  # the countdown checker rejects longer expressions unread
_MAX_INT_DIGITS = 40  # integer answers with more digits are wrong without being parsed
_MAX_DRAWS = 10_000  # draws per row before generate_problems gives up on a full cell

_INT_RE = re.compile(r"[+-]?[0-9]+")
_DECIMAL_RE = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?")
_EXPR_TOKEN_RE = re.compile(r"[0-9]+|[-+*()]")
_SPLIT_NUMBER_RE = re.compile(r"[0-9]\s+[0-9]")


@dataclass(frozen=True)
class Problem:
    """One task instance.

    ``numbers`` and ``target`` are set for countdown only (the given numbers and the number to
    make); other families leave them ``()`` and ``None``.
    """

    id: str
    family: str
    difficulty: int
    question: str
    answer: str
    numbers: tuple[int, ...] = ()
    target: int | None = None


# ---------------------------------------------------------------------------------------------
# countdown expressions: a small safe parser (digits, + - * and parentheses only; no eval)
# A tree is an int (a number) or a tuple (op, left, right).


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
    tokens = _EXPR_TOKEN_RE.findall(text)
    if "".join(tokens) != text or any(t.isdigit() and len(t) > 6 for t in tokens):
        return None
    pos = 0

    def expr():
        nonlocal pos
        left = term()
        while left is not None and pos < len(tokens) and tokens[pos] in "+-":
            op = tokens[pos]
            pos += 1
            right = term()
            left = None if right is None else (op, left, right)
        return left

    def term():
        nonlocal pos
        left = factor()
        while left is not None and pos < len(tokens) and tokens[pos] == "*":
            pos += 1
            right = factor()
            left = None if right is None else ("*", left, right)
        return left

    def factor():
        nonlocal pos
        if pos >= len(tokens):
            return None
        token = tokens[pos]
        pos += 1
        if token.isdigit():
            return int(token)
        if token == "(":
            inner = expr()
            if inner is None or pos >= len(tokens) or tokens[pos] != ")":
                return None
            pos += 1
            return inner
        return None

    tree = expr()
    return tree if pos == len(tokens) else None


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


# ---------------------------------------------------------------------------------------------
# generation


def _digits_number(rng: random.Random, digits: int) -> int:
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def _random_tree(numbers: list[int], rng: random.Random) -> int | tuple:
    if len(numbers) == 1:
        return numbers[0]
    k = rng.randint(1, len(numbers) - 1)
    left, right = _random_tree(numbers[:k], rng), _random_tree(numbers[k:], rng)
    op = rng.choice("+-*")
    if op == "-" and evaluate(left) < evaluate(right):
        left, right = right, left
    return (op, left, right)


def _positive_steps(tree: int | tuple) -> bool:
    """No intermediate result of ``tree`` is zero or negative."""
    if isinstance(tree, int):
        return True
    return evaluate(tree) > 0 and _positive_steps(tree[1]) and _positive_steps(tree[2])


def _make_countdown(difficulty: int, rng: random.Random) -> tuple[str, str, tuple, int]:
    count, low, high, max_target = _COUNTDOWN_LEVELS[difficulty]
    while True:
        numbers = [rng.randint(low, high) for _ in range(count)]
        order = numbers[:]
        rng.shuffle(order)
        tree = _random_tree(order, rng)
        target = evaluate(tree)
        if _positive_steps(tree) and target <= max_target and target not in numbers:
            break
    # the worked trace tries the plain sum first; when it works, it is the canonical answer
    answer = "+".join(map(str, numbers)) if sum(numbers) == target else format_expression(tree)
    question = f"Make {target} from {','.join(map(str, numbers))}"
    return question, answer, tuple(numbers), target


def make_problem(family: str, difficulty: int, rng: random.Random, index: int = 0) -> Problem:
    """Draw one problem of ``family`` at ``difficulty`` (1..4) from ``rng``.

    Its id is ``{family}-{difficulty}-{index:06d}``.
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty must be one of {DIFFICULTIES}, got {difficulty!r}")
    numbers, target = (), None
    if family in ("add", "sub"):
        a, b = _digits_number(rng, difficulty), _digits_number(rng, difficulty)
        if family == "add":
            question, answer = f"{a}+{b}=?", str(a + b)
        else:
            if difficulty < 4 and a < b:
                a, b = b, a
            question, answer = f"{a}-{b}=?", str(a - b)
    elif family == "mul":
        digits_a, digits_b = _MUL_LEVELS[difficulty]
        a = rng.randint(max(1, 10 ** (digits_a - 1)), 10**digits_a - 1)
        b = rng.randint(2 if digits_b == 1 else 10, 10**digits_b - 1)
        question, answer = f"{a}*{b}=?", str(a * b)
    elif family == "sort":
        count, largest = _SORT_LEVELS[difficulty]
        values = [rng.randint(0, largest) for _ in range(count)]
        question = f"Sort: {','.join(map(str, values))}"
        answer = ",".join(map(str, sorted(values)))
    else:
        question, answer, numbers, target = _make_countdown(difficulty, rng)
    return Problem(f"{family}-{difficulty}-{index:06d}", family, difficulty, question, answer,
                   numbers, target)


def generate_problems(n: int, seed: int | str, families=FAMILIES, difficulties=DIFFICULTIES, *,
                      exclude=frozenset(), unique: bool = False, start: int = 0) -> list[Problem]:
    """Generate ``n`` problems, deterministic from ``seed``, balanced across family x difficulty.

    Rows cycle through the cells (every family at every difficulty) in order, so any ``n`` that
    is a multiple of the number of cells gives each cell the same count. Questions in
    ``exclude`` are never drawn; with ``unique=True`` no question repeats. Ids are numbered from
    ``start`` by row position.
    """
    cells = [(f, d) for f in families for d in difficulties]
    if not cells:
        raise ValueError("generate_problems needs at least one family and one difficulty")
    rng = random.Random(seed)
    excluded, problems = set(exclude), []
    for i in range(n):
        family, difficulty = cells[i % len(cells)]
        for _ in range(_MAX_DRAWS):
            problem = make_problem(family, difficulty, rng, start + i)
            if problem.question not in excluded:
                break
        else:
            raise ValueError(f"could not draw a new {family} difficulty-{difficulty} question: "
                             "that cell has too few distinct questions left; ask for fewer rows")
        if unique:
            excluded.add(problem.question)
        problems.append(problem)
    return problems


def eval_problems() -> list[Problem]:
    """The eval split's problems: 10 distinct questions per family x difficulty."""
    return generate_problems(EVAL_PER_CELL * len(FAMILIES) * len(DIFFICULTIES), EVAL_SEED,
                             unique=True)


def train_problems() -> list[Problem]:
    """The train split's problems: 2000 rows, no question in common with :func:`eval_problems`.

    Ids continue the eval numbering, so no id is shared between the splits either.
    """
    held_out = eval_problems()
    return generate_problems(TRAIN_SIZE, TRAIN_SEED, exclude={p.question for p in held_out},
                             start=len(held_out))


# ---------------------------------------------------------------------------------------------
# reference solutions


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


# ---------------------------------------------------------------------------------------------
# checking answers


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


# ---------------------------------------------------------------------------------------------
# rows, splits and SFT data


def to_row(problem: Problem) -> dict:
    """A dataset row: TRL's conversational ``prompt`` plus the columns the rewards need."""
    return {
        "prompt": [{"role": "user", "content": problem.question}],
        "question": problem.question,
        "answer": problem.answer,
        "family": problem.family,
        "difficulty": problem.difficulty,
        "id": problem.id,
        "numbers": list(problem.numbers),
        "target": problem.target,
    }


def task_features():
    """The :class:`datasets.Features` of a task-suite row (shared by :mod:`labkit.gsm8k`)."""
    from datasets import Features, List, Value

    return Features({
        "prompt": List({"role": Value("string"), "content": Value("string")}),
        "question": Value("string"),
        "answer": Value("string"),
        "family": Value("string"),
        "difficulty": Value("int64"),
        "id": Value("string"),
        "numbers": List(Value("int64")),
        "target": Value("int64"),
    })


def data_dir() -> Path:
    """The lab's data folder: ``$LABKIT_DATA`` if set, else ``data/`` next to the package."""
    return Path(os.environ.get("LABKIT_DATA") or Path(__file__).resolve().parent.parent / "data")


def write_splits(out: str | Path) -> list[Path]:
    """Write ``train.jsonl`` and ``eval.jsonl`` into ``out``; return their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, problems in (("train", train_problems()), ("eval", eval_problems())):
        path = out / f"{name}.jsonl"
        with path.open("w", encoding="utf-8", newline="\n") as f:
            for problem in problems:
                f.write(json.dumps(to_row(problem)) + "\n")
        paths.append(path)
    return paths


def load_split(split: str = "train", path: str | Path | None = None, *, families=None,
               difficulties=None):
    """The shipped ``train`` or ``eval`` split as a :class:`datasets.Dataset`.

    ``path`` may name a jsonl file or a folder holding ``{split}.jsonl``; by default the file is
    ``tasks/{split}.jsonl`` under :func:`data_dir`. ``families`` and ``difficulties`` keep only
    those cells of the suite (default: all), in the file's order.
    """
    from datasets import Dataset

    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    families = _checked_subset("families", families, FAMILIES)
    difficulties = _checked_subset("difficulties", difficulties, DIFFICULTIES)
    file = Path(path) if path is not None else data_dir() / "tasks"
    if file.is_dir():
        file = file / f"{split}.jsonl"
    if not file.is_file():
        raise FileNotFoundError(f"{file} not found; build it with: python -m labkit.tasks --out "
                                f"{file.parent}")
    with file.open(encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    rows = [row for row in rows
            if row["family"] in families and row["difficulty"] in difficulties]
    return Dataset.from_list(rows, features=task_features())


def _checked_subset(name: str, chosen, allowed: tuple) -> tuple:
    if chosen is None:
        return allowed
    chosen = (chosen,) if isinstance(chosen, (str, int)) else tuple(chosen)
    unknown = [c for c in chosen if c not in allowed]
    if unknown or not chosen:
        raise ValueError(f"{name} must be a non-empty subset of {allowed}, got {chosen!r}")
    return chosen


#: Where the shipped tiny model has headroom: addition and subtraction of difficulty 2 and 3.
MEDIUM_CELLS = {"families": ("add", "sub"), "difficulties": (2, 3)}


def medium_cells(split: str = "train", path: str | Path | None = None):
    """The ``MEDIUM_CELLS`` of a split: the cells the notebooks' live runs train and evaluate on.

    Why these: the warm-started tiny Qwen solves them sometimes (eval pass@1 13-36% at
    temperature 1, pass@8 50-100%), so most groups hold both right and wrong answers, and a worked
    solution beats a direct guess, so RL has something to find within minutes on a CPU (GRPO: +30
    points in about 25 steps; ``tests/test_learning.py``). On the whole suite half the prompts are
    never solved and a tenth always, and the same budget buys a few points at most.
    """
    return load_split(split, path, **MEDIUM_CELLS)


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


def main(argv: list[str] | None = None) -> None:
    """Command line: write the shipped splits (``python -m labkit.tasks --out data/tasks``)."""
    parser = argparse.ArgumentParser(description="Write the task suite's train/eval splits.")
    parser.add_argument("--out", default="data/tasks", help="output folder (default data/tasks)")
    args = parser.parse_args(argv)
    for path in write_splits(args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
