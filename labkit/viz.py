"""Static figures of the lab's key ideas, each drawn by the labkit functions that training uses.

Every number on these pictures comes from the same code the trainer runs: the clip region from
:func:`labkit.losses.clipped_surrogate` with its gradient from torch autograd, the advantages from
:mod:`labkit.advantages`, the aggregation weights from autograd through
:func:`labkit.losses.aggregate`, and so on. Nothing is re-derived here, so a picture can never
disagree with a training run.

=============================  =================================================================
function                       what it draws
=============================  =================================================================
``plot_clip_region``           PPO objective and gradient against the ratio; zero-gradient zones
``clip_cases_table``           the four sign cases of (A, ratio outside the band), as a table
``plot_gae``                   a toy token sequence: rewards, values, GAE advantages and returns
``plot_group_advantages``      one group's rewards and six advantage estimators side by side
``group_advantages_table``     the same numbers as a table
``plot_kl_estimators``         k1/k2/k3 and their gradients; bias and spread from samples
``plot_aggregation_weights``   per-token gradient weight against length for each ``loss_type``
``aggregation_weights``        the same weights as a table
``plot_overlong_penalty``      DAPO's soft overlong penalty and a batch's lengths on it
``plot_ratio_spread``          token vs GSPO sequence ratio spread against response length
``ratio_spread``               the same simulation as a table
``plot_gfpo_filter``           a group's lengths and rewards, GFPO's kept set, its advantages
``plot_runs``, ``load_run``    training curves from logged runs, with the regenerating command
``runs_summary``               a table of logged runs: start, end and best eval accuracy, length...
``LivePlot``                   a trainer callback that redraws ``plot_runs`` in place while training
``plot_token_temperature``     a model's next-token distribution and entropy at several temperatures
``temperature_tokens``         the same numbers: top tokens, probabilities, entropy at T
``fork_logits``                the tiny Qwen's next-token logits at three places of its own answer
``plot_temperature_schedules`` sampling temperature over training (constant, linear, cosine)
``plot_surrogate_weights``     each surrogate's gradient weight against the ratio; focal weight
``surrogate_weights``          the same weights as a table
``plot_majority_vote``         a prompt's sampled answers and TTRL's vote; maj@G against G
``majority_vote_groups``       the same vote per prompt, as a table
``plot_sampling_weights``      curriculum / prioritized shares per difficulty; MT-GRPO weights
``multitask_weight_paths``     the same weights per step (``difficulty_sampling_weights``: shares)
``plot_pass_at_k``             pass@k against k for several models, and the gain over the first
=============================  =================================================================

Each ``plot_*`` function returns a :class:`matplotlib.figure.Figure`. Figures are created with
the object-oriented API (not ``pyplot``), so they are never shown twice in a notebook and need no
closing; pass ``axes=`` to draw into axes of your own instead. The interactive versions are in
:mod:`labkit.widgets`.

Sizes are chosen for JupyterLab's notebook column: figures are made at :data:`FIGURE_DPI` (90) and
are at most about 840 px wide, so even a three-panel figure shows at full size (not shrunk, its
10-point text 12.5 px tall) beside the file browser in a 1280 px window (an 848 px column), and a
committed notebook stays small. Legends sit outside the data: beside the axes, or one legend above
the panels.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from labkit.advantages import (
    batch_normalize,
    gae,
    group_advantages,
    opo_advantages,
    remax_advantages,
    rloo_advantages,
)
from labkit.filters import gfpo_advantages, gfpo_filter
from labkit.losses import (
    aggregate,
    clipped_surrogate,
    kl_estimate,
    no_clip_surrogate,
    sequence_log_ratio,
    token_log_ratio,
)
from labkit.rewards.shaping import overlong_penalty

__all__ = [
    "LivePlot",
    "aggregation_weights",
    "clip_cases_table",
    "difficulty_sampling_weights",
    "fork_logits",
    "group_advantages_table",
    "load_run",
    "majority_vote_groups",
    "multitask_weight_paths",
    "plot_aggregation_weights",
    "plot_clip_region",
    "plot_gae",
    "plot_gfpo_filter",
    "plot_group_advantages",
    "plot_kl_estimators",
    "plot_majority_vote",
    "plot_overlong_penalty",
    "plot_pass_at_k",
    "plot_ratio_spread",
    "plot_runs",
    "plot_sampling_weights",
    "plot_surrogate_weights",
    "plot_temperature_schedules",
    "plot_token_temperature",
    "ratio_spread",
    "runs_summary",
    "surrogate_weights",
    "temperature_tokens",
]

RATIO_LABEL = r"probability ratio $r = \pi_\theta / \pi_{old}$"
LENGTH_LABEL = "response length (tokens)"
_DTYPE = torch.float64
_ZERO_SHADE = {"color": "0.85", "alpha": 0.6, "lw": 0, "zorder": 0}
#: Resolution of the lab's figures: the PNG a notebook shows (and stores) has this many pixels per
#: inch. 90 keeps 10-point text at 12.5 px, and a three-panel run figure (9.15 in) at 833 px, inside
#: JupyterLab's notebook column (848 px in a 1280 px window with the file browser open).
FIGURE_DPI = 90
#: Font size of legends and small annotations ("small" = 8.3 pt = 10.4 px at FIGURE_DPI).
_SMALL = "small"
_AGG_LABELS = {
    "grpo": r"grpo: $1/(B|o_i|)$",
    "bnpo": r"bnpo / dapo: $1/\sum_j|o_j|$",
    "dapo": r"dapo: $1/\sum_j|o_j|$",
    "dr_grpo": r"dr_grpo: $1/(B L_{max})$",
    "sequence_sum": r"sequence_sum: $1/B$",
}


def _enable_notebook_display() -> None:
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


_enable_notebook_display()


def _panels(axes, n: int, ncols: int | None = None, width: float = 4.0, height: float = 3.0,
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


def _tensor(values, name: str) -> torch.Tensor:
    t = torch.as_tensor([] if values is None else values, dtype=_DTYPE).reshape(-1)
    if t.numel() == 0:
        raise ValueError(f"{name} must not be empty")
    return t


def _shade(ax: Axes, x: np.ndarray, flags: np.ndarray, label: str) -> None:
    """Shade each contiguous run of ``flags`` (one legend entry for all runs)."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], flags.astype(int), [0]])))
    for start, stop in zip(edges[::2], edges[1::2]):
        ax.axvspan(x[start], x[stop - 1], label=label, **_ZERO_SHADE)
        label = "_nolegend_"


