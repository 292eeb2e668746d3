"""The KL penalty folded into the reward instead of the loss (InstructGPT, arXiv 2203.02155,
eq. 2; RLOO), and an outcome reward placed on its completion's last token."""

from __future__ import annotations

import torch

from labkit.advantages.groups import as_float, check_mask
from labkit.plugins import config_rule

__all__ = ["kl_penalized_rewards", "kl_penalized_token_rewards", "outcome_to_token_rewards"]


def outcome_to_token_rewards(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    r"""Place each sequence's scalar reward on its last response token (0 elsewhere).

    ===========  ======  ===============================================
    name         shape   meaning
    ===========  ======  ===============================================
    ``rewards``  (B,)    outcome reward per sequence
    ``mask``     (B, T)  response mask (holes allowed, e.g. tool output)
    returns      (B, T)  token rewards: ``r_i`` at the last True of row i
    ===========  ======  ===============================================

    Edge case: a row with no response token (e.g. a truncated completion masked out by DAPO's
    overlong filtering) cannot hold its reward; its row is all zeros, so it does not train.
    """
    if rewards.dim() != 1 or mask.dim() != 2 or rewards.shape[0] != mask.shape[0]:
        raise ValueError(
            f"rewards must be (B,) and mask (B, T) with the same B, got {tuple(rewards.shape)} "
            f"and {tuple(mask.shape)}"
        )
    m = mask.bool()
    # The last valid token is the one where the running count reaches the row total.
    counts = m.long().cumsum(-1)
    last = m & (counts == counts[:, -1:])
    return torch.where(last, as_float(rewards)[:, None], 0)


def kl_penalized_token_rewards(
    token_rewards: torch.Tensor, kl: torch.Tensor, beta: float, mask: torch.Tensor
) -> torch.Tensor:
    r"""KL folded into per-token rewards (InstructGPT / PPO-RLHF, TRL PPO, verl ``use_kl_in_reward``).

    .. math::
        r_t \leftarrow r_t - \beta\, \mathrm{sg}[k_t],\qquad
        k_t = \log\pi_{\theta_{old}}(y_t\mid s_t) - \log\pi_{ref}(y_t\mid s_t)\ \ (k_1)

    =================  ======  ==============================================================
    name               shape   meaning
    =================  ======  ==============================================================
    ``token_rewards``  (B, T)  e.g. from :func:`outcome_to_token_rewards`
    ``kl``             (B, T)  per-token KL estimate, typically
                               ``labkit.losses.kl_estimate(old_logp, ref_logp, "k1")``
    ``beta``           float   KL coefficient >= 0 (InstructGPT 0.02, TRL PPO 0.05)
    returns            (B, T)  penalised rewards, 0 on masked positions, no gradient
    =================  ======  ==============================================================

    With k1 and undiscounted returns this gives the unbiased gradient of the sequence KL ("in
    reward" placement; Shah et al., arXiv 2512.21852, section 3). The KL is detached: in-reward KL acts only
    through the advantages.
    """
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if token_rewards.shape != kl.shape:
        raise ValueError(f"kl must have shape {tuple(token_rewards.shape)}, got {tuple(kl.shape)}")
    m = check_mask(mask, token_rewards)
    return torch.where(m, token_rewards - beta * kl.detach(), 0)


def kl_penalized_rewards(
    rewards: torch.Tensor, kl: torch.Tensor, beta: float, mask: torch.Tensor
) -> torch.Tensor:
    r"""KL folded into the scalar sequence reward (TRL RLOO; the "Comedy of Estimators" advice).

    .. math::
        R_i \leftarrow R_i - \beta \sum_t \mathrm{sg}[k_{i,t}]

    ===========  ======  ========================================================
    name         shape   meaning
    ===========  ======  ========================================================
    ``rewards``  (B,)    outcome rewards
    ``kl``       (B, T)  per-token k1 estimates (``kl_estimate(old, ref, "k1")``)
    ``beta``     float   >= 0 (TRL RLOO default 0.05)
    returns      (B,)    penalised rewards, no gradient through the KL
    ===========  ======  ========================================================

    Apply before the group baseline (TRL RLOO does). With k1 this is the unbiased, recommended
    on-policy placement (arXiv 2512.21852).
    """
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if rewards.dim() != 1 or kl.dim() != 2 or kl.shape[0] != rewards.shape[0]:
        raise ValueError(
            f"rewards must be (B,) and kl (B, T) with the same B, got {tuple(rewards.shape)} and "
            f"{tuple(kl.shape)}"
        )
    m = check_mask(mask, kl)
    return as_float(rewards) - beta * torch.where(m, kl.detach(), 0).sum(-1)


@config_rule
def _check_kl_in_reward(config) -> None:
    if config.kl_in_reward and config.beta == 0:
        raise ValueError("kl_in_reward=True subtracts beta * KL from the reward, and beta is 0: "
                         "set beta > 0 (e.g. 0.05) to get a reference model and a penalty, or "
                         "kl_in_reward=False")
