"""Self-checking notebook exercises: your function against labkit's reference, spinningup style.

A notebook exercise gives a stub to fill in and one line to check it::

    from functools import partial
    from labkit.exercises import check_function, random_policy_batch
    from labkit.losses import clipped_surrogate

    def my_clipped_surrogate(log_ratio, advantages):
        raise NotImplementedError  # your code here: the per-token PPO loss, epsilon = 0.2

    check_function(my_clipped_surrogate, clipped_surrogate,
                   partial(random_policy_batch, keys=("log_ratio", "advantages")))

:func:`check_function` calls both functions on the same random inputs and compares the output's
shape, then its values, then (through autograd) its gradient with respect to every floating input.
It prints either ``Correct! ...`` or the first thing that differs, with where and by how much, and
returns a bool. A wrong answer never raises; a learner function that itself raises is re-raised
as :class:`LearnerError` with a hint (the original error is chained below it).

Input makers take a ``torch.Generator`` and return the keyword arguments of one call:
:func:`random_policy_batch` (an off-policy batch of responses of varied lengths),
:func:`random_group_rewards` (groups of sampled rewards), :func:`random_pass_counts` (the
counts of one pass@k problem) and :func:`random_stale_batch` (a batch sampled by an older policy:
behaviour, proximal and current log-probs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd
import torch

__all__ = ["STALE_CORRECTIONS", "LearnerError", "check_function", "check_prediction",
           "random_group_rewards", "random_pass_counts", "random_policy_batch",
           "random_stale_batch"]


class LearnerError(RuntimeError):
    """The learner's function raised an exception (chained as ``__cause__``) on a check input."""


# --------------------------------------------------------------------------------------------
# input makers
# --------------------------------------------------------------------------------------------