def _legend_beside(ax: Axes, **kwargs):
    """The axes' legend to its right, outside the data (constrained layout makes the room)."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0,
                     fontsize=_SMALL, **kwargs)


def _legend_above(fig: Figure, panels: Sequence[Axes], handles, labels, title=None):
    """One legend for the whole figure, above its panels, in as many columns as fit.

    The figure grows by the legend's height, so the panels keep theirs. On a figure of the
    caller's (``axes=``, no constrained layout) the legend goes in the first panel instead.
    """
    if not handles:
        return None
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    if not isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):
        return panels[0].legend(handles, labels, fontsize=_SMALL, title=title,
                                title_fontsize=_SMALL)
    # An entry's width in px: the handle and the gaps, and ~0.55 em per character of its label.
    entry_px = (4 + 0.55 * max(len(str(label)) for label in labels)) * 10 * fig.dpi / 72
    ncols = max(1, min(len(labels), int(fig.get_figwidth() * fig.dpi // entry_px)))
    rows = -(-len(labels) // ncols) + (title is not None)
    fig.set_figheight(fig.get_figheight() + 0.2 * rows)
    return fig.legend(handles, labels, loc="outside upper center", ncols=ncols, fontsize=10,
                      title=title, title_fontsize=_SMALL, frameon=False)


def _grouped_bars(ax: Axes, columns: Mapping[str, np.ndarray], width: float = 0.8) -> None:
    """Side-by-side bars, one series per column, one group per position."""
    step = width / len(columns)
    for k, (label, y) in enumerate(columns.items()):
        x = np.arange(len(y)) + (k - (len(columns) - 1) / 2) * step
        ax.bar(x, y, step, label=label)
    ax.axhline(0, color="0.3", lw=0.8)


# --------------------------------------------------------------------------------------------
# 1. the clip region
# --------------------------------------------------------------------------------------------


def _clip_curves(ratio: torch.Tensor, advantage: float, **clip) -> tuple[np.ndarray, np.ndarray]:
    """Objective J = -clipped_surrogate and its gradient dJ/dr (autograd) on a grid of ratios."""
    r = ratio.clone().requires_grad_(True)
    objective = -clipped_surrogate(torch.log(r), torch.full_like(r, advantage), **clip)
    (grad,) = torch.autograd.grad(objective.sum(), r)
    return objective.detach().numpy(), grad.numpy()


def plot_clip_region(epsilon_low: float = 0.2, epsilon_high: float | None = 0.2,
                     dual_clip: float | None = None, advantage: float | str = 1.0,
                     delta: float | None = None, ratio_max: float | None = None,
                     axes=None) -> Figure:
    r"""PPO's clipped objective and its gradient against the probability ratio.

    Top row: the per-token objective :math:`J = -\ell` from
    :func:`labkit.losses.clipped_surrogate` (the quantity PPO/GRPO maximise), with the unclipped
    :math:`rA` dashed. Bottom row: :math:`dJ/dr` from autograd. Grey bands mark where the gradient
    is exactly zero; dotted lines mark the clip bounds :math:`1-\varepsilon_{low}`,
    :math:`1+\varepsilon_{high}` (and the dual-clip :math:`c`).

    What to see: for A > 0 the gradient vanishes above :math:`1+\varepsilon_{high}` (the token was
    already made likelier enough) but not below :math:`1-\varepsilon_{low}`; for A < 0 it vanishes
    below :math:`1-\varepsilon_{low}` and stays on above :math:`1+\varepsilon_{high}`, growing
    without bound unless dual-clip caps the loss beyond :math:`c`. Clip-higher
    (``epsilon_high=0.28``) widens only the upper band.

    Args:
        epsilon_low, epsilon_high, dual_clip, delta: as in ``clipped_surrogate`` (TRL names).
        advantage: the token's advantage A, or ``"both"`` for A = +1 and A = -1 side by side.
        ratio_max: right end of the ratio axis (default: past every bound).
        axes: 2 axes (objective, gradient) to draw into; 4 for ``"both"``, ordered like
            ``fig.subplots(2, 2)``: the two objectives, then the two gradients.

    Returns:
        the figure (2 panels, or 4 for ``"both"``).
    """
    advantages = (1.0, -1.0) if advantage == "both" else (float(advantage),)
    epsilon_high = epsilon_low if epsilon_high is None else epsilon_high
    clip = {"epsilon_low": epsilon_low, "epsilon_high": epsilon_high, "delta": delta,
            "dual_clip": dual_clip}
    if ratio_max is None:
        ends = [2.0, 1 + epsilon_high + 0.6] + [c + 0.6 for c in (dual_clip, delta) if c]
        ratio_max = max(e for e in ends if np.isfinite(e))
    ratio = torch.linspace(0.01, ratio_max, 800, dtype=_DTYPE)
    x = ratio.numpy()
    fig, flat = _panels(axes, 2 * len(advantages), ncols=len(advantages), sharex=axes is None)
    grid = np.array(flat, dtype=object).reshape(2, len(advantages))
    bounds = [(1 - epsilon_low, r"$1-\varepsilon_{low}$"),
              (1 + epsilon_high, r"$1+\varepsilon_{high}$")]
    for col, a in enumerate(advantages):
        objective, grad = _clip_curves(ratio, a, **clip)
        unclipped = -no_clip_surrogate(torch.log(ratio), torch.tensor(a, dtype=_DTYPE)).numpy()
        zero = np.abs(grad) < 1e-12
        marks = bounds + ([(dual_clip, "dual-clip $c$")] if dual_clip and a < 0 else [])
        for row, (ax, y) in enumerate(zip(grid[:, col], (objective, grad))):
            _shade(ax, x, zero, "zero gradient")
            if row == 0:
                ax.plot(x, unclipped, "--", color="0.5", lw=1, label=r"unclipped $rA$")
            ax.plot(x, y, color="C0" if a >= 0 else "C3", lw=2,
                    label="objective $J=-\\ell$" if row == 0 else "$dJ/dr$ (autograd)")
            for (b, text), style in zip(marks, (":", ":", "-.")):
                if 0 < b < ratio_max:
                    ax.axvline(b, color="k", ls=style, lw=1, label=text if row == 0 else None)
            ax.set_xlim(0, ratio_max)
            ax.legend(fontsize=_SMALL, loc="best")
        grid[0, col].set(title=f"A = {a:+g}: clipped surrogate",
                         ylabel="per-token objective $J$ (to maximise)")
        grid[1, col].set(title=f"A = {a:+g}: gradient", xlabel=RATIO_LABEL,
                         ylabel="gradient $dJ/dr$ $(= -d\\ell/dr)$")
    return fig


_CASE_MEANINGS = {
    (True, "above", True): "good token already made likelier enough: clipped, no push",
    (True, "below", False): "good token became less likely: keep pushing it up",
    (False, "below", True): "bad token already made less likely enough: clipped, no push",
    (False, "above", False): "bad token became likelier: keep pushing it down (unbounded)",
    (False, "above", True): "bad token beyond the dual-clip bound c: loss capped, no push",
}


def clip_cases_table(epsilon_low: float = 0.2, epsilon_high: float | None = 0.2,
                     dual_clip: float | None = None, below: float | None = None,
                     above: float | None = None) -> pd.DataFrame:
    r"""The four sign cases of (A, ratio outside the clip band), computed with autograd.

    One row per case: A = +1 or -1, and a ratio ``below`` :math:`1-\varepsilon_{low}` or ``above``
    :math:`1+\varepsilon_{high}` (defaults: 0.1 outside the band). Columns: the objective
    :math:`J=-\ell` from :func:`labkit.losses.clipped_surrogate`, its gradient :math:`dJ/dr` from
    autograd, whether that gradient is zero, and what it means.

    Expected (PPO's clipped objective, arXiv 1707.06347 eq. 7): zero for (A > 0, above) and
    (A < 0, below); non-zero for (A > 0, below) and (A < 0, above), the latter also zero with
    ``dual_clip`` below the ratio.
    """
    epsilon_high = epsilon_low if epsilon_high is None else epsilon_high
    low, high = 1 - epsilon_low, 1 + epsilon_high
    below = max(low - 0.1, low / 2) if below is None else below
    above = high + 0.1 if above is None else above
    if not 0 < below < low:
        raise ValueError(f"below must lie in (0, 1 - epsilon_low = {low:g}), got {below}")
    if not (np.isfinite(above) and above > high):
        raise ValueError(f"above must be finite and > 1 + epsilon_high = {high:g}, got {above}")
    rows = []
    for a in (1.0, -1.0):
        for side, r in (("above", above), ("below", below)):
            objective, grad = _clip_curves(torch.tensor([r], dtype=_DTYPE), a,
                                           epsilon_low=epsilon_low, epsilon_high=epsilon_high,
                                           dual_clip=dual_clip)
            zero = bool(abs(grad[0]) < 1e-12)
            rows.append({"advantage": a, "ratio": r,
                         "region": f"{side} 1{'+eps_high' if side == 'above' else '-eps_low'}",
                         "objective J": float(objective[0]), "gradient dJ/dr": float(grad[0]),
                         "zero gradient": zero, "meaning": _CASE_MEANINGS[(a > 0, side, zero)]})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# 2. GAE
# --------------------------------------------------------------------------------------------


def plot_gae(rewards=None, values=None, gamma: float = 1.0, lam: float = 0.95,
             axes=None) -> Figure:
    r"""GAE on one toy response: rewards and values above, advantages and returns below.

    Calls :func:`labkit.advantages.gae` (and again with ``lam=0`` for the TD errors
    :math:`\delta_t`). Default: 8 tokens, reward 1 on the last token only (an outcome reward), and
    a critic whose value rises towards the end.

    What to see: with :math:`\lambda = 1` every advantage is the final reward minus the value
    (high variance, no bias from the critic); with :math:`\lambda = 0` it is the one-step TD error
    (low variance, trusts the critic); :math:`\gamma < 1` shrinks the credit reaching early tokens.
    Returns :math:`\hat R_t = \hat A_t + V_t` are the critic's regression targets.

    Returns:
        the figure (2 panels).
    """
    r = _tensor([0.0] * 7 + [1.0] if rewards is None else rewards, "rewards")
    v = torch.linspace(0.3, 0.8, r.numel(), dtype=_DTYPE) if values is None else _tensor(
        values, "values")
    if v.shape != r.shape:
        raise ValueError(f"values need one entry per reward: {r.numel()}, got {v.numel()}")
    mask = torch.ones(1, r.numel(), dtype=torch.bool)
    adv, ret = (t[0].numpy() for t in gae(r[None], v[None], mask, gamma, lam))
    td_error = gae(r[None], v[None], mask, gamma, 0.0)[0][0].numpy()
    t = np.arange(r.numel())
    fig, (top, bottom) = _panels(axes, 2, ncols=1, width=7.4, height=2.6, sharex=axes is None)
    top.bar(t, r.numpy(), 0.6, color="C2", label="reward $r_t$")
    top.plot(t, v.numpy(), "o-", color="C1", label="critic value $V(s_t)$")
    top.set(title="toy response: rewards and values", ylabel="reward / value")
    _grouped_bars(bottom, {r"advantage $\hat A_t$": adv,
                           r"return $\hat R_t = \hat A_t + V_t$": ret})
    bottom.plot(t, td_error, "k_", ms=14, mew=2, label=r"TD error $\delta_t$ ($\lambda=0$)")
    bottom.set(title=f"GAE with $\\gamma$ = {gamma:g}, $\\lambda$ = {lam:g}",
               xlabel="response token position t", ylabel="advantage / return")
    for ax in (top, bottom):
        ax.set_xticks(t)
        _legend_beside(ax)
    return fig


# --------------------------------------------------------------------------------------------
# 3. group advantages
# --------------------------------------------------------------------------------------------


def group_advantages_table(rewards=(1, 0, 0, 1, 0, 0, 0, 1), lengths=None, greedy_reward=None,
                           num_generations: int | None = None) -> pd.DataFrame:
    r"""Advantages of one batch of groups under each estimator of :mod:`labkit.advantages`.

    Columns: ``reward`` (and ``length``), then ``GRPO`` (group std), ``Dr. GRPO`` (no std),
    ``RLOO``, ``OPO`` (only with ``lengths``), ``ReMax`` (only with ``greedy_reward``: one float,
    or one per prompt) and ``batch-scaled`` (group mean, one std for the whole batch:
    ``batch_normalize`` of Dr. GRPO's advantages). ``num_generations`` defaults to one group.
    """
    r = _tensor(rewards, "rewards")
    g = r.numel() if num_generations is None else num_generations
    table = {"reward": r.numpy()}
    if lengths is not None:
        table["length"] = _tensor(lengths, "lengths").numpy()
    table["GRPO"] = group_advantages(r, g).numpy()
    table["Dr. GRPO"] = group_advantages(r, g, "none").numpy()
    table["RLOO"] = rloo_advantages(r, g).numpy()
    if lengths is not None:
        table["OPO"] = opo_advantages(r, _tensor(lengths, "lengths"), g).numpy()
    if greedy_reward is not None:
        greedy = _tensor(greedy_reward, "greedy_reward")
        if greedy.numel() == 1:
            greedy = greedy.repeat(r.numel() // g)
        table["ReMax"] = remax_advantages(r, greedy, g).numpy()
    table["batch-scaled"] = batch_normalize(group_advantages(r, g, "none")).numpy()
    return pd.DataFrame(table)


def plot_group_advantages(rewards=(1, 0, 0, 1, 0, 0, 0, 1), lengths=None, greedy_reward=None,
                          num_generations: int | None = None, axes=None) -> Figure:
    r"""One group's rewards (left) and its advantages under each estimator (right, grouped bars).

    All numbers come from :func:`group_advantages_table`, i.e. from :mod:`labkit.advantages`.
    OPO appears when ``lengths`` are given, ReMax when ``greedy_reward`` is.

    What to see: every estimator centres the rewards (advantages of a group sum to zero, except
    ReMax, whose baseline is the greedy answer's reward); GRPO divides by the group's std, so a
    group with one right answer in eight gives it a large advantage, while Dr. GRPO keeps the raw
    scale; RLOO is Dr. GRPO times G/(G-1); OPO's baseline leans towards the long responses'
    rewards. A group whose rewards are all equal gets all-zero advantages: no gradient.

    Returns:
        the figure (2 panels).
    """
    table = group_advantages_table(rewards, lengths, greedy_reward, num_generations)
    i = np.arange(len(table))
    fig, (left, right) = _panels(axes, 2, width=4.6)
    left.bar(i, table["reward"], 0.6, color="C2")
    if "length" in table:
        for x, (rew, length) in enumerate(zip(table["reward"], table["length"])):
            left.annotate(f"{length:g}", (x, rew), ha="center", va="bottom", fontsize=_SMALL)
    left.margins(y=0.1)  # headroom for the length labels
    left.set(title="rewards" + (" (labels: length in tokens)" if "length" in table else ""),
             xlabel="completion i", ylabel="reward $r_i$", xticks=i)
    _grouped_bars(right, {k: table[k].to_numpy() for k in table if k not in ("reward", "length")})
    right.set(title="advantages by estimator", xlabel="completion i",
              ylabel=r"advantage $\hat A_i$", xticks=i)
    _legend_beside(right)
    return fig


# --------------------------------------------------------------------------------------------
# 4. KL estimators
# --------------------------------------------------------------------------------------------


def plot_kl_estimators(log_ratio_max: float = 2.0, shift: float = 1.0, n_samples: int = 1000,
                       vocab_size: int = 8, seed: int = 0, axes=None) -> Figure:
    r"""Schulman's k1, k2, k3 (:func:`labkit.losses.kl_estimate`): curves, gradients, bias, spread.

    Top: each estimator's value and its gradient w.r.t. :math:`\log\pi(y)` (autograd, as when the
    KL is in the loss) against :math:`d = \log(\pi_{ref}(y)/\pi(y))`. Bottom: a categorical
    :math:`\pi` over ``vocab_size`` tokens and a nearby :math:`\pi_{ref}` (logits moved by ``shift``
    times Gaussian noise, seeded), ``n_samples`` tokens drawn from :math:`\pi`: the bias of the
    sample mean and the per-sample standard deviation, relative to the true
    :math:`\mathrm{KL}(\pi\|\pi_{ref})`. Bars are the sampled values (with +-2 standard errors),
    crosses the exact expectation over the vocabulary.

    What to see: k1 goes negative and has the largest spread; k2 is always >= 0 but biased; k3 is
    >= 0, unbiased and low-variance, which is why GRPO uses it. As a loss, k1's gradient is a
    constant (zero in expectation: no regularisation).

    Returns:
        the figure (4 panels).
    """
    kinds = ("k1", "k2", "k3")
    d = torch.linspace(-log_ratio_max, log_ratio_max, 400, dtype=_DTYPE)
    fig, (vals, grads, bias_ax, std_ax) = _panels(axes, 4, ncols=2)
    for k, kind in enumerate(kinds):
        logp = torch.zeros_like(d, requires_grad=True)
        est = kl_estimate(logp, d, kind)
        (grad,) = torch.autograd.grad(est.sum(), logp)
        vals.plot(d.numpy(), est.detach().numpy(), color=f"C{k}", label=kind)
        grads.plot(d.numpy(), grad.numpy(), color=f"C{k}", label=kind)
    for ax, what in ((vals, "estimate $k$"), (grads, r"gradient $dk/d\log\pi(y)$")):
        ax.axhline(0, color="0.3", lw=0.8)
        ax.set(xlabel=r"log-ratio $d = \log(\pi_{ref}(y)/\pi(y))$", ylabel=what)
        ax.legend(fontsize=_SMALL)
    vals.set_title("per-token KL estimators")
    grads.set_title("their gradients in the loss (autograd)")

    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(vocab_size, generator=gen, dtype=_DTYPE)
    logp_all = torch.log_softmax(logits, -1)
    ref_all = torch.log_softmax(logits + shift * torch.randn(vocab_size, generator=gen,
                                                             dtype=_DTYPE), -1)
    true_kl = float((logp_all.exp() * (logp_all - ref_all)).sum())
    tokens = torch.multinomial(logp_all.exp(), n_samples, replacement=True, generator=gen)
    x = np.arange(len(kinds))
    for k, kind in enumerate(kinds):
        sampled = kl_estimate(logp_all[tokens], ref_all[tokens], kind)
        per_token = kl_estimate(logp_all, ref_all, kind)
        exact_mean = float((logp_all.exp() * per_token).sum())
        exact_std = float((logp_all.exp() * (per_token - exact_mean) ** 2).sum().sqrt())
        std = float(sampled.std())
        bias_ax.bar(k, (float(sampled.mean()) - true_kl) / true_kl, 0.6, color=f"C{k}",
                    yerr=2 * std / n_samples**0.5 / true_kl, capsize=4)
        std_ax.bar(k, std / true_kl, 0.6, color=f"C{k}")
        bias_ax.plot(k, (exact_mean - true_kl) / true_kl, "kx", label="exact" if k == 0 else None)
        std_ax.plot(k, exact_std / true_kl, "kx", label="exact" if k == 0 else None)
    bias_ax.axhline(0, color="0.3", lw=0.8)
    bias_ax.set(title=f"bias / KL from {n_samples} samples (KL = {true_kl:.3f})",
                ylabel="(sample mean - KL) / KL", xticks=x, xticklabels=kinds, xlabel="estimator")
    std_ax.set(title="spread / KL", ylabel="per-sample std / KL", xticks=x, xticklabels=kinds,
               xlabel="estimator")
    for ax in (bias_ax, std_ax):
        ax.legend(fontsize=_SMALL)
    return fig


# --------------------------------------------------------------------------------------------
# 5. aggregation weights
# --------------------------------------------------------------------------------------------


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
        per_token = torch.zeros(mask.shape, dtype=_DTYPE, requires_grad=True)
        loss = aggregate(per_token, mask, loss_type, max_completion_length=l_max)
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
    fig, (per_token, per_response) = _panels(axes, 2, width=4.5)
    for k, loss_type in enumerate(loss_types):
        weight = shown[loss_type].to_numpy()
        per_token.plot(shown["length"], weight, "o-", color=f"C{k}",
                       label=_AGG_LABELS.get(loss_type, loss_type))
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
        ax.legend(fontsize=_SMALL)
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
    grid = torch.linspace(0, 1.1 * max_completion_length, 600, dtype=_DTYPE)
    curve = overlong_penalty(grid, max_completion_length, overlong_buffer_len, penalty_factor)
    n = 1 if lengths is None else 2
    fig, panels = _panels(axes, n, ncols=1, width=5.5, height=2.8, sharex=axes is None)
    ax = panels[0]
    start = max_completion_length - overlong_buffer_len
    ax.axvspan(start, max_completion_length, label="overlong buffer $L_{cache}$", **_ZERO_SHADE)
    ax.axvline(max_completion_length, color="k", ls=":", lw=1,
               label=f"$L_{{max}}$ = {max_completion_length}")
    ax.plot(grid.numpy(), curve.numpy(), color="C3", lw=2, label="penalty")
    ax.set(title=f"DAPO soft overlong penalty ($L_{{cache}}$ = {overlong_buffer_len}, "
                 f"c = {penalty_factor:g})", ylabel="penalty added to the reward")
    if lengths is not None:
        lens = _tensor(lengths, "lengths")
        pen = overlong_penalty(lens, max_completion_length, overlong_buffer_len, penalty_factor)
        ax.plot(lens.numpy(), pen.numpy(), "o", color="C0", alpha=0.7,
                label=f"batch ({int((pen < 0).sum())} of {lens.numel()} penalised)")
        panels[1].hist(lens.numpy(), bins=30, color="C0", alpha=0.8)
        panels[1].axvspan(start, max_completion_length, **_ZERO_SHADE)
        panels[1].set(title="batch lengths", ylabel="responses")
    panels[-1].set_xlabel(LENGTH_LABEL)
    ax.legend(fontsize=_SMALL, loc="lower left")
    return fig


# --------------------------------------------------------------------------------------------
# 7. token vs sequence ratios
# --------------------------------------------------------------------------------------------


def _simulate_ratios(lengths, noise_std, n_sequences, seed):
    """Token ratios and GSPO sequence ratios of simulated sequences, per length."""
    lens = torch.as_tensor(lengths, dtype=torch.long).reshape(-1)
    if lens.numel() == 0 or (lens < 1).any():
        raise ValueError(f"lengths must be a non-empty list of lengths >= 1, got {lengths}")
    if n_sequences < 2 or not noise_std > 0:
        raise ValueError(
            f"a spread needs n_sequences >= 2 and noise_std > 0, got {n_sequences}, {noise_std}"
        )
    gen = torch.Generator().manual_seed(seed)
    rows = lens.repeat_interleave(n_sequences)
    mask = torch.arange(int(lens.max()))[None, :] < rows[:, None]
    old_logp = -3 * torch.rand(mask.shape, generator=gen, dtype=_DTYPE)
    logp = old_logp + noise_std * torch.randn(mask.shape, generator=gen, dtype=_DTYPE)
    token = token_log_ratio(logp, old_logp, mask).exp()
    sequence = sequence_log_ratio(logp, old_logp, mask).exp()
    for length in lens.tolist():
        rows_l = rows == length
        yield length, token[rows_l][mask[rows_l]], sequence[rows_l]


def _spread_table(sims) -> pd.DataFrame:
    rows = [{"length": length, "token_ratio_std": float(tok.std()),
             "sequence_ratio_std": float(seq.std())} for length, tok, seq in sims]
    return pd.DataFrame(rows).sort_values("length", ignore_index=True)


def ratio_spread(lengths=(4, 16, 64, 256), noise_std: float = 0.1, n_sequences: int = 256,
                 seed: int = 0) -> pd.DataFrame:
    r"""Spread of token ratios vs GSPO sequence ratios, simulated, one row per response length.

    ``n_sequences`` responses of each length get independent per-token log-ratio noise
    :math:`\log r_{i,t}\sim\mathcal N(0, \sigma^2)` (``noise_std`` = :math:`\sigma`, seeded).
    Columns ``token_ratio_std`` (std over all tokens of :func:`labkit.losses.token_log_ratio`'s
    ratio) and ``sequence_ratio_std`` (std over responses of
    :func:`labkit.losses.sequence_log_ratio`'s ratio :math:`s_i`).
    """
    return _spread_table(_simulate_ratios(lengths, noise_std, n_sequences, seed))


def plot_ratio_spread(lengths=(4, 16, 64, 256), noise_std: float = 0.1, n_sequences: int = 256,
                      seed: int = 0, axes=None) -> Figure:
    r"""Why GSPO's sequence ratio is steadier than the token ratios, against response length.

    Left: standard deviation of the token ratios :math:`r_{i,t}` and of the sequence ratios
    :math:`s_i = (\prod_t r_{i,t})^{1/|o_i|}` (:func:`ratio_spread`), with the reference slope
    :math:`\sigma/\sqrt{|o_i|}` dashed. Right: both distributions at the longest length.

    What to see: the token ratios spread the same at every length, so long responses carry many
    tokens far from 1 (clipped, or noisy weights); the sequence ratio averages the noise away and
    its spread shrinks like :math:`1/\sqrt{|o_i|}`, so a length-normalised clip band (GSPO's
    :math:`\varepsilon` of 3e-4 to 4e-4) clips whole responses only when the policy really moved.

    Returns:
        the figure (2 panels).
    """
    sims = list(_simulate_ratios(lengths, noise_std, n_sequences, seed))
    table = _spread_table(sims)
    fig, (spread, hist) = _panels(axes, 2, width=4.5)
    spread.plot(table["length"], table["token_ratio_std"], "o-", label=r"token ratio $r_{i,t}$")
    spread.plot(table["length"], table["sequence_ratio_std"], "o-",
                label=r"sequence ratio $s_i$ (GSPO)")
    spread.plot(table["length"], noise_std / np.sqrt(table["length"]), "k--", lw=1,
                label=r"$\sigma/\sqrt{|o_i|}$")
    spread.set(title=f"ratio spread, log-ratio noise $\\sigma$ = {noise_std:g}",
               xlabel=LENGTH_LABEL, ylabel="standard deviation of the ratio", xscale="log",
               yscale="log")
    length, tok, seq = max(sims, key=lambda s: s[0])
    bins = np.histogram_bin_edges(tok.numpy(), bins=60)
    hist.hist(tok.numpy(), bins=bins, density=True, alpha=0.6, label=r"token ratios $r_{i,t}$")
    hist.hist(seq.numpy(), bins=bins, density=True, alpha=0.6, label=r"sequence ratios $s_i$")
    hist.set(title=f"distribution at length {length}", xlabel=RATIO_LABEL, ylabel="density")
    for ax in (spread, hist):
        ax.legend(fontsize=_SMALL)
    return fig


# --------------------------------------------------------------------------------------------
# 8. GFPO
# --------------------------------------------------------------------------------------------


def plot_gfpo_filter(rewards=(1, 1, 0, 1, 0, 1, 1, 0),
                     lengths=(120, 340, 410, 95, 150, 210, 380, 60),
                     num_remains_in_group: int = 4, metric: str = "length",
                     axes=None) -> Figure:
    r"""GFPO on one group: which completions are kept, and the advantages they get.

    Left: each sampled completion's length and reward; the ``num_remains_in_group`` kept by
    :func:`labkit.filters.gfpo_filter` (shortest, or best reward per token for
    ``metric="token_efficiency"``) are filled, the rejected ones hollow. Right: plain GRPO's
    advantages (:func:`labkit.advantages.group_advantages` on all G) next to GFPO's
    (:func:`labkit.filters.gfpo_advantages`: statistics of the kept set, 0 for the rest).

    What to see: the long correct answers lose their positive advantage (rejected, so 0), the short
    correct ones keep it, so training is pulled towards concise correct answers; long wrong answers
    also stop being penalised, which is the price of filtering.

    Returns:
        the figure (2 panels).
    """
    r, lens = _tensor(rewards, "rewards"), _tensor(lengths, "lengths")
    if lens.shape != r.shape:
        raise ValueError(f"lengths need one entry per reward: {r.numel()}, got {lens.numel()}")
    g = r.numel()
    keep = gfpo_filter(r, lens, g, num_remains_in_group, metric)
    grpo = group_advantages(r, g).numpy()
    gfpo = gfpo_advantages(r, keep, g).numpy()
    fig, (scatter, bars) = _panels(axes, 2, width=4.6)
    k, length, reward = keep.numpy(), lens.numpy(), r.numpy()
    scatter.scatter(length[k], reward[k], s=60, color="C0", label=f"kept ({int(k.sum())})")
    scatter.scatter(length[~k], reward[~k], s=60, facecolors="none", edgecolors="C0",
                    label=f"rejected ({int((~k).sum())})")
    for i, (x, y) in enumerate(zip(length, reward)):
        scatter.annotate(str(i), (x, y), textcoords="offset points", xytext=(5, 5),
                         fontsize=_SMALL)
    scatter.margins(x=0.08, y=0.15)  # headroom for the completion numbers
    scatter.set(title=f"kept {int(k.sum())} of G = {g} by {metric}", xlabel=LENGTH_LABEL,
                ylabel="reward")
    _grouped_bars(bars, {"GRPO (all G)": grpo, "GFPO (kept set only)": gfpo})
    bars.set(title="advantages", xlabel="completion i", ylabel=r"advantage $\hat A_i$",
             xticks=np.arange(g))
    (h1, l1), (h2, l2) = scatter.get_legend_handles_labels(), bars.get_legend_handles_labels()
    _legend_above(fig, (scatter, bars), h1 + h2, l1 + l2)
    return fig


# --------------------------------------------------------------------------------------------
# 9. training curves
# --------------------------------------------------------------------------------------------


def load_run(path) -> pd.DataFrame:
    """Read a CSV training log; ``# key: value`` lines at its top go to ``df.attrs``.

    The reference logs in ``data/runs/`` start with ``# command: <the command that regenerates
    this log>``; it ends up in ``df.attrs["command"]`` and :func:`plot_runs` prints it under the
    figure.
    """
    path = Path(path)
    header: dict[str, str] = {}
    skip = 0
    with path.open() as f:
        for line in f:
            if not line.startswith("#"):
                break
            skip += 1
            key, sep, value = line[1:].partition(":")
            if sep:
                header[key.strip()] = value.strip()
    df = pd.read_csv(path, skiprows=skip)
    df.attrs.update(header)
    return df


# Units of the logged metrics, for the y axes of plot_runs (a metric not listed is a plain number).
_METRIC_UNITS = {
    "completion_length": "tokens", "completion_length_max": "tokens", "eval_length": "tokens",
    "reward_length": "tokens", "entropy": "nats per token", "kl_old": "nats per token",
    "kl_ref": "nats per token", "step_time": "s", "generation_time": "s",
    "tokens_per_second": "tokens / s", "peak_memory_mb": "MiB", "accuracy": "fraction",
    "eval_accuracy": "fraction", "eval_pass@k": "fraction", "clip_low": "fraction of tokens",
    "clip_high": "fraction of tokens", "clip_region": "fraction of tokens",
    "frac_reward_zero_std": "fraction of groups", "truncation_rate": "fraction",
    "eval_truncation": "fraction", "value_clipfrac": "fraction of tokens",
}


def runs_summary(runs: Mapping[str, pd.DataFrame],
                 extra: Mapping[str, Callable[[pd.DataFrame], float]] | None = None,
                 late_from: int | None = None) -> pd.DataFrame:
    """One column per run: steps, completions that trained, seconds per step, eval accuracy and
    length at the start and the end, and the best eval accuracy.

    One evaluation of a few hundred samples is noisy, so ``late_from`` (a step) adds two rows: a
    seed's eval accuracy and eval length averaged over its evaluations at that step and after.

    ``extra`` adds rows: a name and a function of the run's training rows (one seed's), e.g.
    ``{"entropy, last 20 steps": lambda d: d["entropy"].tail(20).mean()}``. A log of several
    seeds (a ``seed`` column) is summarised per seed, and its cells read ``mean ± spread`` over
    the seeds, the spread being half the min-max range (the band of :func:`plot_runs`), with a
    ``seeds`` row; the cells of a one-seed log stay numbers.

    ``runs`` maps a name to a history with evaluation columns (``TrainResult.history`` merged with
    its evaluations, or a reference log from :func:`load_run`). Rows without a ``reward`` are
    evaluation-only rows (step 0); rows without ``eval_accuracy`` did not evaluate.
    """
    rows, extra = {}, dict(extra or {})
    for name, df in runs.items():
        missing = {"reward", "eval_accuracy", "eval_length"} - set(df.columns)
        if missing:
            raise ValueError(f"run {name!r} has no {sorted(missing)} column(s); runs_summary "
                             f"needs a log with evaluations (labkit.reference_runs writes them)")
        if _seeds(df) < 2:
            rows[name] = _summary_of_one_seed(df, extra, late_from)
            continue
        per_seed = pd.DataFrame([_summary_of_one_seed(part, extra, late_from)
                                 for _, part in df.groupby("seed")])
        spread = (per_seed.max() - per_seed.min()) / 2
        rows[name] = {key: f"{per_seed[key].mean():.3f} ± {spread[key]:.3f}"
                      for key in per_seed.columns}
        rows[name]["steps"] = int(per_seed["steps"].max())
        rows[name]["seeds"] = len(per_seed)
    table = pd.DataFrame(rows).round(3)
    if "seeds" in table.index:
        table.loc["seeds"] = table.loc["seeds"].fillna(1).astype(int)
    return table


def _summary_of_one_seed(df: pd.DataFrame, extra: Mapping[str, Callable],
                         late_from: int | None = None) -> dict:
    steps, evals = df.dropna(subset=["reward"]), df.dropna(subset=["eval_accuracy"])
    row = {"steps": int(steps["step"].max()),
           "completions with a gradient per step": steps["completions_trained"].mean(),
           "seconds per step (wall)": steps["step_time"].mean(),
           "eval accuracy, start": evals["eval_accuracy"].iloc[0],
           "eval accuracy, end": evals["eval_accuracy"].iloc[-1],
           "best eval accuracy": evals["eval_accuracy"].max(),
           "eval length, start": evals["eval_length"].iloc[0],
           "eval length, end": evals["eval_length"].iloc[-1]}
    if late_from is not None:
        late = evals[evals["step"] >= late_from]
        row[f"eval accuracy, steps {late_from}+"] = late["eval_accuracy"].mean()
        row[f"eval length, steps {late_from}+"] = late["eval_length"].mean()
    row.update({key: float(fn(steps)) for key, fn in extra.items()})
    return row


def _seeds(df: pd.DataFrame) -> int:
    """How many seeds a log holds (a reference log of several seeds has a ``seed`` column)."""
    return int(df["seed"].nunique()) if "seed" in df else 1


def _over_seeds(df: pd.DataFrame, metric: str, x: str, smooth: int):
    """(x, mean, min, max) of ``metric`` over the seeds of a log, each seed's curve smoothed
    first; None for a log of one seed (or without an ``x`` column to align the seeds on)."""
    if _seeds(df) < 2 or x not in df:
        return None
    logged = df.dropna(subset=[metric])
    curves = logged.pivot_table(index=x, columns="seed", values=metric)  # one column per seed
    if smooth > 1:
        curves = curves.rolling(smooth, min_periods=1).mean()
    return (curves.index.to_numpy(), curves.mean(axis=1).to_numpy(),
            curves.min(axis=1).to_numpy(), curves.max(axis=1).to_numpy())


def _regenerate_footer(commands: Mapping[str, str]) -> list[str]:
    """The lines saying how to regenerate logged runs: one command, one pattern when the commands
    differ only by the run's name (``.../<name>.json``, so many runs do not widen the figure), else
    one line per run."""
    if len(set(commands.values())) <= 1:
        return [f"regenerate: {c}" for c in set(commands.values())]
    patterns = {re.sub(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", "<name>", c)
                for name, c in commands.items()}
    if len(patterns) == 1 and "<name>" in next(iter(patterns)):
        return [f"regenerate: {patterns.pop()}"]
    return [f"regenerate {n}: {c}" for n, c in commands.items()]


def plot_runs(runs: Mapping[str, pd.DataFrame],
              metrics: Sequence[str] = ("reward", "accuracy", "completion_length"),
              smooth: int = 1, x: str = "step", axes=None) -> Figure:
    """Training curves of several runs, one panel per metric column, one legend for all panels.

    ``runs`` maps a name to a history DataFrame (``TrainResult.history`` or :func:`load_run`).
    With ``smooth`` > 1 a moving average over that many logged values is drawn over the faint raw
    curve. Rows where a metric is missing (a log's evaluation-only rows, or a metric logged only
    every few steps) are skipped, so the curve joins the points it has. A run without a metric is
    left out of that panel, whose title names it. The runs' legend sits above the panels, once;
    when runs carry a ``command`` in ``df.attrs`` (reference logs), the figure's footer says how
    to regenerate them. Up to three panels a row, 833 px wide at :data:`FIGURE_DPI`.

    A log of several seeds (a ``seed`` column with more than one value, as the reference logs of
    ``labkit.reference_runs`` with ``"seeds": [...]``) is drawn as its mean over seeds with a
    min-max band; ``smooth`` then applies to each seed's curve before they are combined, and the
    legend says how many seeds.

    What to see: compare runs on the same axes: reward and accuracy rising, completion length
    growing or shrinking, entropy and clip fractions over training.

    Returns:
        the figure (one panel per metric).
    """
    if not metrics:
        raise ValueError("metrics must name at least one column")
    if smooth < 1:
        raise ValueError(f"smooth must be >= 1 (rows in the moving average), got {smooth}")
    fig, panels = _panels(axes, len(metrics), ncols=min(len(metrics), 3), width=3.05, height=2.5)
    handles = {}
    for ax, metric in zip(panels, metrics):
        missing = []
        for k, (name, df) in enumerate(runs.items()):
            if metric not in df:
                missing.append(name)
                continue
            band = _over_seeds(df, metric, x, smooth)
            if band is not None:
                xs, mean, low, high = band
                ax.fill_between(xs, low, high, color=f"C{k}", alpha=0.2, lw=0)
                (handles[name],) = ax.plot(xs, mean, color=f"C{k}",
                                           label=f"{name} ({df['seed'].nunique()} seeds)")
                continue
            y = df[metric]
            logged = y.notna().to_numpy()
            xs, y = np.asarray(df.get(x, df.index))[logged], y[logged]
            if smooth > 1:
                ax.plot(xs, y, color=f"C{k}", alpha=0.25, lw=1)
                y = y.rolling(smooth, min_periods=1).mean()
            (handles[name],) = ax.plot(xs, y, color=f"C{k}", label=name)
        # A long list of names would stretch the panel's title past the figure: count them instead
        absent = ("" if not missing else
                  f"\n(not logged by: {', '.join(missing)})" if len(missing) <= 2 else
                  f"\n({len(missing)} of {len(runs)} runs lack it)")
        ax.set(title=metric + absent,
               xlabel="training step" if x == "step" else x,
               ylabel=_METRIC_UNITS.get(metric, metric))  # the title names the metric
    seeded = any(_seeds(df) > 1 for df in runs.values())
    title = "; ".join(([f"moving average of {smooth} (faint: raw values)"] if smooth > 1 else [])
                      + (["band: min-max over seeds"] if seeded else [])) or None
    labels = [h.get_label() for h in handles.values()]
    _legend_above(fig, panels, list(handles.values()), labels, title=title)
    commands = {name: df.attrs["command"] for name, df in runs.items() if df.attrs.get("command")}
    # "small" is about 8.3 pt; a character of it about 0.6 em wide: wrap to the figure's width
    columns = max(20, int(fig.get_figwidth() * 72 / (0.6 * 8.3)))
    footer = [part for line in _regenerate_footer(commands)
              for part in textwrap.wrap(line, columns, subsequent_indent="    ",
                                        break_on_hyphens=False)]
    if footer:
        fig.supxlabel("\n".join(footer), x=0.01, ha="left", fontsize=_SMALL)
    if axes is None:  # room for the footer on top of the panels' own height
        fig.set_figheight(fig.get_figheight() + 0.17 * len(footer))
    return fig


class LivePlot:
    """Trainer callback: redraw :func:`plot_runs` of the run so far, in one output area.

    ``train(config, callbacks=[LivePlot(("reward", "accuracy"), every=5)])`` draws the curves after
    every ``every``-th step and after the last one, replacing the previous drawing (no flood of
    figures). In a notebook it uses IPython's updatable display; elsewhere it does nothing, so a
    script can keep the callback. ``smooth`` is passed to :func:`plot_runs`.
    """

    def __init__(self, metrics: Sequence[str] = ("reward", "accuracy", "completion_length"),
                 every: int = 5, smooth: int = 1, label: str = "this run"):
        if every < 1:
            raise ValueError(f"every must be >= 1 (steps between redraws), got {every}")
        self.metrics, self.every, self.smooth, self.label = tuple(metrics), every, smooth, label
        self.handle = None

    def __call__(self, trainer, row) -> None:
        last = row["step"] == trainer.config.max_steps
        if row["step"] % self.every and not last:
            return
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            return
        if get_ipython() is None:
            return
        fig = plot_runs({self.label: trainer.history}, self.metrics, smooth=self.smooth)
        if self.handle is None:
            self.handle = display(fig, display_id=True)
        else:
            self.handle.update(fig)


# --------------------------------------------------------------------------------------------
# 10. exploration: temperature, and the gradient weight of each surrogate (notebook 07)
# --------------------------------------------------------------------------------------------


def temperature_tokens(logits: torch.Tensor, temperature: float = 1.0,
                       top_k: int = 8) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``top_k`` likeliest next tokens of each position at ``temperature``, and the entropy.

    ============  ======  ==============================================================
    name          shape   meaning
    ============  ======  ==============================================================
    ``logits``    (P, V)  a model's next-token logits at P positions (any float dtype)
    returns ids   (P, k)  token ids, likeliest first (the order does not depend on T)
    returns p     (P, k)  their probabilities at ``temperature``
    returns H     (P,)    entropy of the whole tempered distribution, nats
    ============  ======  ==============================================================

    Both come from :func:`labkit.logprobs.logprobs_and_entropy`, the function that scores
    rollouts in training, so the entropy is the one the trainer logs at that temperature.
    """
    from labkit.logprobs import logprobs_and_entropy

    if logits.dim() != 2:
        raise ValueError(f"logits must have shape (P, V), got {tuple(logits.shape)}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    k = min(top_k, logits.shape[-1])
    ids = logits.topk(k, dim=-1).indices  # (P, k); dividing by T > 0 keeps the order
    # One "sequence" per rank: row j of the (k, P, V) view asks for the j-th likeliest token.
    logp, entropy = logprobs_and_entropy(logits.expand(k, *logits.shape), ids.T.contiguous(),
                                         temperature)
    return ids, logp.T.exp(), entropy[0]


def plot_token_temperature(logits: torch.Tensor, temperatures: Sequence[float] = (0.6, 1.0, 1.2),
                           token_labels: Callable[[int], str] | None = None,
                           contexts: Sequence[str] | None = None, top_k: int = 8,
                           axes=None) -> Figure:
    r"""The next-token distribution of a few positions at several temperatures, and its entropy.

    Sampling at temperature :math:`T` draws from :math:`\mathrm{softmax}(z/T)`: :math:`T<1`
    sharpens the distribution (less exploration), :math:`T>1` flattens it. One panel per position
    (P of them): bars of the ``top_k`` likeliest tokens' probabilities at each temperature, the
    entropy :math:`H` in nats in the legend. A last panel draws :math:`H` against :math:`T` for
    every position, with the chosen temperatures marked.

    Args:
        logits: (P, V) next-token logits, e.g. the tiny Qwen's at a few positions of one of its
            own completions.
        temperatures: the temperatures to compare (> 0).
        token_labels: id -> text for the bars (a tokenizer's ``decode``); default: the id.
        contexts: P short strings naming each position (the text before it), for the titles.
        axes: P + 1 axes to draw into.

    Returns:
        the figure (P + 1 panels, two a row).
    """
    temperatures = [float(t) for t in temperatures]
    if not temperatures or min(temperatures) <= 0:
        raise ValueError(f"temperatures must be positive and not empty, got {temperatures}")
    positions = logits.shape[0] if logits.dim() == 2 else 0
    if contexts is not None and len(contexts) != positions:
        raise ValueError(f"contexts must name the {positions} positions, got {len(contexts)}")
    label = token_labels or str
    fig, panels = _panels(axes, positions + 1, ncols=2, width=4.6, height=2.6)
    for p, ax in enumerate(panels[:-1]):
        columns, ids = {}, None
        for t in temperatures:
            ids, probs, entropy = temperature_tokens(logits[p:p + 1], t, top_k)
            columns[f"T = {t:g}: H = {float(entropy[0]):.2f} nats"] = probs[0].double().numpy()
        _grouped_bars(ax, columns)
        ax.set_xticks(range(len(ids[0])), [repr(label(int(i)))[1:-1] for i in ids[0]],
                      rotation=45, ha="right", fontsize=_SMALL)
        where = f"position {p + 1}" + (f": after …{contexts[p][-20:]!r}" if contexts else "")
        ax.set(title=where, ylabel="probability", xlabel="next token (likeliest first)")
        ax.legend(fontsize=_SMALL, loc="upper right")
    ax = panels[-1]
    grid = torch.linspace(0.1, 2.0, 40, dtype=_DTYPE)
    for p in range(positions):
        curve = [float(temperature_tokens(logits[p:p + 1], float(t), 1)[2][0]) for t in grid]
        ax.plot(grid.numpy(), curve, color=f"C{p + 4}", label=f"position {p + 1}")
    for t in temperatures:
        ax.axvline(t, color="0.5", ls=":", lw=1)
    ax.set(title="entropy of the whole distribution", xlabel="sampling temperature T",
           ylabel="entropy H (nats)")
    ax.legend(fontsize=_SMALL, loc="upper left")
    return fig


def plot_temperature_schedules(total_steps: int = 200, start: float = 1.2, final: float = 0.8,
                               schedules: Sequence[str] = ("constant", "linear", "cosine"),
                               axes=None) -> Figure:
    """Sampling temperature over training for each ``temperature_schedule`` (Kimi K2's decay).

    Every value is :func:`labkit.temperature.temperature_at`, the function the trainer calls
    each step. One panel.
    """
    from labkit.temperature import temperature_at

    if total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")
    fig, (ax,) = _panels(axes, 1, width=4.6, height=2.6)
    steps = np.arange(total_steps)
    for k, schedule in enumerate(schedules):
        ax.plot(steps, [temperature_at(int(s), total_steps, start, final, schedule)
                        for s in steps], color=f"C{k}", label=schedule)
    ax.set(title=f"temperature schedules, {start:g} → {final:g}", xlabel="training step",
           ylabel="sampling temperature T")
    _legend_beside(ax)
    return fig


#: The surrogates of :func:`surrogate_weights`, with their TRL ``loss_type`` names.
SURROGATES = ("ppo_clip", "no_clip", "cispo", "sapo", "vespo")
_SURROGATE_LABELS = {
    "ppo_clip": "PPO clip (grpo, dapo, ...)", "no_clip": "no clip (RL-PLUS)",
    "cispo": "CISPO", "sapo": "SAPO", "vespo": "VESPO (one-token sequence)",
}


def surrogate_weights(ratio, advantage: float = 1.0, epsilon_low: float = 0.2,
                      epsilon_high: float = 0.28, cispo_max_weight: float = 5.0,
                      sapo_temperature_pos: float = 1.0, sapo_temperature_neg: float = 1.05,
                      vespo_k: tuple[float, float] = (2.0, 3.0),
                      vespo_lambda: tuple[float, float] = (3.0, 2.0)) -> pd.DataFrame:
    r"""Each surrogate's gradient weight :math:`w(r)` at the given ratios, by autograd.

    Every per-token loss of :mod:`labkit.losses` has a gradient of the form
    :math:`\nabla_\theta\ell = -w(r)\,A\,\nabla_\theta\log\pi_\theta(o_t)`, so
    :math:`w = -\frac{1}{A}\frac{\partial\ell}{\partial\log\pi}`: how hard a token with ratio
    :math:`r=\pi_\theta/\pi_{old}` is pushed, relative to REINFORCE (:math:`w = 1`). It is
    computed here by autograd through ``clipped_surrogate`` (with ``epsilon_low``,
    ``epsilon_high``), ``no_clip_surrogate``, ``cispo_surrogate`` (``max_weight``),
    ``sapo_surrogate`` and ``vespo_surrogate`` (a one-token sequence, so its sequence weight is
    :math:`r`; pairs are (A >= 0, A < 0)).

    Returns:
        a table, one row per ratio, one column per surrogate (:data:`SURROGATES`).
    """
    from labkit.losses import cispo_surrogate, sapo_surrogate, vespo_surrogate

    if advantage == 0:
        raise ValueError("advantage must be non-zero (every gradient is 0 at A = 0)")
    r = _tensor(ratio, "ratio")
    if (r <= 0).any():
        raise ValueError("ratio must be > 0")
    old_logp = torch.full_like(r, math.log(0.5))  # any behaviour log-prob: w depends on r only
    logp = (old_logp + r.log()).requires_grad_(True)
    a = torch.full_like(r, float(advantage))
    log_ratio = logp - old_logp
    losses = {
        "ppo_clip": clipped_surrogate(log_ratio, a, epsilon_low, epsilon_high),
        "no_clip": no_clip_surrogate(log_ratio, a),
        "cispo": cispo_surrogate(logp, log_ratio, a, cispo_max_weight),
        "sapo": sapo_surrogate(log_ratio, a, sapo_temperature_pos, sapo_temperature_neg),
        "vespo": vespo_surrogate(logp[:, None], log_ratio[:, None], a[:, None],
                                 torch.ones(len(r), 1, dtype=torch.bool), vespo_k[0],
                                 vespo_lambda[0], vespo_k[1], vespo_lambda[1])[:, 0],
    }
    table = {"ratio": r.numpy()}
    for name, loss in losses.items():
        (grad,) = torch.autograd.grad(loss.sum(), logp)
        table[name] = (-grad / advantage).numpy() + 0.0
    return pd.DataFrame(table)


def plot_surrogate_weights(epsilon_low: float = 0.2, epsilon_high: float = 0.28,
                           cispo_max_weight: float = 2.0, gamma: float = 0.5,
                           ratio_max: float = 3.0, axes=None) -> Figure:
    r"""The gradient weight of each surrogate against the ratio, and RL-PLUS's focal weight.

    Panels 1 and 2 (A > 0, A < 0): :func:`surrogate_weights` on a grid of ratios, REINFORCE
    (w = 1) dotted. Panel 3: the exploration weight :math:`(1-p)^\gamma` of
    :func:`labkit.losses.focal_weight` against the token's probability :math:`p`, for
    ``gamma`` and, for comparison, 0 (off) and 2.

    What to see: PPO's clip sets the weight to *zero* outside its band on the side where moving
    further would help (A > 0 above :math:`1+\varepsilon_{high}`, A < 0 below
    :math:`1-\varepsilon_{low}`); no-clip keeps :math:`w = r` everywhere; CISPO keeps every
    token's gradient and only caps the weight; SAPO and VESPO fade the weight smoothly away from
    the on-policy point instead of cutting it. All equal 1 at :math:`r = 1`. CISPO's cap is 2
    here so that it shows on the axis (TRL recommends ``epsilon_high=5.0`` for ``cispo``).

    Returns:
        the figure (3 panels).
    """
    from labkit.losses import focal_weight

    if not ratio_max > 1:
        raise ValueError(f"ratio_max must be > 1, got {ratio_max}")
    ratio = torch.linspace(0.02, ratio_max, 400, dtype=_DTYPE)
    fig, panels = _panels(axes, 3, width=3.05, height=2.7)
    handles = {}
    for ax, a in zip(panels[:2], (1.0, -1.0)):
        table = surrogate_weights(ratio, a, epsilon_low, epsilon_high, cispo_max_weight)
        for k, name in enumerate(SURROGATES):
            # PPO's clip on top: the others coincide with its unclipped stretch
            style = {"no_clip": "--", "cispo": "-."}.get(name, "-")
            label = _SURROGATE_LABELS[name] + (f" (cap {cispo_max_weight:g})"
                                                if name == "cispo" else "")
            (handles[label],) = ax.plot(
                table.ratio, table[name], style, color=f"C{k}", lw=2.2 if k == 0 else 1.4,
                zorder=3 if k == 0 else 2)
        ax.axhline(1, color="0.5", ls=":", lw=1)
        for b in (1 - epsilon_low, 1 + epsilon_high):
            ax.axvline(b, color="k", ls=":", lw=0.8)
        ax.set(title=f"A {'>' if a > 0 else '<'} 0", xlabel=RATIO_LABEL,
               ylabel="gradient weight w", ylim=(-0.1, min(ratio_max, 3.2)))
    ax = panels[2]
    p = torch.linspace(0, 1, 201, dtype=_DTYPE)
    for k, g in enumerate(sorted({0.0, float(gamma), 2.0})):
        ax.plot(p.numpy(), focal_weight(p.clamp(min=1e-12).log(), g).numpy(), color=f"C{k + 5}",
                lw=2 if g == gamma else 1, label=rf"$\gamma$ = {g:g}")
    ax.set(title=r"RL-PLUS focal weight $(1-p)^\gamma$",
           xlabel="token probability p under the policy", ylabel="weight C")
    ax.legend(fontsize=_SMALL, loc="lower left")
    _legend_above(fig, panels, list(handles.values()), list(handles))
    return fig


# --------------------------------------------------------------------------------------------
# 11. rewards and data: majority vote, prompt sampling weights, pass@k (notebook 08)
# --------------------------------------------------------------------------------------------


def majority_vote_groups(samples: pd.DataFrame, group_size: int | None = None) -> pd.DataFrame:
    """TTRL's majority vote per prompt of a per-sample frame, against the verifier's label.

    ``samples`` is the frame of :func:`labkit.evaluate.sample_answers` (one row per sample, with
    ``id``, ``family``, ``text`` and ``correct``: 1.0 / 0.0 / NaN); a ``question`` column, if
    present, is carried over. Each prompt votes with its first ``group_size`` samples (default:
    all), through :func:`labkit.rewards.ttrl.answer_key` and :func:`labkit.rewards.ttrl.majority_vote`, the
    functions of the TTRL reward.

    ============== =====================================================================
    column         meaning (one row per prompt, in the order of ``samples``)
    ============== =====================================================================
    id             the prompt
    group_size     samples that voted
    majority       the text of the majority answer (None: no sample had an answer)
    share          the majority's votes / group_size (TTRL's majority ratio)
    majority_right 1.0 when the majority answer passes the verifier, else 0.0
    accuracy       the group's share of correct samples (pass@1 of this prompt)
    any_right      1.0 when some sample is correct (pass@G)
    ============== =====================================================================
    """
    from labkit.rewards import completion_content, extract_answer
    from labkit.rewards.ttrl import answer_key, majority_vote

    missing = {"id", "family", "text", "correct"} - set(samples.columns)
    if missing:
        raise ValueError(f"samples lacks the column(s) {sorted(missing)}; pass the frame of "
                         f"labkit.evaluate.sample_answers")
    if group_size is not None and group_size < 1:
        raise ValueError(f"group_size must be >= 1 (samples that vote), got {group_size}")
    rows = []
    for prompt_id, group in samples.groupby("id", sort=False):
        group = group.iloc[:group_size] if group_size else group
        texts = [extract_answer(completion_content(t)) for t in group["text"]]
        keys = [answer_key(f, t) for f, t in zip(group["family"], texts)]
        label, share = majority_vote(keys)
        correct = group["correct"].fillna(0.0).to_numpy() > 0
        voters = [i for i, k in enumerate(keys) if label is not None and k == label]
        row = {"id": prompt_id}
        if "question" in group:
            row["question"] = group["question"].iloc[0]
        row.update({"group_size": len(group),
                    "majority": texts[voters[0]] if voters else None, "share": share,
                    "majority_right": float(bool(voters) and bool(correct[voters[0]])),
                    "accuracy": float(correct.mean()), "any_right": float(correct.any())})
        rows.append(row)
    return pd.DataFrame(rows)


def plot_majority_vote(samples: pd.DataFrame, prompt: int = 0, group_size: int | None = None,
                       axes=None) -> Figure:
    """One prompt's sampled answers and their vote; and the vote's accuracy against G.

    Panel 1: how many of the prompt's first ``group_size`` samples gave each answer (the eight
    most common, then "other"), green when the verifier accepts the answer, red when not, the
    majority outlined in black; the title says the majority, its share and whether it is right.
    Panel 2: over every prompt of ``samples``, the majority vote's accuracy (maj@G: the share of
    prompts whose vote passes the verifier, the label accuracy of TTRL's pseudo-labels), the
    single-sample accuracy (pass@1) and pass@G, for G = 1 .. the samples per prompt; the
    dotted line marks ``group_size``. ``prompt`` is the position of the prompt in ``samples``.

    What to see: where maj@G sits above pass@1, a TTRL reward is mostly right and sharpening
    toward the vote raises accuracy (self-consistency); on prompts whose majority is wrong the
    reward pays the policy for agreeing with its own mistake. pass@G is the ceiling: a vote can
    only pick an answer that was sampled.

    Returns:
        the figure (2 panels).
    """
    from labkit.rewards import completion_content, extract_answer
    from labkit.rewards.ttrl import answer_key

    ids = list(dict.fromkeys(samples["id"]))
    if not 0 <= prompt < len(ids):
        raise ValueError(f"prompt must lie in 0..{len(ids) - 1} (the prompts of samples), "
                         f"got {prompt}")
    per_prompt = int(samples.groupby("id").size().min())
    size = per_prompt if group_size is None else group_size
    if not 1 <= size <= per_prompt:
        raise ValueError(f"group_size must lie in 1..{per_prompt} (the fewest samples of a "
                         f"prompt), got {group_size}")
    fig, (ax, ax_g) = _panels(axes, 2, width=4.6, height=3.1)
    group = samples[samples["id"] == ids[prompt]].iloc[:size]
    vote = majority_vote_groups(group).iloc[0]
    texts = [extract_answer(completion_content(t)) for t in group["text"]]
    keys = [answer_key(f, t) for f, t in zip(group["family"], texts)]
    right = group["correct"].fillna(0.0).to_numpy() > 0
    counts: dict = {}
    for key, text, ok in zip(keys, texts, right):
        label = "(no vote)" if key is None else text.strip()  # no answer, or unparsable
        entry = counts.setdefault(key if key is not None else label, [label, 0, bool(ok)])
        entry[1] += 1
    bars = sorted(counts.values(), key=lambda e: -e[1])
    if len(bars) > 8:
        bars = bars[:8] + [["other", sum(e[1] for e in bars[8:]), False]]
    x = np.arange(len(bars))
    colors = ["C2" if ok else "C3" for _, _, ok in bars]
    edges = ["k" if vote["majority"] is not None and name == str(vote["majority"]).strip()
             else "none" for name, _, _ in bars]
    ax.bar(x, [n for _, n, _ in bars], color=colors, edgecolor=edges, linewidth=2)
    ax.set_xticks(x, [name[:8] for name, _, _ in bars], rotation=45, ha="right",
                  fontsize=_SMALL)
    verdict = ("no answer" if vote["majority"] is None
               else f"majority {vote['majority']} ({vote['share']:.0%}): "
                    + ("right" if vote["majority_right"] else "wrong"))
    question = str(group["question"].iloc[0]) if "question" in group else f"prompt {prompt}"
    ax.set(title=f"{question[:40]}\n{verdict}", xlabel="sampled answer",
           ylabel=f"samples (of G = {size})")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color="C2", label="verifier: right"),
                       Patch(color="C3", label="verifier: wrong")], fontsize=_SMALL)
    sizes = np.arange(1, per_prompt + 1)
    curves = [majority_vote_groups(samples, g) for g in sizes]
    ax_g.plot(sizes, [c["majority_right"].mean() for c in curves], "o-", ms=3,
              label="majority vote right (maj@G)")
    ax_g.plot(sizes, [c["accuracy"].mean() for c in curves], "--", label="one sample (pass@1)")
    ax_g.plot(sizes, [c["any_right"].mean() for c in curves], ":", label="any sample (pass@G)")
    ax_g.axvline(size, color="0.4", ls=":", lw=1)
    ax_g.set(title=f"over {len(ids)} prompts", xlabel="samples per prompt G",
             ylabel="fraction of prompts", ylim=(0, 1.02))
    _legend_beside(ax_g)
    return fig


