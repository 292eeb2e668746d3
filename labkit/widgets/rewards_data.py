"""Notebook 08's widgets: TTRL's majority vote, prompt sampling weights and pass@k."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

import pandas as pd

from labkit import viz
from labkit.widgets.controls import (
    _STYLE,
    _interactive,
    _slider,
    widgets_enabled,
)


def majority_vote_widget(samples: pd.DataFrame, prompt: int = 0, group_size: int | None = None):
    """TTRL's vote on sampled groups: slide over the prompts of ``samples`` (the frame of
    ``labkit.evaluate.sample_answers``) and over G, the samples that vote
    (``viz.plot_majority_vote``)."""
    per_prompt = int(samples.groupby("id").size().min())
    group_size = per_prompt if group_size is None else group_size
    if not widgets_enabled():
        return viz.plot_majority_vote(samples, prompt, group_size)
    controls = {
        "prompt": _slider("IntSlider", prompt, 0, samples["id"].nunique() - 1, 1, "prompt"),
        "group_size": _slider("IntSlider", group_size, 1, per_prompt, 1, "samples G"),
    }
    return _interactive(partial(viz.plot_majority_vote, samples), controls)


def sampling_weights_widget(solve_rates: Sequence[float] = (0.9, 0.6, 0.3, 0.1),
                            progress: float = 0.25, floor: float = 0.05,
                            accuracies: Mapping[str, float] | None = None, lam: float = 0.2,
                            lr: float = 0.025):
    """Prompt sampling weights as solve rates change (``viz.plot_sampling_weights``): sliders
    for the solve rates of difficulty 1-4, the share of training done, prioritized sampling's
    floor, the families' accuracies and MT-GRPO's lambda and learning rate (log scale)."""
    accuracies = dict(accuracies or {"add": 0.6, "sub": 0.45, "mul": 0.1})
    if not widgets_enabled():
        return viz.plot_sampling_weights(solve_rates, progress, floor, accuracies, lam=lam, lr=lr)
    import ipywidgets as widgets

    rates = {f"d{d + 1}": _slider("FloatSlider", s, 0.0, 1.0, 0.05, f"d{d + 1} solve rate")
             for d, s in enumerate(solve_rates)}
    families = {f: _slider("FloatSlider", a, 0.0, 1.0, 0.05, f"{f} accuracy")
                for f, a in accuracies.items()}
    controls = {
        **rates,
        "progress": _slider("FloatSlider", progress, 0.0, 1.0, 0.05, "training done"),
        "floor": _slider("FloatSlider", floor, 0.0, 0.5, 0.01, "floor"),
        **{f"acc_{f}": box for f, box in families.items()},
        "lam": _slider("FloatSlider", lam, 0.0, 2.0, 0.05, "λ (accuracy term)"),
        "lr": _slider("FloatLogSlider", lr, -3, 1, 0.1, "MT-GRPO lr", base=10),
    }
    rows = [widgets.HBox([*rates.values(), controls["progress"], controls["floor"]],
                         layout=widgets.Layout(flex_flow="row wrap")),
            widgets.HBox([*families.values(), controls["lam"], controls["lr"]],
                         layout=widgets.Layout(flex_flow="row wrap"))]

    def draw(progress, floor, lam, lr, **values):
        return viz.plot_sampling_weights(
            [values[f"d{d + 1}"] for d in range(len(solve_rates))], progress, floor,
            {f: values[f"acc_{f}"] for f in accuracies}, lam=lam, lr=lr)

    return _interactive(draw, controls, rows)


def pass_at_k_widget(curves: Mapping[str, pd.DataFrame], cell: str = "all"):
    """pass@k before and after training, cell by cell (``viz.plot_pass_at_k``): ``curves`` maps
    a model's name to its ``labkit.evaluate.pass_at_k_curve`` frame."""
    if not widgets_enabled():
        return viz.plot_pass_at_k(curves, cell)
    import ipywidgets as widgets

    first = next(iter(curves.values()))
    cells = ["all"] + [f"{f} d{d}" for f, d in zip(first["family"], first["difficulty"])
                       if f != "all"]
    controls = {"cell": widgets.Dropdown(options=cells, value=cell if cell in cells else "all",
                                         description="cell", style=_STYLE)}
    return _interactive(partial(viz.plot_pass_at_k, curves), controls)


#: Models the memory planner widget offers: the shipped tiny Qwen and the shipped real shapes.
