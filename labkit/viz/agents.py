"""Notebook 10 (agents): one episode's tokens, coloured by who wrote them, with the ones that carry
gradient marked."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from labkit.viz.style import FIGURE_DPI, SMALL

#: Background colour of each author's tokens.
AUTHOR_COLORS = {"policy": "#c6dbef", "tool": "#fdd0a2", "environment": "#d9d9d9"}
_SHOWN = {"\n": "\u21b5", " ": "\u00b7"}  # newline and space, made visible


def plot_episode(tokens, trained=None, *, columns: int = 96, title: str | None = None,
                 axes=None) -> Figure:
    """An episode as text, each token on the background of its author.

    ``tokens``: ``(text, author)`` pairs (:func:`labkit.agents.episodes.token_authors`);
    ``trained``: one bool per token, True where the token is in the loss (drawn bold and
    underlined); lines wrap at ``columns`` characters and after each newline token.
    """
    tokens = list(tokens)
    if not tokens:
        raise ValueError("tokens is empty: give the (text, author) pairs of an episode")
    trained = [False] * len(tokens) if trained is None else list(trained)
    if len(trained) != len(tokens):
        raise ValueError(f"trained has {len(trained)} flags for {len(tokens)} tokens")
    unknown = {author for _, author in tokens} - set(AUTHOR_COLORS)
    if unknown:
        raise ValueError(f"unknown authors {sorted(unknown)}; use {tuple(AUTHOR_COLORS)}")
    placed, line, col = [], 0, 0
    for (text, author), grad in zip(tokens, trained):
        shown = "".join(_SHOWN.get(ch, ch) for ch in text)
        if col + len(shown) > columns:
            line, col = line + 1, 0
        placed.append((line, col, shown, author, grad))
        col += len(shown)
        if text == "\n":
            line, col = line + 1, 0
    lines = line + 1
    width_in = 9.0
    # a monospaced character advances 0.6 of the font size: one column per character
    fontsize = 0.96 * width_in * 72 / (columns + 1) / 0.602
    line_in = 1.45 * fontsize / 72
    if axes is None:
        height = 0.45 + line_in * (lines + 0.4)
        fig = Figure(figsize=(width_in, height), dpi=FIGURE_DPI)
        ax = fig.add_axes((0.02, 0.0, 0.96, 1 - 0.45 / height))
    else:
        ax, fig = axes, axes.figure
    for row, col, shown, author, grad in placed:
        ax.text(col, row, shown, family="DejaVu Sans Mono", fontsize=fontsize, va="top",
                ha="left", weight="bold" if grad else "normal",
                bbox={"facecolor": AUTHOR_COLORS[author], "edgecolor": "none", "pad": 0.3})
        if grad:
            ax.plot([col, col + len(shown)], [row + 0.82, row + 0.82], color="#08306b", lw=0.8)
    ax.set_xlim(0, columns + 1)
    ax.set_ylim(lines + 0.2, -0.2)
    ax.axis("off")
    handles = [Patch(color=color, label=author) for author, color in AUTHOR_COLORS.items()]
    handles.append(Patch(facecolor="white", edgecolor="#08306b", label="bold, underlined: in the "
                                                                       "loss"))
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=4,
              fontsize=SMALL, frameon=False, borderaxespad=0.2)
    if title:
        ax.set_title(title, fontsize="medium", loc="right")
    return fig