def difficulty_sampling_weights(difficulties=(1, 2, 3, 4), solve_rates=(0.9, 0.6, 0.3, 0.1),
                                progress: float = 0.25, curriculum_ratio: float = 0.5,
                                floor: float = 0.05) -> pd.DataFrame:
    """Each sampler's share of draws per difficulty, from the samplers' own ``weights()``.

    One prompt per entry of ``difficulties`` with its running solve rate from ``solve_rates``;
    ``progress`` is the share of training done (0..1). ``uniform``: every prompt alike;
    ``curriculum``: :class:`labkit.prompt_sampling.CurriculumSampler` at that progress (the
    hardest allowed difficulty rises over the first ``curriculum_ratio`` of training);
    ``prioritized``: :class:`labkit.prompt_sampling.PrioritizedSampler` with those solve rates
    (weight 1 - s + ``floor``). Columns: ``difficulty``, ``solve_rate`` and one per sampler
    (shares summing to 1 over the rows).
    """
    from labkit.prompt_sampling import CurriculumSampler, PrioritizedSampler

    if len(difficulties) != len(solve_rates) or not difficulties:
        raise ValueError(f"give one solve rate per difficulty: {len(difficulties)} "
                         f"difficulties, {len(solve_rates)} solve rates")
    if not all(0 <= s <= 1 for s in solve_rates):
        raise ValueError(f"solve_rates must lie in [0, 1], got {tuple(solve_rates)}")
    if not 0 <= progress <= 1:
        raise ValueError(f"progress must lie in [0, 1] (share of training done), got {progress}")
    if not 0 < curriculum_ratio <= 1:
        raise ValueError(f"curriculum_ratio must lie in (0, 1], got {curriculum_ratio}")
    total = 1000
    curriculum = CurriculumSampler(difficulties, seed=0, total_steps=total,
                                   ratio=curriculum_ratio)
    curriculum.step = round(progress * total)
    prioritized = PrioritizedSampler(len(difficulties), seed=0, floor=floor)
    prioritized.solve_rate = [float(s) for s in solve_rates]

    def shares(weights):
        weights = np.asarray(weights, dtype=float)
        return weights / weights.sum()

    return pd.DataFrame({"difficulty": list(difficulties), "solve_rate": list(solve_rates),
                         "uniform": shares(np.ones(len(difficulties))),
                         "curriculum": shares(curriculum.weights()),
                         "prioritized": shares(prioritized.weights())})


