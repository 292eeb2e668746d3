"""Training curves: committed reference logs and live runs, with the command that regenerates each."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from labkit.viz.style import SMALL, legend_above, make_panels


def load_run(path) -> pd.DataFrame:
    """Read a CSV training log; ``# key: value`` lines at its top go to ``df.attrs``.

    The reference logs in ``data/runs/`` start with ``# command: <the command that regenerates
    this log>``; it ends up in ``df.attrs["command"]`` and :func:`plot_runs` prints it under the
    figure.
    """
    path = Path(path)
    header: dict[str, str] = {}
    skip = 0
    with path.open() as f:
        for line in f:
            if not line.startswith("#"):
                break
            skip += 1
            key, sep, value = line[1:].partition(":")
            if sep:
                header[key.strip()] = value.strip()
    df = pd.read_csv(path, skiprows=skip)
    df.attrs.update(header)
    return df


# Units of the logged metrics, for the y axes of plot_runs (a metric not listed is a plain number).
_METRIC_UNITS = {
    "completion_length": "tokens", "completion_length_max": "tokens", "eval_length": "tokens",
    "reward_length": "tokens", "entropy": "nats per token", "kl_old": "nats per token",
    "kl_ref": "nats per token", "step_time": "s", "generation_time": "s",
    "tokens_per_second": "tokens / s", "peak_memory_mb": "MiB", "accuracy": "fraction",
    "eval_accuracy": "fraction", "eval_pass@k": "fraction", "clip_low": "fraction of tokens",
    "clip_high": "fraction of tokens", "clip_region": "fraction of tokens",
    "frac_reward_zero_std": "fraction of groups", "truncation_rate": "fraction",
    "eval_truncation": "fraction", "value_clipfrac": "fraction of tokens",
    "offpolicy_kl": "nats per token", "offpolicy_clip_frac": "fraction of tokens",
    "offpolicy_corrected_frac": "fraction of tokens", "environment_logp": "nats per token",
    "tool_call_rate": "fraction of episodes", "eval_tool_call_rate": "fraction of episodes",
    "tool_error_rate": "fraction of calls", "policy_tokens": "tokens",
    "sampled_tokens": "tokens", "eval_length_correct": "tokens", "eval_length_wrong": "tokens",
    "sampling_logp_diff": "nats per token", "sampling_logp_diff_max": "nats",
    "is_ratio_mean": "ratio (1 = on-policy)",
}


def _metric_unit(metric: str) -> str:
    """The y-axis label of a logged metric: its unit, a share for the per-family accuracies
    (``accuracy_mul``, ``eval_accuracy_add_d2``), else the metric's own name."""
    if metric in _METRIC_UNITS:
        return _METRIC_UNITS[metric]
    if metric.startswith(("accuracy_", "eval_accuracy_")):
        return "fraction"
    return metric


def summary_values(runs: Mapping[str, pd.DataFrame],
                   extra: Mapping[str, Callable[[pd.DataFrame], float]] | None = None,
                   late_from: int | None = None) -> dict[str, pd.DataFrame]:
    """The numbers behind :func:`runs_summary`: for each run, a frame with one row per summary
    row and the columns ``mean``, ``min`` and ``max`` over the seeds (all three the same for a
    one-seed log) and ``seeds``. A notebook records these (:mod:`labkit.quotes`) so that a quoted
    ``0.354 (0.347-0.362)`` has a source; the arguments are :func:`runs_summary`'s."""
    extra = dict(extra or {})
    values = {}
    for name, df in runs.items():
        missing = {"reward", "eval_accuracy", "eval_length"} - set(df.columns)
        if missing:
            raise ValueError(f"run {name!r} has no {sorted(missing)} column(s); runs_summary "
                             f"needs a log with evaluations (labkit.commands.reference_runs writes them)")
        parts = [df] if _seeds(df) < 2 else [part for _, part in df.groupby("seed")]
        per_seed = pd.DataFrame([_summary_of_one_seed(part, extra, late_from) for part in parts])
        values[name] = pd.DataFrame({"mean": per_seed.mean(), "min": per_seed.min(),
                                     "max": per_seed.max(), "seeds": len(per_seed)})
    return values


def summary_records(frame: pd.DataFrame, rows: Mapping[str, str]) -> dict[str, float]:
    """What a notebook records (:mod:`labkit.quotes`) of one run's :func:`summary_values` frame:
    for each ``row: key``, the mean over the seeds as ``key`` and the lowest and the highest seed
    as ``key_min`` and ``key_max``, the three numbers a ``mean (min–max)`` cell shows."""
    return {f"{key}{suffix}": float(frame.loc[row, stat]) for row, key in rows.items()
            for stat, suffix in (("mean", ""), ("min", "_min"), ("max", "_max"))}


