"""Notebook 07's widgets: token temperature and the surrogates' gradient weights."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from labkit import viz
from labkit.widgets.controls import (
    _interactive,
    _slider,
    widgets_enabled,
)


def temperature_widget(logits=None, token_labels: Callable[[int], str] | None = None,
                       contexts: Sequence[str] | None = None, temperature: float = 1.2,
                       top_k: int = 8, question: str = "347+285=?", seed: int = 0):
    """Slide the sampling temperature: a model's next-token bars at T beside T = 1, and entropy.

    ``logits`` is (P, V), a model's next-token logits at P positions (see
    ``viz.plot_token_temperature``); by default the tiny Qwen's at three places of its own worked
    answer to ``question`` (``viz.fork_logits(question, seed)``). The static fallback compares
    T = 0.6, 1.0 and 1.2.
    """
    if logits is None:
        fork = viz.fork_logits(question, seed)
        logits, token_labels, contexts = fork["logits"], fork["decode"], fork["contexts"]
    if not widgets_enabled():
        return viz.plot_token_temperature(logits, (0.6, 1.0, 1.2), token_labels, contexts, top_k)
    controls = {"temperature": _slider("FloatSlider", temperature, 0.1, 2.0, 0.05,
                                       "temperature T")}

    def draw(temperature):
        shown = (1.0,) if temperature == 1.0 else (1.0, temperature)
        return viz.plot_token_temperature(logits, shown, token_labels, contexts, top_k)

    return _interactive(draw, controls)


def surrogate_weights_widget(epsilon_low: float = 0.2, epsilon_high: float = 0.28,
                             cispo_max_weight: float = 2.0, gamma: float = 0.5):
    """Sliders for PPO's clip half-widths, CISPO's cap and RL-PLUS's gamma over
    ``viz.plot_surrogate_weights``: the gradient weight of each surrogate against the ratio."""
    if not widgets_enabled():
        return viz.plot_surrogate_weights(epsilon_low, epsilon_high, cispo_max_weight, gamma)
    controls = {
        "epsilon_low": _slider("FloatSlider", epsilon_low, 0.0, 0.9, 0.01, "ε_low"),
        "epsilon_high": _slider("FloatSlider", epsilon_high, 0.0, 1.0, 0.01, "ε_high"),
        "cispo_max_weight": _slider("FloatSlider", cispo_max_weight, 1.0, 5.0, 0.1,
                                    "CISPO cap"),
        "gamma": _slider("FloatSlider", gamma, 0.0, 3.0, 0.1, "γ (focal)"),
    }
    return _interactive(viz.plot_surrogate_weights, controls)
