"""OPO's length-weighted optimal baseline (arXiv 2505.23585, section 3)."""

from __future__ import annotations

import torch

from labkit.advantages.groups import group_lengths, group_rows
from labkit.advantages.registry import AdvantageInputs, Advantages, register_advantage_estimator

__all__ = ["opo_advantages"]


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
    grouped = group_rows(rewards, num_generations)
    lens = group_lengths(lengths, num_generations, grouped)
    weights = lens.to(grouped.dtype).clamp(min=1)
    baseline = (weights * grouped).sum(-1, keepdim=True) / weights.sum(-1, keepdim=True)
    constant = grouped.amax(-1, keepdim=True) == grouped.amin(-1, keepdim=True)
    return torch.where(constant, 0, grouped - baseline).reshape(-1)


@register_advantage_estimator(
    "opo", summary="r minus the length-weighted mean reward of the group",
    trl_refusal="OPO's length-weighted baseline (arXiv 2505.23585) has no TRL equivalent",
    paper=("On-Policy RL with Optimal Reward Baseline", "2505.23585"))
def _opo(x: AdvantageInputs) -> Advantages:
    return Advantages(opo_advantages(x.rewards, x.lengths, x.num_generations))
