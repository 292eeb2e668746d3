"""Advantage estimators: pure tensor functions, one per method.

Layout (same as TRL): outcome rewards are a 1-D tensor of length ``N = P * G`` in which the ``G``
completions of each of the ``P`` prompts are consecutive, so ``rewards.view(P, G)`` is one row per
group. Outcome estimators return one advantage per completion, shape (N,), to be broadcast over its
tokens by the loss. Token-level estimators (GAE) work on (B, T) tensors with a 0/1 response mask.

=============================  ====================================================================
function                       method
=============================  ====================================================================
``group_advantages``           GRPO ((r - mean_g) / (std + eps)); Dr. GRPO (``scale_rewards="none"``);
                               Lite-PPO / TRL ``scale_rewards="batch"``
``rloo_advantages``            RLOO leave-one-out baseline
``remax_advantages``           ReMax greedy-decode baseline
``opo_advantages``             OPO length-weighted baseline
``batch_normalize``            REINFORCE++-baseline / DLER batch-level scaling, PPO whitening
``combine_rewards``            several reward functions: TRL sum-then-normalise or GDPO
``gae``                        PPO's generalised advantage estimation and value targets
``explained_variance``         how much of the returns' spread the critic predicts (PPO diagnostic)
``outcome_to_token_rewards``   put a sequence reward on its last token (PPO-RLHF)
``kl_penalized_token_rewards`` KL folded into per-token rewards (PPO-RLHF, k1)
``kl_penalized_rewards``       KL folded into the sequence reward (RLOO, "Comedy of Estimators")
=============================  ====================================================================

Missing rewards. A reward function may return ``None`` for a completion (TRL's contract); the
caller turns it into NaN. Following TRL exactly, ``group_advantages`` and ``combine_rewards`` treat a
NaN reward as *missing*: it is left out of every mean and standard deviation and its completion gets
advantage 0. The other estimators need every reward and raise ``ValueError`` on NaN. Infinite
rewards always raise.

Departures from TRL/verl, all deliberate and tested:

* a group whose (present) rewards are all equal gets advantages of exactly 0; TRL gets
  ``(r - mean) / (0 + 1e-4)``, i.e. 0 up to the rounding of the mean (about 1e-8 in float32);
* a group of one completion gets advantage 0 from the group baselines (GRPO, Dr. GRPO, RLOO, OPO;
  TRL's rule); verl's GRPO, RLOO and OPO return the raw reward for a singleton group, which is not
  centred at all;
* the standard deviation is Bessel-corrected (n - 1) as in TRL and verl, with ``eps = 1e-4`` added
  to it (TRL; verl uses 1e-6, oat 1e-8); GFPO's population std is available with ``unbiased=False``.
"""

from __future__ import annotations

import torch

__all__ = [
    "batch_normalize",
    "combine_rewards",
    "explained_variance",
    "gae",
    "group_advantages",
    "kl_penalized_rewards",
    "kl_penalized_token_rewards",
    "opo_advantages",
    "outcome_to_token_rewards",
    "remax_advantages",
    "rloo_advantages",
]

#: ``scale_rewards`` values (TRL's names): the advantage denominator.
SCALE_REWARDS = ("group", "batch", "none")
#: ``multi_objective_aggregation`` values (TRL's names): TRL's default, or GDPO's.
MULTI_OBJECTIVE_AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")


# --------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------


def _as_scale(scale_rewards) -> str:
    # TRL accepts booleans for backward compatibility: True -> "group", False -> "none".
    if scale_rewards is True:
        return "group"
    if scale_rewards is False:
        return "none"
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(
            f"scale_rewards must be one of {SCALE_REWARDS} (or True/False), got {scale_rewards!r}"
        )
    return scale_rewards


def _as_float(x: torch.Tensor) -> torch.Tensor:
    return x if x.is_floating_point() else x.to(torch.get_default_dtype())