def _pick(values: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    unknown = [k for k in keys if k not in values]
    if unknown:
        raise ValueError(f"unknown keys {unknown}; choose from {list(values)}")
    return {k: values[k] for k in keys}


def random_policy_batch(generator: torch.Generator, batch_size: int = 4, max_length: int = 7,
                        ratio_std: float = 0.3,
                        keys: Sequence[str] = ("log_ratio", "advantages", "mask"),
                        ) -> dict[str, torch.Tensor]:
    """An off-policy batch of ``batch_size`` responses of varied lengths (float64).

    ======================  ======  ===========================================================
    key                     shape   content
    ======================  ======  ===========================================================
    ``logp``                (B, T)  current log-probs of the sampled tokens (< 0)
    ``old_logp``            (B, T)  behaviour log-probs: ``logp`` minus N(0, ratio_std) noise
    ``log_ratio``           (B, T)  ``logp - old_logp``, so many ratios leave the 0.8-1.2 band
    ``advantages``          (B, 1)  one advantage per response, N(0, 1)
    ``mask``                (B, T)  bool response mask; lengths 1..T, the first row full
    ======================  ======  ===========================================================

    Padding positions hold random values like real ones, so a function that forgets the mask is
    caught. ``keys`` chooses which entries to return (they become the keyword arguments).
    """
    shape = (batch_size, max_length)
    logp = -3 * torch.rand(shape, generator=generator, dtype=torch.float64)
    log_ratio = ratio_std * torch.randn(shape, generator=generator, dtype=torch.float64)
    lengths = torch.randint(1, max_length + 1, (batch_size,), generator=generator)
    lengths[0] = max_length
    values = {
        "logp": logp,
        "old_logp": logp - log_ratio,
        "log_ratio": log_ratio,
        "advantages": torch.randn(batch_size, 1, generator=generator, dtype=torch.float64),
        "mask": torch.arange(max_length)[None, :] < lengths[:, None],
    }
    return _pick(values, keys)


#: the corrections whose behaviour weight :func:`random_stale_batch` can ask for
STALE_CORRECTIONS = ("tis", "icepop", "decoupled")


def random_stale_batch(generator: torch.Generator, batch_size: int = 4, max_length: int = 7,
                       staleness_std: float = 0.6,
                       keys: Sequence[str] = ("prox_logp", "behav_logp", "mask"),
                       ) -> dict[str, Any]:
    """A stale batch: tokens sampled by an older policy, scored by the current ones (float64).

    ==================  ======  ===================================================================
    key                 shape   content
    ==================  ======  ===================================================================
    ``logp``            (B, T)  log-probs under the weights being optimised (< 0)
    ``prox_logp``       (B, T)  under the proximal policy (the weights at the start of the update):
                                ``logp`` minus N(0, 0.1) noise
    ``behav_logp``      (B, T)  under the behaviour policy that sampled: ``prox_logp`` minus
                                N(0, ``staleness_std``) noise, so behaviour ratios reach 0.2-5
    ``advantages``      (B, 1)  one advantage per response, N(0, 1)
    ``mask``            (B, T)  bool response mask; lengths 1..T, the first row full
    ``correction``      str     one of :data:`STALE_CORRECTIONS`, drawn
    ``cap``             float   the weight's upper bound, drawn in [1.5, 3]
    ``floor``           float   the lower bound, drawn in [0.3, 0.7]; None for ``decoupled``
                                (it has none)
    ==================  ======  ===================================================================

    Padding holds values like real tokens (a function that forgets the mask is caught); with a
    behaviour log-ratio of std 0.6, a trial of 28 tokens almost always has tokens beyond both
    bounds, so truncating where the rule masks (or the reverse) is caught.
    """
    shape = (batch_size, max_length)
    logp = -3 * torch.rand(shape, generator=generator, dtype=torch.float64)
    prox = logp - 0.1 * torch.randn(shape, generator=generator, dtype=torch.float64)
    behav = prox - staleness_std * torch.randn(shape, generator=generator, dtype=torch.float64)
    lengths = torch.randint(1, max_length + 1, (batch_size,), generator=generator)
    lengths[0] = max_length
    correction = STALE_CORRECTIONS[int(torch.randint(len(STALE_CORRECTIONS), (),
                                                     generator=generator))]
    cap = 1.5 + 1.5 * float(torch.rand((), generator=generator, dtype=torch.float64))
    floor = 0.3 + 0.4 * float(torch.rand((), generator=generator, dtype=torch.float64))
    values = {
        "logp": logp,
        "prox_logp": prox,
        "behav_logp": behav,
        "advantages": torch.randn(batch_size, 1, generator=generator, dtype=torch.float64),
        "mask": torch.arange(max_length)[None, :] < lengths[:, None],
        "correction": correction,
        "cap": cap,
        "floor": None if correction == "decoupled" else floor,
    }
    return _pick(values, keys)


def random_pass_counts(generator: torch.Generator, max_samples: int = 2000) -> dict[str, int]:
    """One pass@k problem: ``num_samples`` n in 1..``max_samples``, ``num_correct`` c in 0..n and
    ``k`` in 1..n (plain ints), the arguments of :func:`labkit.evaluate.pass_at_k`.

    The binomials of pass@k leave the float range (about 1.8e308) from n of about 1030 (C(1030,
    515)), so with the default ``max_samples`` a version that turns C(n, k) into a float
    overflows on some draws, while exact integers (``math.comb``, then one division) or the
    product form do not. A range below 1000 would let the float version pass.
    """
    n = int(torch.randint(1, max_samples + 1, (), generator=generator))
    return {"num_samples": n, "num_correct": int(torch.randint(0, n + 1, (), generator=generator)),
            "k": int(torch.randint(1, n + 1, (), generator=generator))}


REWARD_KINDS = ("binary", "total", "normal")


def random_group_rewards(generator: torch.Generator, num_prompts: int = 3,
                         num_generations: int = 4, kind: str = "binary", max_length: int = 64,
                         keys: Sequence[str] = ("rewards", "num_generations"),
                         ) -> dict[str, Any]:
    """Rewards of ``num_prompts`` groups of ``num_generations`` completions (groups consecutive).

    ===================  =====  =============================================================
    key                  shape  content
    ===================  =====  =============================================================
    ``rewards``          (N,)   float64, by ``kind``: ``"binary"`` 0/1 (a correctness reward;
                                some groups may be all equal, the edge case every estimator
                                must handle); ``"total"`` 0, 1 or 2, the lab's accuracy (0/1)
                                plus format (0/1), with one group all equal; ``"normal"``
                                N(0, 1)
    ``num_generations``  int    G
    ``lengths``          (N,)   response lengths in tokens, 1..``max_length`` (long)
    ===================  =====  =============================================================

    ``"total"`` is the reward the lab's runs train on. A rule derived for 0/1 rewards (the
    standard deviation sqrt(p(1-p)), or "some but not all right" as 0 < sum < G) gives a wrong
    answer on its groups, e.g. [2, 2, 1, 1], where ``"binary"`` inputs would let it pass.
    """
    if kind not in REWARD_KINDS:
        raise ValueError(f"kind must be one of {REWARD_KINDS}, got {kind!r}")
    n = num_prompts * num_generations
    if kind == "binary":
        rewards = torch.randint(0, 2, (n,), generator=generator).to(torch.float64)
    elif kind == "total":
        accuracy = torch.rand(n, generator=generator, dtype=torch.float64) < 0.5
        formatted = torch.rand(n, generator=generator, dtype=torch.float64) < 0.75
        rewards = accuracy.to(torch.float64) + formatted.to(torch.float64)
        equal = int(torch.randint(0, num_prompts, (), generator=generator))
        group = slice(equal * num_generations, (equal + 1) * num_generations)
        rewards[group] = float(rewards[group.start])
    else:
        rewards = torch.randn(n, generator=generator, dtype=torch.float64)
    values = {
        "rewards": rewards,
        "num_generations": num_generations,
        "lengths": torch.randint(1, max_length + 1, (n,), generator=generator),
    }
    return _pick(values, keys)


# --------------------------------------------------------------------------------------------
# the checker
# --------------------------------------------------------------------------------------------


def _copy(inputs: Mapping[str, Any], requires_grad: bool) -> dict[str, Any]:
    """Independent copies, floating tensors as fresh leaves (with grad if asked)."""
    copies = {}
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor):
            value = value.detach().clone()
            if requires_grad and value.is_floating_point():
                value.requires_grad_(True)
        copies[key] = value
    return copies


