"""Input checks and small masked reductions that every loss module of the package shares."""

from __future__ import annotations

import math

import torch

#: Log-ratios are clamped to +-20 before ``exp``: exp(89) overflows float32 (verl's bound).
LOG_RATIO_LIMIT = 20.0


def check_same_shape(ref: torch.Tensor, ref_name: str, **tensors: torch.Tensor | None) -> None:
    for name, t in tensors.items():
        if t is not None and t.shape != ref.shape:
            raise ValueError(
                f"{name} must have the shape of {ref_name} {tuple(ref.shape)}, got {tuple(t.shape)}"
            )


def check_non_negative(**values: float | None) -> None:
    for name, v in values.items():
        if v is not None and not v >= 0:
            raise ValueError(f"{name} must be >= 0 (float('inf') allowed), got {v}")


def check_finite_number(**values: float | None) -> None:
    for name, v in values.items():
        if v is not None and not math.isfinite(v):
            raise ValueError(f"{name} must be a finite number, got {v}")


def masked_mean(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over True entries of the bool mask ``m`` (0 if there are none)."""
    x = x.expand(m.shape)
    return torch.where(m, x, 0).sum() / m.sum().clamp(min=1)


def exp_ratio(log_ratio: torch.Tensor) -> torch.Tensor:
    """``exp`` of a log-ratio clamped to +-LOG_RATIO_LIMIT, so the ratio and its gradient stay
    finite (where it is clamped, every surrogate's clip or kernel has already silenced it)."""
    return torch.exp(log_ratio.clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))
