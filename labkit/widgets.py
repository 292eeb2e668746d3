"""Interactive controls for the lab's figures: sliders and text boxes redrawing a labkit.viz figure.

Each builder returns an ipywidgets box (controls above, figure below), so a notebook cell can end
with ``clip_region_widget()``. The figure is redrawn by the static function of
:mod:`labkit.viz` with the controls' values, so what moves on screen is computed by the code
training uses. Text boxes take comma-separated numbers (``1, 0, 0, 1``); a value a labkit function
rejects shows its error message in place of the figure.

Layout: every slider keeps a track of 220 px or more whatever its description's length, so it can
be dragged in JupyterLab's notebook column; a range that depends on another control follows it
(GFPO's k runs to the group size, the overlong buffer stays below the length cap); a control that
does not apply is disabled (dual-clip's c while dual-clip is off); the runs and metrics of
``runs_widget`` are checkboxes, all in view. ``tests/test_browser.py`` checks these in Chromium.

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
``temperature_widget``            ``plot_token_temperature``
``surrogate_weights_widget``      ``plot_surrogate_weights``
``memory_plan_widget``            ``labkit.viz.plot_memory_plan``
``majority_vote_widget``          ``plot_majority_vote``
``sampling_weights_widget``       ``plot_sampling_weights``
``pass_at_k_widget``              ``plot_pass_at_k``
``episode_widget``                ``plot_episode``
================================  ======================================================
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable, Mapping, Sequence
from functools import partial

import pandas as pd
from matplotlib.figure import Figure

from labkit import viz

__all__ = [
    "aggregation_widget",
    "clip_region_widget",
    "episode_widget",
    "gae_widget",
    "gfpo_widget",
    "group_advantages_widget",
    "kl_estimators_widget",
    "majority_vote_widget",
    "memory_plan_figure",
    "memory_plan_widget",
    "overlong_widget",
    "pass_at_k_widget",
    "ratio_spread_widget",
    "runs_widget",
    "sampling_weights_widget",
    "surrogate_weights_widget",
    "temperature_widget",
    "widgets_enabled",
]

_STYLE = {"description_width": "initial"}
# Widths in px. A slider's description takes its natural width ("initial") and the slider's
# Layout width adds the track and the readout to it, so no label eats its slider's track
# (ipywidgets' default is 300 px for label, track and readout together).
_CHAR_PX = 8  # a generous average width of a character in JupyterLab's 13 px widget font
_TRACK_PX = 220
_READOUT_PX = 80
_TEXT_PX = 240  # a text box's input field
# Columns that can be the x axis of training curves: the step, and cumulative counters.
_STEP_LIKE = re.compile(r"step|epoch|elapsed\w*|wall_time|total_\w+|\w+_total|cum\w+|\w+_seen")


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


def _interactive(draw: Callable[..., Figure], controls: Mapping, rows: Sequence | None = None):
    """Controls above an output area that ``draw`` redraws on every change.

    ``rows`` lays the controls out (a list of widgets stacked above the figure); by default they
    share one wrapping row.
    """
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
    if rows is None:
        rows = [widgets.HBox(list(controls.values()), layout=widgets.Layout(flex_flow="row wrap"))]
    return widgets.VBox([*rows, output])


def _slider(kind: str, value, low, high, step, description: str, track: int = _TRACK_PX,
            **extra):
    """A slider whose track keeps ``track`` px whatever its description's length."""
    import ipywidgets as widgets

    width = _CHAR_PX * len(description) + track + _READOUT_PX
    return getattr(widgets, kind)(value=value, min=low, max=high, step=step,
                                  description=description, continuous_update=False,
                                  style=_STYLE, layout=widgets.Layout(width=f"{width}px"),
                                  **extra)


def _textbox(value: str, description: str, placeholder: str = ""):
    import ipywidgets as widgets

    width = _CHAR_PX * len(description) + _TEXT_PX
    return widgets.Text(value=value, description=description, placeholder=placeholder,
                        continuous_update=False, style=_STYLE,
                        layout=widgets.Layout(width=f"{width}px"))


