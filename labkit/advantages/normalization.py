"""Normalising advantages over a batch, and combining several reward functions (TRL's weighted sum,
GDPO's per-function normalisation, arXiv 2601.05242)."""

from __future__ import annotations

import torch

from labkit.advantages.groups import as_float, centre, check_mask, group_rows, group_std
from labkit.advantages.grpo import as_scale, group_advantages
from labkit.rules import config_rule

#: ``multi_objective_aggregation`` values (TRL's names): TRL's default, or GDPO's.
MULTI_OBJECTIVE_AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")


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
    x = as_float(advantages)
    valid = torch.ones_like(x, dtype=torch.bool) if mask is None else check_mask(mask, x)
    if not torch.isfinite(torch.where(valid, x, 0)).all():
        raise ValueError("advantages contain non-finite values at valid (unmasked) positions")
    centred, count = centre(torch.where(valid, x, torch.nan), dim=None)
    return centred / (group_std(centred, count, dim=None) + eps)


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
