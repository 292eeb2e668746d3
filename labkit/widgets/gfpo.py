"""Notebook 06's widget: GFPO's filter on one group."""

from __future__ import annotations

from collections.abc import Sequence

from labkit import viz
from labkit.widgets.controls import (
    _STYLE,
    _interactive,
    _numbers,
    _slider,
    _text,
    _textbox,
    widgets_enabled,
)


def gfpo_widget(rewards: Sequence[float] = (1, 1, 0, 1, 0, 1, 1, 0),
                lengths: Sequence[float] = (120, 340, 410, 95, 150, 210, 380, 60),
                num_remains_in_group: int = 4, metric: str = "length"):
    """GFPO: type a group's rewards and lengths, choose k and the metric: who keeps a gradient?

    The "kept k" slider (``num_remains_in_group``) runs from 1 to the group size G, the number of
    rewards typed, and follows it when the rewards change.
    """
    if not widgets_enabled():
        return viz.plot_gfpo_filter(rewards, lengths, num_remains_in_group, metric)
    import ipywidgets as widgets

    group_size = max(len(rewards), 1)
    rewards_box = _textbox(_text(rewards), "rewards")
    kept = _slider("IntSlider", min(num_remains_in_group, group_size), 1, group_size, 1,
                   "kept k", tooltip="num_remains_in_group: completions kept of the group's G")

    def follow_group_size(change):  # observed before the figure is: k is clamped first
        try:
            size = len(_numbers(change["new"], "rewards") or [])
        except ValueError:
            return  # the figure shows the message
        if size:
            kept.max = size

    rewards_box.observe(follow_group_size, "value")
    controls = {
        "rewards": rewards_box,
        "lengths": _textbox(_text(lengths), "lengths"),
        "num_remains_in_group": kept,
        "metric": widgets.Dropdown(options=["length", "token_efficiency"], value=metric,
                                   description="metric", style=_STYLE),
    }

    def draw(rewards, lengths, num_remains_in_group, metric):
        return viz.plot_gfpo_filter(_numbers(rewards, "rewards"), _numbers(lengths, "lengths"),
                                    num_remains_in_group, metric)

    return _interactive(draw, controls)
