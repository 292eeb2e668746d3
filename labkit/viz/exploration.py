"""Notebook 07 (exploration and stability): temperature, schedules, every surrogate's gradient weight, forking tokens."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

from labkit.losses import (
    clipped_surrogate,
    no_clip_surrogate,
)
from labkit.viz.style import (
    DTYPE,
    RATIO_LABEL,
    SMALL,
    as_tensor,
    grouped_bars,
    legend_above,
    legend_beside,
    make_panels,
)


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
    fig, panels = make_panels(axes, positions + 1, ncols=2, width=4.6, height=2.6)
    for p, ax in enumerate(panels[:-1]):
        columns, ids = {}, None
        for t in temperatures:
            ids, probs, entropy = temperature_tokens(logits[p:p + 1], t, top_k)
            columns[f"T = {t:g}: H = {float(entropy[0]):.2f} nats"] = probs[0].double().numpy()
        grouped_bars(ax, columns)
        ax.set_xticks(range(len(ids[0])), [repr(label(int(i)))[1:-1] for i in ids[0]],
                      rotation=45, ha="right", fontsize=SMALL)
        where = f"position {p + 1}" + (f": after …{contexts[p][-20:]!r}" if contexts else "")
        ax.set(title=where, ylabel="probability", xlabel="next token (likeliest first)")
        ax.legend(fontsize=SMALL, loc="upper right")
    ax = panels[-1]
    grid = torch.linspace(0.1, 2.0, 40, dtype=DTYPE)
    for p in range(positions):
        curve = [float(temperature_tokens(logits[p:p + 1], float(t), 1)[2][0]) for t in grid]
        ax.plot(grid.numpy(), curve, color=f"C{p + 4}", label=f"position {p + 1}")
    for t in temperatures:
        ax.axvline(t, color="0.5", ls=":", lw=1)
    ax.set(title="entropy of the whole distribution", xlabel="sampling temperature T",
           ylabel="entropy H (nats)")
    ax.legend(fontsize=SMALL, loc="upper left")
    return fig


def plot_temperature_schedules(total_steps: int = 200, start: float = 1.2, final: float = 0.8,
                               schedules: Sequence[str] = ("constant", "linear", "cosine"),
                               axes=None) -> Figure:
    """Sampling temperature over training for each ``temperature_schedule`` (Kimi K2's decay).

    Every value is :func:`labkit.tricks.temperature.temperature_at`, the function the trainer calls
    each step. One panel.
    """
    from labkit.tricks.temperature import temperature_at

    if total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")
    fig, (ax,) = make_panels(axes, 1, width=4.6, height=2.6)
    steps = np.arange(total_steps)
    for k, schedule in enumerate(schedules):
        ax.plot(steps, [temperature_at(int(s), total_steps, start, final, schedule)
                        for s in steps], color=f"C{k}", label=schedule)
    ax.set(title=f"temperature schedules, {start:g} → {final:g}", xlabel="training step",
           ylabel="sampling temperature T")
    legend_beside(ax)
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
    r = as_tensor(ratio, "ratio")
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
    ratio = torch.linspace(0.02, ratio_max, 400, dtype=DTYPE)
    fig, panels = make_panels(axes, 3, width=3.05, height=2.7)
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
    p = torch.linspace(0, 1, 201, dtype=DTYPE)
    for k, g in enumerate(sorted({0.0, float(gamma), 2.0})):
        ax.plot(p.numpy(), focal_weight(p.clamp(min=1e-12).log(), g).numpy(), color=f"C{k + 5}",
                lw=2 if g == gamma else 1, label=rf"$\gamma$ = {g:g}")
    ax.set(title=r"RL-PLUS focal weight $(1-p)^\gamma$",
           xlabel="token probability p under the policy", ylabel="weight C")
    ax.legend(fontsize=SMALL, loc="lower left")
    legend_above(fig, panels, list(handles.values()), list(handles))
    return fig


def fork_logits(question: str = "347+285=?", seed: int = 0, model=None, tokenizer=None,
                num_samples: int = 8) -> dict:
    """A model's next-token logits at three places of one of its own worked answers.

    Samples ``num_samples`` answers to ``question`` at T = 1 (seeded, with
    :func:`labkit.sampling.generate`), takes the first one that works the problem out inside
    ``<think>``, and reads the logits right after ``<think>`` (work it out or answer at once: a
    fork), after the last ``=`` of the reasoning (a computed digit) and after ``<answer>``.
    ``model``/``tokenizer`` default to the tiny Qwen on the CPU.

    Returns:
        a dict: ``logits`` (3, V) float32, ``contexts`` (the completion text before each place),
        ``text`` (the whole completion) and ``decode`` (token id -> text), the arguments of
        :func:`plot_token_temperature`.
    """
    from labkit.models import load_policy
    from labkit.sampling import generate

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
