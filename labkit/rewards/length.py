"""Length-control rewards and truncation rules that act on the reward (or on the length cap).

Pure tensor functions, one per method, in the layout of :mod:`labkit.advantages`: 1-D tensors of
length ``N = P * G`` with the ``G`` completions of each prompt consecutive. Each returns the
shaped reward (or the per-prompt length cap); the trainer's group advantage then runs unchanged on
it. The trainer reaches the rewards through ``TrainConfig.length_reward`` (last column; see
:func:`length_shaped_rewards`); LASER-D's bucket and target helpers are teaching functions that
notebook 06 calls by hand (the trainer has no monitoring set to recompute targets on).

===================================  ============================================================
function                             method (``length_reward`` value)
===================================  ============================================================
``kimi_length_reward``               Kimi k1.5 group-relative length reward (arXiv 2501.12599,
                                     section 2.3.3): +0.5 for the shortest, -0.5 for the longest
                                     (``"kimi"``)
``budget_control_reward``            Kimi K2 budget control (arXiv 2507.20534, section 3.2.3): a
                                     response over its task's token budget gets a penalty
                                     (``"budget"``)
``laser_reward``                     LASER / LASER-DE (arXiv 2505.15612): a bonus alpha for a
                                     correct response within the target length (``"laser"``,
                                     ``"laser_de"``)
``laser_difficulty_buckets``         LASER-D: easy / medium / hard from correct counts (k/3, 2k/3)
                                     (teaching function)
``laser_adaptive_target``            LASER-D: the shortest length whose Expected Correct
                                     Responses reach 1 (teaching function)
``truncation_reward``                DLER truncation penalty (arXiv 2510.15110): reward 0 beyond
                                     the truncation length L_T (``"truncation"``)
``difficulty_truncation_lengths``    DA-DLER: a shorter L_T for prompts solved at least half the
                                     time (``"difficulty_truncation"``)
===================================  ============================================================

Where the source leaves a choice open, the choice made here (marked "lab choice" in the
docstrings): lengths are counted in tokens (open-r1's ``len_reward`` counts characters); K2's
budgets and penalty are unpublished, so both are arguments (penalty default 0, the lowest task
reward of the lab's 0/1 accuracy); DA-DLER's tie at the threshold goes to the easy tier (the
reference's unit-test property "ratio >= 0.5 truncated at 2000"); LASER-D's bucket edges are
``3c >= 2k`` (easy) and ``3c >= k`` (medium), which gives the paper's 6 / 3-5 / 0-2 at k = 8.
"""

from __future__ import annotations

import torch

from labkit.advantages import as_float, check_lengths, group_lengths, group_rows
from labkit.plugins import config_rule

__all__ = [
    "LENGTH_REWARDS",
    "budget_control_reward",
    "difficulty_truncation_lengths",
    "kimi_length_reward",
    "laser_adaptive_target",
    "laser_difficulty_buckets",
    "laser_reward",
    "length_shaped_rewards",
    "truncation_reward",
]

#: ``TrainConfig.length_reward`` values, one per method the trainer can apply.
LENGTH_REWARDS = ("kimi", "laser", "laser_de", "budget", "truncation", "difficulty_truncation")

_LASER_VARIANTS = ("laser", "laser_de")