def multitask_weight_paths(accuracies: Mapping[str, float], steps: int = 150,
                           gains: Mapping[str, float] | None = None, lam: float = 0.2,
                           lr: float = 0.025) -> pd.DataFrame:
    """MT-GRPO's family weights step by step, from :class:`labkit.prompt_sampling.MultiTaskSampler`.

    Each step every family reports its batch accuracy, ``accuracies[f] + gains[f] * step``
    (clipped to [0, 1]; ``gains`` default 0: a family that does not improve), and the sampler
    takes one :func:`labkit.prompt_sampling.iwu_step` with ``lam`` and ``lr``. One row per step
    (0 = before any feedback): ``step``, ``weight_<family>`` and ``accuracy_<family>``.
    """
    from labkit.prompt_sampling import MultiTaskSampler

    if not accuracies:
        raise ValueError("accuracies must name at least one family")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    gains = dict(gains or {})
    names = list(accuracies)
    sampler = MultiTaskSampler(names, seed=0, lam=lam, lr=lr)
    rows = []
    for step in range(steps + 1):
        acc = {f: min(max(accuracies[f] + gains.get(f, 0.0) * step, 0.0), 1.0) for f in names}
        z = sampler.family_weights()
        rows.append({"step": step, **{f"weight_{f}": z[f] for f in names},
                     **{f"accuracy_{f}": acc[f] for f in names}})
        sampler.observe(list(range(len(names))), [acc[f] for f in names])
    return pd.DataFrame(rows)


