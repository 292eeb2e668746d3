"""Interactive controls for the lab's figures: sliders and text boxes redrawing a labkit.viz figure.

Each builder returns an ipywidgets box (controls above, figure below), so a notebook cell can end
with ``clip_region_widget()``. The figure is redrawn by the static function of
:mod:`labkit.viz` with the controls' values, so what moves on screen is computed by the code
training uses. Text boxes take comma-separated numbers (``1, 0, 0, 1``); a value a labkit function
rejects shows its error message in place of the figure.

Static fallback: when ``LABKIT_STATIC=1`` is set (CI, ``nbconvert``, nbval) or ipywidgets is not
installed, :func:`widgets_enabled` is False and every builder returns the static figure drawn with
its defaults instead, which Jupyter shows when it ends the cell. Builders take the same keyword
defaults as their figure function, so a notebook can preset the controls.

================================  ======================================================
builder                           figure (in :mod:`labkit.viz`)
================================  ======================================================
``clip_region_widget``            ``plot_clip_region``
``gae_widget``                    ``plot_gae``
``group_advantages_widget``       ``plot_group_advantages``
``kl_estimators_widget``          ``plot_kl_estimators``
``aggregation_widget``            ``plot_aggregation_weights``
``overlong_widget``               ``plot_overlong_penalty``
``ratio_spread_widget``           ``plot_ratio_spread``
``gfpo_widget``                   ``plot_gfpo_filter``
``runs_widget``                   ``plot_runs``
================================  ======================================================
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping, Sequence

import pandas as pd
from matplotlib.figure import Figure

from labkit import viz

__all__ = [
    "aggregation_widget",
    "clip_region_widget",
    "gae_widget",
    "gfpo_widget",
    "group_advantages_widget",
    "kl_estimators_widget",
    "overlong_widget",
    "ratio_spread_widget",
    "runs_widget",
    "widgets_enabled",
]

_STYLE = {"description_width": "initial"}


def widgets_enabled() -> bool:
    """True unless ``LABKIT_STATIC=1`` is set or ipywidgets is not installed."""
    if os.environ.get("LABKIT_STATIC") == "1":
        return False
    return importlib.util.find_spec("ipywidgets") is not None


def _numbers(text: str, name: str) -> list[float] | None:
    """Comma-separated numbers from a text box; None when it is empty."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        return [float(p) for p in parts] or None
    except ValueError:
        raise ValueError(f"{name}: write numbers separated by commas, got {text!r}") from None


def _text(value: Sequence[float] | None) -> str:
    return "" if value is None else ", ".join(f"{v:g}" for v in value)


def _interactive(draw: Callable[..., Figure], controls: Mapping):
    """Controls (wrapping rows) above an output area that ``draw`` redraws on every change."""
    import ipywidgets as widgets
    from IPython.display import display

    def redraw(**values):
        try:
            fig = draw(**values)
        except ValueError as err:
            print(f"Cannot draw this: {err}")
            return
        display(fig)

    output = widgets.interactive_output(redraw, dict(controls))
    row = widgets.Layout(flex_flow="row wrap")
    return widgets.VBox([widgets.HBox(list(controls.values()), layout=row), output])


def _slider(kind: str, value, low, high, step, description: str, **extra):
    import ipywidgets as widgets

    return getattr(widgets, kind)(value=value, min=low, max=high, step=step,
                                  description=description, continuous_update=False,
                                  style=_STYLE, **extra)


def _textbox(value: str, description: str, placeholder: str = ""):
    import ipywidgets as widgets

    return widgets.Text(value=value, description=description, placeholder=placeholder,
                        continuous_update=False, style=_STYLE)


