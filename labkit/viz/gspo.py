"""Notebook 05 (GSPO): the spread of token and sequence ratios against response length."""

from __future__ import annotations

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