def _length_range(default: int) -> tuple[int, int]:
    """(step, max) of a token-length slider around ``default``: up to 4x it, ~128+ stops.

    The step is a power of two dividing ``default`` (so the default is a stop), at most
    max / 128: one drag pixel is a few tokens, not a few hundred.
    """
    high = max(64, 1 << (4 * max(int(default), 1) - 1).bit_length())
    step = 1
    while default % (2 * step) == 0 and 2 * step <= high // 128:
        step *= 2
    return step, high


def _checkboxes(options: Sequence[str], selected: Sequence[str], column_px: int,
                in_click_order: bool):
    """A grid of checkboxes, one per option, all visible, with a ``value``: the ticked options.

    The grid's ``value`` (a tuple, observable like a widget's) lists the ticked options in the
    order of ``options``, or, with ``in_click_order``, ``selected`` first and then in the order
    they were ticked.
    """
    import ipywidgets as widgets
    import traitlets

    boxes = [widgets.Checkbox(value=o in selected, description=str(o), indent=False,
                              layout=widgets.Layout(width="auto"))
             for o in options]
    grid = widgets.GridBox(boxes, layout=widgets.Layout(
        grid_template_columns=f"repeat(auto-fill, minmax({column_px}px, 1fr))", width="100%"))
    grid.add_traits(value=traitlets.Tuple())
    grid.value = tuple(o for o in selected if o in options)
    if not in_click_order:
        grid.value = tuple(o for o in options if o in grid.value)

    def toggled(change):
        option = options[boxes.index(change["owner"])]
        if not in_click_order:
            grid.value = tuple(o for o, box in zip(options, boxes) if box.value)
        elif change["new"]:
            grid.value = (*grid.value, option)
        else:
            grid.value = tuple(o for o in grid.value if o != option)

    for box in boxes:
        box.observe(toggled, "value")
    return grid


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
        "n_samples": _slider("IntSlider", n_samples, 10, 20000, 10, "samples", track=300),
        "seed": widgets.IntText(value=seed, description="seed", style=_STYLE,
                                layout=widgets.Layout(width="140px")),
    }
    return _interactive(viz.plot_kl_estimators, controls)


def aggregation_widget(lengths: Sequence[int] = (8, 16, 32, 64, 128),
                       max_completion_length: int = 256):
    """Aggregation weights: type a batch's response lengths, set dr_grpo's max_completion_length.

    Watch grpo's per-token weight fall as 1/length while dapo's and dr_grpo's stay flat.
    """
    if not widgets_enabled():
        return viz.plot_aggregation_weights(lengths, max_completion_length)
    step, high = _length_range(max_completion_length)
    controls = {
        "lengths": _textbox(_text(lengths), "response lengths"),
        "max_completion_length": _slider("IntSlider", max_completion_length, step, high, step,
                                         "max_completion_length", track=320),
    }

    def draw(lengths, max_completion_length):
        lens = [int(v) for v in _numbers(lengths, "lengths") or []]
        return viz.plot_aggregation_weights(lens, max_completion_length)

    return _interactive(draw, controls)


def overlong_widget(max_completion_length: int = 1024, overlong_buffer_len: int = 256,
                    penalty_factor: float = 1.0,
                    lengths: Sequence[float] | None = (180, 420, 640, 790, 850, 930, 1010, 1024)):
    """DAPO overlong penalty: slide the cap, the buffer and the factor; type a batch's lengths.

    The cap's slider runs up to four times ``max_completion_length``; the buffer's slider stays
    below the cap (its maximum follows the cap).
    """
    if not widgets_enabled():
        return viz.plot_overlong_penalty(max_completion_length, overlong_buffer_len,
                                         penalty_factor, lengths)
    step, high = _length_range(max_completion_length)
    cap = _slider("IntSlider", max_completion_length, step, high, step, "max_completion_length",
                  track=320)
    buffer = _slider("IntSlider", min(overlong_buffer_len, max_completion_length - 1), 0,
                     max_completion_length - 1, 1, "overlong_buffer_len", track=320)

    def follow_cap(change):  # observed before the figure is: the buffer is clamped first
        buffer.max = change["new"] - 1

    cap.observe(follow_cap, "value")
    controls = {
        "max_completion_length": cap,
        "overlong_buffer_len": buffer,
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
        "seed": widgets.IntText(value=seed, description="seed", style=_STYLE,
                                layout=widgets.Layout(width="140px")),
    }

    def draw(lengths, noise_std, n_sequences, seed):
        lens = [int(v) for v in _numbers(lengths, "lengths") or []]
        return viz.plot_ratio_spread(lens, noise_std, n_sequences, seed)

    return _interactive(draw, controls)


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
MEMORY_PLAN_MODELS = ("tiny", "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen3-0.6B",
                      "Qwen/Qwen2.5-1.5B-Instruct")