def clip_region_widget(epsilon_low: float = 0.2, epsilon_high: float = 0.28,
                       dual_clip: float | None = None, advantage: float | str = "both"):
    """PPO clip region: sliders for the clip half-widths and dual-clip, a choice of advantage sign.

    ``advantage`` is ``"both"``, ``1.0`` or ``-1.0``. Move ``epsilon_high`` above
    ``epsilon_low`` (DAPO's clip-higher) and watch only the A > 0 band widen; switch dual-clip on
    to see the A < 0 gradient vanish beyond c.
    """
    if not widgets_enabled():
        return viz.plot_clip_region(epsilon_low, epsilon_high, dual_clip, advantage)
    import ipywidgets as widgets

    controls = {
        "epsilon_low": _slider("FloatSlider", epsilon_low, 0.0, 0.5, 0.01, "ε_low"),
        "epsilon_high": _slider("FloatSlider", epsilon_high, 0.0, 0.5, 0.01, "ε_high"),
        "use_dual_clip": widgets.Checkbox(value=dual_clip is not None, description="dual-clip"),
        "dual_clip": _slider("FloatSlider", dual_clip or 3.0, 1.5, 5.0, 0.1, "c"),
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


def kl_estimators_widget(shift: float = 1.0, n_samples: int = 1000, seed: int = 0):
    """KL estimators k1/k2/k3: move the reference away from the policy, change the sample size.

    Small shifts: k2 is nearly unbiased; large shifts: its bias grows while k3 stays unbiased.
    More samples shrink the error bars, not the per-sample spread.
    """
    if not widgets_enabled():
        return viz.plot_kl_estimators(shift=shift, n_samples=n_samples, seed=seed)
    import ipywidgets as widgets

    controls = {
        "shift": _slider("FloatSlider", shift, 0.05, 3.0, 0.05, "distance of π_ref"),
        "n_samples": _slider("IntSlider", n_samples, 10, 20000, 10, "samples"),
        "seed": widgets.IntText(value=seed, description="seed", style=_STYLE),
    }
    return _interactive(viz.plot_kl_estimators, controls)


def aggregation_widget(lengths: Sequence[int] = (8, 16, 32, 64, 128),
                       max_completion_length: int = 256):
    """Aggregation weights: type a batch's response lengths, set dr_grpo's max_completion_length.

    Watch grpo's per-token weight fall as 1/length while dapo's and dr_grpo's stay flat.
    """
    if not widgets_enabled():
        return viz.plot_aggregation_weights(lengths, max_completion_length)
    controls = {
        "lengths": _textbox(_text(lengths), "response lengths"),
        "max_completion_length": _slider("IntSlider", max_completion_length, 1, 4096, 1,
                                         "max_completion_length"),
    }

    def draw(lengths, max_completion_length):
        lens = [int(v) for v in _numbers(lengths, "lengths") or []]
        return viz.plot_aggregation_weights(lens, max_completion_length)

    return _interactive(draw, controls)


def overlong_widget(max_completion_length: int = 1024, overlong_buffer_len: int = 256,
                    penalty_factor: float = 1.0,
                    lengths: Sequence[float] | None = (180, 420, 640, 790, 850, 930, 1010, 1024)):
    """DAPO overlong penalty: slide the cap, the buffer and the factor; type a batch's lengths."""
    if not widgets_enabled():
        return viz.plot_overlong_penalty(max_completion_length, overlong_buffer_len,
                                         penalty_factor, lengths)
    controls = {
        "max_completion_length": _slider("IntSlider", max_completion_length, 16, 4096, 16,
                                         "max_completion_length"),
        "overlong_buffer_len": _slider("IntSlider", overlong_buffer_len, 0, 2048, 16,
                                       "overlong_buffer_len"),
        "penalty_factor": _slider("FloatSlider", penalty_factor, 0.0, 2.0, 0.05,
                                  "penalty_factor"),
        "lengths": _textbox(_text(lengths), "batch lengths", "empty: curve only"),
    }

    def draw(max_completion_length, overlong_buffer_len, penalty_factor, lengths):
        return viz.plot_overlong_penalty(max_completion_length, overlong_buffer_len,
                                         penalty_factor, _numbers(lengths, "lengths"))

    return _interactive(draw, controls)


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
        "seed": widgets.IntText(value=seed, description="seed", style=_STYLE),
    }

    def draw(lengths, noise_std, n_sequences, seed):
        lens = [int(v) for v in _numbers(lengths, "lengths") or []]
        return viz.plot_ratio_spread(lens, noise_std, n_sequences, seed)

    return _interactive(draw, controls)


def gfpo_widget(rewards: Sequence[float] = (1, 1, 0, 1, 0, 1, 1, 0),
                lengths: Sequence[float] = (120, 340, 410, 95, 150, 210, 380, 60),
                num_remains_in_group: int = 4, metric: str = "length"):
    """GFPO: type a group's rewards and lengths, choose k and the metric: who keeps a gradient?"""
    if not widgets_enabled():
        return viz.plot_gfpo_filter(rewards, lengths, num_remains_in_group, metric)
    import ipywidgets as widgets

    controls = {
        "rewards": _textbox(_text(rewards), "rewards"),
        "lengths": _textbox(_text(lengths), "lengths"),
        "num_remains_in_group": _slider("IntSlider", num_remains_in_group, 1, 16, 1,
                                        "kept k (num_remains_in_group)"),
        "metric": widgets.Dropdown(options=["length", "token_efficiency"], value=metric,
                                   description="metric"),
    }

    def draw(rewards, lengths, num_remains_in_group, metric):
        return viz.plot_gfpo_filter(_numbers(rewards, "rewards"), _numbers(lengths, "lengths"),
                                    num_remains_in_group, metric)

    return _interactive(draw, controls)


def runs_widget(runs: Mapping[str, pd.DataFrame],
                metrics: Sequence[str] = ("reward", "accuracy", "completion_length"),
                smooth: int = 1, x: str = "step"):
    """Training curves: pick runs and metric columns, smooth with a moving average.

    ``runs`` maps names to histories (``TrainResult.history`` or ``viz.load_run`` of a reference
    log in ``data/runs/``).
    """
    if not widgets_enabled():
        return viz.plot_runs(runs, metrics, smooth, x)
    import ipywidgets as widgets

    columns = sorted({c for df in runs.values() for c in df.select_dtypes("number").columns})
    controls = {
        "names": widgets.SelectMultiple(options=list(runs), value=list(runs), description="runs",
                                        style=_STYLE),
        "metrics": widgets.SelectMultiple(options=columns,
                                          value=[m for m in metrics if m in columns],
                                          description="metrics", style=_STYLE),
        "smooth": _slider("IntSlider", smooth, 1, 50, 1, "moving average"),
        "x": widgets.Dropdown(options=columns, value=x if x in columns else None,
                              description="x axis", style=_STYLE),
    }

    def draw(names, metrics, smooth, x):
        return viz.plot_runs({n: runs[n] for n in names}, metrics, smooth, x or "step")

    return _interactive(draw, controls)
