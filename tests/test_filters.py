"""labkit.tricks.filters: DAPO dynamic sampling (arXiv 2503.14476) and GFPO (arXiv 2508.09726)."""

import pytest
import torch

from labkit.advantages import group_advantages
from labkit.tricks.filters import (
    adaptive_num_remains,
    difficulty_quartiles,
    dynamic_sampling_mask,
    gfpo_advantages,
    gfpo_filter,
)

D = torch.float64


def t(*values):
    return torch.tensor(values, dtype=D)


# ---------------------------------------------------------------- DAPO dynamic sampling


def test_dynamic_sampling_drops_all_correct_and_all_wrong_groups():
    acc = t(1, 1, 0, 0, 0, 0, 1, 0, 1, 1, 1, 1)
    keep = dynamic_sampling_mask(acc, 3)
    assert keep.tolist() == [True, False, True, False]
    # every kept group has a non-zero advantage somewhere, every dropped one is all zero
    adv = group_advantages(acc, 3).view(4, 3)
    assert (adv.abs().sum(-1) > 0).tolist() == keep.tolist()


def test_dynamic_sampling_edge_cases():
    assert dynamic_sampling_mask(t(0.3, 0.3, 1.0), 1).all()  # G = 1 keeps everything (verl)
    nan = float("nan")
    assert dynamic_sampling_mask(t(1, nan, 1, 0, nan, nan), 3).tolist() == [False, False]
    assert dynamic_sampling_mask(t(1, nan, 0), 3).tolist() == [True]
    with pytest.raises(ValueError, match="not divisible"):
        dynamic_sampling_mask(t(1, 0, 1), 2)


# ---------------------------------------------------------------- GFPO filter


def test_shortest_k_keeps_exactly_the_k_smallest_lengths():
    g = torch.Generator().manual_seed(0)
    lengths = torch.randperm(8, generator=g).repeat(3) * 10 + torch.arange(24)
    rewards = torch.rand(24, dtype=D, generator=g)
    keep = gfpo_filter(rewards, lengths, 8, 3, "length").view(3, 8)
    assert keep.sum(-1).tolist() == [3, 3, 3]
    for group, kept in zip(lengths.view(3, 8), keep):
        assert set(group[kept].tolist()) == set(group.sort().values[:3].tolist())


def test_token_efficiency_keeps_the_highest_reward_per_token():
    rewards = t(1, 1, 0, -1, 1, 0)
    lengths = torch.tensor([10, 40, 5, 100, 20, 1])
    keep = gfpo_filter(rewards, lengths, 6, 3, "token_efficiency")
    # efficiencies 0.1, 0.025, 0, -0.01, 0.05, 0: top 3 are rows 0, 4, 1
    assert keep.tolist() == [True, True, False, False, True, False]


def test_ties_are_broken_by_position_and_per_prompt_k():
    lengths = torch.tensor([5, 5, 5, 5, 7, 3, 3, 9])
    keep = gfpo_filter(t(0, 0, 0, 0, 0, 0, 0, 0), lengths, 4, torch.tensor([2, 3]))
    assert keep.tolist() == [True, True, False, False, True, True, True, False]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_remains_in_group": 0}, r"\[1, G=4\]"),
        ({"num_remains_in_group": 5}, r"\[1, G=4\]"),
        ({"num_remains_in_group": torch.tensor([2, 2, 2])}, r"shape \(P,\)"),
        ({"metric": "reward"}, "metric"),
        ({"lengths": torch.tensor([1, 2, 3, -4, 5, 6, 7, 8])}, "lengths"),
        ({"lengths": torch.tensor([1, 2, 3, 4])}, "lengths"),
    ],
)
def test_gfpo_filter_bad_arguments(kwargs, match):
    args = {
        "rewards": t(1, 0, 1, 0, 1, 1, 0, 0),
        "lengths": torch.arange(1, 9),
        "num_generations": 4,
        "num_remains_in_group": 2,
    } | kwargs
    with pytest.raises(ValueError, match=match):
        gfpo_filter(**args)


