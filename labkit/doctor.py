"""The run doctor: the classic failures of an RL run, read from its metrics in plain words.

:func:`diagnose` reads a history (``TrainResult.history``, a reference log from
:func:`labkit.viz.load_run`, or TRL's frame from :mod:`labkit.trl_bridge`) and, with the run's
``TrainConfig`` when you have it, returns one :class:`Finding` per failure it sees: the metric,
the first step it showed, what it means, the likely cause, the fix and the notebook that explains
it. :class:`RunDoctor` is the same check as a trainer callback that prints each finding once,
while the run trains. :func:`troubleshooting_table` is the table of docs/troubleshooting.md,
built from the same rules, so the two never disagree.

The checks compare means over a window of steps (``window``, default 5) rather than single
steps: one batch of 16 prompts is noisy (a group of 8 flips from all-wrong to mixed by chance).

===================== ======================== ===============================================
check                 metric                   fires when (window means)
===================== ======================== ===============================================
reward_stuck          frac_reward_zero_std     >= 0.9: nearly every group has equal rewards
truncation            truncation_rate          >= 0.3 of completions hit the length cap
entropy_collapse      entropy                  below a quarter of its first window's value
length_explosion      completion_length        above 3x its first window's value
policy_drift          kl_old                   > 0.1 nats per token between updates
reference_drift       kl_ref                   > 0.5 nats per token from the reference
clip_out_of_range     clip_region              > 0.3 of tokens clipped (token-level ratios)
nonfinite_steps       skipped_nonfinite        any step skipped for a NaN/inf loss or gradient
reward_without_skill  reward, accuracy         reward up >= 0.15 while accuracy moves < 0.02
staleness_grows       staleness                > 4 steps between sampling and training
offpolicy_kl_explodes offpolicy_kl             > 0.1 nats per token since the batch was sampled
queue_starves         queue_wait / step_time   > 0.5: the trainer mostly waits for the sampler
inert_clip_higher     (config)                 epsilon_high > epsilon on a purely on-policy run
===================== ======================== ===============================================

The thresholds are the lab's, set from its own runs (``data/runs``): plain GRPO on the medium
cells keeps frac_reward_zero_std between 0.2 and 0.7, truncation near 0, kl_old 0 (on-policy) and
its entropy falls from 0.31 to 0.03 nats in 200 steps (``07_exploration/grpo.csv``: the collapse
the doctor names). GSPO clips 20-50% of its *sequences* by design (arXiv 2507.18071, section 5
reports clipped fractions two orders of magnitude above GRPO's), so the clip check reads
token-level runs only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from labkit.config.train_config import TrainConfig, inert_clip_higher_message

__all__ = ["CHECKS", "Check", "Finding", "RunDoctor", "diagnose", "troubleshooting_table"]


@dataclass(frozen=True)
class Finding:
    """One failure the doctor saw."""

    check: str
    """name of the check (a key of :data:`CHECKS`)"""
    metric: str
    """the history column it read ("config" for a setting)"""
    step: int | None
    """first step at which the window mean crossed the threshold (None: a setting)"""
    value: float | None
    """the metric's window mean at that step"""
    message: str
    """what the doctor sees, with the numbers"""
    cause: str
    fix: str
    notebook: str

    def __str__(self) -> str:
        where = f"step {self.step}: " if self.step is not None else ""
        return (f"[{self.check}] {where}{self.message}\n  likely cause: {self.cause}\n"
                f"  fix: {self.fix}\n  read: {self.notebook}")


@dataclass(frozen=True)
class Check:
    """A rule of the doctor and the troubleshooting table's row for it."""

    name: str
    metric: str
    symptom: str
    cause: str
    fix: str
    notebook: str
    test: Callable
    """``test(history, config, window) -> (step, value, message) | None``"""


def _steps(history: pd.DataFrame) -> np.ndarray:
    """The step of each row, by position: the ``step`` column, else 1, 2, ... as the trainer
    counts (never the frame's index: a slice, or one seed of several, starts anywhere)."""
    if "step" in history:
        return history["step"].to_numpy(dtype=float)
    return np.arange(1, len(history) + 1, dtype=float)