def _leaves(out, path: str = "output") -> list[tuple[str, Any]]:
    """(path, value) for each tensor or number in a (nested) tuple/list/dict output."""
    if isinstance(out, (tuple, list)):
        return [leaf for i, v in enumerate(out) for leaf in _leaves(v, f"{path}[{i}]")]
    if isinstance(out, Mapping):
        return [leaf for k, v in out.items() for leaf in _leaves(v, f"{path}[{k!r}]")]
    return [(path, out)]


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


def _fmt(x: torch.Tensor) -> str:
    return f"{x.item():.4g}" if x.is_floating_point() else str(x.item())


def _inputs_at(inputs: Mapping[str, Any], index: tuple[int, ...], shape: torch.Size) -> str:
    """The inputs at ``index`` of an output of ``shape`` (broadcast dims read at 0)."""
    parts = []
    for key, value in inputs.items():
        if not isinstance(value, torch.Tensor):
            parts.append(f"{key}={value!r}")
        elif index and value.dim() == len(shape) and all(
                s in (1, o) for s, o in zip(value.shape, shape)):
            at = tuple(0 if s == 1 else i for s, i in zip(value.shape, index))
            parts.append(f"{key}={_fmt(value.detach()[at])}")
        else:
            parts.append(f"{key}: shape {tuple(value.shape)}")
    return ", ".join(parts)


def _worst(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float):
    """None if close everywhere, else (max abs error, index of the worst mismatch)."""
    if got.dtype == torch.bool or expected.dtype == torch.bool:
        got, expected = got.to(torch.int64), expected.to(torch.int64)
    g, e = got.detach().to(torch.float64), expected.detach().to(torch.float64)
    close = torch.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
    if bool(close.all()):
        return None
    err = torch.nan_to_num((g - e).abs(), nan=torch.inf)
    err = torch.where(close, -1.0, err)
    flat = int(err.argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), e.shape))
    return float(err.reshape(-1)[flat]), index


def _compare_values(name: str, got, expected, inputs, atol: float, rtol: float) -> str | None:
    if isinstance(expected, torch.Tensor) and not isinstance(got, torch.Tensor):
        return f"`{name}` returned {_describe(got)} but expected {_describe(expected)}"
    got_leaves, exp_leaves = _leaves(got), _leaves(expected)
    if len(got_leaves) != len(exp_leaves):
        return (f"`{name}` returned {len(got_leaves)} value(s) but the reference returns "
                f"{len(exp_leaves)}")
    for (path, g), (_, e) in zip(got_leaves, exp_leaves):
        where = "" if len(exp_leaves) == 1 else f" ({path})"
        if isinstance(e, torch.Tensor) and not isinstance(g, torch.Tensor):
            return f"`{name}` returned {_describe(g)}{where} but expected {_describe(e)}"
        g, e = torch.as_tensor(g), torch.as_tensor(e)
        if g.shape != e.shape:
            return (f"`{name}` returned shape {tuple(g.shape)}{where} but expected "
                    f"{tuple(e.shape)}")
        worst = _worst(g, e, atol, rtol)
        if worst is not None:
            err, index = worst
            return (f"values differ{where}: max abs error {err:.3g} at index {index} (got "
                    f"{_fmt(g[index])}, expected {_fmt(e[index])}); inputs: "
                    f"{_inputs_at(inputs, index, e.shape)}")
    return None


