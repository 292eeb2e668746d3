"""ReMax's greedy-rollout baseline (arXiv 2310.10505, Algorithm 1)."""

from __future__ import annotations

import torch

from labkit.advantages.groups import group_rows
from labkit.advantages.registry import AdvantageInputs, Advantages, register_advantage_estimator

__all__ = ["remax_advantages"]


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
    grouped = group_rows(rewards, num_generations)
    baseline = group_rows(baseline_rewards, 1, name="baseline_rewards")
    if baseline.shape[0] != grouped.shape[0]:
        raise ValueError(
            f"baseline_rewards must have one entry per prompt: P = {grouped.shape[0]}, "
            f"got {baseline.shape[0]}"
        )
    return (grouped - baseline.to(grouped.dtype)).reshape(-1)


@register_advantage_estimator(
    "remax", groups=False, summary="r minus the reward of one greedy completion of the prompt",
    trl_refusal="ReMax's greedy-rollout baseline (arXiv 2310.10505) has no TRL equivalent",
    paper=(("ReMax: A Simple, Effective, and Efficient Reinforcement Learning Method for "
            "Aligning Large Language Models"), "2310.10505"))
def _remax(x: AdvantageInputs) -> Advantages:
    return Advantages(remax_advantages(x.rewards, x.greedy_rewards(), x.num_generations))
