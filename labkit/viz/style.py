"""Shared style of the lab's figures: sizes for JupyterLab's column, labels, panels and legends."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

RATIO_LABEL = r"probability ratio $r = \pi_\theta / \pi_{old}$"
LENGTH_LABEL = "response length (tokens)"
DTYPE = torch.float64
ZERO_SHADE = {"color": "0.85", "alpha": 0.6, "lw": 0, "zorder": 0}
#: Resolution of the lab's figures: the PNG a notebook shows (and stores) has this many pixels per
#: inch. 90 keeps 10-point text at 12.5 px, and a three-panel run figure (9.15 in) at 833 px, inside
#: JupyterLab's notebook column (848 px in a 1280 px window with the file browser open).
FIGURE_DPI = 90
#: Font size of legends and small annotations ("small" = 8.3 pt = 10.4 px at FIGURE_DPI).
SMALL = "small"
AGG_LABELS = {
    "grpo": r"grpo: $1/(B|o_i|)$",
    "bnpo": r"bnpo / dapo: $1/\sum_j|o_j|$",
    "dapo": r"dapo: $1/\sum_j|o_j|$",
    "dr_grpo": r"dr_grpo: $1/(B L_{max})$",
    "sequence_sum": r"sequence_sum: $1/B$",
}


def enable_notebook_display() -> None:
    """Let a returned Figure show as a PNG in Jupyter even where ``pyplot`` was never used.

    The inline backend registers this formatter only once a ``pyplot`` figure exists; these
    figures are not ``pyplot``'s, so without it a cell ending in ``plot_gae()`` would print
    ``<Figure ...>``. An already registered formatter (inline backend) is left alone. Both write
    the PNG at the figure's own dpi (:data:`FIGURE_DPI` for the lab's figures; not "retina"),
    cropped to what is drawn.
    """
    try:
        from IPython import get_ipython
        from IPython.core.pylabtools import print_figure
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    png = shell.display_formatter.formatters["image/png"]
    try:
        png.lookup_by_type(Figure)
    except KeyError:
        png.for_type(Figure, partial(print_figure, fmt="png"))


enable_notebook_display()  # on import: every figure module imports this one


def make_panels(axes, n: int, ncols: int | None = None, width: float = 4.0, height: float = 3.0,
            sharex: bool = False) -> tuple[Figure, list[Axes]]:
    """A new constrained-layout figure with ``n`` panels, or the caller's ``n`` axes."""
    if axes is None:
        ncols = n if ncols is None else ncols
        nrows = -(-n // ncols)
        fig = Figure(figsize=(width * ncols, height * nrows), dpi=FIGURE_DPI,
                     layout="constrained")
        grid = list(fig.subplots(nrows, ncols, squeeze=False, sharex=sharex).ravel())
        for spare in grid[n:]:  # a last row that is not full: no empty frames
            fig.delaxes(spare)
        return fig, grid[:n]
    given = [axes] if isinstance(axes, Axes) else list(np.ravel(axes))
    if len(given) != n:
        raise ValueError(f"this figure needs {n} axes, got {len(given)}")
    return given[0].figure, given


def as_tensor(values, name: str) -> torch.Tensor:
    t = torch.as_tensor([] if values is None else values, dtype=DTYPE).reshape(-1)
    if t.numel() == 0:
        raise ValueError(f"{name} must not be empty")
    return t


def shade(ax: Axes, x: np.ndarray, flags: np.ndarray, label: str) -> None:
    """Shade each contiguous run of ``flags`` (one legend entry for all runs)."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], flags.astype(int), [0]])))
    for start, stop in zip(edges[::2], edges[1::2]):
        ax.axvspan(x[start], x[stop - 1], label=label, **ZERO_SHADE)
        label = "_nolegend_"


def legend_beside(ax: Axes, **kwargs):
    """The axes' legend to its right, outside the data (constrained layout makes the room)."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0,
                     fontsize=SMALL, **kwargs)


def legend_above(fig: Figure, panels: Sequence[Axes], handles, labels, title=None):
    """One legend for the whole figure, above its panels, in as many columns as fit.

    The figure grows by the legend's height, so the panels keep theirs. On a figure of the
    caller's (``axes=``, no constrained layout) the legend goes in the first panel instead.
    """
    if not handles:
        return None
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    if not isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):
        return panels[0].legend(handles, labels, fontsize=SMALL, title=title,
                                title_fontsize=SMALL)
    # An entry's width in px: the handle and the gaps, and ~0.55 em per character of its label.
    entry_px = (4 + 0.55 * max(len(str(label)) for label in labels)) * 10 * fig.dpi / 72
    ncols = max(1, min(len(labels), int(fig.get_figwidth() * fig.dpi // entry_px)))
    rows = -(-len(labels) // ncols) + (title is not None)
    fig.set_figheight(fig.get_figheight() + 0.2 * rows)
    return fig.legend(handles, labels, loc="outside upper center", ncols=ncols, fontsize=10,
                      title=title, title_fontsize=SMALL, frameon=False)


def grouped_bars(ax: Axes, columns: Mapping[str, np.ndarray], width: float = 0.8) -> None:
    """Side-by-side bars, one series per column, one group per position."""
    step = width / len(columns)
    for k, (label, y) in enumerate(columns.items()):
        x = np.arange(len(y)) + (k - (len(columns) - 1) / 2) * step
        ax.bar(x, y, step, label=label)
    ax.axhline(0, color="0.3", lw=0.8)