def _gradients(out, inputs: Mapping[str, Any], weights: list[torch.Tensor]):
    """Gradient of sum(weight * output) w.r.t. each floating input tensor (zeros if unused)."""
    wrt = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.requires_grad}
    floats = [torch.as_tensor(v) for _, v in _leaves(out)]
    terms = [(t * w).sum() for t, w in zip(floats, weights)
             if t.is_floating_point() and t.requires_grad]
    if not terms:
        return {k: torch.zeros_like(v) for k, v in wrt.items()}
    grads = torch.autograd.grad(sum(terms), list(wrt.values()), allow_unused=True)
    return {k: torch.zeros_like(v) if g is None else g
            for (k, v), g in zip(wrt.items(), grads)}


def _has_gradient_path(out, inputs: Mapping[str, Any]) -> bool:
    """True when some floating input requires grad and some floating output depends on one."""
    return _floats_in_and_out(out, inputs) and any(
        torch.as_tensor(v).requires_grad for _, v in _leaves(out))


def _floats_in_and_out(out, inputs: Mapping[str, Any]) -> bool:
    """True when some input requires grad and some output is floating: a gradient could flow,
    so a reference whose output has none is detached on purpose (RL-PLUS's focal weight)."""
    return (any(isinstance(v, torch.Tensor) and v.requires_grad for v in inputs.values())
            and any(torch.as_tensor(v).is_floating_point() for _, v in _leaves(out)))


def check_function(learner_fn: Callable, reference_fn: Callable,
                   make_inputs: Callable[[torch.Generator], Mapping[str, Any]],
                   n_trials: int = 5, atol: float = 1e-6, rtol: float = 1e-5,
                   check_grad: bool = True, name: str | None = None, seed: int = 0) -> bool:
    """Check a learner's function against the reference on ``n_trials`` random inputs.

    Args:
        learner_fn: the learner's function, called with the keyword arguments of ``make_inputs``.
        reference_fn: labkit's implementation, called with the same arguments.
        make_inputs: ``generator -> dict of keyword arguments``, e.g. :func:`random_policy_batch`.
        n_trials: input draws (seeded ``seed``, ``seed + 1``, ...: the check is repeatable).
        atol, rtol: tolerances for values and gradients (``torch.isclose``).
        check_grad: also compare gradients w.r.t. every floating input tensor, through a
            random weighting of the outputs (so a gradient that only sums right is caught).
        name: how to call the function in messages (default: its ``__name__``).

    Returns:
        True if outputs (shape, values) and gradients match on every trial; otherwise prints the
        first difference and returns False. A stub that raises ``NotImplementedError`` returns
        False with a reminder. Any other exception from ``learner_fn`` is re-raised as
        :class:`LearnerError` with a hint.
    """
    _check_arguments(learner_fn, reference_fn, make_inputs, n_trials, atol, rtol, seed)
    name = name or getattr(learner_fn, "__name__", "your function")
    gradients_compared = False  # stays False where no float input reaches a float output
    detached = False  # float inputs and outputs, and the reference's output depends on none
    for trial in range(n_trials):
        generator = torch.Generator().manual_seed(seed + trial)
        made = make_inputs(generator)
        if not isinstance(made, Mapping):
            raise TypeError(f"make_inputs must return a dict of keyword arguments, got "
                            f"{type(made).__name__}")
        inputs = dict(made)
        ref_inputs, learner_inputs = _copy(inputs, check_grad), _copy(inputs, check_grad)
        expected = reference_fn(**ref_inputs)
        try:
            got = learner_fn(**learner_inputs)
        except NotImplementedError:
            print(f"Not implemented yet: replace the `raise NotImplementedError` in `{name}` "
                  "with your code, run that cell again, then this one.")
            return False
        except Exception as err:
            raise LearnerError(
                f"`{name}` raised {type(err).__name__}: {err}\nHint: it is called with keyword "
                f"arguments {_inputs_at(inputs, (), torch.Size())} and should return "
                f"{_describe(expected)} like the reference; the traceback above shows the line."
            ) from err
        problem = _compare_values(name, got, expected, inputs, atol, rtol)
        if problem is None and check_grad:
            weights = [torch.randn(torch.as_tensor(e).shape, generator=generator,
                                   dtype=torch.float64) for _, e in _leaves(expected)]
            ref_grads = _gradients(expected, ref_inputs, weights)
            learner_grads = _gradients(got, learner_inputs, weights)
            gradients_compared = gradients_compared or _has_gradient_path(expected, ref_inputs)
            detached = detached or _floats_in_and_out(expected, ref_inputs)
            for key, ref_grad in ref_grads.items():
                worst = _worst(learner_grads[key], ref_grad, atol, rtol)
                if worst is not None:
                    err, index = worst
                    problem = (f"values match but the gradient w.r.t. `{key}` differs: check "
                               f"where you detach/clip (max abs error {err:.3g} at index "
                               f"{index}: got {_fmt(learner_grads[key][index])}, expected "
                               f"{_fmt(ref_grad[index])})")
                    break
        if problem is not None:
            print(f"Not quite (trial {trial + 1} of {n_trials}): {problem}")
            return False
    if gradients_compared:
        checked = "values and gradients"
    elif detached:
        # the gradients were compared: the reference's are zero, so a learner's must be too
        checked = ("values, and no gradient: the reference's output is detached from its "
                   "inputs, and yours is too")
    elif check_grad:
        # integer lengths, boolean masks: there is no gradient to compare, so do not claim one
        checked = "values; its inputs or outputs are not floating tensors, so no gradient flows"
    else:
        checked = "values"
    print(f"Correct! `{name}` matches the reference on {n_trials} random inputs ({checked}).")
    return True