def _smoothed(history: pd.DataFrame, column: str, window: int) -> pd.Series | None:
    """Window means of a column over the steps that logged it, indexed by step."""
    if column not in history:
        return None
    series = pd.Series(history[column].to_numpy(dtype=float), index=_steps(history))
    series = series.dropna()
    if series.empty:
        return None
    return series.rolling(window, min_periods=min(window, len(series))).mean().dropna()


def _first_above(means: pd.Series | None, threshold: float):
    if means is None:
        return None
    hits = means[means > threshold]
    return None if hits.empty else (int(hits.index[0]), float(hits.iloc[0]))


def _threshold(column: str, threshold: float, text: str):
    def test(history, config, window):
        hit = _first_above(_smoothed(history, column, window), threshold)
        if hit is None:
            return None
        step, value = hit
        return step, value, text.format(value=value, threshold=threshold)
    return test


def _ratio_to_start(column: str, factor: float, below: bool, text: str):
    """Fires when the window mean moves past ``factor`` x the first window's mean."""
    def test(history, config, window):
        means = _smoothed(history, column, window)
        if means is None or len(means) < 2:
            return None
        start = float(means.iloc[0])
        if start <= 0:
            return None
        later = means.iloc[1:]
        hits = later[later < factor * start] if below else later[later > factor * start]
        if hits.empty:
            return None
        step, value = int(hits.index[0]), float(hits.iloc[0])
        return step, value, text.format(value=value, start=start, ratio=value / start)
    return test


def _tool_never_called(history, config, window):
    """Episodes ran, and the policy (almost) stopped calling its tool."""
    means = _smoothed(history, "tool_call_rate", window)
    if means is None or means.empty:
        return None
    low = means[means <= 0.02]
    if low.empty:
        return None
    step, value = int(low.index[0]), float(low.iloc[0])
    return step, value, (f"only {value:.1%} of episodes call a tool (from step {step}): the "
                         f"policy answers alone")


def _clip_test(history, config, window):
    if config is not None and getattr(config, "importance_sampling_level", "token") != "token":
        return None  # sequence-level ratios clip whole sequences by design (GSPO)
    return _threshold("clip_region", 0.3,
                      "{value:.0%} of tokens are clipped (above {threshold:.0%}): the policy "
                      "moves far from the one that sampled")(history, config, window)


def _nonfinite_test(history, config, window):
    if "skipped_nonfinite" not in history:
        return None
    skipped = history["skipped_nonfinite"].to_numpy(dtype=float)
    hit = skipped > 0  # NaN: a row that did not log it (an evaluation's)
    if not hit.any():
        return None
    first = int(_steps(history)[hit][0])
    total = float(skipped[hit].sum())
    if math.isfinite(total):
        return first, total, (f"{total:g} optimizer step(s) were skipped for a NaN/inf loss or "
                              f"gradient (the weights were kept)")
    # a count of inf is no count (a hand-edited or corrupted log): say what can be said
    steps = int(hit.sum())
    return first, float(steps), (f"optimizer steps were skipped for a NaN/inf loss or gradient "
                                 f"in {steps} logged step(s) (the weights were kept; the "
                                 f"skipped_nonfinite count reads {total}, not a number of "
                                 f"steps)")


def _reward_without_skill(history, config, window):
    rewards, accuracy = (_smoothed(history, c, window) for c in ("reward", "accuracy"))
    if rewards is None or accuracy is None or len(rewards) < 2 or len(accuracy) < 2:
        return None
    reward_gain = float(rewards.iloc[-1] - rewards.iloc[0])
    accuracy_gain = float(accuracy.iloc[-1] - accuracy.iloc[0])
    if reward_gain < 0.15 or accuracy_gain >= 0.02:
        return None
    message = (f"the trained reward rose by {reward_gain:+.2f} while the strict accuracy moved "
               f"{accuracy_gain:+.2f}: the policy is learning the reward, not the task")
    return int(rewards.index[-1]), reward_gain, message


