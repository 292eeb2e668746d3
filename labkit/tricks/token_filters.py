"""Which tokens get a gradient: the top-entropy "forking" tokens (arXiv 2506.01939) and
Clip-Cov / KL-Cov (arXiv 2505.22617, section 4), which silence or KL-penalise the few tokens whose
log-prob covaries most with their advantage, the ones that drive entropy down.

==================================  ===============================================================
function                            method (switch)
==================================  ===============================================================
``top_entropy_mask``                the gradient only on the highest-entropy tokens
                                    (``top_entropy_quantile``, TRL's name)
``covariance`` / ``clip_cov_mask``  Clip-Cov and KL-Cov (``cov_penalty``)
``/ kl_cov_mask``
``token_filters``                   the above, as the trainer applies them to one micro-batch
==================================  ===============================================================

Where the lab chooses: the top-entropy threshold is computed over the whole generation batch from
the sampling-time entropies (TRL computes it per micro-batch from the training forward; the two
agree on-policy and the lab's does not depend on micro-batching).
"""

from __future__ import annotations

import torch

from labkit.plugins import config_rule

#: ``cov_penalty`` values (verl's loss-mode names).
COV_PENALTIES = ("clip_cov", "kl_cov")


def top_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, quantile: float) -> torch.Tensor:
    r"""Bool (B, T): the valid tokens whose entropy reaches the :math:`(1-\rho)`-quantile of all
    valid tokens' entropies, :math:`\rho` = ``quantile`` (arXiv 2506.01939 keeps the top 20%,
    ``quantile=0.2``; 1.0 keeps every token). The others keep their place in the normalisers but
    give no gradient."""
    if not 0 < quantile <= 1:
        raise ValueError(f"quantile must lie in (0, 1], got {quantile}")
    m = mask.bool()
    if quantile == 1 or not m.any():
        return m
    threshold = torch.quantile(entropy[m].float(), 1 - quantile)
    return m & (entropy >= threshold)


def covariance(logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    r"""Per-token centred product :math:`(A_t - \bar A)(\log\pi_t - \overline{\log\pi})` over
    the valid tokens, detached; 0 on padding. Its mean is the covariance that arXiv 2505.22617
    shows drives the entropy change of a softmax policy: tokens with high probability and high
    advantage (or low and low) lower the entropy."""
    m = mask.bool()
    a = advantages.expand_as(logp).detach().float()
    lp = logp.detach().float()
    count = m.sum().clamp(min=1)
    a_mean = torch.where(m, a, 0).sum() / count
    lp_mean = torch.where(m, lp, 0).sum() / count
    return torch.where(m, (a - a_mean) * (lp - lp_mean), 0)


def clip_cov_mask(cov: torch.Tensor, mask: torch.Tensor, already_clipped: torch.Tensor,
                  ratio: float = 2e-4, low: float = 1.0, high: float = 5.0,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """Bool (B, T): the tokens Clip-Cov silences. Among valid tokens not clipped by PPO already
    and with ``low < cov < high``, ``max(1, int(ratio * valid tokens))`` are drawn at random
    (paper defaults 2e-4, 1, 5; verl's ``clip_cov_*``)."""
    m = mask.bool()
    candidates = (m & ~already_clipped.bool() & (cov > low) & (cov < high)).reshape(-1)
    chosen = torch.zeros_like(candidates)
    available = candidates.nonzero().squeeze(-1)
    if len(available):
        count = min(max(1, int(ratio * int(m.sum()))), len(available))
        pick = torch.randperm(len(available), generator=generator,
                              device=generator.device if generator is not None else "cpu")
        chosen[available[pick[:count].to(available.device)]] = True
    return chosen.view_as(m)


def kl_cov_mask(cov: torch.Tensor, mask: torch.Tensor, ratio: float = 2e-3) -> torch.Tensor:
    """Bool (B, T): the ``max(1, int(ratio * valid tokens))`` valid tokens of largest covariance,
    the ones KL-Cov penalises with ``coef * |log pi - log pi_old|`` (paper default 2e-3)."""
    m = mask.bool()
    valid = int(m.sum())
    chosen = torch.zeros_like(m)
    if valid == 0:
        return chosen
    count = min(max(1, int(ratio * valid)), valid)
    scores = torch.where(m, cov, -torch.inf).reshape(-1)
    chosen.view(-1)[scores.topk(count).indices] = True
    return chosen


def token_filters(config, logp: torch.Tensor, old_logp: torch.Tensor | None,
                  advantages: torch.Tensor, mask: torch.Tensor,
                  token_weights: torch.Tensor | None = None,
                  generator: torch.Generator | None = None):
    """What the token-level switches do to one micro-batch's loss: ``(weights, penalty,
    filtered)``, each (B, T) or None.

    ``token_weights`` is the step's top-entropy mask (or None); ``config.cov_penalty`` then adds
    Clip-Cov's silenced tokens (their weight set to 0) or KL-Cov's penalty
    ``kl_cov_coef * |log pi - log pi_old|`` on the chosen tokens, whose clip
    :func:`labkit.losses.policy_loss` must then drop. ``filtered`` (bool) marks every token the
    filters touched, for the ``tokens_masked`` metric. ``advantages`` is (B,) or (B, T);
    ``old_logp`` None means on-policy (the ratio is 1). ``(None, None, None)`` when no filter is
    on.
    """
    weights = token_weights
    if config.cov_penalty is None:
        return weights, None, None if weights is None else weights == 0
    old = logp.detach() if old_logp is None else old_logp
    advantages = advantages[:, None] if advantages.dim() == 1 else advantages
    cov = covariance(logp, advantages, mask)
    if config.cov_penalty == "kl_cov":
        chosen = kl_cov_mask(cov, mask, config.kl_cov_ratio)
        penalty = config.kl_cov_coef * (logp - old).abs() * chosen
        filtered = chosen if weights is None else chosen | (weights == 0)
        return weights, penalty, filtered
    ratio = torch.exp((logp - old).detach())
    high = 1 + config.upper_clip
    clipped = (((advantages > 0) & (ratio > high))
               | ((advantages < 0) & (ratio < 1 - config.epsilon)))
    silenced = clip_cov_mask(cov, mask, clipped, config.clip_cov_ratio, config.clip_cov_lb,
                             config.clip_cov_ub, generator)
    keep = (~silenced).float()
    weights = keep if weights is None else weights * keep
    return weights, None, weights == 0


@config_rule
def _check_cov_penalty(config) -> None:
    from labkit.losses import clipped_loss_types, get_loss_type

    if config.clip_cov_lb >= config.clip_cov_ub:
        raise ValueError(f"clip_cov_lb ({config.clip_cov_lb}) must be below clip_cov_ub "
                         f"({config.clip_cov_ub})")
    if config.cov_penalty is not None and not get_loss_type(config.loss_type).clipped:
        raise ValueError(f"cov_penalty acts on PPO's clipped surrogate; loss_type="
                         f"{config.loss_type!r} is not one: use one of {clipped_loss_types()}")