def _check_arguments(learner_fn, reference_fn, make_inputs, n_trials, atol, rtol, seed) -> None:
    """The checker's own arguments, refused by name (a learner's mistake is never one of these:
    these are how the notebook calls the checker)."""
    for label, fn in (("learner_fn", learner_fn), ("reference_fn", reference_fn),
                      ("make_inputs", make_inputs)):
        if not callable(fn):
            raise TypeError(f"{label} must be a function, got {type(fn).__name__} {fn!r}")
    if type(n_trials) is not int or n_trials < 1:
        raise ValueError(f"n_trials must be an integer >= 1 (a check of 0 inputs proves "
                         f"nothing), got {n_trials!r}")
    for label, value in (("atol", atol), ("rtol", rtol)):
        if not (isinstance(value, int | float) and not isinstance(value, bool)
                and 0 <= value < math.inf):
            raise ValueError(f"{label} must be a finite number >= 0, got {value!r}")
    if type(seed) is not int:
        raise TypeError(f"seed must be an integer, got {seed!r}")


# --------------------------------------------------------------------------------------------
# experiment exercises: change a setting, predict, run, check
# --------------------------------------------------------------------------------------------

PREDICTIONS = ("up", "down", "same")


def _history(run, which: str):
    """A run's history frame: a ``TrainResult`` (its ``.history``) or the frame itself."""
    frame = getattr(run, "history", run)
    if not hasattr(frame, "columns") or not hasattr(frame, "iloc"):
        raise TypeError(f"{which} must be a TrainResult or its history DataFrame, got "
                        f"{type(run).__name__}")
    return frame


def check_prediction(prediction: str, baseline, changed, metric: str, *, window: int = 5,
                     tolerance: float = 0.0) -> bool:
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
        tolerance: the largest difference still called "same" (>= 0, finite).

    Returns:
        True if the runs bear the prediction out; prints what they showed either way.
    """
    if prediction not in PREDICTIONS:
        raise ValueError(f"prediction must be one of {PREDICTIONS}, got {prediction!r}")
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise ValueError(f"window must be an integer >= 1 (rows averaged), got {window!r}")
    if not (isinstance(tolerance, int | float) and not isinstance(tolerance, bool)
            and 0 <= tolerance < math.inf):
        raise ValueError(f"tolerance must be a finite number >= 0, got {tolerance!r}")
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
    shown = ("same" if abs(difference) <= tolerance else "up" if difference > 0 else "down")
    what = (f"{metric} (mean of the last {window} values): baseline {before:.4g}, changed "
            f"{after:.4g}, difference {difference:+.4g} (\"same\" means within {tolerance:g})")
    if shown == prediction:
        print(f"Your prediction ({prediction}) matches what the runs showed: {what}. One seed "
              f"each: run another seed before you call it a rule.")
        return True
    print(f"Not what the runs showed: you predicted {prediction}, they show {shown}. {what}. "
          f"Look at the metric's curve in both runs to see why.")
    return False
