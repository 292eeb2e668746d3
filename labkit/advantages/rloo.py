"""RLOO's leave-one-out baseline (arXiv 2402.14740, section 3.2)."""

from __future__ import annotations

import torch

from labkit.advantages.groups import centre, group_rows
from labkit.advantages.registry import AdvantageInputs, Advantages, register_advantage_estimator

__all__ = ["rloo_advantages"]


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
    grouped = group_rows(rewards, num_generations)
    g = grouped.shape[1]
    if g == 1:
        return torch.zeros_like(grouped).reshape(-1)
    centred, _ = centre(grouped)
    return (centred * (g / (g - 1))).reshape(-1)


@register_advantage_estimator(
    "rloo", summary="r minus the mean of the other completions of the prompt",
    trl_refusal="the leave-one-out baseline is TRL's RLOOTrainer (trl.RLOOConfig), another "
                "trainer, not a GRPOConfig setting",
    paper=(("Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human "
            "Feedback in LLMs"), "2402.14740"))
def _rloo(x: AdvantageInputs) -> Advantages:
    return Advantages(rloo_advantages(x.rewards, x.num_generations))
