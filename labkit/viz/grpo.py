"""Notebooks 02-03 (GRPO and its baselines): a group's advantages by every estimator, the KL estimators."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

from labkit.advantages import (
    batch_normalize,
    group_advantages,
    opo_advantages,
    remax_advantages,
    rloo_advantages,
)
from labkit.losses import (
    kl_estimate,
)
from labkit.viz.style import DTYPE, SMALL, as_tensor, grouped_bars, legend_beside, make_panels


def group_advantages_table(rewards=(1, 0, 0, 1, 0, 0, 0, 1), lengths=None, greedy_reward=None,
                           num_generations: int | None = None) -> pd.DataFrame:
    r"""Advantages of one batch of groups under each estimator of :mod:`labkit.advantages`.

    Columns: ``reward`` (and ``length``), then ``GRPO`` (group std), ``Dr. GRPO`` (no std),
    ``RLOO``, ``OPO`` (only with ``lengths``), ``ReMax`` (only with ``greedy_reward``: one float,
    or one per prompt) and ``batch-scaled`` (group mean, one std for the whole batch:
    ``batch_normalize`` of Dr. GRPO's advantages). ``num_generations`` defaults to one group.
    """
    r = as_tensor(rewards, "rewards")
    g = r.numel() if num_generations is None else num_generations
    table = {"reward": r.numpy()}
    if lengths is not None:
        table["length"] = as_tensor(lengths, "lengths").numpy()
    table["GRPO"] = group_advantages(r, g).numpy()
    table["Dr. GRPO"] = group_advantages(r, g, "none").numpy()
    table["RLOO"] = rloo_advantages(r, g).numpy()
    if lengths is not None:
        table["OPO"] = opo_advantages(r, as_tensor(lengths, "lengths"), g).numpy()
    if greedy_reward is not None:
        greedy = as_tensor(greedy_reward, "greedy_reward")
        if greedy.numel() == 1:
            greedy = greedy.repeat(r.numel() // g)
        table["ReMax"] = remax_advantages(r, greedy, g).numpy()
    table["batch-scaled"] = batch_normalize(group_advantages(r, g, "none")).numpy()
    return pd.DataFrame(table)


def group_push_table(rewards, num_generations: int, lengths=None, *, share: bool = False,
                     eps: float = 1e-4) -> pd.DataFrame:
    r"""How hard each estimator pushes each group of a batch: one row per group (prompt).

    Columns: ``reward`` (the group's mean), ``std`` (its std with Bessel's correction, the one
    GRPO divides by), then per estimator the group's total push
    :math:`\sum_{i\in g}|\hat A_i|`: ``GRPO`` (``group_advantages``, ``scale_rewards="group"``),
    ``Dr. GRPO`` (``scale_rewards="none"``), ``RLOO`` and, with ``lengths``, ``OPO``. The
    advantages are :mod:`labkit.advantages`' own; ``eps`` is GRPO's. With ``share=True`` each
    estimator's column is divided by its sum over the batch: the share of the batch's push that
    each group gets, the part of the update a constant factor (which Adam's normalisation
    cancels) leaves unchanged.

    What to see: Dr. GRPO's and RLOO's push grows with the spread of the rewards inside the group
    (RLOO's is Dr. GRPO's times G/(G-1), so their shares are equal); GRPO's is about the same for
    every group that has any spread (for G = 8, from 4.9 for one answer apart from seven equal
    ones to 7.5 for an even split), since it divides the spread out: a
    near-tie group, whose rewards differ by a few hundredths, gets as big a push as a group split
    between right and wrong. With 0/1 rewards that means groups solved rarely or almost always
    gain weight against a group solved half the time; with partial credit, it means near-ties.
    """
    r = as_tensor(rewards, "rewards")
    g = int(num_generations)
    if g < 2 or r.numel() % g:
        raise ValueError(f"num_generations must be >= 2 and divide the {r.numel()} rewards, "
                         f"got {num_generations!r}")
    groups = r.view(-1, g)
    estimators = {"GRPO": group_advantages(r, g, "group", eps),
                  "Dr. GRPO": group_advantages(r, g, "none"),
                  "RLOO": rloo_advantages(r, g)}
    if lengths is not None:
        estimators["OPO"] = opo_advantages(r, as_tensor(lengths, "lengths"), g)
    table = pd.DataFrame({"reward": groups.mean(-1).numpy(), "std": groups.std(-1).numpy()})
    for name, adv in estimators.items():
        push = adv.abs().view(-1, g).sum(-1)
        total = push.sum()
        table[name] = (push / total if share and total > 0 else
                       torch.zeros_like(push) if share else push).numpy()
    return table


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
    fig, (left, right) = make_panels(axes, 2, width=4.6)
    left.bar(i, table["reward"], 0.6, color="C2")
    if "length" in table:
        for x, (rew, length) in enumerate(zip(table["reward"], table["length"])):
            left.annotate(f"{length:g}", (x, rew), ha="center", va="bottom", fontsize=SMALL)
    left.margins(y=0.1)  # headroom for the length labels
    left.set(title="rewards" + (" (labels: length in tokens)" if "length" in table else ""),
             xlabel="completion i", ylabel="reward $r_i$", xticks=i)
    grouped_bars(right, {k: table[k].to_numpy() for k in table if k not in ("reward", "length")})
    right.set(title="advantages by estimator", xlabel="completion i",
              ylabel=r"advantage $\hat A_i$", xticks=i)
    legend_beside(right)
    return fig


# --------------------------------------------------------------------------------------------
# 4. KL estimators
# --------------------------------------------------------------------------------------------


def plot_kl_estimators(log_ratio_max: float = 2.0, shift: float = 1.0, n_samples: int = 20000,
                       vocab_size: int = 8, seed: int = 0, axes=None) -> Figure:
    r"""Schulman's k1, k2, k3 (:func:`labkit.losses.kl_estimate`): curves, gradients, bias, spread.

    Top: each estimator's value and its gradient w.r.t. :math:`\log\pi(y)` (autograd, as when the
    KL is in the loss) against :math:`d = \log(\pi_{ref}(y)/\pi(y))`. Bottom: a categorical
    :math:`\pi` over ``vocab_size`` tokens and a nearby :math:`\pi_{ref}` (logits moved by ``shift``
    times Gaussian noise, seeded), ``n_samples`` tokens drawn from :math:`\pi`: the bias of the
    sample mean and the per-sample standard deviation, relative to the true
    :math:`\mathrm{KL}(\pi\|\pi_{ref})`. Bars are the exact values (expectations over the
    vocabulary), so an unbiased estimator has no bias bar; dots are what the ``n_samples`` drawn
    tokens give (the bias dot with +-2 standard errors).

    What to see: k1 goes negative and has the largest spread; k2 is always >= 0 but biased; k3 is
    >= 0, unbiased and low-variance, which is why GRPO uses it. As a loss, k1's gradient is a
    constant (zero in expectation: no regularisation).

    Returns:
        the figure (4 panels).
    """
    kinds = ("k1", "k2", "k3")
    d = torch.linspace(-log_ratio_max, log_ratio_max, 400, dtype=DTYPE)
    fig, (vals, grads, bias_ax, std_ax) = make_panels(axes, 4, ncols=2)
    for k, kind in enumerate(kinds):
        logp = torch.zeros_like(d, requires_grad=True)
        est = kl_estimate(logp, d, kind)
        (grad,) = torch.autograd.grad(est.sum(), logp)
        vals.plot(d.numpy(), est.detach().numpy(), color=f"C{k}", label=kind)
        grads.plot(d.numpy(), grad.numpy(), color=f"C{k}", label=kind)
    for ax, what in ((vals, "estimate $k$"), (grads, r"gradient $dk/d\log\pi(y)$")):
        ax.axhline(0, color="0.3", lw=0.8)
        ax.set(xlabel=r"log-ratio $d = \log(\pi_{ref}(y)/\pi(y))$", ylabel=what)
        ax.legend(fontsize=SMALL)
    vals.set_title("per-token KL estimators")
    grads.set_title("their gradients in the loss (autograd)")

    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(vocab_size, generator=gen, dtype=DTYPE)
    logp_all = torch.log_softmax(logits, -1)
    ref_all = torch.log_softmax(logits + shift * torch.randn(vocab_size, generator=gen,
                                                             dtype=DTYPE), -1)
    true_kl = float((logp_all.exp() * (logp_all - ref_all)).sum())
    tokens = torch.multinomial(logp_all.exp(), n_samples, replacement=True, generator=gen)
    x = np.arange(len(kinds))
    for k, kind in enumerate(kinds):
        sampled = kl_estimate(logp_all[tokens], ref_all[tokens], kind)
        per_token = kl_estimate(logp_all, ref_all, kind)
        exact_mean = float((logp_all.exp() * per_token).sum())
        exact_std = float((logp_all.exp() * (per_token - exact_mean) ** 2).sum().sqrt())
        std = float(sampled.std())
        # The bar is the estimator's true bias (its expectation over the vocabulary), so an
        # unbiased estimator has no bar; the dot is what one batch of n_samples tokens gives.
        bias_ax.bar(k, (exact_mean - true_kl) / true_kl, 0.6, color=f"C{k}", alpha=0.6,
                    label="exact" if k == 0 else None)
        bias_ax.errorbar(k, (float(sampled.mean()) - true_kl) / true_kl,
                         yerr=2 * std / n_samples**0.5 / true_kl, fmt="ko", capsize=4,
                         label=f"{n_samples} samples, ±2 s.e." if k == 0 else None)
        std_ax.bar(k, exact_std / true_kl, 0.6, color=f"C{k}", alpha=0.6,
                   label="exact" if k == 0 else None)
        std_ax.plot(k, std / true_kl, "ko", label=f"{n_samples} samples" if k == 0 else None)
    bias_ax.axhline(0, color="0.3", lw=0.8)
    bias_ax.set(title=f"bias / KL (KL = {true_kl:.3f})",
                ylabel="(mean - KL) / KL", xticks=x, xticklabels=kinds, xlabel="estimator")
    std_ax.set(title="spread / KL", ylabel="per-sample std / KL", xticks=x, xticklabels=kinds,
               xlabel="estimator")
    for ax in (bias_ax, std_ax):
        ax.legend(fontsize=SMALL)
    return fig