def _queue_starves(history, config, window):
    """The overlapped trainer spends most of its step waiting for the sampling thread."""
    if "queue_wait" not in history or "step_time" not in history:
        return None
    share = history[["step"]].copy() if "step" in history else pd.DataFrame(index=history.index)
    share["queue_share"] = (pd.to_numeric(history["queue_wait"], errors="coerce")
                            / pd.to_numeric(history["step_time"], errors="coerce"))
    hit = _first_above(_smoothed(share, "queue_share", window), 0.5)
    if hit is None:
        return None
    step, value = hit
    return step, value, (f"the trainer waited for the sampler {value:.0%} of its step time "
                         f"(above 50%): the queue is empty when the trainer asks")


def _inert_clip_higher(history, config, window):
    if not getattr(config, "clip_higher_inert", False):
        return None
    return None, None, inert_clip_higher_message(config)


#: The doctor's rules, in the order it reports them.
CHECKS: tuple[Check, ...] = (
    Check("reward_stuck", "frac_reward_zero_std",
          "reward flat, loss ~0, nothing learns",
          "prompts too easy or too hard for the model (every answer right, or every one wrong), "
          "or a reward that cannot tell completions apart",
          "train on cells the model solves sometimes; more generations per prompt; dynamic "
          "sampling (DAPO); a partial-credit reward",
          "04_dapo (dynamic sampling), 08_rewards_data (verifiers)",
          _threshold("frac_reward_zero_std", 0.9,
                     "{value:.0%} of groups have equal rewards (at least {threshold:.0%}): their "
                     "advantages are 0 and they teach nothing")),
    Check("truncation", "truncation_rate",
          "answers cut off, accuracy falls as length grows",
          "max_completion_length too short for the answers, or lengths growing without bound",
          "raise max_completion_length; an overlong filter or soft penalty (DAPO); a length "
          "reward (GFPO, Kimi, DLER)",
          "04_dapo (overlong), 06_gfpo_length",
          _threshold("truncation_rate", 0.3,
                     "{value:.0%} of completions hit max_completion_length (at least "
                     "{threshold:.0%})")),
    Check("entropy_collapse", "entropy",
          "every sample of a prompt looks the same; pass@k stops rising",
          "the policy sharpens on its own samples: the clip lets likely tokens grow and caps "
          "unlikely ones",
          "a higher or decaying temperature, top-entropy tokens, Clip-Cov/KL-Cov, a reference "
          "reset, clip-higher (epsilon_high; on the tiny model it did not move the entropy)",
          "07_exploration, 04_dapo (clip-higher)",
          _ratio_to_start("entropy", 0.25, True,
                          "entropy fell to {value:.3f} nats per token, {ratio:.0%} of its "
                          "starting {start:.3f}")),
    Check("length_explosion", "completion_length",
          "answers get longer and longer",
          "a per-sequence loss (GRPO's 1/|o|) weighs long wrong answers less, or a reward that "
          "pays for length",
          "token-level aggregation (dapo, dr_grpo); a length reward or GFPO's filter",
          "04_dapo (token loss), 06_gfpo_length",
          _ratio_to_start("completion_length", 3.0, False,
                          "completions grew to {value:.1f} tokens, {ratio:.1f}x the starting "
                          "{start:.1f}")),
    Check("policy_drift", "kl_old",
          "loss spikes, reward drops after a good start",
          "updates too large: learning rate too high, or too many passes over one batch",
          "lower learning_rate; fewer num_iterations or mini-batches; a tighter clip",
          "01_ppo (batch reuse), 05_gspo",
          _threshold("kl_old", 0.1,
                     "the policy moves {value:.3f} nats per token from the sampling policy "
                     "within one step (above {threshold})")),
    Check("reference_drift", "kl_ref",
          "KL to the reference keeps climbing",
          "beta too small for the learning rate, or a run long past where the reference is useful",
          "raise beta, or reset the reference (ProRL) / sync it (TR-DPO)",
          "02_grpo (KL), 07_exploration (reference reset)",
          _threshold("kl_ref", 0.5,
                     "KL to the reference reached {value:.3f} nats per token (above "
                     "{threshold})")),
    Check("clip_out_of_range", "clip_region",
          "a large share of tokens clipped",
          "the policy moves far between sampling and update: learning rate too high or too "
          "many passes",
          "lower learning_rate or num_iterations; read clip_low vs clip_high",
          "01_ppo, 04_dapo (clip-higher)",
          _clip_test),
    Check("nonfinite_steps", "skipped_nonfinite",
          "NaN or inf in the loss or gradient",
          "a learning rate far too high, float16 overflow, or a reward returning inf/NaN",
          "lower learning_rate; train in bfloat16 or float32; check the reward functions",
          "docs/gpu.md, 09_scaling_up",
          _nonfinite_test),
    Check("reward_without_skill", "reward, accuracy",
          "reward rises, accuracy does not",
          "reward hacking: the reward pays for something other than a right answer (a lax "
          "verifier, a judge, a length or format bonus)",
          "make the verifier strict; watch the strict accuracy, not the reward",
          "08_rewards_data (verifiers, judge)",
          _reward_without_skill),
    Check("tool_never_called", "tool_call_rate",
          "the agent never calls its tool",
          "the warm start rarely calls it and nothing rewards calling it, or tool calls end in "
          "errors and wrong answers, so RL learned to avoid them",
          "warm-start with tool demonstrations; train on cells where the tool is needed; check "
          "tool_error_rate and the tool-call syntax",
          "10_agents",
          _tool_never_called),
    Check("tool_errors", "tool_error_rate",
          "tool calls keep failing",
          "malformed calls (syntax, argument names) or calls the tool refuses; a small model "
          "drifts from the call format it was warm-started on",
          "look at the error replies in the episodes; reward only answers (errors then cost "
          "reward); a stricter format in the warm start",
          "10_agents",
          _threshold("tool_error_rate", 0.3,
                     "{value:.0%} of tool calls were answered with an error (at least "
                     "{threshold:.0%})")),
    Check("turn_limit", "turn_limit_rate",
          "episodes end at the turn limit",
          "the policy calls tools without ever answering: a loop, or a task that needs more "
          "turns than max_tool_calling_iterations",
          "raise max_tool_calling_iterations, or reward answering; look at the last turns",
          "10_agents",
          _threshold("turn_limit_rate", 0.5,
                     "{value:.0%} of episodes stopped at the turn limit (at least "
                     "{threshold:.0%})")),
    Check("staleness_grows", "staleness",
          "the trainer learns from ever older samples",
          "the sampler runs far ahead of the trainer: a large max_staleness, or groups that "
          "take long and so carry old policy versions",
          "a smaller max_staleness; correct the stale batches (offpolicy_correction 'decoupled' "
          "or 'tis'); staleness_admission 'slow_down'",
          "11_async",
          _threshold("staleness", 4.0,
                     "batches are {value:.1f} steps stale on average (above {threshold:g})")),
    Check("offpolicy_kl_explodes", "offpolicy_kl",
          "reward drops in an async run; the behaviour ratio spreads",
          "the weights moved far since the batch was sampled: stale batches with a high "
          "learning rate, trained without a behaviour weight",
          "lower max_staleness or learning_rate; offpolicy_correction 'decoupled' (AReaL) or "
          "'icepop', which drop the far tokens",
          "11_async",
          _threshold("offpolicy_kl", 0.1,
                     "the policy is {value:.3f} nats per token from the one that sampled the "
                     "batch (above {threshold})")),
    Check("queue_starves", "queue_wait, step_time",
          "an async run is no faster than a synchronous one",
          "the sampler is the bottleneck: the trainer waits for it (queue_wait), so the overlap "
          "buys nothing",
          "a larger max_staleness (the sampler may run further ahead), shorter completions, or "
          "fewer generations per step; compare samples/s with python -m labkit async_overlap",
          "11_async",
          _queue_starves),
    Check("inert_clip_higher", "config",
          "clip-higher set, clip fractions 0",
          "on-policy training (one optimizer step per batch): the ratio is 1, no clip binds",
          "use num_mini_batches > 1 or num_iterations > 1, as DAPO does",
          "04_dapo (clip-higher), 07_exploration",
          _inert_clip_higher),
)


