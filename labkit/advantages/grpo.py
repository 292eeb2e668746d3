"""GRPO's group-relative advantage (DeepSeekMath, arXiv 2402.03300, section 4.1.2), with Dr.
GRPO's unscaled variant (arXiv 2503.20783, section 3.2) and TRL's batch scale (Lite-PPO, arXiv
2508.08221); several reward functions combine by TRL's weighted sum or by GDPO's per-function
normalisation (arXiv 2601.05242), this estimator's ``multi_objective_aggregation``.
"""

from __future__ import annotations

import torch

from labkit.advantages.groups import as_float, centre, group_rows, group_std
from labkit.advantages.registry import AdvantageInputs, Advantages, register_advantage_estimator
from labkit.plugins import config_rule

__all__ = ["MULTI_OBJECTIVE_AGGREGATIONS", "SCALE_REWARDS", "combine_rewards", "group_advantages"]

#: ``scale_rewards`` values (TRL's names): the advantage denominator.
SCALE_REWARDS = ("group", "batch", "none")
#: ``multi_objective_aggregation`` values (TRL's names): TRL's default, or GDPO's.
MULTI_OBJECTIVE_AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")


def as_scale(scale_rewards) -> str:
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
    groups (TRL: the rounding error of the mean divided by 1e-4: exactly 0 for 0/1 rewards, up to
    2.4e-3 in float32 on constant groups of rewards such as 0.3 or 1.7; ``docs/conventions.md``).
    """
    scale = as_scale(scale_rewards)
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    grouped = group_rows(rewards, num_generations, allow_nan=True)
    centred, count = centre(grouped)
    if scale == "group":
        centred = centred / (group_std(centred, count, unbiased=unbiased) + eps)
    elif scale == "batch":
        flat = grouped.reshape(-1)
        batch_centred, batch_count = centre(flat, dim=None)
        centred = centred / (group_std(batch_centred, batch_count, dim=None, unbiased=unbiased) + eps)
    return centred.reshape(-1)


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
    scale = as_scale(scale_rewards)
    if rewards_per_func.dim() != 2:
        raise ValueError(
            f"rewards_per_func must have shape (N, K), got {tuple(rewards_per_func.shape)}"
        )
    r = as_float(rewards_per_func)
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
        grouped = group_rows(
            r.T.reshape(-1), num_generations, name="rewards_per_func", allow_nan=True
        )
        centred, count = centre(grouped)
        per_func = (centred / (group_std(centred, count) + eps)).reshape(k, n).T
        # Missing entries are already 0 in per_func, which is nansum's convention.
        summed = torch.where(unscorable, torch.nan, per_func @ w)
        centred, count = centre(summed, dim=None)
        return centred / (group_std(centred, count, dim=None) + eps)
    summed = torch.where(torch.isnan(r), 0, r * w).sum(dim=1)
    summed = torch.where(unscorable, torch.nan, summed)
    return group_advantages(summed, num_generations, scale, eps)


@config_rule
def _check_gdpo(config) -> None:
    if config.multi_objective_aggregation != "normalize_then_sum":
        return
    gfpo = config.num_remains_in_group is not None or config.gfpo_adaptive_k is not None
    if config.advantage_estimator != "grpo" or gfpo:
        raise ValueError("multi_objective_aggregation='normalize_then_sum' (GDPO) is a GRPO "
                         "advantage: use advantage_estimator='grpo' without GFPO, or "
                         "'sum_then_normalize'")
    if config.overlong_buffer_len or config.length_reward is not None:
        raise ValueError("multi_objective_aggregation='normalize_then_sum' (GDPO) normalises each "
                         "reward function's column; the overlong penalty and length_reward shape "
                         "the total instead: use 'sum_then_normalize' with them")


@register_advantage_estimator(
    "grpo", missing_rewards=True, summary="(r - group mean) / (group std + eps)",
    paper=("DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models",
           "2402.03300"))
def _grpo(x: AdvantageInputs) -> Advantages:
    cfg = x.config
    if cfg.multi_objective_aggregation == "normalize_then_sum":  # GDPO
        weights = cfg.reward_weights and torch.tensor(cfg.reward_weights)
        return Advantages(combine_rewards(x.reward_components, weights, x.num_generations,
                                          "normalize_then_sum").to(x.rewards.dtype))
    return Advantages(group_advantages(x.rewards, x.num_generations, cfg.scale_rewards))
