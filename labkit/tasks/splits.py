"""Rows and splits: a problem as a dataset row, the shipped ``train``/``eval`` files, their cells.

:func:`to_row` gives TRL's conversational ``prompt`` plus the columns the rewards read;
:func:`write_splits` writes the shipped splits (``python -m labkit tasks``,
:mod:`labkit.tasks.build`) and :func:`load_split` reads them back as a :class:`datasets.Dataset`, from :func:`data_dir`
(``$LABKIT_DATA`` or the repository's ``data/``). :func:`medium_cells` is the slice the
notebooks' live runs use.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from labkit.tasks.problems import DIFFICULTIES, FAMILIES, Problem, eval_problems, train_problems


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
    """The :class:`datasets.Features` of a task-suite row (shared by :mod:`labkit.tasks.gsm8k`)."""
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
    return Path(os.environ.get("LABKIT_DATA") or Path(__file__).resolve().parents[2] / "data")


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
        raise FileNotFoundError(f"{file} not found; build it with: python -m labkit tasks --out "
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
