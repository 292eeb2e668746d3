"""Group filters: which sampled completions (or whole groups) carry gradient.

* DAPO dynamic sampling (arXiv 2503.14476): drop prompts whose G completions all got the same
  reward (accuracy 0 or 1), then refill the batch: :func:`dynamic_sampling_mask`.
* GFPO (arXiv 2508.09726): sample G, keep the best k by length or by reward per token, compute
  the group advantage on the kept ones only and give the rest advantage 0:
  :func:`gfpo_filter`, :func:`gfpo_advantages`; the adaptive-difficulty k:
  :func:`adaptive_num_remains` with :func:`difficulty_quartiles`.

Layout as in :mod:`labkit.advantages`: (N,) tensors, N = P*G, groups consecutive.

Departures: DAPO filters on accuracy; here any per-completion metric is accepted (pass accuracy
to be faithful, the reward to follow verl's ``metric=seq_reward``). GFPO keeps rejected
completions in the batch with advantage 0 (they still count in a token-level normaliser, as in the
paper's eq. 2) where TRL's removed experimental trainer dropped them; the paper's t-digest of past
difficulties is replaced by exact quantiles over a history tensor the caller keeps.
"""

from __future__ import annotations

import torch

from labkit.advantages import group_advantages, group_lengths, group_rows
from labkit.plugins import config_rule

__all__ = [
    "adaptive_num_remains",
    "difficulty_quartiles",
    "dynamic_sampling_mask",
    "gfpo_advantages",
    "gfpo_filter",
]

#: ``gfpo_metric`` values: keep the shortest, or the highest reward per token.
GFPO_METRICS = ("length", "token_efficiency")