def plot_sampling_weights(solve_rates=(0.9, 0.6, 0.3, 0.1), progress: float = 0.25,
                          floor: float = 0.05,
                          accuracies: Mapping[str, float] | None = None,
                          gains: Mapping[str, float] | None = None, lam: float = 0.2,
                          lr: float = 0.025, steps: int = 150, axes=None) -> Figure:
    """Which prompts a step trains on: difficulty samplers, and MT-GRPO's family weights.

    Panel 1: the share of draws per difficulty 1..4 of uniform sampling, the fixed curriculum at
    ``progress`` (share of training done; the ramp covers the first half) and prioritized
    sampling with ``solve_rates`` (:func:`difficulty_sampling_weights`). Panel 2: the family
    weights of :class:`labkit.prompt_sampling.MultiTaskSampler` over ``steps`` steps when the
    families' batch accuracies are ``accuracies`` (default add 0.6, sub 0.45, mul 0.1) rising
    by ``gains`` per step (:func:`multitask_weight_paths`).

    What to see: the curriculum hides the hard cells early and is uniform after the ramp;
    prioritized sampling follows the solve rates at every step (the adaptive curriculum); the
    multi-task weights drift toward the family with the lowest accuracy, at a speed set by
    ``lr`` and the size of the accuracy gaps (at the default 0.025 they move a few points in 150
    steps).

    Returns:
        the figure (2 panels).
    """
    accuracies = dict(accuracies or {"add": 0.6, "sub": 0.45, "mul": 0.1})
    table = difficulty_sampling_weights(solve_rates=solve_rates, progress=progress, floor=floor)
    paths = multitask_weight_paths(accuracies, steps, gains, lam, lr)
    fig, (ax, ax_m) = _panels(axes, 2, width=4.6, height=3.1)
    columns = {"uniform": table["uniform"].to_numpy(),
               f"curriculum at {progress:.0%} of training": table["curriculum"].to_numpy(),
               "prioritized (1 - solve rate)": table["prioritized"].to_numpy()}
    _grouped_bars(ax, columns)
    ax.set_xticks(np.arange(len(table)),
                  [f"d{d}\n{s:.0%}" for d, s in zip(table["difficulty"], table["solve_rate"])])
    ax.set(title="share of draws per difficulty", xlabel="difficulty (solve rate)",
           ylabel="share of prompts drawn", ylim=(0, 1.05))
    ax.legend(fontsize=_SMALL)
    for k, family in enumerate(accuracies):
        ax_m.plot(paths["step"], paths[f"weight_{family}"], color=f"C{k}",
                  label=f"{family} (acc. {accuracies[family]:.2f})")
    ax_m.axhline(1 / len(accuracies), color="0.5", ls=":", lw=1)
    ax_m.set(title=f"MT-GRPO family weights (lr {lr:g}, λ {lam:g})", xlabel="training step",
             ylabel="sampling weight z of the family")
    _legend_beside(ax_m)
    return fig


