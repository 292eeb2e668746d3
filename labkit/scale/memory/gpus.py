"""The memory plan against GPU sizes: the sizes the lab's figures mark, and whether a plan
fits each (:func:`gpu_table`, :func:`gpu_fits`).

The planner's total leaves out the CUDA context and the allocator's cache (a few hundred MiB
to about 1 GiB, :mod:`labkit.scale.memory`), so a plan fits a card only with
:data:`MARGIN_GIB` to spare; a plan between the card's size and that margin is "tight" and
reads as not fitting."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import pandas as pd

#: GPU memory sizes (GiB) the lab's figures mark: a T4/V100-16, a 24 GB consumer card (RTX
#: 3090/4090, A10), an A100-40GB and an 80 GB A100/H100.
GPU_SIZES_GIB = (16, 24, 40, 80)

#: The headroom (GiB) a plan must leave on a card to count as fitting: what the planner leaves
#: out, the CUDA context and the allocator's cache, is up to about this much.
MARGIN_GIB = 1.0


def gpu_table(plan: pd.DataFrame, gpus: Sequence[float] = GPU_SIZES_GIB,
              margin_gib: float = MARGIN_GIB) -> pd.DataFrame:
    """One row per GPU size (GiB): the planned total, the headroom left, whether it fits and
    the verdict in a word.

    ``fits`` is True when the headroom is at least ``margin_gib`` (module docstring: the plan
    leaves out the CUDA context and the allocator's cache). ``verdict`` is ``"fits"``,
    ``"tight"`` (the plan is under the card's size by less than the margin: treat it as not
    fitting) or ``"no"``. ``margin_gib=0`` compares the bare total with the card.
    """
    total, margin = _total_gib(plan), margin_of(margin_gib)
    rows = []
    for g in gpu_sizes(gpus):
        headroom = g - total
        fits = headroom >= margin
        rows.append({"gpu_GiB": g, "planned_GiB": total, "headroom_GiB": headroom, "fits": fits,
                     "verdict": "fits" if fits else "tight" if headroom >= 0 else "no"})
    return pd.DataFrame(rows)


def gpu_fits(plan: pd.DataFrame, gpu: float, margin_gib: float = MARGIN_GIB) -> bool:
    """True when the planned total leaves at least ``margin_gib`` of ``gpu`` GiB free."""
    (size,) = gpu_sizes([gpu])
    return size - _total_gib(plan) >= margin_of(margin_gib)


def margin_of(margin_gib) -> float:
    """``margin_gib`` as a float; ValueError unless a finite number of GiB, 0 or more."""
    if isinstance(margin_gib, bool) or not isinstance(margin_gib, (int, float)) \
            or not math.isfinite(margin_gib) or margin_gib < 0:
        raise ValueError(f"margin_gib must be a finite number of GiB, 0 or more (e.g. "
                         f"{MARGIN_GIB}), got {margin_gib!r}")
    return float(margin_gib)


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
