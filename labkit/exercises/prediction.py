"""The experiment exercise's check, :func:`check_prediction`: did a changed setting move a metric
up, down or not at all, as the learner predicted?"""

from __future__ import annotations

import math

import pandas as pd

PREDICTIONS = ("up", "down", "same")
#: Without a tolerance, "same" means within this share of the larger of the two ends: two runs
#: with one setting changed never end bit for bit equal, so "within 0" could never be right.
RELATIVE_SAME = 0.05


def _history(run, which: str):
    """A run's history frame: a ``TrainResult`` (its ``.history``) or the frame itself."""
    frame = getattr(run, "history", run)
    if not hasattr(frame, "columns") or not hasattr(frame, "iloc"):
        raise TypeError(f"{which} must be a TrainResult or its history DataFrame, got "
                        f"{type(run).__name__}")
    return frame


def check_prediction(prediction: str, baseline, changed, metric: str, *, window: int = 5,
                     tolerance: float | None = None) -> bool:
    """Check a learner's prediction of what a changed setting does to ``metric``.

    The experiment exercise: run a baseline and a run with one setting changed (same seed),
    predict whether ``metric`` ends ``"up"``, ``"down"`` or the ``"same"`` in the changed run,
    and this says what the runs showed. Each run's value is the mean of its last ``window``
    rows that have the metric (one step of 16 prompts is noisy); "same" means the two differ by
    at most ``tolerance``, "up"/"down" by more than it. One seed per run: the message says so.

    Args:
        prediction: "up", "down" or "same".
        baseline, changed: ``TrainResult`` or its ``history`` frame (or an ``eval_history``).
        metric: a column of both frames, e.g. ``"completion_length"`` or ``"eval_accuracy"``.
        window: rows averaged at the end of each run (>= 1).
        tolerance: the largest difference still called "same" (>= 0, finite); None (the
            default): :data:`RELATIVE_SAME` of the larger of the two ends' sizes.

    Returns:
        True if the runs bear the prediction out; prints what they showed either way.
    """
    if prediction not in PREDICTIONS:
        raise ValueError(f"prediction must be one of {PREDICTIONS}, got {prediction!r}")
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise ValueError(f"window must be an integer >= 1 (rows averaged), got {window!r}")
    if tolerance is not None and not (isinstance(tolerance, int | float)
                                      and not isinstance(tolerance, bool)
                                      and 0 <= tolerance < math.inf):
        raise ValueError(f"tolerance must be a finite number >= 0 or None, got {tolerance!r}")
    ends = []
    for which, run in (("baseline", baseline), ("changed", changed)):
        frame = _history(run, which)
        if metric not in frame.columns:
            raise ValueError(f"metric {metric!r} is not a column of the {which} run; it has "
                             f"{sorted(map(str, frame.columns))}")
        values = frame[metric].dropna()
        if values.empty:
            raise ValueError(f"the {which} run has no value of {metric!r}")
        numbers = pd.to_numeric(values, errors="coerce")
        if numbers.isna().any():
            raise ValueError(f"metric {metric!r} of the {which} run must hold numbers, got "
                             f"{values[numbers.isna()].iloc[0]!r}")
        end = float(numbers.iloc[-window:].mean())
        if not math.isfinite(end):
            raise ValueError(f"metric {metric!r} of the {which} run ends at {end} (mean of its "
                             f"last {window} values): a run that diverged cannot be compared")
        ends.append(end)
    before, after = ends
    difference = after - before
    if tolerance is None:
        tolerance = RELATIVE_SAME * max(abs(before), abs(after))
        same = f"\"same\" would need at most {tolerance:.3g}, {RELATIVE_SAME:.0%} of the larger end"
    else:
        same = f"\"same\" would need at most {tolerance:g}"
    shown = ("same" if abs(difference) <= tolerance else "up" if difference > 0 else "down")
    what = (f"{metric} (mean of the last {window} values): baseline {before:.4g}, changed "
            f"{after:.4g}, difference {difference:+.4g} ({same})")
    if shown == prediction:
        print(f"Your prediction ({prediction}) matches what the runs showed: {what}. One seed "
              f"each: run another seed before you call it a rule.")
        return True
    print(f"Not what the runs showed: you predicted {prediction}, they show {shown}. {what}. "
          f"Look at the metric's curve in both runs to see why.")
    return False
