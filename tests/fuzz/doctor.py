"""Surface 6: the run doctor (``labkit.doctor.diagnose``, ``RunDoctor``) on empty, NaN-filled,
mistyped (strings in numeric columns), partial (missing columns) and one-row histories, and
with settings that are not settings."""

from __future__ import annotations

import math
import types

import numpy as np
import pandas as pd

from fuzz.harness import Case

SURFACE = 6
METRICS = ("frac_reward_zero_std", "truncation_rate", "entropy", "completion_length", "kl_old",
           "kl_ref", "clip_region", "skipped_nonfinite", "reward", "accuracy", "tool_call_rate",
           "tool_error_rate", "turn_limit_rate")


def _healthy(steps: int = 20) -> pd.DataFrame:
    step = np.arange(1, steps + 1)
    return pd.DataFrame({"step": step, "frac_reward_zero_std": 0.4, "truncation_rate": 0.0,
                         "entropy": 0.3, "completion_length": 20.0, "kl_old": 0.0,
                         "kl_ref": 0.01, "clip_region": 0.01, "skipped_nonfinite": 0,
                         "reward": 0.3 + 0.01 * step, "accuracy": 0.3 + 0.01 * step})


def _diagnose(history, config=None, **kwargs):
    from labkit.doctor import diagnose

    return lambda: diagnose(history, config, **kwargs)


def _findings(*names):
    def check(findings):
        got = [f.check for f in findings]
        assert got == list(names), f"findings {got}, expected {list(names)}"
    return check


def _findings_at(*expected):
    """The findings, as (check, step) pairs, are ``expected``."""
    def check(findings):
        got = [(f.check, f.step) for f in findings]
        assert got == list(expected), f"findings {got}, expected {list(expected)}"
    return check


def _with(column, values):
    frame = _healthy(len(values))
    frame[column] = values
    return frame


class _Trainer:
    """What RunDoctor reads of a trainer: its history and its config."""

    def __init__(self, history):
        from labkit.config import TrainConfig

        self.history, self.config = history, TrainConfig(max_steps=len(history))


def _doctor(**kwargs):
    from labkit.doctor import RunDoctor

    return RunDoctor(**kwargs)


def _doctor_call(**kwargs):
    from labkit.doctor import RunDoctor

    def call():
        doctor = RunDoctor(**kwargs)
        history = _healthy(10)
        doctor(_Trainer(history), history.iloc[-1].to_dict())
        return doctor.findings
    return call


def cases() -> list[Case]:
    c = []

    def refuse(name, call, *fragments):
        c.append(Case(SURFACE, name, call, tuple(fragments)))

    def accept(name, call, check):
        c.append(Case(SURFACE, name, call, None, check=check))

    accept("healthy", _diagnose(_healthy()), _findings())
    accept("empty-frame", _diagnose(pd.DataFrame()), _findings())
    accept("columns-no-rows", _diagnose(_healthy().iloc[:0]), _findings())
    accept("one-row", _diagnose(_healthy(1)), _findings())
    accept("one-row-nonfinite", _diagnose(_with("skipped_nonfinite", [1])),
           _findings("nonfinite_steps"))
    accept("all-nan", _diagnose(_healthy().assign(**{m: math.nan for m in METRICS})),
           _findings())
    accept("nan-step-rows-of-a-merged-eval", _diagnose(
        pd.concat([_healthy(), pd.DataFrame({"step": [0], "eval_accuracy": [0.3]})])),
        _findings())
    accept("partial-reward-only", _diagnose(_healthy()[["step", "reward"]]), _findings())
    accept("no-step-column", _diagnose(_healthy().drop(columns="step")), _findings())
    accept("inf-entropy", _diagnose(_with("entropy", [math.inf] * 20)), _findings())
    for value in (math.inf, 1e308):  # a count that is not one, or that overflows a sum
        accept(f"skipped-nonfinite-{value!r}",
               _diagnose(_with("skipped_nonfinite", [0] * 9 + [value] + [0] * 10)),
               _findings_at(("nonfinite_steps", 10)))
    accept("skipped-nonfinite--inf", _diagnose(_with("skipped_nonfinite", [-math.inf] * 20)),
           _findings())
    no_step = _with("skipped_nonfinite", [0] * 7 + [1] + [0] * 12).drop(columns="step")
    accept("no-step-column-sliced", _diagnose(no_step.iloc[5:]),
           _findings_at(("nonfinite_steps", 3)))
    accept("no-step-column-reversed-index", _diagnose(no_step[::-1].reset_index(drop=True)
                                                      .set_axis(range(19, -1, -1))),
           _findings_at(("nonfinite_steps", 13)))
    accept("no-step-column-repeated-index", _diagnose(pd.concat([no_step, no_step])),
           _findings_at(("nonfinite_steps", 8)))
    seeds = pd.concat([_healthy().drop(columns="step").assign(seed=0),
                       no_step.assign(seed=1)], ignore_index=True)
    accept("no-step-column-second-seed", _diagnose(seeds), _findings_at(("nonfinite_steps", 8)))
    accept("bools-as-numbers", _diagnose(_with("skipped_nonfinite", [False] * 19 + [True])),
           _findings("nonfinite_steps"))
    accept("numeric-strings-from-a-csv", _diagnose(_with("truncation_rate", ["0.5"] * 20)),
           _findings("truncation"))
    for column in METRICS:
        refuse(f"strings-in-{column}", _diagnose(_with(column, ["high"] + [0.1] * 19)),
               column, "'high'")
    refuse("strings-in-step", _diagnose(_with("step", ["one"] + list(range(2, 21)))), "step",
           "'one'")
    refuse("nan-in-step-with-a-metric", _diagnose(_with("step", [math.nan] + list(range(2, 21)))),
           "step", "nan")
    refuse("lists-in-a-column", _diagnose(_with("kl_ref", [[0.1]] * 20)), "kl_ref", "[0.1]")
    refuse("history-a-list", _diagnose(_healthy().to_dict("records")), "history", "list")
    refuse("history-none", _diagnose(None), "history", "NoneType")
    refuse("history-a-dict", _diagnose({"step": [1]}), "history", "dict")
    for value in (0, -1, 1.5, True, "5", None):
        refuse(f"window={value!r}", _diagnose(_healthy(), window=value), "window", repr(value))
    accept("window-huge", _diagnose(_healthy(), window=10**12), _findings())
    refuse("config-a-dict", _diagnose(_healthy(), {"importance_sampling_level": "sequence"}),
           "config", "dict")
    refuse("config-a-namespace", _diagnose(_healthy(), types.SimpleNamespace(epsilon=0.2)),
           "config", "SimpleNamespace")
    for name, value in (("every", 0), ("every", True), ("every", 2.5), ("window", 0),
                        ("window", True), ("window", "5"), ("printer", "stdout"),
                        ("printer", None)):  # refused when the doctor is made, not mid-run
        refuse(f"run-doctor-{name}={value!r}", lambda kw={name: value}: _doctor(**kw), name,
               repr(value))
    accept("run-doctor-every-step", _doctor_call(every=1), _findings())
    return c
