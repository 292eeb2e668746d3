"""GRPO's group-relative advantage (DeepSeekMath, arXiv 2402.03300, section 4.1.2), with Dr.
GRPO's unscaled variant (arXiv 2503.20783, section 3.2) and TRL's batch scale (Lite-PPO, arXiv
2508.08221); GDPO's per-reward normalisation is this estimator's ``multi_objective_aggregation``.
"""

from __future__ import annotations

import torch

from labkit.advantages.groups import centre, group_rows, group_std
from labkit.advantages.registry import AdvantageInputs, Advantages, register_advantage_estimator

#: ``scale_rewards`` values (TRL's names): the advantage denominator.
SCALE_REWARDS = ("group", "batch", "none")


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


@register_advantage_estimator(
    "grpo", missing_rewards=True, summary="(r - group mean) / (group std + eps)",
    paper=("DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models",
           "2402.03300"))
def _grpo(x: AdvantageInputs) -> Advantages:
    cfg = x.config
    if cfg.multi_objective_aggregation == "normalize_then_sum":  # GDPO
        # its per-function normalisation lives with the other reward combinations, which build
        # on this module's formula
        from labkit.advantages.normalization import combine_rewards

        weights = cfg.reward_weights and torch.tensor(cfg.reward_weights)
        return Advantages(combine_rewards(x.reward_components, weights, x.num_generations,
                                          "normalize_then_sum").to(x.rewards.dtype))
    return Advantages(group_advantages(x.rewards, x.num_generations, cfg.scale_rewards))
