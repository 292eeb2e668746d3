"""PPO's clipped surrogate and the five loss types built on it: grpo, bnpo, dr_grpo, dapo and
sequence_sum share the surrogate and differ in aggregation only (TRL's ``loss_type`` names; the
lab's ``sequence_sum`` is TRL's ``luspo`` aggregation, arXiv 2602.05261).

The options of this family: ``delta`` (TRL's cap on the unclipped ratio, INTELLECT-2, arXiv
2505.07291) and ``dual_clip`` (verl's ``clip_ratio_c``, arXiv 1912.09729). Clip-higher is the
shared ``epsilon_high`` (DAPO, arXiv 2503.14476, section 3.1).
"""

from __future__ import annotations

import torch

from labkit.losses.registry import SurrogateInputs, register_policy_loss
from labkit.losses.validation import check_non_negative, exp_ratio

_PPO = ("Proximal Policy Optimization Algorithms", "1707.06347")


def upper_clip(epsilon: float, epsilon_high: float | None) -> float:
    """TRL's rule for the upper clip, written once: ``epsilon_high``, or ``epsilon`` when it is
    None (a symmetric band). A config resolves it as :attr:`TrainConfig.upper_clip
    <labkit.config.TrainConfig.upper_clip>`; the functions that take TRL's two arguments call
    this."""
    return epsilon if epsilon_high is None else epsilon_high


def clipped_surrogate(
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    dual_clip: float | None = None,
) -> torch.Tensor:
    r"""PPO clipped surrogate with clip-higher, TRL's two-sided ``delta`` and verl's dual-clip.

    Textbook form (PPO, arXiv 1707.06347, eq. 7, negated)::

        ratio = torch.exp(log_ratio)
        return -torch.minimum(ratio * A, ratio.clamp(1 - eps_low, 1 + eps_high) * A)

    .. math::
        \ell = -\min\big(\hat r A,\ \mathrm{clip}(r, 1-\varepsilon_{low}, 1+\varepsilon_{high}) A\big),
        \qquad \hat r = \min(r, \delta)\ \text{if } \delta \text{ else } r

    and with dual-clip :math:`c`: :math:`\ell \leftarrow \min(\ell, -cA)` where :math:`A<0`.

    ================  ==========  ================================================================
    name              shape       meaning
    ================  ==========  ================================================================
    ``log_ratio``     (B, T) or   log importance ratio (token, GSPO-token) or (B, 1) sequence ratio
                      (B, 1)
    ``advantages``    broadcast   (B, 1) or (B, T)
    ``epsilon_low``   float       lower half-width >= 0 (0.2); > 1 disables the lower clip
    ``epsilon_high``  float       upper half-width >= 0; None = ``epsilon_low`` (DAPO: 0.28)
    ``delta``         float       cap on the unclipped ratio, > 1 (INTELLECT-2; TRL ``delta``)
    ``dual_clip``     float       c > 1 (verl ``clip_ratio_c``, customary 3)
    returns           broadcast   per-token loss
    ================  ==========  ================================================================

    Gradient w.r.t. :math:`\log\pi` (four sign cases): zero if A > 0 and r > 1+eps_high, or A < 0 and
    r < 1-eps_low, or A = 0 (the "clipped" tokens), and zero for A < 0 and r > c with dual-clip or
    r > delta; otherwise :math:`-A\,r`. At r = 1 this is REINFORCE weighted by A. For A < 0,
    ``delta`` and ``dual_clip`` give the same value (both cap the loss at ``c|A|``); ``delta`` also
    caps the ratio for A > 0, where it never binds because ``delta > 1 + eps_high`` is usual.
    ``float('inf')`` for both epsilons disables clipping (= :func:`no_clip_surrogate`).
    """
    epsilon_high = upper_clip(epsilon_low, epsilon_high)
    check_non_negative(epsilon_low=epsilon_low, epsilon_high=epsilon_high)
    if delta is not None and not delta > 1:
        raise ValueError(
            f"delta caps the ratio from above and must be > 1 (TRL recommends > 1 + epsilon_high), got {delta}"
        )
    if dual_clip is not None and not dual_clip > 1:
        raise ValueError(f"dual_clip must be > 1 (verl asserts clip_ratio_c > 1), got {dual_clip}")
    # exp(89) overflows float32; clamping keeps the gradient finite (the clip zeroes it there).
    ratio = exp_ratio(log_ratio)
    clipped = ratio.clamp(1 - epsilon_low, 1 + epsilon_high)
    unclipped = ratio if delta is None else ratio.clamp(max=delta)
    loss = -torch.minimum(unclipped * advantages, clipped * advantages)
    if dual_clip is not None:
        loss = torch.where(advantages < 0, torch.minimum(loss, -dual_clip * advantages), loss)
    return loss


