"""The task suite's problems: five families at four difficulty levels, drawn from seeded streams.

:func:`make_problem` draws one :class:`Problem` of a family and difficulty;
:func:`generate_problems` draws a balanced, reproducible list; :func:`eval_problems` and :func:`train_problems` are the
shipped splits' problems (questions disjoint). Every countdown instance is built from a random
expression, so it is solvable. The families are listed in :mod:`labkit.tasks`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from labkit.tasks.expressions import evaluate, format_expression

FAMILIES = ("add", "sub", "mul", "countdown", "sort")
DIFFICULTIES = (1, 2, 3, 4)

TRAIN_SEED = 1
EVAL_SEED = 0
TRAIN_SIZE = 2000
EVAL_PER_CELL = 10  # eval rows per family x difficulty

# countdown: (how many numbers, smallest, largest, largest allowed target) per difficulty
_COUNTDOWN_LEVELS = {1: (2, 1, 9, 81), 2: (3, 1, 9, 200), 3: (3, 2, 25, 500), 4: (4, 1, 12, 500)}
# sort: (how many numbers, largest value) per difficulty
_SORT_LEVELS = {1: (3, 9), 2: (4, 99), 3: (5, 99), 4: (6, 99)}
# mul: (digits of a, digits of b) per difficulty
_MUL_LEVELS = {1: (1, 1), 2: (2, 1), 3: (2, 2), 4: (3, 2)}

_MAX_DRAWS = 10_000  # draws per row before generate_problems gives up on a full cell


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