def dynamic_sampling_mask(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    r"""DAPO dynamic sampling: keep the groups whose rewards are not all equal.

    .. math::
        \text{keep}_q = \big[\max_{i\in g(q)} r_i > \min_{i\in g(q)} r_i\big]

    ==================  =====  =====================================================
    name                shape  meaning
    ==================  =====  =====================================================
    ``rewards``         (N,)   reward (or accuracy) per completion; NaN = missing
    ``num_generations`` int    G
    returns             (P,)   bool, True = keep this prompt's group
    ==================  =====  =====================================================

    A dropped group has all-zero GRPO advantages, so it only dilutes a token-level normaliser.
    Expand to completions with ``mask.repeat_interleave(G)``. Edge cases: with G = 1 every group is
    kept (verl's rule; otherwise a G = 1 run would drop everything); missing (NaN) rewards are
    ignored, and a group with fewer than two present rewards is dropped. Infinite rewards raise.
    """
    grouped = group_rows(rewards, num_generations, allow_nan=True)
    if grouped.shape[1] == 1:
        return torch.ones(grouped.shape[0], dtype=torch.bool, device=grouped.device)
    valid = ~torch.isnan(grouped)
    hi = torch.where(valid, grouped, -torch.inf).amax(-1)
    lo = torch.where(valid, grouped, torch.inf).amin(-1)
    return hi > lo


def gfpo_filter(
    rewards: torch.Tensor,
    lengths: torch.Tensor,
    num_generations: int,
    num_remains_in_group: int | torch.Tensor,
    metric: str = "length",
) -> torch.Tensor:
    r"""GFPO rejection step: keep the best ``k`` completions of each group by a metric.

    ``"length"``: the k shortest (ascending :math:`|o_i|`). ``"token_efficiency"``: the k highest
    :math:`R_i / |o_i|`.

    ==========================  =========  ==============================================
    name                        shape      meaning
    ==========================  =========  ==============================================
    ``rewards``                 (N,)       finite rewards (used by token_efficiency)
    ``lengths``                 (N,)       response lengths in tokens (>= 0)
    ``num_remains_in_group``    int or     k, TRL's name; a (P,) integer tensor gives each
                                (P,)       prompt its own k (adaptive-difficulty GFPO)
    returns                     (N,)       bool keep mask with exactly k True per group
    ==========================  =========  ==============================================

    Edge cases: ties are broken by position (the earlier completion wins), so the result is
    deterministic; lengths are clamped to >= 1 for the efficiency ratio (no division by zero);
    with negative rewards a *longer* wrong answer has the better (less negative) efficiency, as in
    the paper. ``k`` must satisfy ``1 <= k <= G``; ``k = G`` keeps everything; ``k = 1`` is allowed
    but gives zero advantages (one kept reward has no spread).
    """
    if metric not in GFPO_METRICS:
        raise ValueError(f"metric must be one of {GFPO_METRICS}, got {metric!r}")
    grouped = group_rows(rewards, num_generations)
    lens = group_lengths(lengths, num_generations, grouped)
    num_prompts, g = grouped.shape
    k = torch.as_tensor(num_remains_in_group, device=grouped.device)
    if k.is_floating_point() or k.dim() > 1 or (k.dim() == 1 and k.shape[0] != num_prompts):
        raise ValueError(
            f"num_remains_in_group must be an int or an integer tensor of shape (P,) = ({num_prompts},)"
        )
    if ((k < 1) | (k > g)).any():
        raise ValueError(f"num_remains_in_group must lie in [1, G={g}], got {k.tolist()}")
    if metric == "length":
        score = lens.to(grouped.dtype)
    else:
        score = -grouped / lens.to(grouped.dtype).clamp(min=1)
    # Rank of each completion in its group (0 = best); a stable sort breaks ties by position.
    order = torch.sort(score, dim=-1, stable=True).indices
    rank = torch.empty_like(order)
    rank.scatter_(-1, order, torch.arange(g, device=order.device).expand(num_prompts, g))
    return (rank < k.reshape(-1, 1)).reshape(-1)


def gfpo_advantages(
    rewards: torch.Tensor,
    keep_mask: torch.Tensor,
    num_generations: int,
    scale_rewards: str | bool = "group",
    eps: float = 1e-4,
    *,
    unbiased: bool = False,
) -> torch.Tensor:
    r"""GFPO advantage: group statistics over the retained completions only, 0 for the rest.

    Textbook form (one group, ``keep`` its bool mask)::

        kept = rewards[keep]
        A = torch.zeros_like(rewards)
        A[keep] = (kept - kept.mean()) / (kept.std(unbiased=False) + eps)

    .. math::
        \hat A_i = \frac{R_i - \mu_S}{\sigma_S + \varepsilon}\, m_i,\qquad
        \mu_S = \tfrac1k\textstyle\sum_{j\in S}R_j,\quad
        \sigma_S = \sqrt{\tfrac1k\textstyle\sum_{j\in S}(R_j-\mu_S)^2}

    ==================  =====  =======================================================
    name                shape  meaning
    ==================  =====  =======================================================
    ``rewards``         (N,)   rewards of all G sampled completions
    ``keep_mask``       (N,)   bool, from :func:`gfpo_filter`
    returns             (N,)   advantages; exactly 0 where ``keep_mask`` is False
    ==================  =====  =======================================================

    Args:
        scale_rewards: as in :func:`~labkit.advantages.group_advantages`, computed on the kept set.
        unbiased: False (default) = the paper's population std, so the kept advantages of a group
            satisfy ``sum A = 0`` and ``sum A**2 = k`` (up to eps); True = Bessel, as TRL's removed
            GFPO trainer did.

    Edge cases: a kept set with equal rewards (e.g. all k shortest are correct under a binary
    reward) gives 0 for the whole group; with k = G it equals ``group_advantages`` (with the same
    ``unbiased``). Implemented as :func:`group_advantages` with rejected rewards marked missing.
    """
    if keep_mask.shape != rewards.shape or keep_mask.dtype != torch.bool:
        raise ValueError(f"keep_mask must be a bool tensor of shape {tuple(rewards.shape)}")
    r = rewards if rewards.is_floating_point() else rewards.to(torch.get_default_dtype())
    # Rejected completions are "missing rewards" for group_advantages: out of the stats, A = 0.
    return group_advantages(
        torch.where(keep_mask, r, torch.nan), num_generations, scale_rewards, eps, unbiased=unbiased
    )


def difficulty_quartiles(history: torch.Tensor, min_count: int = 1) -> torch.Tensor | None:
    r"""Quartiles :math:`(q_{25}, q_{50}, q_{75})` of the per-prompt mean rewards seen so far.

    ===========  =====  ====================================================
    name         shape  meaning
    ===========  =====  ====================================================
    ``history``  (H,)   mean reward of every group seen so far (any order)
    returns      (3,)   quartiles, or ``None`` while fewer than ``min_count``
    ===========  =====  ====================================================

    Replaces the paper's streaming t-digest by exact quantiles (linear interpolation): the lab's
    histories are small. ``None`` means "not ready": :func:`adaptive_num_remains` then uses the
    very-hard k for every prompt, as the paper does during warm-up.
    """
    if history.dim() != 1:
        raise ValueError(f"history must be 1-D, got shape {tuple(history.shape)}")
    if history.numel() < max(min_count, 1):
        return None
    h = history if history.is_floating_point() else history.to(torch.get_default_dtype())
    return torch.quantile(h, torch.tensor([0.25, 0.5, 0.75], dtype=h.dtype, device=h.device))


def adaptive_num_remains(
    mean_rewards: torch.Tensor,
    quartiles: torch.Tensor | None,
    k_values: tuple[int, int, int, int] = (8, 8, 6, 4),
) -> torch.Tensor:
    r"""Adaptive-difficulty GFPO (paper Algorithm 2): retain more completions for harder prompts.

    .. math::
        k_q = \begin{cases}k_{very\,hard} & \mu_q < q_{25}\\ k_{hard} & q_{25}\le\mu_q < q_{50}\\
        k_{medium} & q_{50}\le\mu_q<q_{75}\\ k_{easy} & \mu_q \ge q_{75}\end{cases}

    ===================  =====  ==========================================================
    name                 shape  meaning
    ===================  =====  ==========================================================
    ``mean_rewards``     (P,)   mean reward of each prompt's G completions (lower = harder)
    ``quartiles``        (3,)   from :func:`difficulty_quartiles`, or None (not ready)
    ``k_values``         4 int  (very hard, hard, medium, easy); paper: 8, 8, 6, 4 of G = 16
    returns              (P,)   long tensor of k, for ``gfpo_filter(num_remains_in_group=...)``
    ===================  =====  ==========================================================

    Edge cases: before the quartiles are ready every prompt gets the very-hard k. A mean equal to
    a quartile goes to the easier bucket (the paper's strict ``<``).
    """
    if len(k_values) != 4 or any(int(k) != k or k < 1 for k in k_values):
        raise ValueError(f"k_values must be four positive integers, got {k_values}")
    if mean_rewards.dim() != 1:
        raise ValueError(
            f"mean_rewards must be 1-D (one per prompt), got {tuple(mean_rewards.shape)}"
        )
    ks = torch.tensor(k_values, dtype=torch.long, device=mean_rewards.device)
    if quartiles is None:
        return ks[0].expand(mean_rewards.shape[0]).clone()
    if quartiles.shape != (3,):
        raise ValueError(f"quartiles must have shape (3,), got {tuple(quartiles.shape)}")
    # Number of quartiles the mean reaches: 0 = below q25 (very hard) ... 3 = at/above q75 (easy).
    bucket = (mean_rewards[:, None] >= quartiles.to(mean_rewards.dtype)[None, :]).sum(-1)
    return ks[bucket]


@config_rule
def _check_group_filters(config) -> None:
    """Dynamic sampling and GFPO need groups; GFPO needs GRPO's formula and one k."""
    from labkit.advantages import get_estimator

    gfpo = config.num_remains_in_group is not None or config.gfpo_adaptive_k is not None
    per_token = get_estimator(config.advantage_estimator).per_token
    if config.dynamic_sampling and (per_token or config.num_generations < 2):
        raise ValueError("dynamic_sampling drops groups whose completions all got the same "
                         "reward, which needs groups: use num_generations >= 2 with a group "
                         "estimator (grpo, rloo, remax, opo), or dynamic_sampling=False")
    if gfpo and config.advantage_estimator != "grpo":
        raise ValueError("num_remains_in_group / gfpo_adaptive_k (GFPO) normalise advantages "
                         "inside the kept subset with GRPO's formula: use "
                         "advantage_estimator='grpo', or turn GFPO off")
    if config.num_remains_in_group is not None and config.gfpo_adaptive_k is not None:
        raise ValueError("gfpo_adaptive_k gives each prompt its own k and replaces "
                         "num_remains_in_group: set one of them, not both")


class AdaptiveGFPO:
    """Adaptive-difficulty GFPO's memory (arXiv 2508.09726, Algorithm 2): every group mean reward
    seen so far, whose quartiles sort a new prompt into very hard, hard, medium or easy.

    ``mean_rewards`` is what a checkpoint saves to resume the same k's."""

    def __init__(self, adaptive_k: tuple[int, int, int, int], num_generations: int):
        self.adaptive_k, self.num_generations = adaptive_k, num_generations
        self.mean_rewards: list[float] = []

    def num_remains(self, rewards: torch.Tensor) -> torch.Tensor:
        """Per-prompt k (P,) for a batch of rewards (N,), this step's groups included in the
        quartiles."""
        means = rewards.view(-1, self.num_generations).nanmean(-1)
        self.mean_rewards += means.tolist()
        history = torch.tensor(self.mean_rewards, dtype=torch.float32)
        quartiles = difficulty_quartiles(history[~torch.isnan(history)], min_count=4)
        return adaptive_num_remains(means.cpu(), quartiles, self.adaptive_k).to(rewards.device)
