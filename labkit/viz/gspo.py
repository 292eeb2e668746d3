"""Notebook 05 (GSPO): the spread of token and sequence ratios against response length."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

from labkit.losses import (
    sequence_log_ratio,
    token_log_ratio,
)
from labkit.viz.style import DTYPE, LENGTH_LABEL, RATIO_LABEL, SMALL, make_panels


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
    old_logp = -3 * torch.rand(mask.shape, generator=gen, dtype=DTYPE)
    logp = old_logp + noise_std * torch.randn(mask.shape, generator=gen, dtype=DTYPE)
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
    fig, (spread, hist) = make_panels(axes, 2, width=4.5)
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
        ax.legend(fontsize=SMALL)
    return fig


#: Response-length bins of :func:`measured_ratio_spread` (lower edges; the last bin is open).
LENGTH_BINS = (1, 8, 16, 32)


def measured_ratio_spread(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor,
                          bins=LENGTH_BINS, band=(3e-4, 4e-4)) -> pd.DataFrame:
    r"""Token and sequence log-ratio spreads of *real* responses, one row per length bin.

    ``logp`` and ``old_logp`` are (B, T) log-probabilities of the same sampled tokens under the
    policy being trained and the one that sampled them; ``mask`` marks the valid tokens. The
    textbook law behind GSPO's narrow clip (the :math:`1/|o_i|` exponent of arXiv 2507.18071,
    eq. 7; :func:`ratio_spread` simulates it) assumes the token log-ratios :math:`\log r_{i,t}` are independent with spread
    :math:`\sigma`, so the sequence log-ratio :math:`\log s_i = \frac1{|o_i|}\sum_t\log r_{i,t}`
    spreads by :math:`\sigma/\sqrt{|o_i|}`. Real log-ratios need not be independent: a policy
    update moves the tokens of one response together. The table measures which holds.

    ================= =================================================================
    column            meaning
    ================= =================================================================
    lengths           the bin, e.g. ``16-31`` tokens
    responses         responses in the bin
    token_std         std of :math:`\log r_{i,t}` over the bin's tokens (:math:`\sigma`)
    sequence_std      std of :math:`\log s_i` over the bin's responses
    if_independent    what the law predicts: :math:`\sigma\sqrt{\mathrm{mean}_i(1/|o_i|)}`
    measured/law      ``sequence_std / if_independent``: 1 = the law holds; above 1 =
                      the tokens of a response move together; below 1 = the responses
                      differ in how much their tokens move (a pooled :math:`\sigma`
                      overstates the quiet ones)
    outside_token     share of the bin's tokens whose own ratio :math:`r_{i,t}` lies outside
                      GSPO's band :math:`[1-\varepsilon_{low}, 1+\varepsilon_{high}]`
                      (``band``): what a token-level clip could act on
    outside_sequence  share of the bin's tokens whose response's :math:`s_i` lies outside
                      the band: what GSPO's clip could act on (all of a response's tokens)
    ================= =================================================================

    Which side of the band clips depends on the sign of the advantage, so a loss's clipped
    share (``clip_region``) is at most these. Bins with fewer than 2 responses are left out.
    """
    mask = mask.bool()
    if logp.shape != old_logp.shape or logp.shape != mask.shape:
        raise ValueError(f"logp, old_logp and mask must share one (B, T) shape, got "
                         f"{tuple(logp.shape)}, {tuple(old_logp.shape)}, {tuple(mask.shape)}")
    low, high = band
    token = token_log_ratio(logp, old_logp, mask).double()
    sequence = sequence_log_ratio(logp, old_logp, mask).double()
    lengths = mask.sum(-1)

    def outside(log_ratio):
        return (log_ratio.exp() < 1 - low) | (log_ratio.exp() > 1 + high)

    edges = [*bins, int(lengths.max()) + 1]
    rows = []
    for lo, hi in itertools.pairwise(edges):
        rows_in = (lengths >= lo) & (lengths < hi)
        if int(rows_in.sum()) < 2:
            continue
        tokens = token[rows_in][mask[rows_in]]
        sigma = float(tokens.std())
        law = sigma * float((1.0 / lengths[rows_in].double()).mean().sqrt())
        seq = sequence[rows_in]
        rows.append({"lengths": f"{lo}-{hi - 1}", "responses": int(rows_in.sum()),
                     "token_std": sigma, "sequence_std": float(seq.std()),
                     "if_independent": law, "measured/law": float(seq.std()) / law,
                     "outside_token": float(outside(tokens).double().mean()),
                     "outside_sequence": float((outside(seq).double() * lengths[rows_in]).sum()
                                               / lengths[rows_in].sum())})
    return pd.DataFrame(rows)
