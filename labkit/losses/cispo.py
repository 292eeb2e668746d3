"""CISPO (MiniMax-M1, arXiv 2506.13585, section 3.1): REINFORCE with a clipped, detached
importance weight, so no token ever loses its gradient to the clip."""

from __future__ import annotations

import math

import torch

from labkit.losses.registry import SurrogateInputs, register_policy_loss
from labkit.losses.validation import exp_ratio
from labkit.plugins import Setting, between


def cispo_surrogate(
    logp: torch.Tensor,
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    max_weight: float,
    min_weight: float | None = None,
) -> torch.Tensor:
    r"""CISPO (MiniMax-M1): REINFORCE with a clipped, detached importance weight.

    .. math::
        \ell = -\,\mathrm{sg}\big[\mathrm{clip}(r, w_{min}, w_{max})\big]\; A\; \log\pi_\theta(o_t\mid s_t)

    ===============  =========  ==============================================================
    name             shape      meaning
    ===============  =========  ==============================================================
    ``logp``         (B, T)     current log-probs (the gradient flows only through these)
    ``log_ratio``    (B, T)/    log importance ratio; (B, 1) for a sequence-level weight
                     (B, 1)
    ``advantages``   broadcast  (B, 1) or (B, T)
    ``max_weight``   float      absolute cap on the weight > 0: TRL ``epsilon_high`` for
                                ``loss_type="cispo"`` (recommended 5.0); the paper's 1 + eps_high
    ``min_weight``   float      optional lower bound (TRL: none; verl: 1 - clip_ratio_low)
    returns          (B, T)     per-token loss (its *value* is not ~0 on-policy, unlike PPO's)
    ===============  =========  ==============================================================

    Unlike PPO, clipping the weight never removes a token's gradient: beyond the cap it is
    :math:`-w_{max} A\,\nabla\log\pi` instead of 0; it is zero only when A = 0.
    """
    if not max_weight > 0:
        raise ValueError(f"max_weight (TRL epsilon_high for cispo) must be > 0, got {max_weight}")
    if min_weight is not None and not 0 <= min_weight <= max_weight:
        raise ValueError(f"min_weight must lie in [0, max_weight={max_weight}], got {min_weight}")
    weight = exp_ratio(log_ratio)
    weight = weight.clamp(min=min_weight, max=max_weight).detach()
    return -weight * advantages * logp


def _cispo_clip_flags(w, advantages, epsilon, epsilon_high):
    # TRL's cispo_clip_ratio: the weight hit its cap on a token that pushes up
    return torch.zeros_like(w, dtype=torch.bool), (w > epsilon_high) & (advantages > 0)


def _check_cispo_config(config) -> None:
    low = config.cispo_min_weight
    if low is not None and config.epsilon_high is not None and low > config.epsilon_high:
        raise ValueError(f"cispo_min_weight ({low}) exceeds the cap epsilon_high "
                         f"({config.epsilon_high}): the weight is clipped to [min, cap]")
    if config.epsilon_high is None:
        raise ValueError(
            "loss_type='cispo' caps the importance weight at epsilon_high, an absolute cap (TRL "
            "recommends 5.0): set epsilon_high (TRL would silently use epsilon = 0.2 and shrink "
            "every gradient fivefold)")


@register_policy_loss("cispo", aggregation="token_mean", trl_name="cispo",
                      options={"cispo_min_weight": Setting(
                          None, between(0, math.inf, optional=True),
                          "CISPO: lower bound of the clipped importance weight (loss_type="
                          "'cispo'); None = no floor (TRL). verl's default CISPO clips to "
                          "[1 - clip_ratio_low, 1 + clip_ratio_high]: its 0.2/0.2 is "
                          "cispo_min_weight=0.8 with epsilon_high=1.2 here "
                          "(docs/conventions.md)",
                          why="TRL's CISPO caps the importance weight from above only; a floor "
                              "on it (verl's 1 - clip_ratio_low) has no GRPOConfig setting")},
                      clip_flags=_cispo_clip_flags, config_check=_check_cispo_config,
                      paper=(("MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning "
                              "Attention"), "2506.13585"),
                      summary="clipped, detached IS weight times log pi; token mean")
def _cispo(x: SurrogateInputs, cispo_min_weight: float | None) -> torch.Tensor:
    if x.epsilon_high is None:
        raise ValueError(
            "loss_type='cispo' needs epsilon_high, the absolute cap on the importance weight "
            "(e.g. 5.0); TRL would silently use epsilon=0.2 and shrink every gradient fivefold")
    return cispo_surrogate(x.logp, x.log_w, x.advantages, max_weight=x.epsilon_high,
                           min_weight=cispo_min_weight)
