"""Notebook 00's widget: the unbiased pass@k estimator against the plug-in one."""

from __future__ import annotations

from labkit import viz
from labkit.widgets.controls import _interactive, _slider, widgets_enabled

#: the largest n the widget's slider offers (the lab's evaluations sample 2 to 64 answers)
MAX_SAMPLES = 64


def pass_at_k_estimator_widget(num_samples: int = 8, num_correct: int = 3):
    """One prompt's pass@k from c right answers of n (``viz.plot_pass_at_k_estimator``): sliders
    for n and c. The c slider runs from 0 to n and follows n when it changes."""
    if not widgets_enabled():
        return viz.plot_pass_at_k_estimator(num_samples, num_correct)
    n = _slider("IntSlider", num_samples, 1, max(MAX_SAMPLES, num_samples), 1, "answers n",
                tooltip="num_samples: answers sampled for the prompt")
    c = _slider("IntSlider", min(num_correct, num_samples), 0, num_samples, 1, "right c",
                tooltip="num_correct: how many of the n answers are right")

    def follow_n(change):  # observed before the figure is: c is clamped first
        c.max = change["new"]

    n.observe(follow_n, "value")
    return _interactive(viz.plot_pass_at_k_estimator,
                        {"num_samples": n, "num_correct": c})
