"""Surface 9: the exercises' checkers (``labkit.exercises.check_function``,
``check_prediction``) given learner functions that return wrong shapes, wrong types, None or
NaN, or raise, and arguments that are not what the checkers take. A wrong answer prints and
returns False; a learner that raises is a LearnerError naming it; bad arguments are refused by
name; nothing may say "Correct!" without having checked."""

from __future__ import annotations

import contextlib
import io
import math

import pandas as pd
import torch

from fuzz.harness import Case
from labkit.exercises import LearnerError

SURFACE = 9


def _reference(log_ratio, advantages):
    from labkit.losses import clipped_surrogate

    return clipped_surrogate(log_ratio, advantages)


def _inputs(generator):
    from labkit.exercises import random_policy_batch

    return random_policy_batch(generator, keys=("log_ratio", "advantages"))


def _check(learner, reference=_reference, make_inputs=_inputs, **kwargs):
    from labkit.exercises import check_function

    def call():
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            verdict = check_function(learner, reference, make_inputs, **kwargs)
        return verdict, out.getvalue()
    return call


def _wrong(fragment):
    """The checker said False and printed what was wrong (containing ``fragment``)."""
    def check(result):
        verdict, printed = result
        assert verdict is False, f"verdict {verdict!r}; printed {printed!r}"
        assert fragment in printed, f"{fragment!r} not in {printed!r}"
    return check


def _right(result):
    verdict, printed = result
    assert verdict is True and "Correct!" in printed, f"{verdict!r}: {printed!r}"


def _history(values):
    return pd.DataFrame({"step": range(1, len(values) + 1), "metric": values})


def _predict(prediction="up", baseline=None, changed=None, metric="metric", **kwargs):
    from labkit.exercises import check_prediction

    def call():
        with contextlib.redirect_stdout(io.StringIO()):
            return check_prediction(prediction, _history([1.0] * 5) if baseline is None
                                    else baseline, _history([2.0] * 5) if changed is None
                                    else changed, metric, **kwargs)
    return call


def _raising_value_error(log_ratio, advantages):
    raise ValueError("shapes do not broadcast")


def _in_place(log_ratio, advantages):
    log_ratio.mul_(2)
    return _reference(log_ratio, advantages)


def cases() -> list[Case]:
    c = []

    def refuse(name, call, *fragments, errors=(ValueError, TypeError)):
        c.append(Case(SURFACE, name, call, tuple(fragments), errors=errors))

    def accept(name, call, check):
        c.append(Case(SURFACE, name, call, None, check=check))

    accept("right", _check(_reference), _right)
    accept("wrong-shape", _check(lambda log_ratio, advantages: _reference(
        log_ratio, advantages)[:, :-1]), _wrong("shape"))
    accept("transposed", _check(lambda log_ratio, advantages: _reference(
        log_ratio, advantages).T), _wrong("shape"))
    accept("returns-none", _check(lambda log_ratio, advantages: None), _wrong("NoneType"))
    accept("returns-a-string", _check(lambda log_ratio, advantages: "loss"), _wrong("str"))
    accept("returns-a-list", _check(lambda log_ratio, advantages: _reference(
        log_ratio, advantages).tolist()), _wrong("list"))
    accept("returns-nan", _check(lambda log_ratio, advantages: torch.full_like(
        log_ratio, math.nan)), _wrong("values differ"))
    accept("returns-ints", _check(lambda log_ratio, advantages: torch.zeros_like(
        log_ratio, dtype=torch.long)), _wrong("values differ"))
    accept("returns-a-tuple", _check(lambda log_ratio, advantages: (
        _reference(log_ratio, advantages), 0)), _wrong("returned a tuple"))
    accept("detached", _check(lambda log_ratio, advantages: _reference(
        log_ratio, advantages).detach()), _wrong("gradient"))
    accept("stub", _check(lambda log_ratio, advantages: (_ for _ in ()).throw(
        NotImplementedError)), _wrong("Not implemented"))
    refuse("raises", _check(_raising_value_error), "_raising_value_error",
           "shapes do not broadcast", errors=(LearnerError,))
    refuse("modifies-its-input-in-place", _check(_in_place), "_in_place", errors=(LearnerError,))
    refuse("wrong-signature", _check(lambda x: x), "<lambda>", "log_ratio",
           errors=(LearnerError,))
    refuse("learner-none", _check(None), "learner_fn", "None")
    refuse("learner-a-tensor", _check(torch.zeros(3)), "learner_fn", "Tensor")
    refuse("reference-none", _check(_reference, reference=None), "reference_fn", "None")
    refuse("make-inputs-returns-none", _check(_reference, make_inputs=lambda g: None),
           "make_inputs", "NoneType")
    refuse("make-inputs-not-callable", _check(_reference, make_inputs={"log_ratio": 1}),
           "make_inputs", "dict")
    for name, value in (("n_trials", 0), ("n_trials", -1), ("n_trials", 1.5), ("n_trials", "3"),
                        ("n_trials", True), ("atol", -1.0), ("atol", math.nan), ("rtol", "0"),
                        ("rtol", math.inf), ("seed", "x"), ("seed", 1.5)):
        refuse(f"{name}={value!r}", _check(_reference, **{name: value}), name, repr(value))
    accept("prediction-right", _predict("up"), lambda verdict: _is(verdict, True))
    accept("prediction-wrong", _predict("down"), lambda verdict: _is(verdict, False))
    for value in ("UP", None, 1, "higher"):
        refuse(f"prediction={value!r}", _predict(value), "prediction", repr(value))
    refuse("baseline-none", _predict_none(), "baseline", "NoneType")
    refuse("metric-missing", _predict(metric="reward"), "'reward'", "metric")
    refuse("metric-strings", _predict(baseline=_history(["a"] * 5)), "metric", "'a'")
    refuse("metric-all-nan", _predict(baseline=_history([math.nan] * 5)), "metric", "baseline")
    refuse("metric-inf", _predict(baseline=_history([math.inf] * 5),
                                  changed=_history([math.inf] * 5)), "metric", "inf")
    for name, value in (("window", 0), ("window", True), ("window", 2.5), ("tolerance", -1),
                        ("tolerance", math.nan), ("tolerance", "0.1"), ("tolerance", True),
                        ("tolerance", math.inf)):
        refuse(f"prediction-{name}={value!r}", _predict(**{name: value}), name, repr(value))
    return c


def _predict_none():
    from labkit.exercises import check_prediction

    return lambda: check_prediction("up", None, _history([1.0] * 5), "metric")


def _is(value, expected):
    assert value is expected, f"{value!r} is not {expected!r}"