def _flat(x, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or x.dim() != 1:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{name} must be a 1-D tensor, got {shape}")
    return x


def _lengths_like(lengths: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return check_lengths(_flat(lengths, "lengths"), like)


def _bool_like(flags: torch.Tensor | None, like: torch.Tensor, name: str) -> torch.Tensor | None:
    if flags is None:
        return None
    _flat(flags, name)
    if flags.shape != like.shape:
        raise ValueError(f"{name} must have one entry per reward ({like.numel()}), got {flags.numel()}")
    return flags.bool()


def _cap(value, like: torch.Tensor, name: str) -> torch.Tensor:
    """A scalar length (or one per completion) as a float tensor broadcastable to ``like``."""
    cap = torch.as_tensor(value, device=like.device)
    if cap.dim() > 1 or (cap.dim() == 1 and cap.shape != like.shape):
        raise ValueError(f"{name} must be a number or a (N,) tensor with N = {like.numel()}")
    if (cap < 0).any() or not torch.isfinite(cap.to(torch.float64)).all():
        raise ValueError(f"{name} must be finite and >= 0, got {value}")
    return cap


# --------------------------------------------------------------------------------------------
# Kimi k1.5 length reward and K2 budget control
# --------------------------------------------------------------------------------------------


def kimi_length_reward(
    lengths: torch.Tensor, correct: torch.Tensor, num_generations: int
) -> torch.Tensor:
    r"""Kimi k1.5's group-relative length reward (arXiv 2501.12599, section 2.3.3).

    .. math::
        \lambda_i = 0.5 - \frac{|o_i| - \min_j |o_j|}{\max_j |o_j| - \min_j |o_j|},\qquad
        \text{len\_reward}_i = \begin{cases}\lambda_i & \text{correct}\\
        \min(0, \lambda_i) & \text{wrong}\end{cases}

    with min and max over the G completions of the same prompt.

    ===================  =====  ==========================================================
    name                 shape  meaning
    ===================  =====  ==========================================================
    ``lengths``          (N,)   response lengths in tokens (lab choice; open-r1 uses chars)
    ``correct``          (N,)   1/True = correct (the paper's r(x, y, y*) = 1), 0 = wrong
    ``num_generations``  int    G, completions per prompt, consecutive
    returns              (N,)   in [-0.5, 0.5] for correct, [-0.5, 0] for wrong answers
    ===================  =====  ==========================================================

    *Added* to the task reward with a weight (unpublished), after a warm-up without it
    (unpublished length). Relative within the group: even a group of uniformly long answers gives
    its shortest correct one +0.5; a group whose lengths are all equal gets 0 everywhere. Wrong
    answers never gain from being short. Check: lengths (100, 200, 300), correct (1, 1, 0) give
    (0.5, 0, -0.5).
    """
    grouped_correct = group_rows(as_float(_flat(correct, "correct")), num_generations, "correct")
    lens = group_lengths(lengths, num_generations, grouped_correct).to(grouped_correct.dtype)
    lo = lens.amin(-1, keepdim=True)
    spread = lens.amax(-1, keepdim=True) - lo
    lam = torch.where(spread > 0, 0.5 - (lens - lo) / spread.clamp(min=1e-12), 0.0)
    reward = torch.where(grouped_correct > 0, lam, lam.clamp(max=0))
    return reward.reshape(-1)


def budget_control_reward(
    rewards: torch.Tensor,
    lengths: torch.Tensor,
    budget,
    penalty: float = 0.0,
    truncated: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Kimi K2 budget control (arXiv 2507.20534, section 3.2.3): over budget means penalised.

    .. math::
        R'_i = \begin{cases} R_i & |o_i| \le B_{task(i)} \text{ and not truncated}\\
        r_{pen} & \text{otherwise}\end{cases}

    ===============  ==========  ==========================================================
    name             shape       meaning
    ===============  ==========  ==========================================================
    ``rewards``      (N,)        task rewards
    ``lengths``      (N,)        response lengths in tokens
    ``budget``       number or   the token budget B, one for all or one per completion (K2
                     (N,)        sets it by task type; sample with max_new_tokens = B)
    ``penalty``      float       r_pen (unpublished; lab choice 0, the lowest 0/1 reward)
    ``truncated``    (N,) bool   optional: completions the sampler cut at the budget; they
                                 are penalised even when their length equals B
    returns          (N,)        shaped rewards (float)
    ===============  ==========  ==========================================================

    Unlike k1.5's partial rollouts, which continue a cut-off response in the next iteration, K2
    punishes it, correct or not. Absolute and per task: a response within budget keeps its
    reward however long it is. Check: a correct response longer than B gets r_pen; any response
    of length <= B (not truncated) keeps its task reward.
    """
    r = as_float(_flat(rewards, "rewards"))
    lens = _lengths_like(lengths, r)
    over = lens > _cap(budget, r, "budget")
    cut = _bool_like(truncated, r, "truncated")
    if cut is not None:
        over = over | cut
    return torch.where(over, torch.as_tensor(float(penalty), dtype=r.dtype, device=r.device), r)


# --------------------------------------------------------------------------------------------
# LASER
# --------------------------------------------------------------------------------------------


def laser_reward(
    rewards: torch.Tensor,
    lengths: torch.Tensor,
    target_length,
    alpha: float = 0.5,
    *,
    correct: torch.Tensor | None = None,
    variant: str = "laser",
) -> torch.Tensor:
    r"""LASER's length-based reward (arXiv 2505.15612, eq. 2 and Table 2): a bonus, never a cut.

    .. math::
        \text{LASER:}\quad \hat R = R + \alpha\, I(R)\, \mathbb 1[|o| \le L_T]

        \text{LASER-DE:}\quad \hat R = R + \alpha\, I(R)\, \mathbb 1[|o| \le L_A]
                                         + \alpha\, (1 - I(R))\, \mathbb 1[|o| > L_A]

    ===================  ==========  ======================================================
    name                 shape       meaning
    ===================  ==========  ======================================================
    ``rewards``          (N,)        correctness reward C(y) (paper: +1 correct, -0.5 wrong,
                                     -1 bad format; the lab's accuracy is 1 / 0)
    ``lengths``          (N,)        response lengths in tokens
    ``target_length``    number or   L_T (LASER; paper 2048/4096/8192 with a 16384 context),
                         (N,)        or each completion's L_A from its difficulty bucket
                                     (LASER-D/DE, :func:`laser_adaptive_target`)
    ``alpha``            float       bonus, paper 0.5
    ``correct``          (N,) bool   I(R); default ``rewards == 1``
    ``variant``          str         ``"laser"`` or ``"laser_de"``
    returns              (N,)        shaped rewards
    ===================  ==========  ======================================================

    A correct but long response is not punished (it just misses the bonus), and the context
    window stays large, so truncation rarely happens. LASER-DE also gives a wrong response *over*
    the target +alpha (a smaller penalty: -0.5 + 0.5 = 0) to keep exploring on failures. Check
    (L_T = 4096, alpha = 0.5): (correct, 3000) -> 1.5, (correct, 5000) -> 1.0, (wrong, 3000) and
    (wrong, 5000) -> -0.5; LASER-DE (wrong, 5000) -> 0.0.
    """
    if variant not in _LASER_VARIANTS:
        raise ValueError(f"variant must be one of {_LASER_VARIANTS}, got {variant!r}")
    if not alpha >= 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    r = as_float(_flat(rewards, "rewards"))
    lens = _lengths_like(lengths, r)
    ok = r == 1 if correct is None else _bool_like(correct, r, "correct")
    within = lens <= _cap(target_length, r, "target_length")
    bonus = ok & within
    if variant == "laser_de":
        bonus = bonus | (~ok & ~within)
    return r + alpha * bonus.to(r.dtype)


def laser_difficulty_buckets(num_correct: torch.Tensor, k: int) -> torch.Tensor:
    r"""LASER-D difficulty buckets from the number of correct rollouts c out of k (section 5.1).

    ==================  =====  ===========================================================
    name                shape  meaning
    ==================  =====  ===========================================================
    ``num_correct``     (P,)   correct rollouts per prompt, integers in [0, k]
    ``k``               int    rollouts per prompt
    returns             (P,)   long: 0 = easy (3c >= 2k), 1 = medium (3c >= k), 2 = hard
    ==================  =====  ===========================================================

    The paper's thresholds are k/3 and 2k/3; the edges above are a lab choice that makes them
    exact integers comparisons (for k = 8: easy c >= 6, medium 3 <= c <= 5, hard c <= 2, as in
    the paper). The paper's minimum correct counts per bucket are 6, 3, 1 at k = 8.
    """
    c = _flat(num_correct, "num_correct")
    if int(k) != k or k < 1:
        raise ValueError(f"k must be a positive integer, got {k}")
    if c.is_floating_point() and not torch.equal(c, c.round()):
        raise ValueError("num_correct must hold integers")
    if ((c < 0) | (c > k)).any():
        raise ValueError(f"num_correct must lie in [0, k={k}]")
    c3 = 3 * c.to(torch.long)
    return torch.where(c3 >= 2 * k, 0, torch.where(c3 >= k, 1, 2)).to(torch.long)


def laser_adaptive_target(
    lengths: torch.Tensor,
    min_correct: float,
    lower: int,
    upper: int,
    interval: int,
) -> int:
    r"""LASER-D's adaptive target length of one difficulty bucket (section 5.2).

    .. math::
        L_A^{(d)} = \min\{\, l \in \{L_T, L_T + I, \dots, L_{ctx}\} :
        \underbrace{P_{l,d}\, |C_d|}_{\mathrm{ECR}_d} \ge 1 \,\}

    with :math:`P_{l,d}` the share of the bucket's monitored responses of length <= l.

    =================  =====  =============================================================
    name               shape  meaning
    =================  =====  =============================================================
    ``lengths``        (M,)   lengths of the bucket's responses on the monitoring set
    ``min_correct``    float  :math:`|C_d|`, paper 6 / 3 / 1 for easy / medium / hard (k = 8)
    ``lower``          int    the lower bound L_T (paper 1024 / 2048 / 4096)
    ``upper``          int    the context window (paper 16384): the fallback when no
                              candidate reaches ECR >= 1
    ``interval``       int    candidate step I (paper 1024)
    returns            int    L_A for this bucket
    =================  =====  =============================================================

    The paper recomputes it every 20 steps on 500 monitored problems. Check: if 40% of a medium
    bucket's responses fit in 2048 tokens, ECR = 0.4 * 3 = 1.2 >= 1, so L_A = 2048 when the lower
    bound is 2048. An empty bucket falls back to ``upper``.
    """
    lens = _flat(lengths, "lengths")
    if not (0 < lower <= upper) or interval < 1:
        raise ValueError(
            f"need 0 < lower <= upper and interval >= 1, got {lower}, {upper}, {interval}"
        )
    if not min_correct > 0:
        raise ValueError(f"min_correct must be > 0, got {min_correct}")
    if lens.numel() == 0:
        return int(upper)
    lens = lens.to(torch.float64)
    for candidate in range(int(lower), int(upper) + 1, int(interval)):
        coverage = float((lens <= candidate).to(torch.float64).mean())
        if coverage * min_correct >= 1 - 1e-12:
            return candidate
    return int(upper)


# --------------------------------------------------------------------------------------------
# DLER
# --------------------------------------------------------------------------------------------


def truncation_reward(rewards: torch.Tensor, lengths: torch.Tensor, truncation_length) -> torch.Tensor:
    r"""DLER's truncation penalty (arXiv 2510.15110, section 3): reward 0 beyond L_T.

    .. math::
        R'_i = \begin{cases} R_i & |o_i| \le L_T\\ 0 & |o_i| > L_T \end{cases}

    ======================  ==========  ===============================================
    name                    shape       meaning
    ======================  ==========  ===============================================
    ``rewards``             (N,)        task rewards
    ``lengths``             (N,)        response lengths in tokens
    ``truncation_length``   number or   L_T (paper 4000), or one per completion
                            (N,)        (DA-DLER, :func:`difficulty_truncation_lengths`)
    returns                 (N,)        shaped rewards
    ======================  ==========  ===============================================

    In practice DLER just sets the maximum response length to L_T: a cut response has no final
    answer and scores 0 by itself, so ``max_completion_length = L_T`` is this function. DLER's
    point is that this crudest penalty works once the optimiser is fixed: group-mean centring
    with one batch std (:func:`labkit.advantages.batch_normalize`), clip-higher 0.28 and dynamic
    sampling (an all-truncated group has all rewards 0 and is dropped).
    """
    r = as_float(_flat(rewards, "rewards"))
    lens = _lengths_like(lengths, r)
    return torch.where(lens <= _cap(truncation_length, r, "truncation_length"), r, 0.0)


def difficulty_truncation_lengths(
    correct_ratio: torch.Tensor,
    threshold: float = 0.5,
    easy_length: int = 2000,
    hard_length: int = 4000,
) -> torch.Tensor:
    r"""DA-DLER (arXiv 2510.15110, section 3.5): easier prompts get a shorter truncation length.

    .. math::
        L_T(q) = \begin{cases} L_{easy} & c_q \ge \text{threshold}\\ L_{hard} & c_q < \text{threshold}
        \end{cases},\qquad c_q = \frac{\#\text{correct}}{G}

    =================  =====  ==========================================================
    name               shape  meaning
    =================  =====  ==========================================================
    ``correct_ratio``  (P,)   c_q in [0, 1] per prompt (e.g. its group's mean accuracy)
    ``threshold``      float  paper 0.5; the tie c_q = threshold is easy (lab choice)
    ``easy_length``    int    paper 2000 tokens
    ``hard_length``    int    paper 4000 tokens
    returns            (P,)   long truncation length per prompt; expand to completions with
                              ``.repeat_interleave(G)`` for :func:`truncation_reward`
    =================  =====  ==========================================================

    The paper trains 150 extra steps with it from a DLER checkpoint.
    """
    c = as_float(_flat(correct_ratio, "correct_ratio"))
    if ((c < 0) | (c > 1) | torch.isnan(c)).any():
        raise ValueError("correct_ratio must lie in [0, 1]")
    if not 0 <= threshold <= 1:
        raise ValueError(f"threshold must lie in [0, 1], got {threshold}")
    if not (0 < easy_length and 0 < hard_length):
        raise ValueError(f"lengths must be > 0, got {easy_length}, {hard_length}")
    easy = torch.tensor(int(easy_length), device=c.device)
    hard = torch.tensor(int(hard_length), device=c.device)
    return torch.where(c >= threshold, easy, hard)


# --------------------------------------------------------------------------------------------
# the trainer's entry point
# --------------------------------------------------------------------------------------------


def length_shaped_rewards(
    kind: str,
    rewards: torch.Tensor,
    lengths: torch.Tensor,
    correct: torch.Tensor,
    num_generations: int,
    *,
    weight: float = 0.5,
    target: int | None = None,
    target_easy: int | None = None,
) -> torch.Tensor:
    r"""Rewards shaped by the length method ``kind`` (``TrainConfig.length_reward``).

    ===================  =====  ================================================================
    name                 shape  meaning
    ===================  =====  ================================================================
    ``rewards``          (N,)   total rewards of the step, G consecutive completions per prompt
    ``lengths``          (N,)   completion lengths in tokens
    ``correct``          (N,)   1 = correct answer, 0 = wrong (NaN = unjudged, counted wrong)
    ``weight``           float  kimi: weight of its length reward; laser/laser_de: alpha
    ``target``           int    L_T for laser/truncation, the budget for budget, DA-DLER's hard
                                length for difficulty_truncation
    ``target_easy``      int    DA-DLER's easy length (prompts solved at least half the time)
    returns              (N,)   shaped rewards
    ===================  =====  ================================================================
    """
    correct = torch.nan_to_num(as_float(_flat(correct, "correct")), nan=0.0)
    if kind == "kimi":
        return rewards + weight * kimi_length_reward(lengths, correct, num_generations)
    if kind in _LASER_VARIANTS:
        return laser_reward(rewards, lengths, target, weight, correct=correct, variant=kind)
    if kind == "budget":
        return budget_control_reward(rewards, lengths, target)
    if kind == "truncation":
        return truncation_reward(rewards, lengths, target)
    if kind == "difficulty_truncation":
        solve_rate = group_rows(correct, num_generations, "correct").mean(-1)
        caps = difficulty_truncation_lengths(solve_rate, 0.5, target_easy, target)
        return truncation_reward(rewards, lengths, caps.repeat_interleave(num_generations))
    raise ValueError(f"length_reward must be one of {LENGTH_REWARDS}, got {kind!r}")


@config_rule
def _check_length_reward(config) -> None:
    """Each length reward's own needs."""
    kind = config.length_reward
    if kind is None:
        return
    if kind != "kimi" and config.length_target is None:
        raise ValueError(f"length_reward={kind!r} needs length_target (tokens)")
    if kind == "difficulty_truncation" and (config.length_target_easy is None or
                                            config.length_target_easy > config.length_target):
        raise ValueError("length_reward='difficulty_truncation' (DA-DLER) needs "
                         "length_target_easy <= length_target: the easy prompts get the shorter "
                         "cut")
    if kind in ("kimi", "difficulty_truncation") and config.num_generations < 2:
        raise ValueError(f"length_reward={kind!r} compares the completions of a group: use "
                         f"num_generations >= 2")
