"""Notebook 09 (scaling up): the memory planner's bill (:func:`labkit.scale.memory.memory_plan`) as a
picture, one stacked bar per phase of a step against GPU sizes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from labkit.scale.memory import GPU_SIZES_GIB, PHASES
from labkit.scale.memory.gpus import gpu_sizes
from labkit.viz.style import FIGURE_DPI


def plot_memory_plan(plan: pd.DataFrame, gpus: Sequence[float] = GPU_SIZES_GIB, axes=None):
    """The bill as stacked bars, one bar per phase of a step, GPU sizes as horizontal lines.

    Each bar stacks the components live in that phase (GiB); the tallest bar is the plan's
    total. Returns a :class:`matplotlib.figure.Figure` (object-oriented API, made at
    :data:`FIGURE_DPI`); pass ``axes=`` to draw into axes of your own.
    """
    if "total" not in plan.index or "phases" not in plan.columns:
        raise ValueError("plan must be a table returned by memory_plan")
    sizes = gpu_sizes(gpus) if gpus else []
    if axes is None:
        fig = Figure(figsize=(8.4, 3.8), dpi=FIGURE_DPI, layout="constrained")
        ax = fig.subplots()
    else:
        ax, fig = axes, axes.figure
    parts = plan.drop(index="total")
    parts = parts[parts["bytes"] > 0]
    x = np.arange(len(PHASES))
    bottom = np.zeros(len(PHASES))
    colors = _component_colors(parts.index)
    for name, row in parts.iterrows():
        heights = np.array([row["GiB"] if phase in row["phases"] else 0.0 for phase in PHASES])
        ax.bar(x, heights, 0.6, bottom=bottom, label=name, color=colors[name])
        bottom += heights
    top = float(bottom.max())
    for size in sizes:
        ax.axhline(size, color="0.35", lw=0.9, ls="--")
        label = ax.annotate(f"{size:g} GiB GPU", (0.995, size), xycoords=("axes fraction", "data"),
                    xytext=(0, 2), textcoords="offset points", ha="right", va="bottom",
                    fontsize="small", color="0.3")
        label.set_in_layout(False)  # a label off the y-range must not squeeze the axes
    visible = [g for g in sizes if g <= 1.6 * max(top, 1e-9)]
    ax.set_ylim(0, max([top * 1.1, *(g * 1.05 for g in visible)]))
    ax.set_xticks(x, ["sampling", "train\n(forward + backward)", "optimizer step"])
    ax.set_ylabel("memory (GiB)")
    ax.set_title(f"planned peak {plan.loc['total', 'GiB']:.2f} GiB ({plan.loc['total', 'phases']})",
                 fontsize="medium")
    # legend beside the axes, outside the data (this package's convention), top segment first
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], loc="upper left", bbox_to_anchor=(1.02, 1.0),
              borderaxespad=0, fontsize="small")
    return fig


def _component_colors(names) -> dict[str, tuple]:
    from matplotlib import colormaps

    cmap = colormaps["tab20"]
    return {name: cmap(k % 20) for k, name in enumerate(names)}