def _grouped(
    rewards: torch.Tensor, num_generations: int, name: str = "rewards", allow_nan: bool = False
):
    """Validate a flat (N,) reward vector and return it as (P, G)."""
    if not isinstance(rewards, torch.Tensor) or rewards.dim() != 1:
        shape = (
            tuple(rewards.shape) if isinstance(rewards, torch.Tensor) else type(rewards).__name__
        )
        raise ValueError(f"{name} must be a 1-D tensor of length N = P * G, got {shape}")
    if (
        isinstance(num_generations, bool)
        or int(num_generations) != num_generations
        or num_generations < 1
    ):
        raise ValueError(f"num_generations must be an integer >= 1, got {num_generations!r}")
    num_generations = int(num_generations)
    if rewards.numel() % num_generations != 0:
        raise ValueError(
            f"len({name}) = {rewards.numel()} is not divisible by num_generations = {num_generations}; "
            "the G completions of each prompt must be consecutive"
        )
    rewards = _as_float(rewards)
    bad = torch.isinf(rewards) if allow_nan else ~torch.isfinite(rewards)
    if bad.any():
        what = "infinite" if allow_nan else "non-finite (NaN/inf)"
        raise ValueError(
            f"{name} contains {what} values at rows {bad.nonzero().flatten().tolist()[:8]}"
        )
    return rewards.view(-1, num_generations)


def _grouped_lengths(
    lengths: torch.Tensor, num_generations: int, like: torch.Tensor
) -> torch.Tensor:
    """Validate response lengths (N,) >= 0 matching the (P, G) rewards ``like``; return (P, G)."""
    lens = _grouped(lengths, num_generations, name="lengths")
    if lens.shape != like.shape:
        raise ValueError(
            f"lengths must have {like.numel()} entries like the rewards, got {lengths.numel()}"
        )
    if (lens < 0).any():
        raise ValueError("lengths must be >= 0")
    return lens


def _check_mask(mask: torch.Tensor, like: torch.Tensor, name: str = "mask") -> torch.Tensor:
    if mask.shape != like.shape:
        raise ValueError(f"{name} must have shape {tuple(like.shape)}, got {tuple(mask.shape)}")
    return mask.bool()


# --------------------------------------------------------------------------------------------
# group statistics (NaN = missing)
# --------------------------------------------------------------------------------------------


