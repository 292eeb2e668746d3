r"""Notebook 11 (asynchronous RL): how stale a batch is, and what its behaviour ratio looks like.

A stale batch was sampled by the weights of an earlier step (the behaviour policy) and is trained
by the weights of now (the proximal policy). Its per-token behaviour ratio
:math:`\pi_{\text{prox}}/\pi_{\text{behav}}` is what every correction of
:mod:`labkit.offpolicy.correction` bounds. The figures here draw that ratio with
:func:`labkit.offpolicy.offpolicy_terms` and :func:`labkit.offpolicy.offpolicy_metrics`, the
functions the trainer calls, on log-probs the caller computed (real ones: the tiny Qwen scored
at two checkpoints of one run, :func:`stale_logprobs`).

=============================  ==================================================================
function                       what it gives
=============================  ==================================================================
``stale_logprobs``             one batch scored by later checkpoints: staleness -> log-prob triple
``staleness_table``            per staleness: the ratio's quantiles, clip and corrected shares, KL
``plot_offpolicy_ratio``       the ratio's histogram, PPO's clip band, the correction's bounds
``plot_staleness_schedule``    which policy version sampled the batch each step trains on
``plot_admission``             the share of groups an admission rule trains, by length
=============================  ==================================================================
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

from labkit.losses import upper_clip
from labkit.offpolicy import offpolicy_metrics, offpolicy_terms
from labkit.viz.style import SMALL, ZERO_SHADE, grouped_bars, legend_beside, make_panels

#: the behaviour ratio's axis (a log scale: a ratio of 2 and one of 1/2 are equally far from 1)
BEHAVIOUR_RATIO_LABEL = r"behaviour ratio $\pi_{prox} / \pi_{behav}$ per token (log scale)"


def stale_logprobs(model, checkpoints: Mapping[int, Mapping], batch, base: int,
                   staleness: Sequence[int], temperature: float = 1.0) -> dict:
    """One batch sampled by the weights of step ``base``, scored by the weights of later steps.

    ``checkpoints`` maps a step to a ``state_dict`` of ``model`` (weights after that many
    updates; 0 = the start); ``batch`` is an :class:`labkit.experience.Experience` sampled with
    ``checkpoints[base]`` at ``temperature`` (its ``sample_logp`` are the behaviour log-probs the
    sampler recorded). For each ``s`` in ``staleness`` the model is loaded with the weights of
    step ``base + s`` and the batch's tokens scored (the proximal log-probs a trainer ``s`` steps
    ahead recomputes). Returns ``{s: (prox_logp, behav_logp, loss_mask)}``. ``model`` is left with
    the weights of the last checkpoint it loaded.
    """
    from labkit.training.forward import completion_logprobs

    missing = [base + s for s in staleness if base + s not in checkpoints]
    if missing or base not in checkpoints:
        raise ValueError(f"checkpoints has steps {sorted(checkpoints)}; base={base} with staleness "
                         f"{list(staleness)} needs steps {sorted({base, *missing})}")
    if any(s < 0 for s in staleness):
        raise ValueError(f"staleness must be >= 0 (steps the trainer is ahead), got "
                         f"{list(staleness)}")
    out = {}
    with torch.no_grad():
        for s in staleness:
            model.load_state_dict(checkpoints[base + s])
            prox = completion_logprobs(model, batch, temperature=temperature,
                                       share_prompts=False)
            out[s] = (prox.detach(), batch.sample_logp, batch.loss_mask)
    return out


def staleness_table(logprobs: Mapping[int, tuple], correction: str = "decoupled",
                    cap: float | None = 5.0, floor: float | None = None, epsilon: float = 0.2,
                    epsilon_high: float | None = None) -> pd.DataFrame:
    """One row per staleness of ``logprobs`` (:func:`stale_logprobs`): the columns the trainer
    logs for a stale batch (:func:`labkit.offpolicy.offpolicy_metrics`, without the
    ``offpolicy_`` prefix): the ratio's mean and quantiles, ``kl`` (nats per token), ``clip_frac``
    (share of tokens outside PPO's band) and ``corrected_frac`` (share the correction bounds)."""
    rows = {}
    for s, (prox, behav, mask) in sorted(logprobs.items()):
        terms = offpolicy_terms(prox, behav, mask, correction, cap, floor, epsilon, epsilon_high)
        metrics = offpolicy_metrics(terms, prox, behav, mask)
        rows[s] = {k.removeprefix("offpolicy_"): v for k, v in metrics.items()}
    table = pd.DataFrame(rows).T
    table.index.name = "staleness"
    return table


def plot_offpolicy_ratio(prox_logp: torch.Tensor, behav_logp: torch.Tensor, mask: torch.Tensor,
                         correction: str = "decoupled", cap: float | None = 5.0,
                         floor: float | None = None, epsilon: float = 0.2,
                         epsilon_high: float | None = None, title: str | None = None,
                         axes=None) -> Figure:
    r"""The behaviour ratio of one batch's tokens, PPO's clip band and the correction's bounds.

    Left: a histogram of the per-token ratio :math:`\pi_{prox}/\pi_{behav}` over the loss tokens
    (log-spaced bins; share of tokens per bin), the band
    :math:`[1-\epsilon, 1+\epsilon_{high}]` shaded (a clip anchored on the behaviour policy, the
    ``coupled`` choice, silences every token outside it at the first update), and the cap and
    floor of ``correction`` as vertical lines. Right: the share of tokens the clip region holds
    and the share the correction truncates or masks (:func:`labkit.offpolicy.offpolicy_terms`).
    Returns a :class:`matplotlib.figure.Figure`; ``axes=`` takes two axes of your own.
    """
    terms = offpolicy_terms(prox_logp, behav_logp, mask, correction, cap, floor, epsilon,
                            epsilon_high)
    m = mask.bool()
    ratio = terms.ratio[m].double().clamp(min=1e-6).numpy()
    if ratio.size == 0:
        raise ValueError("mask selects no token: nothing to draw")
    fig, (hist, bars) = make_panels(axes, 2, width=4.2, height=3.0)
    high = upper_clip(epsilon, epsilon_high)
    spread = max(np.abs(np.log(ratio)).max(), np.log(1 + high) * 1.5, 0.05)
    edges = np.exp(np.linspace(-spread, spread, 41))
    weights = np.full(ratio.size, 1.0 / ratio.size)
    hist.hist(np.clip(ratio, edges[0], edges[-1]), bins=edges, weights=weights, color="C0",
              label=f"{ratio.size} tokens")
    hist.axvspan(1 - epsilon, 1 + high, label=f"clip band [{1 - epsilon:g}, {1 + high:g}]",
                 **ZERO_SHADE)
    bounds = {"cap": cap, "floor": None if correction == "decoupled" else floor}
    for name, value in bounds.items():
        if correction in ("tis", "icepop", "decoupled") and value is not None:
            hist.axvline(value, color="C3", ls="--", lw=1.2, label=f"{correction} {name} {value:g}")
    hist.set_xscale("log")
    hist.set(xlabel=BEHAVIOUR_RATIO_LABEL, ylabel="share of tokens", title=title)
    legend_beside(hist) if axes is not None else hist.legend(fontsize=SMALL, loc="upper left")
    shares = {"outside the\nclip band": float(terms.clip_region[m].float().mean()),
              f"bounded by\n{correction}": float(terms.corrected[m].float().mean())}
    bars.bar(list(shares), list(shares.values()), color=["0.55", "C3"], width=0.6)
    for x, value in enumerate(shares.values()):
        bars.annotate(f"{value:.1%}", (x, value), xytext=(0, 2), textcoords="offset points",
                      ha="center", fontsize=SMALL)
    bars.set(ylabel="share of tokens", ylim=(0, max(0.05, *shares.values()) * 1.25),
             title=f"mean ratio {terms.ratio[m].mean():.3f}")
    return fig


def plot_staleness_schedule(versions: Mapping[str, Sequence[int]], axes=None) -> Figure:
    """Which policy version sampled the batch each training step consumes, one line per run.

    ``versions`` maps a run's name to the version of each step's batch, in step order (0 = the
    initial weights; a run's history has it as ``step - 1 - staleness``). The diagonal is the
    synchronous trainer: every batch sampled by the weights that train on it.
    """
    fig, (ax,) = make_panels(axes, 1, width=5.2, height=3.0)
    longest = 0
    for k, (name, stamps) in enumerate(versions.items()):
        stamps = np.asarray(list(stamps))
        steps = np.arange(len(stamps))
        longest = max(longest, len(stamps))
        ax.step(steps, stamps, where="mid", color=f"C{k}", label=name, lw=1.6)
    ax.plot([0, max(longest - 1, 1)], [0, max(longest - 1, 1)], color="0.6", ls=":", lw=1,
            label="synchronous")
    ax.set(xlabel="training step (weights after that many updates)",
           ylabel="version that sampled its batch")
    legend_beside(ax)
    return fig


def plot_admission(groups: Mapping[str, pd.DataFrame], bins: int = 6, axes=None) -> Figure:
    """Which groups an admission rule keeps, by length: one bar series per rule.

    ``groups`` maps a rule's name to its per-group table (``simulate_admission(...).groups`` or a
    trainer's ``admission_log``: ``length`` and ``kept`` columns; pending groups are left out).
    The lengths (a group's longest completion, tokens) are cut into ``bins`` bins of equal count
    over all rules' groups, so every rule is read on the same bins; each bar is the share of that
    bin's groups the rule trained. A rule that keeps everything draws bars of height 1.
    """
    if not groups:
        raise ValueError("groups is empty: pass {rule name: per-group table}")
    done = {}
    for name, table in groups.items():
        missing = {"length", "kept"} - set(table.columns)
        if missing:
            raise ValueError(f"groups[{name!r}] has no {sorted(missing)} column(s)")
        done[name] = table[table["outcome"] != "pending"] if "outcome" in table else table
    lengths = pd.concat([t["length"] for t in done.values()])
    edges = np.unique(np.quantile(lengths, np.linspace(0, 1, bins + 1)))
    labels = [f"{lo:.0f}-{hi:.0f}" for lo, hi in pairwise(edges)]
    fig, (ax,) = make_panels(axes, 1, width=6.4, height=3.0)
    shares = {name: t.groupby(pd.cut(t["length"], edges, labels=labels, include_lowest=True),
                              observed=False)["kept"].mean().to_numpy(dtype=float)
              for name, t in done.items()}
    grouped_bars(ax, shares)
    ax.set_xticks(np.arange(len(labels)), labels)
    ax.set(xlabel="group's longest completion (tokens), bins of equal count",
           ylabel="share of groups trained", ylim=(0, 1.1))
    legend_beside(ax)
    return fig


__all__ = ["BEHAVIOUR_RATIO_LABEL", "plot_admission", "plot_offpolicy_ratio",
           "plot_staleness_schedule", "stale_logprobs", "staleness_table"]
