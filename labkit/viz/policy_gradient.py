"""Notebook 01 (PPO): the clip region and its four sign cases, GAE on a toy sequence."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

from labkit.advantages import (
    gae,
)
from labkit.losses import (
    clipped_surrogate,
    no_clip_surrogate,
    upper_clip,
)
from labkit.viz.style import (
    DTYPE,
    RATIO_LABEL,
    SMALL,
    as_tensor,
    grouped_bars,
    legend_beside,
    make_panels,
    shade,
)


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
    epsilon_high = upper_clip(epsilon_low, epsilon_high)
    clip = {"epsilon_low": epsilon_low, "epsilon_high": epsilon_high, "delta": delta,
            "dual_clip": dual_clip}
    if ratio_max is None:
        ends = [2.0, 1 + epsilon_high + 0.6] + [c + 0.6 for c in (dual_clip, delta) if c]
        ratio_max = max(e for e in ends if np.isfinite(e))
    ratio = torch.linspace(0.01, ratio_max, 800, dtype=DTYPE)
    x = ratio.numpy()
    fig, flat = make_panels(axes, 2 * len(advantages), ncols=len(advantages), sharex=axes is None)
    grid = np.array(flat, dtype=object).reshape(2, len(advantages))
    bounds = [(1 - epsilon_low, r"$1-\varepsilon_{low}$"),
              (1 + epsilon_high, r"$1+\varepsilon_{high}$")]
    for col, a in enumerate(advantages):
        objective, grad = _clip_curves(ratio, a, **clip)
        unclipped = -no_clip_surrogate(torch.log(ratio), torch.tensor(a, dtype=DTYPE)).numpy()
        zero = np.abs(grad) < 1e-12
        marks = bounds + ([(dual_clip, "dual-clip $c$")] if dual_clip and a < 0 else [])
        for row, (ax, y) in enumerate(zip(grid[:, col], (objective, grad))):
            shade(ax, x, zero, "zero gradient")
            if row == 0:
                ax.plot(x, unclipped, "--", color="0.5", lw=1, label=r"unclipped $rA$")
            ax.plot(x, y, color="C0" if a >= 0 else "C3", lw=2,
                    label="objective $J=-\\ell$" if row == 0 else "$dJ/dr$ (autograd)")
            for (b, text), style in zip(marks, (":", ":", "-.")):
                if 0 < b < ratio_max:
                    ax.axvline(b, color="k", ls=style, lw=1, label=text if row == 0 else None)
            ax.set_xlim(0, ratio_max)
            ax.legend(fontsize=SMALL, loc="best")
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
    epsilon_high = upper_clip(epsilon_low, epsilon_high)
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
            objective, grad = _clip_curves(torch.tensor([r], dtype=DTYPE), a,
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
    r = as_tensor([0.0] * 7 + [1.0] if rewards is None else rewards, "rewards")
    v = torch.linspace(0.3, 0.8, r.numel(), dtype=DTYPE) if values is None else as_tensor(
        values, "values")
    if v.shape != r.shape:
        raise ValueError(f"values need one entry per reward: {r.numel()}, got {v.numel()}")
    mask = torch.ones(1, r.numel(), dtype=torch.bool)
    adv, ret = (t[0].numpy() for t in gae(r[None], v[None], mask, gamma, lam))
    td_error = gae(r[None], v[None], mask, gamma, 0.0)[0][0].numpy()
    t = np.arange(r.numel())
    fig, (top, bottom) = make_panels(axes, 2, ncols=1, width=7.4, height=2.6, sharex=axes is None)
    top.bar(t, r.numpy(), 0.6, color="C2", label="reward $r_t$")
    top.plot(t, v.numpy(), "o-", color="C1", label="critic value $V(s_t)$")
    top.set(title="toy response: rewards and values", ylabel="reward / value")
    grouped_bars(bottom, {r"advantage $\hat A_t$": adv,
                           r"return $\hat R_t = \hat A_t + V_t$": ret})
    bottom.plot(t, td_error, "k_", ms=14, mew=2, label=r"TD error $\delta_t$ ($\lambda=0$)")
    bottom.set(title=f"GAE with $\\gamma$ = {gamma:g}, $\\lambda$ = {lam:g}",
               xlabel="response token position t", ylabel="advantage / return")
    for ax in (top, bottom):
        ax.set_xticks(t)
        legend_beside(ax)
    return fig
