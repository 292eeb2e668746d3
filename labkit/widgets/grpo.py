"""Notebooks 02-03's widgets: a group's advantages and the KL estimators."""

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


def group_advantages_widget(rewards: Sequence[float] = (1, 0, 0, 1, 0, 0, 0, 1),
                            lengths: Sequence[float] | None = (40, 120, 95, 60, 150, 80, 130, 55),
                            greedy_reward: float | None = 1.0):
    """Advantage explorer: type a group's rewards (and lengths, greedy reward), compare estimators.

    Try one right answer out of eight, then seven; all-equal rewards (no gradient); continuous
    rewards; clear the lengths or the greedy reward to hide OPO or ReMax.
    """
    if not widgets_enabled():
        return viz.plot_group_advantages(rewards, lengths, greedy_reward)
    controls = {
        "rewards": _textbox(_text(rewards), "rewards"),
        "lengths": _textbox(_text(lengths), "lengths (OPO)", "empty: no OPO"),
        "greedy": _textbox(_text(None if greedy_reward is None else [greedy_reward]),
                           "greedy reward (ReMax)", "empty: no ReMax"),
    }

    def draw(rewards, lengths, greedy):
        greedy_values = _numbers(greedy, "greedy reward")
        return viz.plot_group_advantages(_numbers(rewards, "rewards"),
                                         _numbers(lengths, "lengths"), greedy_values)

    return _interactive(draw, controls)


def kl_estimators_widget(shift: float = 1.0, n_samples: int = 20000, seed: int = 0):
    """KL estimators k1/k2/k3: move the reference away from the policy, change the sample size.

    Small shifts: k2 is nearly unbiased; large shifts: its bias grows while k3 stays unbiased.
    More samples shrink the error bars, not the per-sample spread.
    """
    if not widgets_enabled():
        return viz.plot_kl_estimators(shift=shift, n_samples=n_samples, seed=seed)
    import ipywidgets as widgets

    controls = {
        "shift": _slider("FloatSlider", shift, 0.05, 3.0, 0.05, "distance of π_ref"),
        "n_samples": _slider("IntSlider", n_samples, 10, 20000, 10, "samples", track=300),
        "seed": widgets.IntText(value=seed, description="seed", style=_STYLE,
                                layout=widgets.Layout(width="140px")),
    }
    return _interactive(viz.plot_kl_estimators, controls)