#: The history columns the checks read.
_READ_COLUMNS = ("step", *dict.fromkeys(m.strip() for c in CHECKS for m in c.metric.split(",")
                                         if m.strip() != "config"))


def diagnose(history: pd.DataFrame, config=None, *, window: int = 5) -> list[Finding]:
    """The :data:`CHECKS` that fire on ``history`` (and ``config``, for setting checks).

    ``history`` needs a ``step`` column (else its rows count as steps 1, 2, ..., whatever its
    index) and any of the metric columns; a check whose metric is missing is skipped. A frame
    with several seeds (a ``seed`` column) is diagnosed seed by seed, and each finding names its
    seed in the message.
    """
    _check_window("window", window)
    if not isinstance(history, pd.DataFrame):
        raise TypeError(f"history must be a pandas DataFrame, got {type(history).__name__}")
    if config is not None and not isinstance(config, TrainConfig):
        raise TypeError(f"config must be the run's labkit.config.TrainConfig or None, got "
                        f"{type(config).__name__}")
    _check_numbers(history)
    if "seed" in history and history["seed"].nunique() > 1:
        findings = []
        for seed, part in history.groupby("seed", sort=True):
            for f in diagnose(part.drop(columns="seed"), config, window=window):
                findings.append(Finding(f.check, f.metric, f.step, f.value,
                                        f"seed {seed}: {f.message}", f.cause, f.fix, f.notebook))
        return findings
    findings = []
    for check in CHECKS:
        hit = check.test(history, config, window)
        if hit is not None:
            step, value, message = hit
            findings.append(Finding(check.name, check.metric, step, value, message, check.cause,
                                    check.fix, check.notebook))
    return findings


