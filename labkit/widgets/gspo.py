"""Notebook 05's widget: token against sequence ratio spread (GSPO)."""

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


def ratio_spread_widget(lengths: Sequence[int] = (4, 16, 64, 256), noise_std: float = 0.1,
                        n_sequences: int = 256, seed: int = 0):
    """Token vs GSPO sequence ratios: slide the per-token noise and the number of responses."""
    if not widgets_enabled():
        return viz.plot_ratio_spread(lengths, noise_std, n_sequences, seed)
    import ipywidgets as widgets

    controls = {
        "lengths": _textbox(_text(lengths), "lengths"),
        "noise_std": _slider("FloatLogSlider", noise_std, -3, 0, 0.1, "log-ratio noise σ",
                             base=10),
        "n_sequences": _slider("IntSlider", n_sequences, 16, 2048, 16, "responses per length"),
        "seed": widgets.IntText(value=seed, description="seed", style=_STYLE,
                                layout=widgets.Layout(width="140px")),
    }

    def draw(lengths, noise_std, n_sequences, seed):
        lens = [int(v) for v in _numbers(lengths, "lengths") or []]
        return viz.plot_ratio_spread(lens, noise_std, n_sequences, seed)

    return _interactive(draw, controls)