def plot_pass_at_k(curves: Mapping[str, pd.DataFrame], cell: str = "all", axes=None) -> Figure:
    """pass@k against k for several models, and each model's gain over the first.

    ``curves`` maps a model's name (e.g. "before", "after") to the frame of
    :func:`labkit.evaluate.pass_at_k_curve` (one row per (family, difficulty) cell and an
    ``all`` row, one ``pass@k`` column per k). ``cell`` is ``"all"`` or a cell as
    ``"<family> d<difficulty>"`` (e.g. ``"add d2"``). Panel 1: pass@k on a log2 axis of k;
    panel 2: pass@k of each model minus the first model's, in percentage points.

    What to see: RL that *sharpens* raises pass@1 a lot and pass@64 little or not at all (the
    gain shrinks to 0, or below, at large k: the base model could already sample those
    answers); RL that teaches a new skill would lift the whole curve.

    Returns:
        the figure (2 panels).
    """
    if not curves:
        raise ValueError("curves must hold at least one model's pass@k frame")

    def row_of(frame):
        if cell == "all":
            chosen = frame[frame["family"] == "all"]
        else:
            family, _, difficulty = cell.partition(" d")
            chosen = frame[(frame["family"] == family)
                           & (frame["difficulty"].astype(str) == difficulty)]
        if chosen.empty:
            cells = [f"{f} d{d}" for f, d in zip(frame["family"], frame["difficulty"])
                     if f != "all"]
            raise ValueError(f"cell must be 'all' or one of {cells}, got {cell!r}")
        row = chosen.iloc[0]
        ks = [int(c.removeprefix("pass@")) for c in frame.columns if c.startswith("pass@")]
        return np.array(ks), np.array([row[f"pass@{k}"] for k in ks], dtype=float), row

    fig, (ax, ax_d) = _panels(axes, 2, width=4.3, height=3.0)
    first = None
    for k, (name, frame) in enumerate(curves.items()):
        ks, values, row = row_of(frame)
        ax.plot(ks, values, "o-", ms=3, color=f"C{k}", label=name)
        if first is None:
            first = (ks, values)
            prompts = int(row["prompts"])
            continue
        if not np.array_equal(ks, first[0]):
            raise ValueError(f"{name!r} has other k values than the first model's")
        ax_d.plot(ks, 100 * (values - first[1]), "o-", ms=3, color=f"C{k}",
                  label=f"{name} - {next(iter(curves))}")
    for a in (ax, ax_d):
        a.set_xscale("log", base=2)
    ax.set(title=f"pass@k, {cell} ({prompts} prompts)", xlabel="k (samples per prompt)",
           ylabel="pass@k (fraction of prompts)", ylim=(0, 1.02))
    ax.legend(fontsize=_SMALL)
    ax_d.axhline(0, color="0.4", lw=0.8)
    ax_d.set(title="gain over the first model", xlabel="k (samples per prompt)",
             ylabel="pass@k difference (points)")
    if len(curves) > 1:
        ax_d.legend(fontsize=_SMALL)
    return fig


