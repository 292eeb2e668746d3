"""Reference runs: the longer training runs that the notebooks plot from committed logs.

A laptop CPU can afford a short live run in a notebook, not hundreds of steps of several variants.
So each comparison a notebook draws is described by a small JSON spec under ``data/runs/``::

    {"preset": "dapo", "overrides": {"max_steps": 200}, "seeds": [0, 1, 2],
     "data": {"families": ["add", "sub"], "difficulties": [2, 3]},
     "about": "DAPO, all four ideas, on the medium cells"}

``seeds`` (default ``[overrides.seed or 0]``) trains one run per seed, so a plot can show the
spread between seeds as a band; ``data`` selects task-suite cells for both the train and the eval
split (default: the whole suite); ``eval_data`` (optional) evaluates on other cells instead, e.g.
the easy cells a run on the medium ones may forget (``{}`` = the whole eval split);
``reward_funcs`` (optional) lists the reward functions to train on by their keys in
:data:`labkit.rewards.NAMED_REWARDS` (never by import path: a spec is data and must not choose
what code runs). This command trains it and writes the history next to the spec,
as ``<spec>.csv`` (one ``seed`` column, the runs one after the other)::

    python -m labkit.reference_runs data/runs/04_dapo/dapo.json [more specs...]

The CSV's first line is ``# command: ...``, the exact command that regenerates it;
:func:`labkit.viz.load_run` reads it back with that command in ``df.attrs["command"]``, and the
plots print it under the figure. The evaluation columns (``eval_*``) are merged into the history
at the steps where an evaluation ran (step 0 is the model before training).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd
import torch

from labkit.agents import named_environment
from labkit.agents.guessing import guessing_dataset
from labkit.config import preset
from labkit.rewards import NAMED_REWARDS, named_reward
from labkit.tasks import load_split
from labkit.trainer import train


def load_spec(path: str | Path) -> dict:
    """Read a run spec: ``preset`` (required), ``overrides`` (TrainConfig fields), ``about``."""
    spec = json.loads(Path(path).read_text())
    if "preset" not in spec:
        raise ValueError(f"{path}: a run spec needs a 'preset' key (e.g. \"grpo\")")
    refused = sorted({"resume_from", "output_dir", "seed"} & set(spec.get("overrides", {})))
    if refused:
        raise ValueError(f"{path}: a reference run starts from the shipped model, writes only "
                         f"its log and takes its seeds from the spec's 'seeds' list; the "
                         f"overrides may not set {', '.join(refused)}")
    unknown = set(spec) - {"preset", "overrides", "seeds", "data", "eval_data", "reward_funcs",
                           "environment", "about"}
    if unknown:
        raise ValueError(f"{path}: unknown spec keys {sorted(unknown)}")
    seeds = spec.setdefault("seeds", [0])
    if not seeds or not all(isinstance(s, int) and s >= 0 for s in seeds):
        raise ValueError(f"{path}: 'seeds' must be a non-empty list of integers >= 0")
    return spec


def reward_funcs(spec: dict, path) -> list | None:
    """The spec's ``reward_funcs``: keys of the lab's named rewards
    (:data:`labkit.rewards.NAMED_REWARDS`, e.g. ``"answer_anywhere"``, ``"judge"``); None: the
    trainer's default rewards. A spec names rewards by key, never by import path, so a shared
    spec cannot make this command import or run code of its choosing."""
    names = spec.get("reward_funcs")
    if names is None:
        return None
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{path}: 'reward_funcs' must be a non-empty list of reward names "
                         f"({', '.join(NAMED_REWARDS)})")
    try:
        return [named_reward(name) for name in names]
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def environment_factory(spec: dict, path):
    """The spec's ``environment``: a key of :data:`labkit.agents.NAMED_ENVIRONMENTS` (episodes
    with that environment's tools), or None for ordinary completions."""
    name = spec.get("environment")
    if name is None:
        return None
    try:
        return named_environment(name)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def run_history(result) -> pd.DataFrame:
    """The training history with the evaluation columns merged in at their steps.

    One column per metric: the trainer's history already carries the ``eval_*`` values of the
    steps that evaluated, so those columns are taken from ``eval_history`` alone, which also holds
    the evaluation of step 0 (the model before training).
    """
    history = result.history
    evals = result.eval_history
    if evals is None or evals.empty:
        return history
    evals = evals.rename(columns={c: c if c.startswith("eval_") or c == "step" else f"eval_{c}"
                                  for c in evals.columns})
    history = history.drop(columns=[c for c in evals.columns if c != "step" and c in history])
    return history.merge(evals, on="step", how="outer").sort_values("step", ignore_index=True)


def run_spec(path: str | Path, *, threads: int | None = None) -> Path:
    """Train the runs a spec describes (one per seed) and write ``<spec>.csv``; returns its path."""
    path = Path(path)
    spec = load_spec(path)
    if threads:
        torch.set_num_threads(threads)
    cells = spec.get("data", {})
    train_data = load_split("train", **cells) if cells else None
    eval_cells = spec.get("eval_data", cells)  # another eval set: what the run may forget
    eval_data = load_split("eval", **eval_cells) if eval_cells else None
    factory = environment_factory(spec, path)
    if spec.get("environment") == "guessing":  # the game brings its own data
        train_data = guessing_dataset(256, seed=0, difficulties=(2, 3))
        eval_data = guessing_dataset(40, seed=1, difficulties=(2, 3))
    histories = []
    start = time.perf_counter()
    for seed in spec["seeds"]:
        config = preset(spec["preset"], **{"progress": False, **spec.get("overrides", {}),
                                           "seed": seed})
        result = train(config, train_dataset=train_data, eval_dataset=eval_data,
                       reward_funcs=reward_funcs(spec, path), environment_factory=factory)
        history = run_history(result)
        history.insert(0, "seed", seed)
        histories.append(history)
    minutes = (time.perf_counter() - start) / 60
    out = path.with_suffix(".csv")
    with out.open("w") as f:
        f.write(f"# command: python -m labkit.reference_runs {path.as_posix()}\n")
        pd.concat(histories, ignore_index=True).to_csv(f, index=False, float_format="%.6g")
    print(f"{path}: {len(spec['seeds'])} seed(s) x {len(histories[0]) - 1} steps in "
          f"{minutes:.1f} min -> {out}")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description="Train reference runs from JSON specs and write "
                                             "their histories as CSV next to the specs.")
    ap.add_argument("specs", nargs="+", type=Path)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = ap.parse_args(argv)
    for spec in args.specs:
        run_spec(spec, threads=args.threads)


if __name__ == "__main__":
    main()
