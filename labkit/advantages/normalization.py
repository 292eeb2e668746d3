"""Normalising advantages over a batch (REINFORCE++-baseline, DLER, PPO's whitening); the
combination of several reward functions is GRPO's (:mod:`labkit.advantages.grpo`)."""

from __future__ import annotations

import torch

from labkit.advantages.groups import as_float, centre, check_mask, group_std

__all__ = ["batch_normalize"]


def batch_normalize(
    advantages: torch.Tensor, mask: torch.Tensor | None = None, eps: float = 1e-4
) -> torch.Tensor:
    r"""Batch-level scaling: z-score of the advantages over the whole batch (or its valid tokens).

    Textbook form (no mask)::

        return (advantages - advantages.mean()) / (advantages.std() + eps)

    .. math::
        \hat A \leftarrow \frac{\hat A - \operatorname{mean}_{\text{batch}}\hat A}
                              {\operatorname{std}_{\text{batch}}\hat A + \varepsilon}

    ==============  ==========  =============================================================
    name            shape       meaning
    ==============  ==========  =============================================================
    ``advantages``  (N,) or     per-sequence advantages (e.g. group-centred rewards), or
                    (B, T)      per-token advantages (GAE, REINFORCE++ returns)
    ``mask``        like input  optional; only True entries enter the statistics
    returns         like input  normalised; masked-out entries are 0
    ==============  ==========  =============================================================

    Used for DLER / REINFORCE++-baseline (group-mean centring, then *one* batch std instead of
    per-group stds), for the last step of GDPO, and to whiten PPO's GAE advantages (TRL/verl
    ``masked_whiten``). Bessel-corrected std, eps added to the std; verl/TRL whitening uses
    ``rsqrt(var + 1e-8)`` instead, and verl whitens over tokens so long responses weigh more
    (pass a (B, T) tensor and mask for that; pass (N,) for the sequence-level form).

    Edge cases: fewer than two valid entries or all-equal entries give 0. Non-finite valid entries
    raise ``ValueError``.
    """
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    x = as_float(advantages)
    valid = torch.ones_like(x, dtype=torch.bool) if mask is None else check_mask(mask, x)
    if not torch.isfinite(torch.where(valid, x, 0)).all():
        raise ValueError("advantages contain non-finite values at valid (unmasked) positions")
    centred, count = centre(torch.where(valid, x, torch.nan), dim=None)
    return centred / (group_std(centred, count, dim=None) + eps)
