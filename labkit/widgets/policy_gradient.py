"""Notebook 01's widgets: PPO's clip region and GAE."""

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


def clip_region_widget(epsilon_low: float = 0.2, epsilon_high: float = 0.28,
                       dual_clip: float | None = None, advantage: float | str = "both"):
    """PPO clip region: sliders for the clip half-widths and dual-clip, a choice of advantage sign.

    ``advantage`` is ``"both"``, ``1.0`` or ``-1.0``. Move ``epsilon_high`` above
    ``epsilon_low`` (DAPO's clip-higher) and watch only the A > 0 band widen; switch dual-clip on
    to see the A < 0 gradient vanish beyond c (the c slider is greyed out while dual-clip is off).
    """
    if not widgets_enabled():
        return viz.plot_clip_region(epsilon_low, epsilon_high, dual_clip, advantage)
    import ipywidgets as widgets

    use_dual_clip = widgets.Checkbox(value=dual_clip is not None, description="dual-clip",
                                     indent=False, layout=widgets.Layout(width="auto"))
    c = _slider("FloatSlider", dual_clip or 3.0, 1.5, 5.0, 0.1, "c", disabled=dual_clip is None,
                tooltip="dual_clip: the bound c on the loss of A < 0 tokens")

    def toggle(change):
        c.disabled = not change["new"]

    use_dual_clip.observe(toggle, "value")
    controls = {
        "epsilon_low": _slider("FloatSlider", epsilon_low, 0.0, 0.5, 0.01, "ε_low"),
        "epsilon_high": _slider("FloatSlider", epsilon_high, 0.0, 0.5, 0.01, "ε_high"),
        "use_dual_clip": use_dual_clip,
        "dual_clip": c,
        "advantage": widgets.Dropdown(options=[("both signs", "both"), ("A = +1", 1.0),
                                               ("A = -1", -1.0)], value=advantage,
                                      description="advantage", style=_STYLE),
    }

    def draw(epsilon_low, epsilon_high, use_dual_clip, dual_clip, advantage):
        return viz.plot_clip_region(epsilon_low, epsilon_high,
                                    dual_clip if use_dual_clip else None, advantage)

    return _interactive(draw, controls)


def gae_widget(rewards: Sequence[float] = (0, 0, 0, 0, 0, 0, 0, 1),
               values: Sequence[float] = (0.3, 0.37, 0.44, 0.51, 0.59, 0.66, 0.73, 0.8),
               gamma: float = 1.0, lam: float = 0.95):
    """GAE on a toy response: edit the token rewards and critic values, slide gamma and lambda.

    Slide lambda from 1 (Monte-Carlo: reward minus value) to 0 (one-step TD error) and watch the
    advantages change shape; put a reward in the middle to see credit flow backwards.
    """
    if not widgets_enabled():
        return viz.plot_gae(rewards, values, gamma, lam)
    controls = {
        "rewards": _textbox(_text(rewards), "token rewards"),
        "values": _textbox(_text(values), "values V(s_t)"),
        "gamma": _slider("FloatSlider", gamma, 0.0, 1.0, 0.01, "γ"),
        "lam": _slider("FloatSlider", lam, 0.0, 1.0, 0.01, "λ"),
    }

    def draw(rewards, values, gamma, lam):
        return viz.plot_gae(_numbers(rewards, "rewards"), _numbers(values, "values"), gamma, lam)

    return _interactive(draw, controls)
