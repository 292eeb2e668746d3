"""Importance ratios: how far the current policy has moved from the one that sampled.

==============================  ===========  ==================================================
function                        shape        ratio
==============================  ===========  ==================================================
``token_log_ratio``             (B, T)       per token, PPO/GRPO (arXiv 1707.06347, eq. 6)
``sequence_log_ratio``          (B,)         GSPO's length-normalised sequence ratio
                                             (arXiv 2507.18071, eq. 7)
``gspo_token_log_ratio``        (B, T)       GSPO-token: the sequence value, a per-token
                                             gradient path (arXiv 2507.18071, eq. 14)
==============================  ===========  ==================================================
"""

from __future__ import annotations

import torch

from labkit.losses.validation import LOG_RATIO_LIMIT, check_same_shape

#: ``importance_sampling_level`` values: TRL's two, plus GSPO-token.
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence", "sequence_token")


def token_log_ratio(
    logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    r"""Per-token log importance ratio :math:`\log r_{i,t}=\log\pi_\theta-\log\pi_{\theta_{old}}`.

    ============  ======  ===========================================================
    name          shape   meaning
    ============  ======  ===========================================================
    ``logp``      (B, T)  current policy, differentiable
    ``old_logp``  (B, T)  behaviour policy (no gradient flows into it if detached)
    ``mask``      (B, T)  optional; masked positions get log-ratio 0 (ratio 1)
    returns       (B, T)  clamped to [-20, 20] (verl's bound) so ``exp`` cannot overflow
    ============  ======  ===========================================================
    """
    check_same_shape(logp, "logp", old_logp=old_logp, mask=mask)
    log_ratio = (logp - old_logp).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    return log_ratio if mask is None else torch.where(mask.bool(), log_ratio, 0)


def sequence_log_ratio(
    logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    r"""GSPO's length-normalised sequence log-ratio (log of the geometric mean of token ratios).

    .. math::
        \log s_i = \frac{1}{|o_i|}\sum_{t} \log\frac{\pi_\theta(o_{i,t}\mid\cdot)}{\pi_{\theta_{old}}(o_{i,t}\mid\cdot)},
        \qquad s_i = \Big(\prod_t r_{i,t}\Big)^{1/|o_i|}

    ============  ======  ======================================================
    name          shape   meaning
    ============  ======  ======================================================
    ``logp``      (B, T)  current policy, differentiable
    ``old_logp``  (B, T)  behaviour policy
    ``mask``      (B, T)  response mask
    returns       (B,)    ``log s_i``; gradient reaches every token as 1/|o_i|
    ============  ======  ======================================================

    Edge case: a row with no tokens gets 0 (its length is clamped to 1, as in TRL and verl).
    """
    check_same_shape(logp, "logp", old_logp=old_logp, mask=mask)
    m = mask.bool()
    return token_log_ratio(logp, old_logp, m).sum(-1) / m.sum(-1).clamp(min=1)


def gspo_token_log_ratio(
    logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    r"""GSPO-token ratio: the sequence ratio's value with a per-token gradient path.

    .. math::
        \log s_{i,t} = \log\pi_\theta(o_{i,t}\mid\cdot) - \mathrm{sg}[\log\pi_\theta(o_{i,t}\mid\cdot)]
                       + \mathrm{sg}[\log s_i]

    ============  ======  =========================================================
    name          shape   meaning
    ============  ======  =========================================================
    ``logp``      (B, T)  current policy, differentiable
    ``old_logp``  (B, T)  behaviour policy
    ``mask``      (B, T)  response mask; masked positions are 0
    returns       (B, T)  numerically ``log s_i`` on every valid token
    ============  ======  =========================================================

    With one advantage per sequence, GSPO-token's loss, clipping and gradient equal GSPO's; it only
    differs when advantages vary along the sequence. verl's ``gspo`` loss uses this form (and clamps
    the log-ratio at 10 from above; labkit clamps token log-ratios at +-20 instead).
    """
    m = mask.bool()
    seq = sequence_log_ratio(logp, old_logp, m).detach()
    return torch.where(m, logp - logp.detach() + seq[:, None], 0)


def importance_log_weight(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor,
                          level: str) -> torch.Tensor:
    """The log importance weight at ``importance_sampling_level``: (B, T) for ``"token"`` and
    ``"sequence_token"``, (B, 1) for ``"sequence"``."""
    if level == "token":
        return token_log_ratio(logp, old_logp, mask)
    if level == "sequence":
        return sequence_log_ratio(logp, old_logp, mask)[:, None]
    if level == "sequence_token":
        return gspo_token_log_ratio(logp, old_logp, mask)
    raise ValueError(f"importance_sampling_level must be one of {IMPORTANCE_SAMPLING_LEVELS}, "
                     f"got {level!r}")