def memory_plan_figure(model: str = "Qwen/Qwen2.5-0.5B-Instruct", num_generations: int = 8,
                       prompts_per_step: int = 16, prompt_length: int = 256,
                       max_completion_length: int = 1024, micro_batch_size: int = 8,
                       dtype: str = "bfloat16", use_peft: bool = False, lora_r: int = 16,
                       lora_dropout: float = 0.05, gradient_checkpointing: bool = False,
                       beta: float = 0.0, gpus: Sequence[float] = (16, 24, 40, 80)) -> Figure:
    """The memory bill of one GRPO step on a GPU (``labkit.scale.memory.memory_plan`` with
    ``device="cuda"``), drawn by ``labkit.viz.plot_memory_plan`` with the GPU sizes marked.

    The run is ``preset("grpo")`` with these fields; a ``micro_batch_size`` above the step's
    completions (``num_generations x prompts_per_step``) is lowered to it. With ``use_peft`` the
    adapters are rank ``lora_r`` on every linear layer (``lora_target_modules="all-linear"``);
    a ``lora_dropout`` above 0 makes peft keep a dropped copy of each adapted layer's input for
    the backward pass, which the planner counts.
    """
    from labkit.config import preset
    from labkit.scale.memory import memory_plan
    from labkit.viz import plot_memory_plan

    completions = num_generations * prompts_per_step
    config = preset("grpo", num_generations=num_generations, prompts_per_step=prompts_per_step,
                    max_completion_length=max_completion_length,
                    micro_batch_size=min(micro_batch_size, completions), dtype=dtype,
                    use_peft=use_peft, lora_r=lora_r, lora_dropout=lora_dropout,
                    lora_target_modules="all-linear",
                    gradient_checkpointing=gradient_checkpointing, beta=beta)
    plan = memory_plan(model, config, prompt_length=prompt_length, device="cuda")
    # a figure as wide as the notebook column, so the legend beside the bars has room
    fig = Figure(figsize=(8.6, 3.8), dpi=viz.FIGURE_DPI, layout="constrained")
    ax = fig.subplots()
    plot_memory_plan(plan, gpus, axes=ax)
    top = ax.get_ylim()[1]
    for label in list(ax.texts):  # a GPU size far above the bars: its label would sit off the
        if label.xy[1] > top:     # axes and collapse the layout, so it goes into the title
            label.remove()
    total = float(plan.loc["total", "GiB"])
    fits = [f"{g:g}" for g in gpus if total <= g]
    verdict = f"fits {', '.join(fits)} GiB" if fits else f"fits none of {tuple(gpus)} GiB"
    ax.set_title(f"{model}: {ax.get_title()}, {verdict}", fontsize="medium")
    ax.set_xlabel(f"phase of one step (G = {num_generations} x {prompts_per_step} prompts, "
                  f"{prompt_length} + {max_completion_length} tokens)")
    return fig


