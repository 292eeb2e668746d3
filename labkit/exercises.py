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

:func:`check_liftable_cells` checks a prediction read off an evaluation: which (family,
difficulty) cells give GRPO a gradient (:func:`cell_signal` counts them).

:func:`check_grpo_gradient` checks a whole GRPO step built from a learner's two functions (the
group advantage and the clipped token loss of :mod:`labkit.grpo_minimal`) against the Trainer's
gradient on one real batch of the tiny model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd
import torch

__all__ = ["STALE_CORRECTIONS", "LearnerError", "cell_signal", "check_function",
           "check_grpo_gradient", "check_liftable_cells", "check_prediction",
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


# --------------------------------------------------------------------------------------------
# reading an evaluation: which cells can RL lift?
# --------------------------------------------------------------------------------------------

_CELL_KEYS = ["family", "difficulty"]


def cell_signal(samples: pd.DataFrame) -> pd.DataFrame:
    """How many prompts of each (family, difficulty) cell would give GRPO a gradient.

    ``samples`` is the per-sample frame of ``labkit.evaluate.evaluate(..., return_samples=True)``
    (``id``, ``family``, ``difficulty``, ``correct``; a NaN counts as wrong, a positive value as
    right, as in :func:`labkit.evaluate.pass_at_k_curve`). Under a 0/1 reward a prompt's group has
    a non-zero advantage only when some answers are right and some wrong: ``mixed``.

    ============  ==================================================================
    column        meaning
    ============  ==================================================================
    family, ...   the cell, one row each, sorted
    ``cell``      its name, ``"<family> d<difficulty>"`` (as ``viz.plot_pass_at_k``)
    ``prompts``   prompts in the cell
    ``accuracy``  share of the cell's answers that are right (the heat map's value)
    ``never``     prompts with no right answer: no signal, no headroom reached
    ``always``    prompts with every answer right: no signal, no headroom left
    ``mixed``     the others: the prompts that give GRPO a gradient
    ============  ==================================================================
    """
    missing = [c for c in ["id", *_CELL_KEYS, "correct"] if c not in samples.columns]
    if missing:
        raise ValueError(f"samples needs the columns {missing} (the frame of evaluate(..., "
                         f"return_samples=True)), it has {list(samples.columns)}")
    if samples.empty:
        raise ValueError("samples is empty: evaluate at least one prompt")
    frame = samples[["id", *_CELL_KEYS]].assign(right=samples["correct"].fillna(0) > 0)
    prompts = frame.groupby([*_CELL_KEYS, "id"], sort=True)["right"].agg(["sum", "size"])
    prompts = prompts.assign(never=prompts["sum"] == 0,
                             always=prompts["sum"] == prompts["size"])
    prompts["mixed"] = ~(prompts["never"] | prompts["always"])
    cells = prompts.groupby(_CELL_KEYS, sort=True).agg(
        prompts=("size", "size"), never=("never", "sum"), always=("always", "sum"),
        mixed=("mixed", "sum"))
    cells.insert(1, "accuracy", frame.groupby(_CELL_KEYS, sort=True)["right"].mean())
    cells = cells.reset_index()
    cells.insert(2, "cell", [f"{f} d{d}" for f, d in zip(cells["family"], cells["difficulty"])])
    return cells.astype({"prompts": int, "never": int, "always": int, "mixed": int})


def _cell_names(prediction, known: list[str]) -> list[str]:
    """The learner's cells as ``"<family> d<difficulty>"`` names; ValueError for any other."""
    if isinstance(prediction, str) or not hasattr(prediction, "__iter__"):
        raise TypeError(f"prediction must be a list of cells such as [\"add d2\", \"sort d1\"], "
                        f"got {prediction!r}")
    names = []
    for item in prediction:
        if isinstance(item, tuple) and len(item) == 2:
            item = f"{item[0]} d{item[1]}"
        name = " ".join(str(item).split())
        if name not in known:
            raise ValueError(f"{item!r} is not a cell of this evaluation; name cells as "
                             f"\"<family> d<difficulty>\", one of {known}")
        names.append(name)
    return names


def check_liftable_cells(prediction, samples: pd.DataFrame, *, liftable: float = 0.7,
                         dead: float = 0.3) -> bool:
    """Check a learner's prediction of the cells where GRPO gets a gradient.

    The learner names, from the accuracy heat map, the (family, difficulty) cells whose prompts
    mostly give GRPO something to learn from: some answers right and some wrong
    (:func:`cell_signal`'s ``mixed``). A cell where at least ``liftable`` of the prompts are mixed
    must be named; a cell where at most ``dead`` are must not be; a cell in between counts either
    way (with 10 prompts a cell, one prompt more or less must not decide a prediction).

    Args:
        prediction: a list of cells, ``"add d2"`` or ``("add", 2)``.
        samples: the per-sample frame of ``evaluate(..., return_samples=True)``.
        liftable, dead: the shares of mixed prompts above and below which a cell is decided
            (``0 <= dead < liftable <= 1``).

    Returns:
        True if the prediction names every liftable cell and no dead one; prints, either way,
        what the evaluation measured, cell by cell.
    """
    for label, value in (("liftable", liftable), ("dead", dead)):
        if not (isinstance(value, int | float) and not isinstance(value, bool)
                and 0 <= value <= 1):
            raise ValueError(f"{label} must be a share between 0 and 1, got {value!r}")
    if not dead < liftable:
        raise ValueError(f"dead ({dead}) must be below liftable ({liftable})")
    cells = cell_signal(samples).set_index("cell")
    named = set(_cell_names(prediction, list(cells.index)))
    share = cells["mixed"] / cells["prompts"]
    must = set(cells.index[share >= liftable - 1e-9])
    must_not = set(cells.index[share <= dead + 1e-9])
    missed = [c for c in cells.index if c in must - named]
    wrong = [c for c in cells.index if c in must_not & named]
    rule = (f"A cell is liftable when at least {liftable:.0%} of its prompts are mixed (some "
            f"answers right, some wrong), dead when at most {dead:.0%} are; a cell in between "
            f"counts either way.")
    if not missed and not wrong:
        print(f"Right: you named all {len(must)} liftable cells and no dead one. {rule}")
    else:
        print(f"Not quite. {rule}")
        for c in missed:
            row = cells.loc[c]
            print(f"- you left out {c} (accuracy {row['accuracy']:.0%}): {row['mixed']} of its "
                  f"{row['prompts']} prompts are mixed, and each of their groups has right "
                  f"answers to push up and wrong ones to push down")
        for c in wrong:
            row = cells.loc[c]
            print(f"- you named {c} (accuracy {row['accuracy']:.0%}): of its {row['prompts']} "
                  f"prompts {row['never']} were never solved and {row['always']} always: in "
                  f"those groups every reward is equal, so every advantage is zero")
    table = cells.assign(shown=[f"{m}/{p}" + (" *" if c in named else "")
                                for c, m, p in zip(cells.index, cells["mixed"],
                                                   cells["prompts"])])
    grid = table.pivot(index="family", columns="difficulty", values="shown").fillna("")
    print("\nmixed prompts per cell (* = named by you):")
    print(grid.to_string())
    return not missed and not wrong


# --------------------------------------------------------------------------------------------
# a whole step: GRPO built from the learner's pieces against the Trainer
# --------------------------------------------------------------------------------------------

#: the gradient check's tolerance, per parameter tensor: |got - expected| <= GRAD_ATOL * max(1,
#: max |expected|) + GRAD_RTOL * |expected|. Not exact, because the Trainer adds the same float32
#: terms in another order (its forward shares each group's prompt, skips zero-advantage rows and
#: packs completions by length). On the check's batch the differences stay near 1e-7, a tenth
#: of the tolerance; a wrong piece (another std, aggregation or sign) moves the gradient by 1e-2
#: or more.
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-6


def check_grpo_gradient(advantage_fn: Callable, loss_fn: Callable, *, model=None, tokenizer=None,
                        dataset=None, seed: int = 3) -> bool:
    """One GRPO step built from ``advantage_fn`` and ``loss_fn`` against the Trainer's.

    The Trainer of ``preset("grpo", prompts_per_step=4, num_generations=4,
    max_completion_length=48, seed=seed)`` samples and scores one batch and accumulates its
    gradient. On a copy of the same weights and the same batch, the learner's step:
    ``advantage_fn(rewards, num_generations)`` (as :func:`labkit.grpo_minimal.group_advantages`)
    and ``loss_fn(logp, logp.detach(), advantages, completion_mask, epsilon)`` (as
    :func:`labkit.grpo_minimal.clipped_token_loss`) on :func:`labkit.grpo_minimal.token_logprobs`,
    then ``backward``. The advantages are compared first, then every parameter's gradient, within
    :data:`GRAD_RTOL` and :data:`GRAD_ATOL` (float32 summation order, see there).

    One update per batch, so every ratio is 1 and the clip never acts here: check the clip on
    random off-policy inputs with :func:`check_function`.

    Args:
        model, tokenizer: the policy (default: the tiny model, float32 on the CPU).
        dataset: the training prompts (default: the first 32 of ``medium_cells("train")``).
        seed: the Trainer's seed, which picks the batch.

    Returns:
        True if advantages and gradients match; otherwise prints the first difference and returns
        False. Stubs that raise ``NotImplementedError`` return False with a reminder; any other
        exception of the learner's functions is re-raised as :class:`LearnerError`.
    """
    import copy

    from labkit import grpo_minimal
    from labkit.config import preset
    from labkit.models import load_policy
    from labkit.tasks import medium_cells
    from labkit.trainer import Trainer

    for label, fn in (("advantage_fn", advantage_fn), ("loss_fn", loss_fn)):
        if not callable(fn):
            raise TypeError(f"{label} must be a function, got {type(fn).__name__} {fn!r}")
    if model is None:
        model, tokenizer = load_policy("tiny", device="cpu", dtype="float32")
    dataset = medium_cells("train").select(range(32)) if dataset is None else dataset
    config = preset("grpo", prompts_per_step=4, num_generations=4, max_completion_length=48,
                    progress=False, seed=seed)
    trainer = Trainer(config, model=copy.deepcopy(model), tokenizer=tokenizer,
                      train_dataset=dataset)
    batch, _ = trainer.sample_and_score()
    trainer.compute_advantages(batch)
    if not bool((batch.sequence_advantages != 0).any()):
        raise ValueError(f"seed {seed} samples a batch whose groups are all right or all wrong: "
                         f"no gradient to compare; pick another seed")
    trainer.model.train()
    trainer.accumulate_gradients(batch, trainer.rows_with_gradient(batch), batch.loss_mask.sum())
    expected = {n: p.grad for n, p in trainer.model.named_parameters() if p.grad is not None}

    mine = copy.deepcopy(model).train()
    mine.zero_grad(set_to_none=True)
    names = {"advantage_fn": getattr(advantage_fn, "__name__", "advantage_fn"),
             "loss_fn": getattr(loss_fn, "__name__", "loss_fn")}
    hints = {"advantage_fn": "gets rewards (N,) and num_generations, returns (N,)",
             "loss_fn": "gets logp, old_logp, advantages (N,), mask (N, L) and epsilon, returns "
                        "a scalar loss"}

    def call(which, fn, *args):
        try:
            return fn(*args)
        except NotImplementedError:
            print(f"Not implemented yet: replace the `raise NotImplementedError` in "
                  f"`{names[which]}` with your code, run that cell again, then this one.")
            return None
        except Exception as err:
            raise LearnerError(f"`{names[which]}` raised {type(err).__name__}: {err}\nHint: it "
                               f"{hints[which]}; the traceback above shows the line.") from err

    advantages = call("advantage_fn", advantage_fn, batch.rewards.clone(),
                      config.num_generations)
    if advantages is None:
        return False
    logp = grpo_minimal.token_logprobs(mine, batch.prompt_ids, batch.prompt_mask,
                                       batch.completion_ids, batch.completion_mask,
                                       config.temperature)
    loss = call("loss_fn", loss_fn, logp, logp.detach(), advantages, batch.completion_mask,
                config.epsilon)
    if loss is None:
        return False
    if not (isinstance(loss, torch.Tensor) and loss.dim() == 0 and loss.requires_grad):
        print(f"Not quite: `{names['loss_fn']}` must return a scalar tensor with a gradient, got "
              f"{_describe(loss)}{'' if getattr(loss, 'requires_grad', False) else ' without one'}"
              f": average to one number, and detach only old_logp.")
        return False
    loss.backward()
    what = (f"the same batch (the Trainer's {config.prompts_per_step} prompts x "
            f"{config.num_generations} completions, seed {seed})")
    got = torch.as_tensor(advantages)
    if got.shape != batch.sequence_advantages.shape:
        print(f"Not quite: `{names['advantage_fn']}` returned shape {tuple(got.shape)}, the "
              f"Trainer's advantages have {tuple(batch.sequence_advantages.shape)} ({what}).")
        return False
    worst = _worst(got.detach().to(batch.sequence_advantages.dtype), batch.sequence_advantages,
                   1e-6, 1e-5)
    if worst is not None:
        index = worst[1]
        print(f"Not quite: your advantages differ from the Trainer's on {what}. Completion "
              f"{index[0]}: got {_fmt(got[index])}, expected "
              f"{_fmt(batch.sequence_advantages[index])}; the batch's rewards are "
              f"{batch.rewards.tolist()}.")
        return False
    largest, used = 0.0, 0.0
    for name, param in mine.named_parameters():
        if name not in expected:
            continue
        want = expected[name]
        have = torch.zeros_like(want) if param.grad is None else param.grad
        bound = GRAD_ATOL * max(1.0, want.abs().max().item()) + GRAD_RTOL * want.abs()
        if not ((have - want).abs() <= bound).all():  # NaN counts as a difference
            error = (have - want).abs().max().item()
            print(f"Not quite: your advantages match the Trainer's, but the gradient of `{name}` "
                  f"differs (max abs error {error:.3g}, its largest entry "
                  f"{want.abs().max().item():.3g}) on {what}. Check the loss's sign, its "
                  f"aggregation (each completion's token mean, then the mean over completions) "
                  f"and its mask.")
            return False
        largest = max(largest, (have - want).abs().max().item())
        used = max(used, ((have - want).abs() / bound).max().item())
    print(f"Correct! One step of your GRPO gives the Trainer's gradient on {what}: the "
          f"advantages and all {len(expected)} parameter gradients agree, the largest difference "
          f"{largest:.1e} ({used:.0%} of the tolerance: float32 sums in another order).")
    return True