def _centre(x: torch.Tensor, dim: int | None = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """``x - nanmean(x)`` along ``dim`` (all dims if None), with NaN entries and constant slices -> 0.

    Returns the centred tensor (NaN-free) and the count of present entries (keepdim).
    """
    valid = ~torch.isnan(x)
    dims = tuple(range(x.dim())) if dim is None else (dim,)
    count = valid.sum(dims, keepdim=True)
    mean = torch.where(valid, x, 0).sum(dims, keepdim=True) / count.clamp(min=1)
    # Constant slices are detected exactly (max == min) so they give exactly 0, not rounding noise.
    hi = torch.where(valid, x, -torch.inf).amax(dims, keepdim=True)
    lo = torch.where(valid, x, torch.inf).amin(dims, keepdim=True)
    varies = valid & (hi > lo)
    return torch.where(varies, x - mean, 0), count


def _std(
    centred: torch.Tensor, count: torch.Tensor, dim: int | None = -1, unbiased: bool = True
) -> torch.Tensor:
    """Std of the present entries from already-centred values; 0 when fewer than 2 (or 1) entries."""
    dims = tuple(range(centred.dim())) if dim is None else (dim,)
    denom = (count - 1 if unbiased else count).clamp(min=1)
    return ((centred**2).sum(dims, keepdim=True) / denom).sqrt()


# --------------------------------------------------------------------------------------------
# outcome-reward estimators
# --------------------------------------------------------------------------------------------


def group_advantages(
    rewards: torch.Tensor,
    num_generations: int,
    scale_rewards: str | bool = "group",
    eps: float = 1e-4,
    *,
    unbiased: bool = True,
) -> torch.Tensor:
    r"""GRPO group-relative advantage (and its Dr. GRPO / batch-std variants).

    Textbook form (``scale_rewards="group"``, no missing rewards)::

        r = rewards.view(-1, num_generations)              # one row per prompt's group
        A = (r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + eps)
        return A.view(-1)

    The code below adds the NaN (missing reward) rule, exact zeros for constant groups and the
    ``"batch"``/``"none"`` scales.

    .. math::
        \hat A_i = \frac{r_i - \operatorname{mean}_{j\in g(i)} r_j}{\sigma + \varepsilon},\qquad
        \sigma = \begin{cases}\operatorname{std}_{j\in g(i)} r_j & \texttt{"group"} \text{ (GRPO)}\\
        \operatorname{std}_{\text{all } j} r_j & \texttt{"batch"} \text{ (Lite-PPO, TRL)}\\
        \text{no division} & \texttt{"none"} \text{ (Dr. GRPO)}\end{cases}

    ==================  =====  ======================================================
    name                shape  meaning
    ==================  =====  ======================================================
    ``rewards``         (N,)   N = P*G, groups consecutive; NaN = missing reward
    ``num_generations`` int    G, completions per prompt
    returns             (N,)   advantage per completion, same float dtype as rewards
    ==================  =====  ======================================================

    Args:
        scale_rewards: ``"group"``/``True``, ``"batch"`` or ``"none"``/``False`` with TRL's meaning.
            ``"batch"`` divides by the std of the *raw* rewards of the whole batch (between-group
            spread included), as TRL does; DLER's "batch normalisation" instead scales the centred
            advantages, see :func:`batch_normalize`.
        eps: added to the std (not inside the square root), TRL's 1e-4.
        unbiased: Bessel-corrected std (TRL, verl). ``False`` gives the population std of the
            GFPO paper, for which ``sum(A**2) = G`` per group (up to eps).

    Edge cases: per group the advantages sum to 0; a group whose rewards are all equal, a group of
    one completion, and a group with fewer than two present rewards give exactly 0; a NaN reward
    (missing) is excluded from the statistics and gets 0 (TRL's rule for unscorable completions).
    ``inf`` raises ``ValueError``. Differs from TRL only in returning exact zeros for constant
    groups (TRL: rounding noise of the mean divided by 1e-4, about 1e-8 in float32).
    """
    scale = _as_scale(scale_rewards)
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    grouped = _grouped(rewards, num_generations, allow_nan=True)
    centred, count = _centre(grouped)
    if scale == "group":
        centred = centred / (_std(centred, count, unbiased=unbiased) + eps)
    elif scale == "batch":
        flat = grouped.reshape(-1)
        batch_centred, batch_count = _centre(flat, dim=None)
        centred = centred / (_std(batch_centred, batch_count, dim=None, unbiased=unbiased) + eps)
    return centred.reshape(-1)


def rloo_advantages(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    r"""REINFORCE Leave-One-Out: baseline = mean reward of the *other* completions of the prompt.

    Textbook form::

        r = rewards.view(-1, G)
        A = r - (r.sum(-1, keepdim=True) - r) / (G - 1)    # mean of the *other* rewards
        return A.view(-1)

    .. math::
        \hat A_i = r_i - \frac{1}{G-1}\sum_{j\ne i} r_j = \frac{G}{G-1}\,(r_i - \bar r)

    ==================  =====  ============================================
    name                shape  meaning
    ==================  =====  ============================================
    ``rewards``         (N,)   N = P*G, groups consecutive, all finite
    returns             (N,)   advantages; each group sums to 0
    ==================  =====  ============================================

    Edge cases: ``G = 1`` has no leave-one-out baseline: advantage 0 (TRL, verl
    ``rloo_vectorized``; verl ``rloo`` returns the raw reward instead). All-equal rewards give
    exactly 0. Equals Dr. GRPO's advantage times ``G/(G-1)``. NaN/inf rewards raise ``ValueError``.
    The KL-in-reward of TRL's RLOO trainer is :func:`kl_penalized_rewards`, applied before this.
    """
    grouped = _grouped(rewards, num_generations)
    g = grouped.shape[1]
    if g == 1:
        return torch.zeros_like(grouped).reshape(-1)
    centred, _ = _centre(grouped)
    return (centred * (g / (g - 1))).reshape(-1)


def remax_advantages(
    rewards: torch.Tensor, baseline_rewards: torch.Tensor, num_generations: int
) -> torch.Tensor:
    r"""ReMax: the baseline is the reward of one greedy decode of the same prompt.

    .. math::
        \hat A_i = r_i - r(q, \bar a),\qquad \bar a_t = \arg\max_a \pi_\theta(a\mid q,\bar a_{<t})

    ======================  =====  =================================================
    name                    shape  meaning
    ======================  =====  =================================================
    ``rewards``             (N,)   sampled completions' rewards, N = P*G
    ``baseline_rewards``    (P,)   reward of the greedy completion of each prompt
    returns                 (N,)   advantages (not normalised)
    ======================  =====  =================================================

    Edge cases: a sampled completion identical to the greedy one gets exactly 0. With binary
    rewards and a correct greedy answer only negative advantages remain. The paper uses G = 1;
    larger G just shares the baseline. Departs from the official code, which also clips rewards to
    [-5, 5], discounts per-token returns (gamma = 0.99) and adds a per-token KL: those are separate
    knobs here. NaN/inf rewards and a baseline of the wrong length raise ``ValueError``.
    """
    grouped = _grouped(rewards, num_generations)
    baseline = _grouped(baseline_rewards, 1, name="baseline_rewards")
    if baseline.shape[0] != grouped.shape[0]:
        raise ValueError(
            f"baseline_rewards must have one entry per prompt: P = {grouped.shape[0]}, "
            f"got {baseline.shape[0]}"
        )
    return (grouped - baseline.to(grouped.dtype)).reshape(-1)


def opo_advantages(
    rewards: torch.Tensor, lengths: torch.Tensor, num_generations: int
) -> torch.Tensor:
    r"""OPO: the variance-optimal baseline under "gradient norm^2 proportional to length".

    Textbook form::

        r, l = rewards.view(-1, G), lengths.view(-1, G).float()
        baseline = (l * r).sum(-1, keepdim=True) / l.sum(-1, keepdim=True)
        return (r - baseline).view(-1)

    .. math::
        b^* = \frac{\sum_{j\in g} l_j\, r_j}{\sum_{j\in g} l_j},\qquad \hat A_i = r_i - b^*

    ===============  =====  ==================================================
    name             shape  meaning
    ===============  =====  ==================================================
    ``rewards``      (N,)   N = P*G, groups consecutive, all finite
    ``lengths``      (N,)   response lengths in tokens (>= 0)
    returns          (N,)   advantages, no std division; ``sum_i l_i A_i = 0``
    ===============  =====  ==================================================

    Edge cases: lengths are clamped to >= 1 (an empty response still counts as one token, so the
    baseline is always defined and lies in [min r, max r]); all-equal rewards give exactly 0; a
    group of one gives 0 (verl uses baseline 0, i.e. the raw reward). Negative lengths raise.
    """
    grouped = _grouped(rewards, num_generations)
    lens = _grouped_lengths(lengths, num_generations, grouped)
    weights = lens.to(grouped.dtype).clamp(min=1)
    baseline = (weights * grouped).sum(-1, keepdim=True) / weights.sum(-1, keepdim=True)
    constant = grouped.amax(-1, keepdim=True) == grouped.amin(-1, keepdim=True)
    return torch.where(constant, 0, grouped - baseline).reshape(-1)


def batch_normalize(
    advantages: torch.Tensor, mask: torch.Tensor | None = None, eps: float = 1e-4
) -> torch.Tensor:
    r"""Batch-level scaling: z-score of the advantages over the whole batch (or its valid tokens).

    Textbook form (no mask)::

        return (advantages - advantages.mean()) / (advantages.std() + eps)

    .. math::
        \hat A \leftarrow \frac{\hat A - \operatorname{mean}_{\text{batch}}\hat A}
                              {\operatorname{std}_{\text{batch}}\hat A + \varepsilon}

    ==============  ==========  =============================================================
    name            shape       meaning
    ==============  ==========  =============================================================
    ``advantages``  (N,) or     per-sequence advantages (e.g. group-centred rewards), or
                    (B, T)      per-token advantages (GAE, REINFORCE++ returns)
    ``mask``        like input  optional; only True entries enter the statistics
    returns         like input  normalised; masked-out entries are 0
    ==============  ==========  =============================================================

    Used for DLER / REINFORCE++-baseline (group-mean centring, then *one* batch std instead of
    per-group stds), for the last step of GDPO, and to whiten PPO's GAE advantages (TRL/verl
    ``masked_whiten``). Bessel-corrected std, eps added to the std; verl/TRL whitening uses
    ``rsqrt(var + 1e-8)`` instead, and verl whitens over tokens so long responses weigh more
    (pass a (B, T) tensor and mask for that; pass (N,) for the sequence-level form).

    Edge cases: fewer than two valid entries or all-equal entries give 0. Non-finite valid entries
    raise ``ValueError``.
    """
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    x = _as_float(advantages)
    valid = torch.ones_like(x, dtype=torch.bool) if mask is None else _check_mask(mask, x)
    if not torch.isfinite(torch.where(valid, x, 0)).all():
        raise ValueError("advantages contain non-finite values at valid (unmasked) positions")
    centred, count = _centre(torch.where(valid, x, torch.nan), dim=None)
    return centred / (_std(centred, count, dim=None) + eps)


def combine_rewards(
    rewards_per_func: torch.Tensor,
    weights: torch.Tensor | None,
    num_generations: int,
    mode: str = "sum_then_normalize",
    scale_rewards: str | bool = "group",
    eps: float = 1e-4,
) -> torch.Tensor:
    r"""Advantages from several reward functions: TRL's default or GDPO's decoupled normalisation.

    ``"sum_then_normalize"`` (TRL default, ``multi_objective_aggregation``):
    :math:`r_i=\sum_k w_k R_{ik}` (NaN entries skipped), then :func:`group_advantages` with
    ``scale_rewards``.

    ``"normalize_then_sum"`` (GDPO, arXiv 2601.05242):

    .. math::
        \tilde A_{ik} = \frac{R_{ik}-\operatorname{mean}_{g} R_{\cdot k}}{\operatorname{std}_{g} R_{\cdot k}+\varepsilon},
        \quad s_i=\sum_k w_k\tilde A_{ik},
        \quad \hat A_i=\frac{s_i-\operatorname{mean}_{\text{batch}} s}{\operatorname{std}_{\text{batch}} s+\varepsilon}

    ======================  ======  =========================================================
    name                    shape   meaning
    ======================  ======  =========================================================
    ``rewards_per_func``    (N, K)  reward of completion i from function k; NaN = the function
                                    returned None for that completion
    ``weights``             (K,)    ``reward_weights``; None means all 1
    returns                 (N,)    advantages
    ======================  ======  =========================================================

    Edge cases (TRL's rules): a NaN entry contributes nothing to the weighted sum (``nansum``) and
    is left out of its function's group statistics; a completion for which *every* function
    returned NaN is unscorable: it is excluded from all statistics and gets advantage 0. A function
    that is constant within a group contributes exactly 0 for that group. ``scale_rewards`` is
    ignored by ``"normalize_then_sum"``, whose two normalisations are fixed by the method (as in
    TRL). Differs from TRL only by exact zeros for constant groups (see :func:`group_advantages`).
    """
    if mode not in MULTI_OBJECTIVE_AGGREGATIONS:
        raise ValueError(f"mode must be one of {MULTI_OBJECTIVE_AGGREGATIONS}, got {mode!r}")
    scale = _as_scale(scale_rewards)
    if rewards_per_func.dim() != 2:
        raise ValueError(
            f"rewards_per_func must have shape (N, K), got {tuple(rewards_per_func.shape)}"
        )
    r = _as_float(rewards_per_func)
    n, k = r.shape
    w = (
        torch.ones(k, dtype=r.dtype, device=r.device)
        if weights is None
        else torch.as_tensor(weights)
    )
    if w.shape != (k,):
        raise ValueError(f"weights must have shape (K,) = ({k},), got {tuple(w.shape)}")
    if not torch.isfinite(w).all():
        raise ValueError("weights must be finite")
    w = w.to(r.dtype).to(r.device)
    unscorable = torch.isnan(r).all(dim=1)
    if mode == "normalize_then_sum":
        grouped = _grouped(
            r.T.reshape(-1), num_generations, name="rewards_per_func", allow_nan=True
        )
        centred, count = _centre(grouped)
        per_func = (centred / (_std(centred, count) + eps)).reshape(k, n).T
        # Missing entries are already 0 in per_func, which is nansum's convention.
        summed = torch.where(unscorable, torch.nan, per_func @ w)
        centred, count = _centre(summed, dim=None)
        return centred / (_std(centred, count, dim=None) + eps)
    summed = torch.where(torch.isnan(r), 0, r * w).sum(dim=1)
    summed = torch.where(unscorable, torch.nan, summed)
    return group_advantages(summed, num_generations, scale, eps)


# --------------------------------------------------------------------------------------------
# token-level: PPO-RLHF rewards, GAE
# --------------------------------------------------------------------------------------------


def outcome_to_token_rewards(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    r"""Place each sequence's scalar reward on its last response token (0 elsewhere).

    ===========  ======  ===============================================
    name         shape   meaning
    ===========  ======  ===============================================
    ``rewards``  (B,)    outcome reward per sequence
    ``mask``     (B, T)  response mask (holes allowed, e.g. tool output)
    returns      (B, T)  token rewards: ``r_i`` at the last True of row i
    ===========  ======  ===============================================

    Edge case: a row with no response token (e.g. a truncated completion masked out by DAPO's
    overlong filtering) cannot hold its reward; its row is all zeros, so it does not train.
    """
    if rewards.dim() != 1 or mask.dim() != 2 or rewards.shape[0] != mask.shape[0]:
        raise ValueError(
            f"rewards must be (B,) and mask (B, T) with the same B, got {tuple(rewards.shape)} "
            f"and {tuple(mask.shape)}"
        )
    m = mask.bool()
    # The last valid token is the one where the running count reaches the row total.
    counts = m.long().cumsum(-1)
    last = m & (counts == counts[:, -1:])
    return torch.where(last, _as_float(rewards)[:, None], 0)


def kl_penalized_token_rewards(
    token_rewards: torch.Tensor, kl: torch.Tensor, beta: float, mask: torch.Tensor
) -> torch.Tensor:
    r"""KL folded into per-token rewards (InstructGPT / PPO-RLHF, TRL PPO, verl ``use_kl_in_reward``).

    .. math::
        r_t \leftarrow r_t - \beta\, \mathrm{sg}[k_t],\qquad
        k_t = \log\pi_{\theta_{old}}(y_t\mid s_t) - \log\pi_{ref}(y_t\mid s_t)\ \ (k_1)

    =================  ======  ==============================================================
    name               shape   meaning
    =================  ======  ==============================================================
    ``token_rewards``  (B, T)  e.g. from :func:`outcome_to_token_rewards`
    ``kl``             (B, T)  per-token KL estimate, typically
                               ``labkit.losses.kl_estimate(old_logp, ref_logp, "k1")``
    ``beta``           float   KL coefficient >= 0 (InstructGPT 0.02, TRL PPO 0.05)
    returns            (B, T)  penalised rewards, 0 on masked positions, no gradient
    =================  ======  ==============================================================

    With k1 and undiscounted returns this gives the unbiased gradient of the sequence KL ("in
    reward" placement; Shah et al., arXiv 2512.21852, section 3). The KL is detached: in-reward KL acts only
    through the advantages.
    """
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if token_rewards.shape != kl.shape:
        raise ValueError(f"kl must have shape {tuple(token_rewards.shape)}, got {tuple(kl.shape)}")
    m = _check_mask(mask, token_rewards)
    return torch.where(m, token_rewards - beta * kl.detach(), 0)


def kl_penalized_rewards(
    rewards: torch.Tensor, kl: torch.Tensor, beta: float, mask: torch.Tensor
) -> torch.Tensor:
    r"""KL folded into the scalar sequence reward (TRL RLOO; the "Comedy of Estimators" advice).

    .. math::
        R_i \leftarrow R_i - \beta \sum_t \mathrm{sg}[k_{i,t}]

    ===========  ======  ========================================================
    name         shape   meaning
    ===========  ======  ========================================================
    ``rewards``  (B,)    outcome rewards
    ``kl``       (B, T)  per-token k1 estimates (``kl_estimate(old, ref, "k1")``)
    ``beta``     float   >= 0 (TRL RLOO default 0.05)
    returns      (B,)    penalised rewards, no gradient through the KL
    ===========  ======  ========================================================

    Apply before the group baseline (TRL RLOO does). With k1 this is the unbiased, recommended
    on-policy placement (arXiv 2512.21852).
    """
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if rewards.dim() != 1 or kl.dim() != 2 or kl.shape[0] != rewards.shape[0]:
        raise ValueError(
            f"rewards must be (B,) and kl (B, T) with the same B, got {tuple(rewards.shape)} and "
            f"{tuple(kl.shape)}"
        )
    m = _check_mask(mask, kl)
    return _as_float(rewards) - beta * torch.where(m, kl.detach(), 0).sum(-1)


def gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Generalised Advantage Estimation over response tokens, and the critic's targets.

    Textbook form (one sequence, no holes in the mask)::

        A, next_value, running = torch.zeros(T), 0.0, 0.0
        for t in reversed(range(T)):
            delta = rewards[t] + gamma * next_value - values[t]   # TD error
            running = delta + gamma * lam * running
            A[t], next_value = running, values[t]
        returns = A + values

    .. math::
        \delta_t = r_t + \gamma V(s_{t+1}) - V(s_t),\qquad
        \hat A_t = \delta_t + \gamma\lambda \hat A_{t+1},\qquad \hat R_t = \hat A_t + V(s_t)

    with :math:`V(s_{T+1}) = 0` and :math:`\hat A_{T+1} = 0` after the last response token.

    =================  ======  ====================================================
    name               shape   meaning
    =================  ======  ====================================================
    ``token_rewards``  (B, T)  per-token rewards (outcome on the last token, -beta*k)
    ``values``         (B, T)  critic values V(s_t) of the rollout (no gradient)
    ``mask``           (B, T)  response mask; holes are skipped, not treated as ends
    returns            (B, T)  advantages ``A`` (0 on masked positions)
    returns            (B, T)  returns ``R = A + V`` (0 on masked positions)
    =================  ======  ====================================================

    Masked positions are skipped by carrying the next value and the running advantage through
    them, as verl does, so padding and tool-output tokens do not break the recursion. Special
    cases: ``lam=1`` gives the reward-to-go minus V; ``lam=0`` gives the TD error. Like TRL and
    verl, a truncated response bootstraps with V = 0 after its last token. Whitening (TRL, verl) is
    left to the caller: ``batch_normalize(adv, mask)`` after taking the returns. Computed without
    gradient (values and rewards are rollout data).
    """
    if token_rewards.dim() != 2 or values.shape != token_rewards.shape:
        raise ValueError(
            f"token_rewards and values must both be (B, T), got {tuple(token_rewards.shape)} and "
            f"{tuple(values.shape)}"
        )
    if not (0.0 <= gamma <= 1.0) or not (0.0 <= lam <= 1.0):
        raise ValueError(f"gamma and lam must lie in [0, 1], got gamma={gamma}, lam={lam}")
    m = _check_mask(mask, token_rewards)
    rewards, vals = _as_float(token_rewards).detach(), _as_float(values).detach()
    batch, length = rewards.shape
    next_value = rewards.new_zeros(batch)
    next_adv = rewards.new_zeros(batch)
    advantages = torch.zeros_like(rewards)
    for t in reversed(range(length)):
        delta = rewards[:, t] + gamma * next_value - vals[:, t]
        adv_t = delta + gamma * lam * next_adv
        valid = m[:, t]
        advantages[:, t] = torch.where(valid, adv_t, 0)
        next_adv = torch.where(valid, adv_t, next_adv)
        next_value = torch.where(valid, vals[:, t], next_value)
    returns = torch.where(m, advantages + vals, 0)
    return advantages, returns


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    r"""How much of the returns' variance the critic's values explain, over the response tokens.

    .. math:: \mathrm{EV} = 1 - \mathrm{Var}[\hat R_t - V(s_t)]\,/\,\mathrm{Var}[\hat R_t]

    =============  ======  ===============================================
    name           shape   meaning
    =============  ======  ===============================================
    ``values``     (B, T)  the critic's V(s_t) at rollout time
    ``returns``    (B, T)  the targets, e.g. the second output of ``gae``
    ``mask``       (B, T)  response mask: only these tokens count
    returns        scalar  EV as a float
    =============  ======  ===============================================

    1 is a perfect critic, 0 one no better than a constant (an untrained critic whose head
    outputs 0 scores exactly 0), negative one worse than a constant. NaN when the returns do not
    vary (every completion got the same reward): there is nothing to explain. Computed on the
    rollout's values, before the critic trains on the batch, it is an out-of-sample score (cleanrl
    logs the same quantity). Population variances (n, not n - 1): the ratio does not depend on it.
    """
    m = _check_mask(mask, values)
    if returns.shape != values.shape:
        raise ValueError(f"values and returns must have the same shape, got "
                         f"{tuple(values.shape)} and {tuple(returns.shape)}")
    target = _as_float(returns).detach()[m]
    spread = target.var(correction=0) if target.numel() else target.new_zeros(())
    if spread == 0:
        return float("nan")
    error = target - _as_float(values).detach()[m]
    return float(1 - error.var(correction=0) / spread)