def runs_summary(runs: Mapping[str, pd.DataFrame],
                 extra: Mapping[str, Callable[[pd.DataFrame], float]] | None = None,
                 late_from: int | None = None) -> pd.DataFrame:
    """One column per run: steps, completions that trained, seconds per step, eval accuracy and
    length at the start and the end, and the best eval accuracy.

    One evaluation of a few hundred samples is noisy, so ``late_from`` (a step) adds two rows: a
    seed's eval accuracy and eval length averaged over its evaluations at that step and after.

    ``extra`` adds rows: a name and a function of the run's training rows (one seed's), e.g.
    ``{"entropy, last 20 steps": lambda d: d["entropy"].tail(20).mean()}``. A log of several
    seeds (a ``seed`` column) is summarised per seed, and its cells read ``mean (min–max)``: the
    mean over the seeds, then the lowest and the highest seed (the band of :func:`plot_runs`),
    with a ``seeds`` row; the cells of a one-seed log stay numbers. With three seeds a "±" would
    suggest a symmetric error bar that the seeds do not give. :func:`summary_values` gives the
    same numbers unformatted.

    ``runs`` maps a name to a history with evaluation columns (``TrainResult.history`` merged with
    its evaluations, or a reference log from :func:`load_run`). Rows without a ``reward`` are
    evaluation-only rows (step 0); rows without ``eval_accuracy`` did not evaluate.
    """
    rows = {}
    for name, frame in summary_values(runs, extra, late_from).items():
        seeds = int(frame["seeds"].iloc[0])
        if seeds < 2:
            rows[name] = frame["mean"].to_dict()
            continue
        rows[name] = {key: _mean_and_range(row) for key, row in frame.iterrows()}
        rows[name]["steps"] = int(frame.loc["steps", "max"])
        rows[name]["seeds"] = seeds
    table = pd.DataFrame(rows).round(3)
    if "seeds" in table.index:
        # an object row (text cells beside numbers): fill explicitly rather than rely on
        # fillna's dtype downcasting, which pandas 2.2 deprecates and pandas 3 dropped
        table.loc["seeds"] = [1 if pd.isna(v) else int(v) for v in table.loc["seeds"]]
    return table


def _mean_and_range(row: pd.Series) -> str:
    """``mean (min–max)``, with one decimal from 10 up and three below (token counts and
    fractions), two significant digits when the whole row is below 0.01."""
    largest = max(abs(row["mean"]), abs(row["min"]), abs(row["max"]))
    digits = ".1f" if largest >= 10 else ".3f" if largest >= 0.01 or largest == 0 else ".2g"
    return f"{row['mean']:{digits}} ({row['min']:{digits}}–{row['max']:{digits}})"


def _first_eval(column: str) -> Callable[[pd.DataFrame], float]:
    return lambda d: float(d[column].dropna().iloc[0])


def _last_eval(column: str) -> Callable[[pd.DataFrame], float]:
    return lambda d: float(d[column].dropna().iloc[-1])


#: What a live run's table says per seed: eval pass@1, pass@k and length at the first and the last
#: evaluation (a live run evaluates before training and at its end). The names are identifiers, so a
#: notebook can record them under the same names (:mod:`labkit.quotes`).
EVAL_CHANGE = {"pass1_before": _first_eval("eval_accuracy"),
               "pass1_after": _last_eval("eval_accuracy"),
               "passk_before": _first_eval("eval_pass@k"),
               "passk_after": _last_eval("eval_pass@k"),
               "length_before": _first_eval("eval_length"),
               "length_after": _last_eval("eval_length")}


def per_seed(run: pd.DataFrame,
             values: Mapping[str, Callable[[pd.DataFrame], float]] = EVAL_CHANGE) -> pd.DataFrame:
    """One row per seed of a log (its ``seed`` column; one row for a log without one), one column
    per value, each a function of that seed's rows, training and evaluation rows together
    (default :data:`EVAL_CHANGE`). The per-seed table under a live run is printed from a
    reference log of the same run with more seeds (``data/runs/*/live_seeds.json``), so every
    seed's figure has a source, not only the live seed's."""
    parts = run.groupby("seed") if "seed" in run else [(0, run)]
    table = pd.DataFrame({seed: {name: fn(part) for name, fn in values.items()}
                          for seed, part in parts}).T
    table.index.name = "seed"
    return table


