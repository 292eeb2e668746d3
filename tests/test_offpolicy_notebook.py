"""Notebook 11's helpers: the stale-batch figures (labkit.viz.offpolicy), the staleness widget's
static fallback, and the exercise checker's input maker (labkit.exercises.random_stale_batch)."""

import math

import pytest
import torch
from matplotlib.figure import Figure

from labkit import viz
from labkit.exercises import STALE_CORRECTIONS, check_function, random_stale_batch
from labkit.offpolicy import offpolicy_terms
from labkit.widgets.offpolicy import staleness_widget


def stale(shift: float, rows: int = 3, length: int = 5):
    """Behaviour log-probs ``shift`` nats below the proximal ones on every token but padding."""
    prox = torch.full((rows, length), -1.0)
    mask = torch.ones(rows, length, dtype=torch.bool)
    mask[1, 3:] = False
    return prox, prox - shift, mask


def test_staleness_table_reads_the_trainers_columns():
    logprobs = {0: stale(0.0), 3: stale(math.log(2.0))}
    table = viz.staleness_table(logprobs, "decoupled", cap=1.5)
    assert list(table.index) == [0, 3]
    assert table.loc[0, "ratio_mean"] == pytest.approx(1.0)
    assert table.loc[0, "clip_frac"] == 0 and table.loc[0, "corrected_frac"] == 0
    # every loss token's ratio is 2: outside [0.8, 1.2], and above the cap 1.5, so masked
    assert table.loc[3, "ratio_q50"] == pytest.approx(2.0)
    assert table.loc[3, "clip_frac"] == 1 and table.loc[3, "corrected_frac"] == 1


def test_ratio_figure_has_the_histogram_and_the_shares():
    fig = viz.plot_offpolicy_ratio(*stale(0.3), correction="tis", cap=2.0, floor=0.5)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    hist, bars = fig.axes
    assert hist.get_xscale() == "log" and "share of tokens" in hist.get_ylabel()
    heights = [p.get_height() for p in bars.patches]
    assert heights == pytest.approx([1.0, 0.0])  # all outside the band (ratio 1.35), none capped
    prox, behav, mask = stale(0.3)
    with pytest.raises(ValueError, match="mask selects no token"):
        viz.plot_offpolicy_ratio(prox, behav, torch.zeros_like(mask))


def test_admission_figure_shares_kept_per_length_bin():
    import pandas as pd

    kept_short = pd.DataFrame({"length": [10, 20, 30, 40], "kept": [True, True, False, False],
                               "outcome": ["trained", "trained", "discarded", "discarded"]})
    everything = kept_short.assign(kept=True, outcome="trained")
    fig = viz.plot_admission({"discard": kept_short, "slow down": everything}, bins=2)
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert heights == pytest.approx([1.0, 0.0, 1.0, 1.0])  # discard: short bin kept, long not
    with pytest.raises(ValueError, match=r"has no \['kept'\]"):
        viz.plot_admission({"x": kept_short.drop(columns="kept")})


def test_stale_logprobs_names_the_missing_checkpoints():
    with pytest.raises(ValueError, match=r"needs steps \[2, 6\]"):
        viz.stale_logprobs(torch.nn.Linear(1, 1), {2: {}, 3: {}}, batch=None, base=2,
                           staleness=(1, 4))


def test_staleness_widget_draws_the_static_figure(monkeypatch):
    monkeypatch.setenv("LABKIT_STATIC", "1")
    logprobs = {0: stale(0.0), 2: stale(0.5)}
    assert isinstance(staleness_widget(logprobs), Figure)
    with pytest.raises(ValueError, match=r"one of the cached values \[0, 2\], got 5"):
        staleness_widget(logprobs, staleness=5)


def behaviour_weights(prox_logp, behav_logp, mask, correction, cap, floor):
    return offpolicy_terms(prox_logp, behav_logp, mask, correction, cap, floor).weights


def truncating_always(prox_logp, behav_logp, mask, correction, cap, floor):
    """The likely wrong answer: truncate (TIS) whatever the correction asks."""
    ratio = torch.exp(prox_logp - behav_logp)
    return ratio.clamp(min=floor or 0.0, max=cap) * mask


def test_the_stale_batch_checker_accepts_the_reference_and_catches_truncation(capsys):
    keys = ("prox_logp", "behav_logp", "mask", "correction", "cap", "floor")
    def make(generator):
        return random_stale_batch(generator, keys=keys)

    drawn = {make(torch.Generator().manual_seed(s))["correction"] for s in range(10)}
    assert drawn == set(STALE_CORRECTIONS)  # ten trials meet every correction
    assert check_function(behaviour_weights, behaviour_weights, make, n_trials=10,
                          check_grad=False)
    assert not check_function(truncating_always, behaviour_weights, make, n_trials=10,
                              check_grad=False)
    assert "differ" in capsys.readouterr().out
