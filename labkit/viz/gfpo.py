"""Notebook 06 (GFPO): a group's kept set and its advantages."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from labkit.advantages import (
    group_advantages,
)
from labkit.tricks.filters import gfpo_advantages, gfpo_filter
from labkit.viz.style import LENGTH_LABEL, SMALL, as_tensor, grouped_bars, legend_above, make_panels


def plot_gfpo_filter(rewards=(1, 1, 0, 1, 0, 1, 1, 0),
                     lengths=(120, 340, 410, 95, 150, 210, 380, 60),
                     num_remains_in_group: int = 4, metric: str = "length",
                     axes=None) -> Figure:
    r"""GFPO on one group: which completions are kept, and the advantages they get.

    Left: each sampled completion's length and reward; the ``num_remains_in_group`` kept by
    :func:`labkit.tricks.filters.gfpo_filter` (shortest, or best reward per token for
    ``metric="token_efficiency"``) are filled, the rejected ones hollow. Right: plain GRPO's
    advantages (:func:`labkit.advantages.group_advantages` on all G) next to GFPO's
    (:func:`labkit.tricks.filters.gfpo_advantages`: statistics of the kept set, 0 for the rest).

    What to see: the long correct answers lose their positive advantage (rejected, so 0), the short
    correct ones keep it, so training is pulled towards concise correct answers; long wrong answers
    also stop being penalised, which is the price of filtering.

    Returns:
        the figure (2 panels).
    """
    r, lens = as_tensor(rewards, "rewards"), as_tensor(lengths, "lengths")
    if lens.shape != r.shape:
        raise ValueError(f"lengths need one entry per reward: {r.numel()}, got {lens.numel()}")
    g = r.numel()
    keep = gfpo_filter(r, lens, g, num_remains_in_group, metric)
    grpo = group_advantages(r, g).numpy()
    gfpo = gfpo_advantages(r, keep, g).numpy()
    fig, (scatter, bars) = make_panels(axes, 2, width=4.6)
    k, length, reward = keep.numpy(), lens.numpy(), r.numpy()
    scatter.scatter(length[k], reward[k], s=60, color="C0", label=f"kept ({int(k.sum())})")
    scatter.scatter(length[~k], reward[~k], s=60, facecolors="none", edgecolors="C0",
                    label=f"rejected ({int((~k).sum())})")
    for i, (x, y) in enumerate(zip(length, reward)):
        scatter.annotate(str(i), (x, y), textcoords="offset points", xytext=(5, 5),
                         fontsize=SMALL)
    scatter.margins(x=0.08, y=0.15)  # headroom for the completion numbers
    scatter.set(title=f"kept {int(k.sum())} of G = {g} by {metric}", xlabel=LENGTH_LABEL,
                ylabel="reward")
    grouped_bars(bars, {"GRPO (all G)": grpo, "GFPO (kept set only)": gfpo})
    bars.set(title="advantages", xlabel="completion i", ylabel=r"advantage $\hat A_i$",
             xticks=np.arange(g))
    (h1, l1), (h2, l2) = scatter.get_legend_handles_labels(), bars.get_legend_handles_labels()
    legend_above(fig, (scatter, bars), h1 + h2, l1 + l2)
    return fig
