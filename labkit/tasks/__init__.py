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

    python -m labkit tasks --out data/tasks

:func:`load_split` reads them as a :class:`datasets.Dataset` in TRL's conversational format.
Set the environment variable ``LABKIT_DATA`` to read them from another data folder.

One module per job: :mod:`~labkit.tasks.problems` (generation), :mod:`~labkit.tasks.expressions`
(the arithmetic parser that countdown and the calculator tool share),
:mod:`~labkit.tasks.solutions` (solution text and SFT data), :mod:`~labkit.tasks.grading`
(checking answers), :mod:`~labkit.tasks.splits` (rows and split files), :mod:`~labkit.tasks.gsm8k`
(GSM8K in the suite's schema) and :mod:`~labkit.tasks.build` (the command).
"""

from labkit.tasks.expressions import evaluate, format_expression, parse_expression
from labkit.tasks.grading import CHECKABLE_FAMILIES, check_answer, check_countdown
from labkit.tasks.problems import (
    DIFFICULTIES,
    EVAL_PER_CELL,
    EVAL_SEED,
    FAMILIES,
    TRAIN_SEED,
    TRAIN_SIZE,
    Problem,
    eval_problems,
    generate_problems,
    make_problem,
    train_problems,
)
from labkit.tasks.solutions import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    DEFAULT_STYLE_WEIGHTS,
    STYLES,
    THINK_CLOSE,
    THINK_OPEN,
    WARM_START_STYLE_WEIGHTS,
    completion_text,
    problem_from_row,
    sft_examples,
    solution_text,
    worked_solution,
)
from labkit.tasks.splits import (
    MEDIUM_CELLS,
    data_dir,
    load_split,
    medium_cells,
    task_features,
    to_row,
    write_splits,
)

__all__ = [
    "ANSWER_CLOSE",
    "ANSWER_OPEN",
    "CHECKABLE_FAMILIES",
    "DEFAULT_STYLE_WEIGHTS",
    "DIFFICULTIES",
    "EVAL_PER_CELL",
    "EVAL_SEED",
    "FAMILIES",
    "MEDIUM_CELLS",
    "STYLES",
    "THINK_CLOSE",
    "THINK_OPEN",
    "TRAIN_SEED",
    "TRAIN_SIZE",
    "WARM_START_STYLE_WEIGHTS",
    "Problem",
    "check_answer",
    "check_countdown",
    "completion_text",
    "data_dir",
    "eval_problems",
    "evaluate",
    "format_expression",
    "generate_problems",
    "load_split",
    "make_problem",
    "medium_cells",
    "parse_expression",
    "problem_from_row",
    "sft_examples",
    "solution_text",
    "task_features",
    "to_row",
    "train_problems",
    "worked_solution",
    "write_splits",
]