def live_beside_log(result, logged: pd.DataFrame,
                    values: Mapping[str, Callable[[pd.DataFrame], float]] = EVAL_CHANGE) -> pd.DataFrame:
    """The per-seed table under a live run: the run ``result`` as this kernel made it (first row,
    "this kernel (seed 0)"), then ``logged``, the :func:`per_seed` table of the committed log of
    the same run ("log, seed N"), with the same ``values``. The log's seed 0 has the live run's
    settings but was written on the lab's machine; another CPU rounds differently and the two part
    after a few steps (``docs/reproducibility.md``), so the row to set against the seeds is this
    kernel's."""
    # the eval figures from eval_history alone: the history repeats the last evaluation on its
    # last step, which would come first in the rows and read as the "before"
    steps = result.history.drop(columns=[c for c in result.history.columns if str(c).startswith("eval_")])
    rows = pd.concat([steps, result.eval_history], ignore_index=True)
    this_kernel = per_seed(rows.drop(columns="seed", errors="ignore"), values)
    return pd.concat([this_kernel.set_axis(["this kernel (seed 0)"]),
                      logged.set_axis([f"log, seed {seed}" for seed in logged.index])]
                     ).rename_axis("run")


def _summary_of_one_seed(df: pd.DataFrame, extra: Mapping[str, Callable],
                         late_from: int | None = None) -> dict:
    steps, evals = df.dropna(subset=["reward"]), df.dropna(subset=["eval_accuracy"])
    row = {"steps": int(steps["step"].max()),
           "completions with a gradient per step": steps["completions_trained"].mean(),
           "seconds per step (wall)": steps["step_time"].mean(),
           "eval accuracy, start": evals["eval_accuracy"].iloc[0],
           "eval accuracy, end": evals["eval_accuracy"].iloc[-1],
           "best eval accuracy": evals["eval_accuracy"].max(),
           "eval length, start": evals["eval_length"].iloc[0],
           "eval length, end": evals["eval_length"].iloc[-1]}
    if late_from is not None:
        late = evals[evals["step"] >= late_from]
        row[f"eval accuracy, steps {late_from}+"] = late["eval_accuracy"].mean()
        row[f"eval length, steps {late_from}+"] = late["eval_length"].mean()
    row.update({key: float(fn(steps)) for key, fn in extra.items()})
    return row


def _seeds(df: pd.DataFrame) -> int:
    """How many seeds a log holds (a reference log of several seeds has a ``seed`` column)."""
    return int(df["seed"].nunique()) if "seed" in df else 1


def _over_seeds(df: pd.DataFrame, metric: str, x: str, smooth: int):
    """(x, mean, min, max) of ``metric`` over the seeds of a log, each seed's curve smoothed
    first; None for a log of one seed (or without an ``x`` column to align the seeds on)."""
    if _seeds(df) < 2 or x not in df:
        return None
    logged = df.dropna(subset=[metric])
    curves = logged.pivot_table(index=x, columns="seed", values=metric)  # one column per seed
    if smooth > 1:
        curves = curves.rolling(smooth, min_periods=1).mean()
    return (curves.index.to_numpy(), curves.mean(axis=1).to_numpy(),
            curves.min(axis=1).to_numpy(), curves.max(axis=1).to_numpy())


