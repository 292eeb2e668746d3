"""Training curves of logged runs, with the runs, metrics and x axis to choose."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import pandas as pd

from labkit import viz
from labkit.widgets.controls import (
    _STYLE,
    _checkboxes,
    _interactive,
    _slider,
    widgets_enabled,
)

# Columns that can be the x axis of training curves: the step, and cumulative counters.
_STEP_LIKE = re.compile(r"step|epoch|elapsed\w*|wall_time|total_\w+|\w+_total|cum\w+|\w+_seen")


def _x_columns(runs: Mapping[str, pd.DataFrame], x: str) -> list[str]:
    """The x axis choices: ``step`` and the cumulative counters the runs log (non-decreasing)."""
    columns = {c for df in runs.values() for c in df.select_dtypes("number").columns}
    counters = sorted(c for c in columns - {"step"} if _STEP_LIKE.fullmatch(c)
                      and all(df[c].dropna().is_monotonic_increasing
                              for df in runs.values() if c in df))
    return ["step", *counters] + ([x] if x in columns - {"step", *counters} else [])


def runs_widget(runs: Mapping[str, pd.DataFrame],
                metrics: Sequence[str] = ("reward", "accuracy", "completion_length"),
                smooth: int = 1, x: str = "step"):
    """Training curves: tick runs and metric columns, smooth with a moving average.

    ``runs`` maps names to histories (``TrainResult.history`` or ``viz.load_run`` of a reference
    log in ``data/runs/``). Every run and every numeric column is a checkbox, all in view; the
    panels follow the order in which metrics are ticked. The x axis is the training step or a
    cumulative counter the logs hold.
    """
    if not widgets_enabled():
        return viz.plot_runs(runs, metrics, smooth, x)
    import ipywidgets as widgets

    columns = sorted({c for df in runs.values() for c in df.select_dtypes("number").columns}
                     - {"step"})
    x_columns = _x_columns(runs, x)
    controls = {
        "names": _checkboxes(list(runs), list(runs), column_px=260, in_click_order=False),
        "metrics": _checkboxes(columns, [m for m in metrics if m in columns], column_px=190,
                               in_click_order=True),
        "smooth": _slider("IntSlider", smooth, 1, 50, 1, "moving average"),
        "x": widgets.Dropdown(options=x_columns, value=x if x in x_columns else "step",
                              description="x axis", style=_STYLE),
    }

    def heading(text):
        return widgets.HTML(f"<b>{text}</b>")

    rows = [heading("runs"), controls["names"],
            heading("metrics (one panel each, in the order ticked)"), controls["metrics"],
            widgets.HBox([controls["smooth"], controls["x"]],
                         layout=widgets.Layout(flex_flow="row wrap"))]

    def draw(names, metrics, smooth, x):
        return viz.plot_runs({n: runs[n] for n in names}, metrics, smooth, x)

    return _interactive(draw, controls, rows)