def fork_logits(question: str = "347+285=?", seed: int = 0, model=None, tokenizer=None,
                num_samples: int = 8) -> dict:
    """A model's next-token logits at three places of one of its own worked answers.

    Samples ``num_samples`` answers to ``question`` at T = 1 (seeded, with
    :func:`labkit.rollout.generate`), takes the first one that works the problem out inside
    ``<think>``, and reads the logits right after ``<think>`` (work it out or answer at once: a
    fork), after the last ``=`` of the reasoning (a computed digit) and after ``<answer>``.
    ``model``/``tokenizer`` default to the tiny Qwen on the CPU.

    Returns:
        a dict: ``logits`` (3, V) float32, ``contexts`` (the completion text before each place),
        ``text`` (the whole completion) and ``decode`` (token id -> text), the arguments of
        :func:`plot_token_temperature`.
    """
    from labkit.models import load_policy
    from labkit.rollout import generate

    if model is None or tokenizer is None:
        model, tokenizer = load_policy("tiny", device="cpu")
    roll = generate(model, tokenizer, [[{"role": "user", "content": question}]],
                    num_generations=num_samples, max_completion_length=64, temperature=1.0,
                    generator=torch.Generator().manual_seed(seed))
    worked = [k for k, text in enumerate(roll.texts)
              if text.startswith("<think>") and not text.startswith("<think></think>")
              and "=" in text.split("</think>")[0] and "<answer>" in text]
    if not worked:
        raise ValueError(f"none of {num_samples} answers to {question!r} (seed {seed}) is worked "
                         f"out; try another seed or more samples")
    k = worked[0]
    prompt = roll.prompt_ids[k][roll.prompt_mask[k].bool()]
    completion = roll.completion_ids[k][roll.completion_mask[k].bool()]
    with torch.no_grad():  # logits[j] predict completion token j
        logits = model(torch.cat([prompt, completion])[None]).logits[0, len(prompt) - 1:]
    pieces = tokenizer.convert_ids_to_tokens(completion.tolist())
    reasoning_end = pieces.index("</think>")
    positions = [1, reasoning_end - pieces[:reasoning_end][::-1].index("="),
                 pieces.index("<answer>") + 1]
    return {"logits": logits[positions].float(), "text": roll.texts[k],
            "contexts": [tokenizer.convert_tokens_to_string(pieces[:p]) for p in positions],
            "decode": tokenizer.decode}
