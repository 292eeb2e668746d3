"""Notebook 11's widget: the behaviour ratio of a stale batch, against its staleness."""

from __future__ import annotations

from collections.abc import Mapping

from labkit import viz
from labkit.offpolicy import CORRECTIONS
from labkit.widgets.controls import (
    _CHAR_PX,
    _READOUT_PX,
    _STYLE,
    _TRACK_PX,
    _interactive,
    _slider,
    widgets_enabled,
)


def staleness_widget(logprobs: Mapping[int, tuple], staleness: int | None = None,
                     correction: str = "decoupled", cap: float = 5.0, floor: float = 0.5,
                     epsilon: float = 0.2):
    """The ratio histogram and clip region of one batch at each cached staleness
    (:func:`labkit.viz.plot_offpolicy_ratio`).

    ``logprobs`` is :func:`labkit.viz.stale_logprobs`'s dict: staleness -> (proximal log-probs,
    behaviour log-probs, loss mask), computed once; a slider move only redraws, it never scores
    or trains. The controls: the staleness (the cached values), the correction, its cap and its
    floor (read by ``tis`` and ``icepop`` only: disabled for the others), and PPO's epsilon.
    """
    stops = sorted(logprobs)
    if not stops:
        raise ValueError("logprobs is empty: compute it with labkit.viz.stale_logprobs")
    staleness = stops[-1] if staleness is None else staleness
    if staleness not in logprobs:
        raise ValueError(f"staleness must be one of the cached values {stops}, got {staleness}")

    def draw(staleness, correction, cap, floor, epsilon):
        prox, behav, mask = logprobs[staleness]
        reads_floor = correction in ("tis", "icepop")
        return viz.plot_offpolicy_ratio(prox, behav, mask, correction, cap,
                                        floor if reads_floor else None, epsilon,
                                        title=f"one batch, trained {staleness} step(s) after "
                                              f"it was sampled")

    if not widgets_enabled():
        return draw(staleness, correction, cap, floor, epsilon)
    import ipywidgets

    choose = ipywidgets.Dropdown(options=list(CORRECTIONS), value=correction,
                                 description="correction", style=_STYLE)
    floor_slider = _slider("FloatSlider", floor, 0.05, 1.0, 0.05, "floor (tis, icepop)")
    floor_slider.disabled = correction not in ("tis", "icepop")

    def follow_correction(change):  # observed before the figure is
        floor_slider.disabled = change["new"] not in ("tis", "icepop")

    choose.observe(follow_correction, "value")
    return _interactive(draw, {
        # the cached values only (a FloatSlider would offer staleness that was never scored),
        # with the track every slider of the lab keeps
        "staleness": ipywidgets.SelectionSlider(
            options=stops, value=staleness, description="staleness (steps)", style=_STYLE,
            continuous_update=False, layout=ipywidgets.Layout(
                width=f"{_CHAR_PX * len('staleness (steps)') + _TRACK_PX + _READOUT_PX}px")),
        "correction": choose,
        "cap": _slider("FloatSlider", cap, 1.0, 10.0, 0.25, "cap"),
        "floor": floor_slider,
        "epsilon": _slider("FloatSlider", epsilon, 0.05, 0.5, 0.01, "epsilon"),
    })


__all__ = ["staleness_widget"]
