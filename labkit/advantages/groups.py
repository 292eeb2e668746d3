"""The group layout every outcome estimator shares, and NaN-aware group statistics.

Layout (TRL's): outcome rewards are a 1-D tensor of length ``N = P * G`` in which the ``G``
completions of each of the ``P`` prompts are consecutive, so ``rewards.view(P, G)`` is one row per
group. These helpers validate that layout and compute the statistics the estimators, GFPO's filter
and the length rewards need; a NaN reward means *missing* (TRL's contract for a reward function
that returns None) and is left out of every mean and standard deviation.
"""

from __future__ import annotations

import torch

__all__ = ["as_float", "centre", "check_lengths", "check_mask", "group_lengths", "group_rows", "group_std"]


def as_float(x: torch.Tensor) -> torch.Tensor:
    return x if x.is_floating_point() else x.to(torch.get_default_dtype())


def group_rows(
    rewards: torch.Tensor, num_generations: int, name: str = "rewards", allow_nan: bool = False
):
    """Validate a flat (N,) reward vector and return it as (P, G)."""
    if not isinstance(rewards, torch.Tensor) or rewards.dim() != 1:
        shape = (
            tuple(rewards.shape) if isinstance(rewards, torch.Tensor) else type(rewards).__name__
        )
        raise ValueError(f"{name} must be a 1-D tensor of length N = P * G, got {shape}")
    if (
        isinstance(num_generations, bool)
        or int(num_generations) != num_generations
        or num_generations < 1
    ):
        raise ValueError(f"num_generations must be an integer >= 1, got {num_generations!r}")
    num_generations = int(num_generations)
    if rewards.numel() % num_generations != 0:
        raise ValueError(
            f"len({name}) = {rewards.numel()} is not divisible by num_generations = {num_generations}; "
            "the G completions of each prompt must be consecutive"
        )
    rewards = as_float(rewards)
    bad = torch.isinf(rewards) if allow_nan else ~torch.isfinite(rewards)
    if bad.any():
        what = "infinite" if allow_nan else "non-finite (NaN/inf)"
        raise ValueError(
            f"{name} contains {what} values at rows {bad.nonzero().flatten().tolist()[:8]}"
        )
    return rewards.view(-1, num_generations)


def check_lengths(lengths: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Completion lengths, one per reward of ``like`` (same shape) and none negative: the one
    check of every function that weighs rewards by length (OPO, GFPO, the length rewards)."""
    if lengths.shape != like.shape:
        raise ValueError(
            f"lengths must have one entry per reward ({like.numel()}), got {lengths.numel()}"
        )
    if (lengths < 0).any():
        raise ValueError("lengths must be >= 0")
    return lengths


def group_lengths(
    lengths: torch.Tensor, num_generations: int, like: torch.Tensor
) -> torch.Tensor:
    """Validate response lengths (N,) >= 0 matching the (P, G) rewards ``like``; return (P, G)."""
    return check_lengths(group_rows(lengths, num_generations, name="lengths"), like)


def check_mask(mask: torch.Tensor, like: torch.Tensor, name: str = "mask") -> torch.Tensor:
    if mask.shape != like.shape:
        raise ValueError(f"{name} must have shape {tuple(like.shape)}, got {tuple(mask.shape)}")
    return mask.bool()


def centre(x: torch.Tensor, dim: int | None = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """``x - nanmean(x)`` along ``dim`` (all dims if None), with NaN entries and constant slices -> 0.

    Returns the centred tensor (NaN-free) and the count of present entries (keepdim).
    """
    valid = ~torch.isnan(x)
    dims = tuple(range(x.dim())) if dim is None else (dim,)
    count = valid.sum(dims, keepdim=True)
    mean = torch.where(valid, x, 0).sum(dims, keepdim=True) / count.clamp(min=1)
    # Constant slices are detected exactly (max == min) so they give exactly 0, not rounding noise.
    hi = torch.where(valid, x, -torch.inf).amax(dims, keepdim=True)
    lo = torch.where(valid, x, torch.inf).amin(dims, keepdim=True)
    varies = valid & (hi > lo)
    return torch.where(varies, x - mean, 0), count


def group_std(
    centred: torch.Tensor, count: torch.Tensor, dim: int | None = -1, unbiased: bool = True
) -> torch.Tensor:
    """Std of the present entries from already-centred values; 0 when fewer than 2 (or 1) entries."""
    dims = tuple(range(centred.dim())) if dim is None else (dim,)
    denom = (count - 1 if unbiased else count).clamp(min=1)
    return ((centred**2).sum(dims, keepdim=True) / denom).sqrt()
