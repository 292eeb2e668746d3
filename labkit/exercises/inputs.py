"""The exercises' input makers: each takes a ``torch.Generator`` and returns the keyword arguments
of one call of the function under check (a policy batch, a stale batch, group rewards, pass@k
counts)."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import torch


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


#: the largest n whose binomials all fit in a float: C(1030, 515) < 1.8e308 < C(1031, 515)
FLOAT_BINOMIAL_LIMIT = 1030


def _overflowing_k(n: int) -> int:
    """The smallest k with C(n, k) beyond the largest float (C(n, k) then overflows for every k
    up to n - k); ``n`` must exceed :data:`FLOAT_BINOMIAL_LIMIT`."""
    limit = math.log(sys.float_info.max)
    k = 1
    while math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) <= limit:
        k += 1
    return k


def random_pass_counts(generator: torch.Generator, max_samples: int = 2000,
                       small_samples: int = 64, max_k: int = 8,
                       large_share: float = 0.25) -> dict[str, int]:
    """One pass@k problem: ``num_samples`` n, ``num_correct`` c and ``k`` (plain ints), the
    arguments of :func:`labkit.evaluate.pass_at_k`. Two kinds of draw:

    ==========  ===============  ==================================================================
    draw        share            n, c, k
    ==========  ===============  ==================================================================
    small       1 - large_share  n in 3..min(``small_samples``, ``max_samples``), k in
                                 2..min(n - 1, ``max_k``), c in 1..n - k: pass@k strictly
                                 between 0 and 1, and k > 1, where a biased estimator shows its
                                 error (at k = 1 every estimator is c / n)
    large       ``large_share``  n in 1031..``max_samples``, k where C(n, k) passes the largest
                                 float (about 1.8e308), c in 0..min(n - k, ``max_k``): a few
                                 right answers, so pass@k is not always 1
    ==========  ===============  ==================================================================

    The small draws are where the estimators differ: the plug-in 1 - (1 - c/n)^k (sampling
    with replacement) is below the unbiased value whenever 1 < k, e.g. 0.609 against 0.643 at
    n = 8, c = 3, k = 2, and "1 if c > 0" is wrong for every draw. The large draws are where a
    version that turns C(n, k) into a float overflows, while exact integers (``math.comb``, then
    one division) or the product form do not; there are none when ``max_samples`` is at most
    :data:`FLOAT_BINOMIAL_LIMIT`. With the seeds 0..19 of ``check_function(..., n_trials=20)``
    both kinds occur (a test holds this).
    """
    if max_samples < 3:
        raise ValueError(f"max_samples must be at least 3 (n > k >= 2), got {max_samples}")
    large = (max_samples > FLOAT_BINOMIAL_LIMIT
             and float(torch.rand((), generator=generator, dtype=torch.float64)) < large_share)
    if large:
        n = int(torch.randint(FLOAT_BINOMIAL_LIMIT + 1, max_samples + 1, (), generator=generator))
        lowest = _overflowing_k(n)
        k = int(torch.randint(lowest, n - lowest + 1, (), generator=generator))
        c = int(torch.randint(0, min(n - k, max_k) + 1, (), generator=generator))
    else:
        n = int(torch.randint(3, max(3, min(small_samples, max_samples)) + 1, (),
                              generator=generator))
        k = int(torch.randint(2, min(n - 1, max_k) + 1, (), generator=generator))
        c = int(torch.randint(1, n - k + 1, (), generator=generator))
    return {"num_samples": n, "num_correct": c, "k": k}


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
