"""The critic's loss (PPO) and the entropy bonus: the terms beside the policy surrogate."""

from __future__ import annotations

import torch

from labkit.losses.validation import (
    check_finite_number,
    check_non_negative,
    check_same_shape,
    masked_mean,
)


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip_range_value: float | None = 0.2,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""PPO critic loss with value clipping (OpenAI baselines ``ppo2``, TRL PPO, verl).

    Textbook form::

        clipped = old_values + (values - old_values).clamp(-eps_v, eps_v)
        loss = torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)
        return 0.5 * loss[mask].mean()

    .. math::
        V^{clip} = V_{old} + \mathrm{clip}(V - V_{old}, -\varepsilon_v, \varepsilon_v),\qquad
        L^{VF} = \tfrac12\,\operatorname{mean}_{t\in m}\max\big((V-\hat R)^2, (V^{clip}-\hat R)^2\big)

    ======================  ======  =========================================================
    name                    shape   meaning
    ======================  ======  =========================================================
    ``values``              (B, T)  current critic outputs, differentiable
    ``old_values``          (B, T)  critic outputs at rollout time
    ``returns``             (B, T)  targets R = A_GAE + V_old (before advantage whitening)
    ``mask``                (B, T)  response mask
    ``clip_range_value``    float   eps_v >= 0 (TRL 0.2, verl 0.5); None = no clipping
    returns                 ()      loss (token mean over this micro-batch)
    returns                 dict    ``value_clipfrac``: share of tokens where the clipped branch won
    ======================  ======  =========================================================

    Zero gradient exactly when the value left the band and the band edge is farther from the target
    than the value (e.g. V_old=0, eps=0.2, R=0.5, V=0.6); otherwise the gradient is (V - R)/n.
    """
    check_same_shape(values, "values", old_values=old_values, returns=returns, mask=mask)
    check_non_negative(clip_range_value=clip_range_value)
    m = mask.bool()
    # Zero the padding first: a NaN there would otherwise give NaN gradients (0 * NaN).
    values, old_values, returns = (torch.where(m, x, 0) for x in (values, old_values, returns))
    unclipped = (values - returns) ** 2
    if clip_range_value is None:
        clipped = unclipped
    else:
        v_clip = old_values + (values - old_values).clamp(-clip_range_value, clip_range_value)
        clipped = (v_clip - returns) ** 2
    loss = 0.5 * masked_mean(torch.maximum(unclipped, clipped), m)
    with torch.no_grad():
        clipfrac = masked_mean((clipped > unclipped).to(values.dtype), m)
    return loss, {"value_clipfrac": clipfrac}


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor, coef: float) -> torch.Tensor:
    r"""Entropy bonus as a loss term: :math:`-c\cdot\operatorname{mean}_{t\in m} H_t` (add it to the loss).

    ===========  ======  =================================================
    name         shape   meaning
    ===========  ======  =================================================
    ``entropy``  (B, T)  per-token entropy (differentiable to have effect)
    ``mask``     (B, T)  response mask
    ``coef``     float   c, finite (TRL ``entropy_coef``; GFPO paper 0.001)
    returns      ()      loss term; negative c penalises entropy
    ===========  ======  =================================================

    A token mean whatever the policy aggregation (TRL 1.16 does the same, so ``coef`` means the
    same for every ``loss_type``).
    """
    check_same_shape(entropy, "entropy", mask=mask)
    check_finite_number(coef=coef)
    return -coef * masked_mean(entropy, mask.bool())
