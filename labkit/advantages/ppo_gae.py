"""PPO's generalised advantage estimation with a critic (GAE, arXiv 1506.02438, eq. 16), and the
critic's explained variance."""

from __future__ import annotations

import torch

from labkit.advantages.groups import as_float, check_mask
from labkit.advantages.kl_reward import kl_penalized_token_rewards, outcome_to_token_rewards
from labkit.advantages.normalization import batch_normalize
from labkit.advantages.registry import AdvantageInputs, Advantages, register_advantage_estimator

__all__ = ["explained_variance", "gae"]


def gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Generalised Advantage Estimation over response tokens, and the critic's targets.

    Textbook form (one sequence, no holes in the mask)::

        A, next_value, running = torch.zeros(T), 0.0, 0.0
        for t in reversed(range(T)):
            delta = rewards[t] + gamma * next_value - values[t]   # TD error
            running = delta + gamma * lam * running
            A[t], next_value = running, values[t]
        returns = A + values

    .. math::
        \delta_t = r_t + \gamma V(s_{t+1}) - V(s_t),\qquad
        \hat A_t = \delta_t + \gamma\lambda \hat A_{t+1},\qquad \hat R_t = \hat A_t + V(s_t)

    with :math:`V(s_{T+1}) = 0` and :math:`\hat A_{T+1} = 0` after the last response token.

    =================  ======  ====================================================
    name               shape   meaning
    =================  ======  ====================================================
    ``token_rewards``  (B, T)  per-token rewards (outcome on the last token, -beta*k)
    ``values``         (B, T)  critic values V(s_t) of the rollout (no gradient)
    ``mask``           (B, T)  response mask; holes are skipped, not treated as ends
    returns            (B, T)  advantages ``A`` (0 on masked positions)
    returns            (B, T)  returns ``R = A + V`` (0 on masked positions)
    =================  ======  ====================================================

    Masked positions are skipped by carrying the next value and the running advantage through
    them, as verl does, so padding and tool-output tokens do not break the recursion. Special
    cases: ``lam=1`` gives the reward-to-go minus V; ``lam=0`` gives the TD error. Like TRL and
    verl, a truncated response bootstraps with V = 0 after its last token. Whitening (TRL, verl) is
    left to the caller: ``batch_normalize(adv, mask)`` after taking the returns. Computed without
    gradient (values and rewards are rollout data).
    """
    if token_rewards.dim() != 2 or values.shape != token_rewards.shape:
        raise ValueError(
            f"token_rewards and values must both be (B, T), got {tuple(token_rewards.shape)} and "
            f"{tuple(values.shape)}"
        )
    if not (0.0 <= gamma <= 1.0) or not (0.0 <= lam <= 1.0):
        raise ValueError(f"gamma and lam must lie in [0, 1], got gamma={gamma}, lam={lam}")
    m = check_mask(mask, token_rewards)
    rewards, vals = as_float(token_rewards).detach(), as_float(values).detach()
    batch, length = rewards.shape
    next_value = rewards.new_zeros(batch)
    next_adv = rewards.new_zeros(batch)
    advantages = torch.zeros_like(rewards)
    for t in reversed(range(length)):
        delta = rewards[:, t] + gamma * next_value - vals[:, t]
        adv_t = delta + gamma * lam * next_adv
        valid = m[:, t]
        advantages[:, t] = torch.where(valid, adv_t, 0)
        next_adv = torch.where(valid, adv_t, next_adv)
        next_value = torch.where(valid, vals[:, t], next_value)
    returns = torch.where(m, advantages + vals, 0)
    return advantages, returns


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    r"""How much of the returns' variance the critic's values explain, over the response tokens.

    .. math:: \mathrm{EV} = 1 - \mathrm{Var}[\hat R_t - V(s_t)]\,/\,\mathrm{Var}[\hat R_t]

    =============  ======  ===============================================
    name           shape   meaning
    =============  ======  ===============================================
    ``values``     (B, T)  the critic's V(s_t) at rollout time
    ``returns``    (B, T)  the targets, e.g. the second output of ``gae``
    ``mask``       (B, T)  response mask: only these tokens count
    returns        scalar  EV as a float
    =============  ======  ===============================================

    1 is a perfect critic, 0 one no better than a constant (an untrained critic whose head
    outputs 0 scores exactly 0), negative one worse than a constant. NaN when the returns do not
    vary (every completion got the same reward): there is nothing to explain. Computed on the
    rollout's values, before the critic trains on the batch, it is an out-of-sample score (cleanrl
    logs the same quantity). Population variances (n, not n - 1): the ratio does not depend on it.
    """
    m = check_mask(mask, values)
    if returns.shape != values.shape:
        raise ValueError(f"values and returns must have the same shape, got "
                         f"{tuple(values.shape)} and {tuple(returns.shape)}")
    target = as_float(returns).detach()[m]
    spread = target.var(correction=0) if target.numel() else target.new_zeros(())
    if spread == 0:
        return float("nan")
    error = target - as_float(values).detach()[m]
    return float(1 - error.var(correction=0) / spread)


def _check_gae_config(config) -> None:
    if config.importance_sampling_level != "token":
        raise ValueError(f"importance_sampling_level={config.importance_sampling_level!r} (GSPO) "
                         f"needs one advantage per completion, but GAE gives one per token: use "
                         f"importance_sampling_level='token' with advantage_estimator='gae'")


@register_advantage_estimator(
    "gae", groups=False, per_token=True, critic=True, config_check=_check_gae_config,
    summary="critic + generalised advantage estimation, whitened over the batch",
    trl_refusal="PPO's critic and generalised advantage estimation: GRPOTrainer has no value "
                "model, and TRL 1.x no longer ships a PPO trainer",
    paper=("High-Dimensional Continuous Control Using Generalized Advantage Estimation",
           "1506.02438"))
def _gae(x: AdvantageInputs) -> Advantages:
    cfg = x.config
    token_rewards = outcome_to_token_rewards(x.rewards, x.mask)
    if x.token_kl is not None:
        token_rewards = kl_penalized_token_rewards(token_rewards, x.token_kl, cfg.beta, x.mask)
    advantages, returns = gae(token_rewards, x.values, x.mask, cfg.gamma, cfg.lam)
    return Advantages(batch_normalize(advantages, x.mask), returns,
                      {"explained_variance": explained_variance(x.values, returns, x.mask)})