def memory_plan_widget(model: str = "Qwen/Qwen2.5-0.5B-Instruct", num_generations: int = 8,
                       prompts_per_step: int = 16, prompt_length: int = 256,
                       max_completion_length: int = 1024, micro_batch_size: int = 8,
                       dtype: str = "bfloat16", use_peft: bool = False, lora_r: int = 16,
                       lora_dropout: float = 0.05, gradient_checkpointing: bool = False,
                       beta: float = 0.0, gpus: Sequence[float] = (16, 24, 40, 80)):
    """The memory planner: pick a model, G, lengths, LoRA and checkpointing; see the bill.

    Redraws :func:`memory_plan_figure` (a stacked bar per phase of a step, the GPU sizes as
    lines). The LoRA controls are greyed out while LoRA is off; the micro-batch slider runs to
    the step's completions and follows G and the prompts per step.
    """
    if not widgets_enabled():
        return memory_plan_figure(model, num_generations, prompts_per_step, prompt_length,
                                  max_completion_length, micro_batch_size, dtype, use_peft,
                                  lora_r, lora_dropout, gradient_checkpointing, beta, gpus)
    import ipywidgets as widgets

    def checkbox(value, description):
        return widgets.Checkbox(value=value, description=description, indent=False,
                                layout=widgets.Layout(width="auto"))

    generations = _slider("IntSlider", num_generations, 2, 64, 1, "G (num_generations)")
    prompts = _slider("IntSlider", prompts_per_step, 1, 64, 1, "prompts per step")
    micro = _slider("IntSlider", min(micro_batch_size, num_generations * prompts_per_step), 1,
                    num_generations * prompts_per_step, 1, "micro-batch",
                    tooltip="micro_batch_size: completions per forward/backward")
    lora = checkbox(use_peft, "LoRA (all-linear)")
    rank = _slider("IntSlider", lora_r, 1, 256, 1, "LoRA rank r", disabled=not use_peft)
    dropout = widgets.Dropdown(options=sorted({0.0, 0.05, float(lora_dropout)}),
                               value=float(lora_dropout), description="LoRA dropout",
                               style=_STYLE, disabled=not use_peft)

    def follow_batch(change):  # observed before the figure is: the micro-batch is clamped first
        micro.max = generations.value * prompts.value

    def toggle_rank(change):
        rank.disabled = dropout.disabled = not change["new"]

    generations.observe(follow_batch, "value")
    prompts.observe(follow_batch, "value")
    lora.observe(toggle_rank, "value")
    controls = {
        "model": widgets.Dropdown(options=list(MEMORY_PLAN_MODELS), value=model,
                                  description="model", style=_STYLE),
        "num_generations": generations,
        "prompts_per_step": prompts,
        "prompt_length": _slider("IntSlider", prompt_length, 16, 4096, 16, "prompt tokens"),
        "max_completion_length": _slider("IntSlider", max_completion_length, 16, 16384, 16,
                                         "completion tokens"),
        "micro_batch_size": micro,
        "dtype": widgets.Dropdown(options=["bfloat16", "float32"], value=dtype,
                                  description="dtype", style=_STYLE),
        "use_peft": lora,
        "lora_r": rank,
        "lora_dropout": dropout,
        "gradient_checkpointing": checkbox(gradient_checkpointing, "gradient checkpointing"),
        "beta": widgets.Dropdown(options=[("beta = 0 (no reference)", 0.0),
                                          ("beta = 0.04 (reference model)", 0.04)],
                                 value=beta, description="KL", style=_STYLE),
    }

    def draw(**values):
        return memory_plan_figure(**values, gpus=gpus)

    return _interactive(draw, controls)


def episode_widget(episodes, tokenizer, row: int = 0, loss: str = "action mask"):
    """One of ``episodes`` (a :class:`labkit.agents.episodes.Episodes`), its tokens coloured by
    author (:func:`labkit.viz.plot_episode`): pick the episode, and which tokens the loss takes,
    the policy's (``"action mask"``, correct) or every token (``"every token"``, the masking
    bug)."""
    from labkit.agents.episodes import token_authors

    rows = len(episodes.texts)

    def draw(row, loss):
        if not 0 <= row < rows:
            raise ValueError(f"row must be in [0, {rows - 1}], got {row}")
        length = int(episodes.lengths[row])
        actions = episodes.action_mask[row, :length]
        tokens = token_authors(tokenizer, episodes.completion_ids[row, :length], actions)
        trained = [True] * len(tokens) if loss == "every token" else \
            [author == "policy" for _, author in tokens]
        calls = int(episodes.tool_calls[row])
        return viz.plot_episode(tokens, trained, title=f"episode {row}: {calls} tool call(s), "
                                                       f"{int(actions.sum())} policy tokens")

    if not widgets_enabled():
        return draw(row, loss)
    import ipywidgets

    return _interactive(draw, {
        "row": _slider("IntSlider", row, 0, max(rows - 1, 0), 1, "episode"),
        "loss": ipywidgets.Dropdown(options=["action mask", "every token"], value=loss,
                                    description="loss on", style=_STYLE),
    })
