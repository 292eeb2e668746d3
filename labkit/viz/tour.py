"""Notebook 00's figure: the unbiased pass@k estimator against the plug-in one."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from labkit.evaluate import pass_at_k
from labkit.viz.style import legend_above, make_panels


def pass_at_k_estimates(num_samples: int = 8, num_correct: int = 3) -> pd.DataFrame:
    """Two estimates of pass@k from one prompt's ``num_correct`` right answers of ``num_samples``,
    and what each gives on average over repeated evaluations.

    =================  ====================================================================
    column             meaning
    =================  ====================================================================
    ``k``              1..n
    ``unbiased``       :func:`labkit.evaluate.pass_at_k` (Chen et al. eq. 1) of (n, c, k)
    ``plug_in``        ``1 - (1 - c/n)**k``: the solve rate c/n put into the formula for p
    ``true``           ``1 - (1 - p)**k`` with p = c/n taken as the prompt's true solve rate
    ``unbiased_mean``  the mean of ``unbiased`` over c ~ Binomial(n, p) (exact sum): equals
                       ``true``
    ``plug_in_mean``   the same mean of ``plug_in``: below ``true`` for 1 < k, 0 < p < 1
    =================  ====================================================================

    ValueError (labkit's, from :func:`~labkit.evaluate.pass_at_k`) unless 0 <= c <= n and n >= 1.
    """
    n, c = int(num_samples), int(num_correct)
    if n < 1:
        raise ValueError(f"num_samples must be at least 1, got {n}")
    pass_at_k(n, c, 1)  # labkit's own check of c
    p = c / n
    weights = [math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(n + 1)]
    rows = []
    for k in range(1, n + 1):
        unbiased = [pass_at_k(n, j, k) for j in range(n + 1)]
        plug_in = [1 - (1 - j / n) ** k for j in range(n + 1)]
        rows.append({"k": k, "unbiased": unbiased[c], "plug_in": plug_in[c],
                     "true": 1 - (1 - p) ** k,
                     "unbiased_mean": float(np.dot(weights, unbiased)),
                     "plug_in_mean": float(np.dot(weights, plug_in))})
    return pd.DataFrame(rows)


def plot_pass_at_k_estimator(num_samples: int = 8, num_correct: int = 3, axes=None) -> Figure:
    """pass@k of one prompt, estimated two ways (:func:`pass_at_k_estimates`).

    Panel 1: from this prompt's ``num_correct`` right answers of ``num_samples``, the unbiased
    estimate (:func:`labkit.evaluate.pass_at_k`) and the plug-in ``1 - (1 - c/n)^k`` against k.
    Panel 2: each estimate's mean over repeated evaluations of a prompt whose true solve rate is
    p = c/n, against the true pass@k ``1 - (1 - p)^k``.

    What to see: at k = 1 both are c/n; the unbiased estimate reaches 1 once k > n - c (every
    draw of k answers holds a right one), the plug-in never does. On average the unbiased one
    lands on the true curve, while the plug-in falls below it: it underestimates pass@k.

    Returns:
        the figure (2 panels).
    """
    table = pass_at_k_estimates(num_samples, num_correct)
    n, c = int(num_samples), int(num_correct)
    fig, (ax, ax_m) = make_panels(axes, 2, width=4.2, height=3.0)
    style = {"unbiased": {"marker": "o", "ms": 4, "ls": "-", "color": "C0"},
             "plug_in": {"marker": "s", "ms": 3, "ls": "--", "color": "C1"}}
    names = {"unbiased": "unbiased: 1 - C(n-c, k) / C(n, k)",
             "plug_in": "plug-in: 1 - (1 - c/n)^k"}
    for key in ("unbiased", "plug_in"):
        ax.plot(table["k"], table[key], **style[key], label=names[key])
    ax.set(title=f"one prompt: {c} of {n} answers right", xlabel="k (answers drawn)",
           ylabel="pass@k estimate (probability)", ylim=(-0.02, 1.05))
    ax_m.plot(table["k"], table["true"], color="0.6", lw=5, alpha=0.6,
              label="true: 1 - (1 - p)^k")
    for key in ("unbiased", "plug_in"):
        ax_m.plot(table["k"], table[f"{key}_mean"], **style[key], label=names[key])
    ax_m.set(title=f"mean over evaluations, true p = {c}/{n}", xlabel="k (answers drawn)",
             ylabel="mean estimate (probability)", ylim=(-0.02, 1.05))
    for a in (ax, ax_m):
        a.xaxis.set_major_locator(MaxNLocator(integer=True))
    handles, labels = ax_m.get_legend_handles_labels()
    legend_above(fig, [ax, ax_m], handles, labels)
    return fig