def _regenerate_footer(commands: Mapping[str, str]) -> list[str]:
    """The lines saying how to regenerate logged runs: one command, one pattern when the commands
    differ only by the run's name (``.../<name>.json``, so many runs do not widen the figure), else
    one line per run."""
    if len(set(commands.values())) <= 1:
        return [f"regenerate: {c}" for c in set(commands.values())]
    patterns = {re.sub(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", "<name>", c)
                for name, c in commands.items()}
    if len(patterns) == 1 and "<name>" in next(iter(patterns)):
        return [f"regenerate: {patterns.pop()}"]
    return [f"regenerate {n}: {c}" for n, c in commands.items()]


def plot_runs(runs: Mapping[str, pd.DataFrame],
              metrics: Sequence[str] = ("reward", "accuracy", "completion_length"),
              smooth: int = 1, x: str = "step", axes=None) -> Figure:
    """Training curves of several runs, one panel per metric column, one legend for all panels.

    ``runs`` maps a name to a history DataFrame (``TrainResult.history`` or :func:`load_run`).
    With ``smooth`` > 1 a moving average over that many logged values is drawn over the faint raw
    curve. Rows where a metric is missing (a log's evaluation-only rows, or a metric logged only
    every few steps) are skipped, so the curve joins the points it has. A run without a metric is
    left out of that panel, whose title names it. The runs' legend sits above the panels, once;
    when runs carry a ``command`` in ``df.attrs`` (reference logs), the figure's footer says how
    to regenerate them. Up to three panels a row, 833 px wide at :data:`FIGURE_DPI`.

    A log of several seeds (a ``seed`` column with more than one value, as the reference logs of
    ``labkit.commands.reference_runs`` with ``"seeds": [...]``) is drawn as its mean over seeds with a
    min-max band; ``smooth`` then applies to each seed's curve before they are combined, and the
    legend says how many seeds.

    What to see: compare runs on the same axes: reward and accuracy rising, completion length
    growing or shrinking, entropy and clip fractions over training.

    Returns:
        the figure (one panel per metric).
    """
    if not metrics:
        raise ValueError("metrics must name at least one column")
    if smooth < 1:
        raise ValueError(f"smooth must be >= 1 (rows in the moving average), got {smooth}")
    fig, panels = make_panels(axes, len(metrics), ncols=min(len(metrics), 3), width=3.05, height=2.5)
    handles = {}
    for ax, metric in zip(panels, metrics):
        missing = []
        for k, (name, df) in enumerate(runs.items()):
            if metric not in df:
                missing.append(name)
                continue
            band = _over_seeds(df, metric, x, smooth)
            if band is not None:
                xs, mean, low, high = band
                ax.fill_between(xs, low, high, color=f"C{k}", alpha=0.2, lw=0)
                (handles[name],) = ax.plot(xs, mean, color=f"C{k}",
                                           label=f"{name} ({df['seed'].nunique()} seeds)")
                continue
            y = df[metric]
            logged = y.notna().to_numpy()
            xs, y = np.asarray(df.get(x, df.index))[logged], y[logged]
            if smooth > 1:
                ax.plot(xs, y, color=f"C{k}", alpha=0.25, lw=1)
                y = y.rolling(smooth, min_periods=1).mean()
            (handles[name],) = ax.plot(xs, y, color=f"C{k}", label=name)
        # A long list of names would stretch the panel's title past the figure: count them instead
        absent = ("" if not missing else
                  f"\n(not logged by: {', '.join(missing)})" if len(missing) <= 2 else
                  f"\n({len(missing)} of {len(runs)} runs lack it)")
        ax.set(title=metric + absent,
               xlabel="training step" if x == "step" else x,
               ylabel=_metric_unit(metric))  # the title names the metric
    seeded = any(_seeds(df) > 1 for df in runs.values())
    title = "; ".join(([f"moving average of {smooth} (faint: raw values)"] if smooth > 1 else [])
                      + (["band: min-max over seeds"] if seeded else [])) or None
    labels = [h.get_label() for h in handles.values()]
    legend_above(fig, panels, list(handles.values()), labels, title=title)
    commands = {name: df.attrs["command"] for name, df in runs.items() if df.attrs.get("command")}
    # "small" is about 8.3 pt; a character of it about 0.6 em wide: wrap to the figure's width
    columns = max(20, int(fig.get_figwidth() * 72 / (0.6 * 8.3)))
    footer = [part for line in _regenerate_footer(commands)
              for part in textwrap.wrap(line, columns, subsequent_indent="    ",
                                        break_on_hyphens=False)]
    if footer:
        fig.supxlabel("\n".join(footer), x=0.01, ha="left", fontsize=SMALL)
    if axes is None:  # room for the footer on top of the panels' own height
        fig.set_figheight(fig.get_figheight() + 0.17 * len(footer))
    return fig


class LivePlot:
    """Trainer callback: redraw :func:`plot_runs` of the run so far, in one output area.

    ``train(config, callbacks=[LivePlot(("reward", "accuracy"), every=5)])`` draws the curves after
    every ``every``-th step and after the last one, replacing the previous drawing (no flood of
    figures). In a notebook it uses IPython's updatable display; elsewhere it does nothing, so a
    script can keep the callback. ``smooth`` is passed to :func:`plot_runs`.
    """

    def __init__(self, metrics: Sequence[str] = ("reward", "accuracy", "completion_length"),
                 every: int = 5, smooth: int = 1, label: str = "this run"):
        if every < 1:
            raise ValueError(f"every must be >= 1 (steps between redraws), got {every}")
        self.metrics, self.every, self.smooth, self.label = tuple(metrics), every, smooth, label
        self.handle = None

    def __call__(self, trainer, row) -> None:
        last = row["step"] == trainer.config.max_steps
        if row["step"] % self.every and not last:
            return
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            return
        if get_ipython() is None:
            return
        fig = plot_runs({self.label: trainer.history}, self.metrics, smooth=self.smooth)
        if self.handle is None:
            self.handle = display(fig, display_id=True)
        else:
            self.handle.update(fig)
