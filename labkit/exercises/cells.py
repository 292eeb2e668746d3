"""Reading an evaluation: which (family, difficulty) cells give GRPO a gradient
(:func:`cell_signal`), and the check of a learner's prediction of them
(:func:`check_liftable_cells`)."""

from __future__ import annotations

import pandas as pd

_CELL_KEYS = ["family", "difficulty"]


def cell_signal(samples: pd.DataFrame) -> pd.DataFrame:
    """How many prompts of each (family, difficulty) cell would give GRPO a gradient.

    ``samples`` is the per-sample frame of ``labkit.evaluate.evaluate(..., return_samples=True)``
    (``id``, ``family``, ``difficulty``, ``correct``; a NaN counts as wrong, a positive value as
    right, as in :func:`labkit.evaluate.pass_at_k_curve`). Under a 0/1 reward a prompt's group has
    a non-zero advantage only when some answers are right and some wrong: ``mixed``.

    ============  ==================================================================
    column        meaning
    ============  ==================================================================
    family, ...   the cell, one row each, sorted
    ``cell``      its name, ``"<family> d<difficulty>"`` (as ``viz.plot_pass_at_k``)
    ``prompts``   prompts in the cell
    ``accuracy``  share of the cell's answers that are right (the heat map's value)
    ``never``     prompts with no right answer: no signal, no headroom reached
    ``always``    prompts with every answer right: no signal, no headroom left
    ``mixed``     the others: the prompts that give GRPO a gradient
    ============  ==================================================================
    """
    missing = [c for c in ["id", *_CELL_KEYS, "correct"] if c not in samples.columns]
    if missing:
        raise ValueError(f"samples needs the columns {missing} (the frame of evaluate(..., "
                         f"return_samples=True)), it has {list(samples.columns)}")
    if samples.empty:
        raise ValueError("samples is empty: evaluate at least one prompt")
    frame = samples[["id", *_CELL_KEYS]].assign(right=samples["correct"].fillna(0) > 0)
    prompts = frame.groupby([*_CELL_KEYS, "id"], sort=True)["right"].agg(["sum", "size"])
    prompts = prompts.assign(never=prompts["sum"] == 0,
                             always=prompts["sum"] == prompts["size"])
    prompts["mixed"] = ~(prompts["never"] | prompts["always"])
    cells = prompts.groupby(_CELL_KEYS, sort=True).agg(
        prompts=("size", "size"), never=("never", "sum"), always=("always", "sum"),
        mixed=("mixed", "sum"))
    cells.insert(1, "accuracy", frame.groupby(_CELL_KEYS, sort=True)["right"].mean())
    cells = cells.reset_index()
    cells.insert(2, "cell", [f"{f} d{d}" for f, d in zip(cells["family"], cells["difficulty"])])
    return cells.astype({"prompts": int, "never": int, "always": int, "mixed": int})


def _cell_names(prediction, known: list[str]) -> list[str]:
    """The learner's cells as ``"<family> d<difficulty>"`` names; ValueError for any other."""
    if isinstance(prediction, str) or not hasattr(prediction, "__iter__"):
        raise TypeError(f"prediction must be a list of cells such as [\"add d2\", \"sort d1\"], "
                        f"got {prediction!r}")
    names = []
    for item in prediction:
        if isinstance(item, tuple) and len(item) == 2:
            item = f"{item[0]} d{item[1]}"
        name = " ".join(str(item).split())
        if name not in known:
            raise ValueError(f"{item!r} is not a cell of this evaluation; name cells as "
                             f"\"<family> d<difficulty>\", one of {known}")
        names.append(name)
    return names


def check_liftable_cells(prediction, samples: pd.DataFrame, *, liftable: float = 0.7,
                         dead: float = 0.3) -> bool:
    """Check a learner's prediction of the cells where GRPO gets a gradient.

    The learner names, from the accuracy heat map, the (family, difficulty) cells whose prompts
    mostly give GRPO something to learn from: some answers right and some wrong
    (:func:`cell_signal`'s ``mixed``). A cell where at least ``liftable`` of the prompts are mixed
    must be named; a cell where at most ``dead`` are must not be; a cell in between counts either
    way (with 10 prompts a cell, one prompt more or less must not decide a prediction).

    Args:
        prediction: a list of cells, ``"add d2"`` or ``("add", 2)``.
        samples: the per-sample frame of ``evaluate(..., return_samples=True)``.
        liftable, dead: the shares of mixed prompts above and below which a cell is decided
            (``0 <= dead < liftable <= 1``).

    Returns:
        True if the prediction names every liftable cell and no dead one; prints, either way,
        what the evaluation measured, cell by cell.
    """
    for label, value in (("liftable", liftable), ("dead", dead)):
        if not (isinstance(value, int | float) and not isinstance(value, bool)
                and 0 <= value <= 1):
            raise ValueError(f"{label} must be a share between 0 and 1, got {value!r}")
    if not dead < liftable:
        raise ValueError(f"dead ({dead}) must be below liftable ({liftable})")
    cells = cell_signal(samples).set_index("cell")
    named = set(_cell_names(prediction, list(cells.index)))
    share = cells["mixed"] / cells["prompts"]
    must = set(cells.index[share >= liftable - 1e-9])
    must_not = set(cells.index[share <= dead + 1e-9])
    missed = [c for c in cells.index if c in must - named]
    wrong = [c for c in cells.index if c in must_not & named]
    rule = (f"A cell is liftable when at least {liftable:.0%} of its prompts are mixed (some "
            f"answers right, some wrong), dead when at most {dead:.0%} are; a cell in between "
            f"counts either way.")
    if not missed and not wrong:
        print(f"Right: you named all {len(must)} liftable cells and no dead one. {rule}")
    else:
        print(f"Not quite. {rule}")
        for c in missed:
            row = cells.loc[c]
            print(f"- you left out {c} (accuracy {row['accuracy']:.0%}): {row['mixed']} of its "
                  f"{row['prompts']} prompts are mixed, and each of their groups has right "
                  f"answers to push up and wrong ones to push down")
        for c in wrong:
            row = cells.loc[c]
            print(f"- you named {c} (accuracy {row['accuracy']:.0%}): of its {row['prompts']} "
                  f"prompts {row['never']} were never solved and {row['always']} always: in "
                  f"those groups every reward is equal, so every advantage is zero")
    table = cells.assign(shown=[f"{m}/{p}" + (" *" if c in named else "")
                                for c, m, p in zip(cells.index, cells["mixed"],
                                                   cells["prompts"])])
    grid = table.pivot(index="family", columns="difficulty", values="shown").fillna("")
    print("\nmixed prompts per cell (* = named by you):")
    print(grid.to_string())
    return not missed and not wrong
