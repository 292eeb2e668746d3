"""The memory plan against GPU sizes: the sizes the lab's figures mark, and whether a plan
fits each (:func:`gpu_table`, :func:`gpu_fits`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import pandas as pd

#: GPU memory sizes (GiB) the lab's figures mark: a T4/V100-16, a 24 GB consumer card (RTX
#: 3090/4090, A10), an A100-40GB and an 80 GB A100/H100.
GPU_SIZES_GIB = (16, 24, 40, 80)


def gpu_table(plan: pd.DataFrame, gpus: Sequence[float] = GPU_SIZES_GIB) -> pd.DataFrame:
    """One row per GPU size (GiB): the planned total, whether it fits and the headroom left.

    The planner's total leaves out the CUDA context and the allocator's caching (module
    docstring), so a plan within about 1 GiB of a card's size should be treated as not fitting.
    """
    total = _total_gib(plan)
    rows = [{"gpu_GiB": float(g), "planned_GiB": total, "fits": total <= float(g),
             "headroom_GiB": float(g) - total} for g in gpu_sizes(gpus)]
    return pd.DataFrame(rows)


def gpu_fits(plan: pd.DataFrame, gpu: float) -> bool:
    """True when the planned total is at most ``gpu`` GiB."""
    (size,) = gpu_sizes([gpu])
    return _total_gib(plan) <= size


def _total_gib(plan) -> float:
    """The planned total of a :func:`memory_plan` table."""
    if not isinstance(plan, pd.DataFrame) or "total" not in plan.index or "GiB" not in plan:
        raise TypeError(f"plan must be a memory_plan(...) table (a DataFrame with a 'total' row "
                        f"and a 'GiB' column), got {type(plan).__name__}")
    return float(plan.loc["total", "GiB"])


def gpu_sizes(gpus) -> list[float]:
    """``gpus`` as a list of sizes in GiB; ValueError unless a non-empty list of positive,
    finite numbers."""
    if isinstance(gpus, (str, bytes)) or not isinstance(gpus, Iterable):
        raise TypeError(f"gpus must be a list of positive sizes in GiB (e.g. {GPU_SIZES_GIB}), "
                        f"got {gpus!r}")
    sizes = list(gpus)
    if not sizes or not all(isinstance(g, (int, float)) and not isinstance(g, bool)
                            and math.isfinite(g) and g > 0 for g in sizes):
        raise ValueError(f"gpus must be positive sizes in GiB (e.g. {GPU_SIZES_GIB}), got "
                         f"{gpus!r}")
    return [float(g) for g in sizes]