def _check_window(name: str, value) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"{name} must be an integer >= 1 (steps), got {value!r}")


def _check_numbers(history: pd.DataFrame) -> None:
    """Every column a check reads holds numbers (numeric text, as a CSV may give, counts; NaN
    is a step that did not log the metric, except in ``step``)."""
    for column in _READ_COLUMNS:
        if column not in history:
            continue
        values = history[column]
        numbers = pd.to_numeric(values, errors="coerce")
        bad = values[numbers.isna() & (values.notna() if column != "step" else True)]
        if len(bad):
            raise ValueError(f"history column {column!r} must hold numbers"
                             f"{' (no NaN)' if column == 'step' else ''}, got {bad.iloc[0]!r} "
                             f"in row {bad.index[0]!r}")


class RunDoctor:
    """A trainer callback: every ``every`` steps, :func:`diagnose` the history so far and print
    each new finding once (``trainer.callbacks`` or ``train(..., callbacks=[RunDoctor()])``).

    ``findings`` keeps what it reported, in order.
    """

    def __init__(self, every: int = 10, window: int = 5, printer=print):
        _check_window("every", every)
        _check_window("window", window)
        if not callable(printer):
            raise TypeError(f"printer must be a function that takes one line of text (print), "
                            f"got {printer!r}")
        self.every, self.window, self.printer = every, window, printer
        self.findings: list[Finding] = []

    def __call__(self, trainer, row) -> None:
        last = row["step"] == trainer.config.max_steps
        if row["step"] % self.every and not last:
            return
        seen = {f.check for f in self.findings}
        for finding in diagnose(trainer.history, trainer.config, window=self.window):
            if finding.check not in seen:
                self.findings.append(finding)
                self.printer(f"doctor: {finding}")


def troubleshooting_table() -> pd.DataFrame:
    """Symptom -> metric -> cause -> fix -> notebook, one row per check (the table of
    docs/troubleshooting.md)."""
    return pd.DataFrame([{"symptom": c.symptom, "metric": c.metric, "cause": c.cause,
                          "fix": c.fix, "notebook": c.notebook, "check": c.name}
                         for c in CHECKS])