# ---------------------------------------------------------------- GFPO advantages


@pytest.fixture
def sampled():
    g = torch.Generator().manual_seed(1)
    rewards = torch.rand(4 * 8, dtype=D, generator=g)
    lengths = torch.randint(5, 500, (32,), generator=g)
    return rewards, lengths


def test_gfpo_rejected_get_zero_and_kept_are_standardised_with_population_std(sampled):
    rewards, lengths = sampled
    keep = gfpo_filter(rewards, lengths, 8, 3)
    adv = gfpo_advantages(rewards, keep, 8, eps=0.0)
    assert adv[~keep].eq(0).all()
    kept = adv.view(4, 8)[keep.view(4, 8)].view(4, 3)
    torch.testing.assert_close(kept.sum(-1), torch.zeros(4, dtype=D), rtol=0, atol=1e-12)
    torch.testing.assert_close((kept**2).sum(-1), torch.full((4,), 3.0, dtype=D))  # sum A^2 = k


def test_gfpo_statistics_ignore_rejected_rewards(sampled):
    rewards, lengths = sampled
    keep = gfpo_filter(rewards, lengths, 8, 4)
    changed = torch.where(keep, rewards, rewards + 100.0)
    torch.testing.assert_close(gfpo_advantages(changed, keep, 8), gfpo_advantages(rewards, keep, 8))


def test_gfpo_with_k_equal_g_is_grpo(sampled):
    rewards, _ = sampled
    everything = torch.ones(32, dtype=torch.bool)
    torch.testing.assert_close(
        gfpo_advantages(rewards, everything, 8), group_advantages(rewards, 8, unbiased=False)
    )
    torch.testing.assert_close(
        gfpo_advantages(rewards, everything, 8, unbiased=True), group_advantages(rewards, 8)
    )


def test_gfpo_equal_kept_rewards_give_no_signal():
    rewards = t(1, 1, 0, 0)  # the two shortest are both correct
    keep = gfpo_filter(rewards, torch.tensor([10, 20, 30, 40]), 4, 2)
    assert gfpo_advantages(rewards, keep, 4).eq(0).all()
    with pytest.raises(ValueError, match="keep_mask"):
        gfpo_advantages(rewards, keep.float(), 4)


# ---------------------------------------------------------------- adaptive difficulty


def test_adaptive_k_by_quartile_bucket_and_before_ready():
    quartiles = t(0.25, 0.5, 0.75)
    means = t(0.1, 0.3, 0.6, 0.9, 0.25, 0.75)
    assert adaptive_num_remains(means, quartiles).tolist() == [8, 8, 6, 4, 8, 4]
    assert adaptive_num_remains(means, None).tolist() == [8] * 6
    assert adaptive_num_remains(t(0.0, 1.0), None, (6, 5, 4, 3)).tolist() == [6, 6]
    with pytest.raises(ValueError, match="k_values"):
        adaptive_num_remains(means, quartiles, (8, 6, 4))


def test_difficulty_quartiles_are_exact_and_none_until_enough_history():
    history = torch.arange(101, dtype=D) / 100
    torch.testing.assert_close(difficulty_quartiles(history), t(0.25, 0.5, 0.75))
    assert difficulty_quartiles(history[:3], min_count=4) is None
    assert difficulty_quartiles(torch.zeros(0)) is None


def test_adaptive_k_feeds_the_filter():
    rewards = t(1, 1, 1, 1, 0, 0, 0, 1)
    means = rewards.view(2, 4).mean(-1)
    k = adaptive_num_remains(means, t(0.3, 0.5, 0.9), k_values=(3, 3, 2, 2))
    keep = gfpo_filter(rewards, torch.arange(8), 4, k)
    assert keep.view(2, 4).sum(-1).tolist() == [2, 3]  # easy prompt keeps 2, hard prompt keeps 3
