"""Notebook 04's widgets: the loss aggregations' weights and DAPO's overlong penalty."""

from __future__ import annotations

from collections.abc import Sequence

from labkit import viz
from labkit.widgets.controls import (
    _interactive,
    _length_range,
    _numbers,
    _slider,
    _text,
    _textbox,
    widgets_enabled,
)


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