def no_clip_surrogate(log_ratio: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    r"""Importance-weighted policy gradient without clipping: :math:`\ell = -r A`.

    ==============  =========  =================================
    name            shape      meaning
    ==============  =========  =================================
    ``log_ratio``   (B, T)/    any importance log-ratio
                    (B, 1)
    ``advantages``  broadcast  (B, 1) or (B, T)
    returns         broadcast  per-token loss, gradient -A r
    ==============  =========  =================================

    RL-PLUS drops the clip on purpose so low-probability tokens keep their gradient (its
    exploration weight and MIS ratio are separate); on-policy (r = 1) it is REINFORCE. Nothing
    bounds the update for a token whose ratio has grown: use with a single pass per batch.
    """
    return -exp_ratio(log_ratio) * advantages


def ppo_clip_flags(w, advantages, epsilon, epsilon_high):
    """Tokens whose gradient the clip removed: A < 0 below 1 - eps, A > 0 above 1 + eps_high."""
    return (w < 1 - epsilon) & (advantages < 0), (w > 1 + epsilon_high) & (advantages > 0)


def check_clipped_config(config) -> None:
    """The clip band's own rules: a symmetric-or-wider upper clip, and delta outside it."""
    epsilon_high = config.upper_clip
    if epsilon_high < config.epsilon:
        raise ValueError(
            f"epsilon_high ({epsilon_high}) is below epsilon ({config.epsilon}): the upper clip "
            f"1 + epsilon_high is meant to be at least as wide as the lower (DAPO's clip-higher "
            f"widens it): raise epsilon_high or use None (= epsilon)")
    if config.delta is not None and config.delta <= 1 + epsilon_high:
        raise ValueError(
            f"delta ({config.delta}) caps the unclipped ratio and must exceed the upper clip 1 + "
            f"epsilon_high = {1 + epsilon_high} (INTELLECT-2, arXiv 2505.07291), or it would clip "
            f"inside the trust region")


def _ppo_clip(x: SurrogateInputs, delta: float | None = None,
              dual_clip: float | None = None) -> torch.Tensor:
    return clipped_surrogate(x.log_w, x.advantages, x.epsilon, x.epsilon_high, delta, dual_clip)


_FAMILY = {"clipped": True, "options": {"delta": None, "dual_clip": None},
           "clip_flags": ppo_clip_flags, "config_check": check_clipped_config}
register_policy_loss("grpo", aggregation="sequence_mean", trl_name="grpo", paper=(
    "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models",
    "2402.03300"), summary="PPO clip, mean over each sequence then over sequences",
    **_FAMILY)(_ppo_clip)
register_policy_loss("bnpo", aggregation="local_token_mean", trl_name="bnpo", paper=_PPO,
                     summary="PPO clip, token mean of each micro-batch", **_FAMILY)(_ppo_clip)
register_policy_loss("dr_grpo", aggregation="fixed_length", trl_name="dr_grpo", paper=(
    "Understanding R1-Zero-Like Training: A Critical Perspective", "2503.20783"),
    summary="PPO clip, sum over tokens / (sequences x max_completion_length)",
    **_FAMILY)(_ppo_clip)
register_policy_loss("dapo", aggregation="token_mean", trl_name="dapo", paper=(
    "DAPO: An Open-Source LLM Reinforcement Learning System at Scale", "2503.14476"),
    summary="PPO clip, token mean over the whole batch", **_FAMILY)(_ppo_clip)
register_policy_loss("sequence_sum", aggregation="sequence_sum", trl_name="luspo", paper=_PPO,
                     summary="PPO clip, sum over each sequence's tokens, mean over sequences",
                     **_FAMILY)(_ppo_clip)
