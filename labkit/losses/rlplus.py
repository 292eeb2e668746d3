"""RL-PLUS (arXiv 2508.00222): no clip, and external demonstrations inside the group, weighed by a
multiple-importance-sampling ratio and an exploration weight."""

from __future__ import annotations

import math

import torch

from labkit.losses.clipped import no_clip_surrogate
from labkit.losses.ratios import token_log_ratio
from labkit.losses.registry import SurrogateInputs, register_policy_loss
from labkit.plugins import Setting, between, config_rule


def focal_weight(logp: torch.Tensor, gamma: float = 0.5) -> torch.Tensor:
    r"""RL-PLUS's exploration weight :math:`C_t = (1 - \mathrm{sg}[\pi_\theta(o_t)])^\gamma`.

    ``logp`` (any shape) are current log-probs; the weight is detached, so it rescales a token's
    gradient without adding one. A token the policy already predicts with probability 1 gets 0;
    an unlikely one keeps almost all of its gradient. Check: p = 0.5 and gamma = 0.5 give 0.7071.
    """
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0, got {gamma}")
    return (1 - logp.detach().exp()).clamp(min=0) ** gamma


def mis_ratio(logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    r"""RL-PLUS's multiple-importance-sampling ratio for tokens of an external demonstration.

    .. math:: r^m_t = \frac{2\,\pi_\theta(e_t)}{\pi_{old}(e_t) + \hat\pi_\omega(e_t)},\qquad
              \hat\pi_\omega = \tfrac12(\pi_{old} + 1) \ \Rightarrow\ r^m_t = \frac{4\pi_\theta}
              {3\pi_{old} + 1}

    The unknown policy that wrote the demonstration is estimated as a half/half mixture of the
    old policy and a maximally uncertain one (the released code's constant 1), which keeps the
    ratio below 4 even where the old policy gave the token almost no probability. Differentiable
    through ``logp``. Check: with p_old = p: p = 1 -> 1, p = 0.5 -> 0.8, p = 0.1 -> 0.3077.
    """
    return 4 * logp.exp() / (3 * old_logp.detach().exp() + 1)


def rlplus_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    demonstrations: torch.Tensor | None = None,
    exploration_gamma: float = 0.5,
) -> torch.Tensor:
    r"""RL-PLUS (arXiv 2508.00222): no clip, and external demonstrations inside the group.

    .. math::
        \ell_{i,t} = \begin{cases} -\,r_{i,t}\,A_i & o_i \text{ sampled by the policy}\\
        -\,r^m_{i,t}\,C_{i,t}\,A_i & o_i \text{ an external demonstration}\end{cases}

    with the ordinary ratio :math:`r`, the MIS ratio :math:`r^m = 4\pi_\theta/(3\pi_{old}+1)`
    (:func:`mis_ratio`) and the exploration weight :math:`C = (1 -
    \mathrm{sg}[\pi_\theta])^\gamma` (:func:`focal_weight`), which, as in the
    released code, applies to demonstration tokens only.

    ======================  =====  ==========================================================
    name                    shape  meaning
    ======================  =====  ==========================================================
    ``logp``, ``old_logp``  (B,T)  current and behaviour log-probs (for a demonstration the
                                   behaviour policy is the old policy scoring it)
    ``advantages``          (B,1)  or (B, T)
    ``demonstrations``      (B,)   bool: rows that are external demonstrations; None = none
    ``exploration_gamma``   float  gamma >= 0 (code default 0.5)
    returns                 (B,T)  per-token loss
    ======================  =====  ==========================================================

    Nothing bounds the update: use one optimizer step per batch, or watch ``kl_old``.
    """
    policy_rows = no_clip_surrogate(token_log_ratio(logp, old_logp), advantages)
    if demonstrations is None or not bool(demonstrations.any()):
        return policy_rows
    demo_rows = -mis_ratio(logp, old_logp) * focal_weight(logp, exploration_gamma) * advantages
    return torch.where(demonstrations.bool()[:, None], demo_rows, policy_rows)


@config_rule
def _check_demonstrations(config) -> None:
    """RL-PLUS's demonstrations (a sampling switch) need its loss and plain groups."""
    if not config.rlplus_demonstrations:
        return
    if config.loss_type != "rlplus":
        raise ValueError("rlplus_demonstrations put external demonstrations in the group, which "
                         "only loss_type='rlplus' trains correctly (with the MIS ratio): set "
                         "loss_type='rlplus'")
    if (config.num_generations < 2 or config.dynamic_sampling
            or config.num_remains_in_group is not None or config.gfpo_adaptive_k is not None):
        raise ValueError("rlplus_demonstrations replace one completion per group: use "
                         "num_generations >= 2 without dynamic sampling or GFPO")


def _check_rlplus_config(config) -> None:
    if config.advantage_estimator == "gae" or config.importance_sampling_level != "token":
        raise ValueError("loss_type='rlplus' uses token ratios and a group advantage: use "
                         "importance_sampling_level='token' and a group estimator")


@register_policy_loss("rlplus", aggregation="fixed_length", trl_name=None,
                      options={"exploration_gamma": Setting(
                          0.5, between(0, math.inf),
                          "RL-PLUS (loss_type='rlplus'): exponent of the exploration weight "
                          "(1 - p)^gamma on demonstration tokens (arXiv 2508.00222, code default "
                          "0.5)")},
                      batch_inputs=("demonstrations",),
                      config_check=_check_rlplus_config,
                      paper=(("RL-PLUS: Countering Capability Boundary Collapse of LLMs in "
                              "Reinforcement Learning with Hybrid-policy Optimization"),
                             "2508.00222"),
                      summary="no clip; demonstrations weighed by the MIS ratio and (1 - p)^gamma")
def _rlplus(x: SurrogateInputs, exploration_gamma: float,
            demonstrations: torch.Tensor | None = None) -> torch.Tensor:
    if x.importance_sampling_level != "token":
        raise ValueError("loss_type='rlplus' uses token ratios (importance_sampling_level="
                         "'token')")
    return rlplus_surrogate(x.logp, x.old_logp, x.advantages, demonstrations, exploration_gamma)
