"""Notebook 04 (DAPO): per-token gradient weights of each aggregation, the soft overlong penalty."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch
from matplotlib.figure import Figure

from labkit.losses import aggregate, get_loss_type
from labkit.rewards.shaping import overlong_penalty
from labkit.viz.style import (
    AGG_LABELS,
    DTYPE,
    LENGTH_LABEL,
    SMALL,
    ZERO_SHADE,
    as_tensor,
    make_panels,
)


def aggregation_weights(lengths=(8, 16, 32, 64, 128), max_completion_length: int | None = None,
                        loss_types: Sequence[str] = ("grpo", "bnpo", "dr_grpo", "sequence_sum"),
                        ) -> pd.DataFrame:
    r"""Per-token gradient weight of each response under each ``loss_type``, by autograd.

    For a batch of responses with the given lengths, the gradient of
    :func:`labkit.losses.aggregate` with respect to every per-token loss :math:`\ell_{i,t}`: the
    weight with which each of response i's tokens enters the update. ``max_completion_length``
    (``dr_grpo``'s :math:`L_{max}`) defaults to the longest length. One row per response.
    """
    lens = torch.as_tensor(lengths, dtype=torch.long).reshape(-1)
    if lens.numel() == 0 or (lens < 0).any():
        raise ValueError(f"lengths must be a non-empty list of lengths >= 0, got {lengths}")
    l_max = int(lens.max()) if max_completion_length is None else max_completion_length
    mask = torch.arange(max(int(lens.max()), 1))[None, :] < lens[:, None]
    table = {"length": lens.numpy()}
    for loss_type in loss_types:
        per_token = torch.zeros(mask.shape, dtype=DTYPE, requires_grad=True)
        loss = aggregate(per_token, mask, get_loss_type(loss_type).aggregation,
                         max_completion_length=l_max)
        (grad,) = torch.autograd.grad(loss, per_token)
        table[loss_type] = grad[:, 0].numpy()
    return pd.DataFrame(table)


def plot_aggregation_weights(lengths=(8, 16, 32, 64, 128), max_completion_length: int | None = None,
                             loss_types: Sequence[str] = ("grpo", "bnpo", "dr_grpo",
                                                          "sequence_sum"),
                             axes=None) -> Figure:
    r"""How much each token of a response counts, against the response's length, per ``loss_type``.

    Left: the per-token gradient weight :math:`\partial L/\partial\ell_{i,t}` from autograd through
    :func:`labkit.losses.aggregate` (:func:`aggregation_weights`). Right: the whole response's
    weight (per-token weight times length). Log scales.

    What to see: ``grpo`` (sample-level mean) gives every *response* the same total weight, so
    each token of a long response counts less: long wrong answers are punished less per token
    (the length bias Dr. GRPO and DAPO point out). ``bnpo``/``dapo`` and ``dr_grpo`` give every
    *token* the same weight (flat left line); ``sequence_sum`` is the plain REINFORCE sum.

    Returns:
        the figure (2 panels).
    """
    table = aggregation_weights(lengths, max_completion_length, loss_types)
    shown = table[table["length"] > 0].sort_values("length")
    fig, (per_token, per_response) = make_panels(axes, 2, width=4.5)
    for k, loss_type in enumerate(loss_types):
        weight = shown[loss_type].to_numpy()
        per_token.plot(shown["length"], weight, "o-", color=f"C{k}",
                       label=AGG_LABELS.get(loss_type, loss_type))
        per_response.plot(shown["length"], weight * shown["length"], "o-", color=f"C{k}",
                          label=loss_type)
    empty = len(table) - len(shown)
    per_token.set(title=f"per-token gradient weight (B = {len(table)}"
                        + (f", {empty} empty, not drawn)" if empty else ")"),
                  ylabel=r"weight $\partial L / \partial \ell_{i,t}$")
    per_response.set(title="weight of the whole response", ylabel=r"weight $\times |o_i|$")
    ticks = sorted(set(shown["length"].tolist()))
    for ax in (per_token, per_response):
        ax.set(xlabel=LENGTH_LABEL, xscale="log", yscale="log")
        ax.set_xticks(ticks, labels=[str(n) for n in ticks])
        ax.minorticks_off()
        ax.legend(fontsize=SMALL)
    return fig


# --------------------------------------------------------------------------------------------
# 6. overlong penalty
# --------------------------------------------------------------------------------------------


def plot_overlong_penalty(max_completion_length: int = 1024, overlong_buffer_len: int = 256,
                          penalty_factor: float = 1.0, lengths=None, axes=None) -> Figure:
    r"""DAPO's soft overlong penalty (:func:`labkit.rewards.shaping.overlong_penalty`) against length.

    The curve is 0 up to :math:`L_{max}-L_{cache}`, falls linearly to :math:`-c` over the buffer
    (shaded) and stays there. With ``lengths``, the batch's responses are drawn on the curve and
    as a histogram below.

    What to see: only responses inside the buffer are penalised, and more the closer they get to
    the cap; a wider buffer warns earlier but more gently. Added to the task reward, the penalty
    lowers long responses' advantages.

    Returns:
        the figure (1 panel, 2 with ``lengths``).
    """
    grid = torch.linspace(0, 1.1 * max_completion_length, 600, dtype=DTYPE)
    curve = overlong_penalty(grid, max_completion_length, overlong_buffer_len, penalty_factor)
    n = 1 if lengths is None else 2
    fig, panels = make_panels(axes, n, ncols=1, width=5.5, height=2.8, sharex=axes is None)
    ax = panels[0]
    start = max_completion_length - overlong_buffer_len
    ax.axvspan(start, max_completion_length, label="overlong buffer $L_{cache}$", **ZERO_SHADE)
    ax.axvline(max_completion_length, color="k", ls=":", lw=1,
               label=f"$L_{{max}}$ = {max_completion_length}")
    ax.plot(grid.numpy(), curve.numpy(), color="C3", lw=2, label="penalty")
    ax.set(title=f"DAPO soft overlong penalty ($L_{{cache}}$ = {overlong_buffer_len}, "
                 f"c = {penalty_factor:g})", ylabel="penalty added to the reward")
    if lengths is not None:
        lens = as_tensor(lengths, "lengths")
        pen = overlong_penalty(lens, max_completion_length, overlong_buffer_len, penalty_factor)
        ax.plot(lens.numpy(), pen.numpy(), "o", color="C0", alpha=0.7,
                label=f"batch ({int((pen < 0).sum())} of {lens.numel()} penalised)")
        panels[1].hist(lens.numpy(), bins=30, color="C0", alpha=0.8)
        panels[1].axvspan(start, max_completion_length, **ZERO_SHADE)
        panels[1].set(title="batch lengths", ylabel="responses")
    panels[-1].set_xlabel(LENGTH_LABEL)
    ax.legend(fontsize=SMALL, loc="lower left")
    return fig
