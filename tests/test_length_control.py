"""labkit.rewards.length: the checkable properties of each length method (Kimi k1.5 and K2, DLER,
LASER), with the papers' own examples where they give one."""

import pytest
import torch

from labkit.advantages import group_advantages
from labkit.rewards.length import (
    budget_control_reward,
    difficulty_truncation_lengths,
    kimi_length_reward,
    laser_adaptive_target,
    laser_difficulty_buckets,
    laser_reward,
    truncation_reward,
)

D = torch.float64


def t(*values, dtype=D):
    return torch.tensor(values, dtype=dtype)


# ---------------------------------------------------------------- Kimi k1.5 length reward


def test_kimi_length_reward_reference_example():
    out = kimi_length_reward(t(100, 200, 300), t(1, 1, 0), 3)
    assert torch.allclose(out, t(0.5, 0.0, -0.5))


def test_kimi_length_reward_ranges_and_equal_lengths():
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 500, (64,), generator=g)
    correct = torch.randint(0, 2, (64,), generator=g)
    out = kimi_length_reward(lengths, correct, 8)
    ok = correct.bool()
    assert (out[ok] >= -0.5).all() and (out[ok] <= 0.5).all()
    assert (out[~ok] >= -0.5).all() and (out[~ok] <= 0).all()
    # per group: the shortest correct answer gets +0.5, the longest -0.5
    for lens, c, r in zip(lengths.view(8, 8), ok.view(8, 8), out.view(8, 8)):
        if lens.max() > lens.min():
            assert r[lens.argmax()] == -0.5
            if c[lens.argmin()]:
                assert r[lens.argmin()] == 0.5
    # a group of equal lengths gets zero length reward
    assert kimi_length_reward(t(7, 7, 7, 9, 9, 9), t(1, 0, 1, 0, 0, 1), 3).tolist()[:3] == [0, 0, 0]


def test_kimi_length_reward_wrong_short_answer_gains_nothing():
    out = kimi_length_reward(t(10, 50, 90), t(0, 1, 1), 3)
    assert out.tolist() == [0.0, 0.0, -0.5]


def test_kimi_length_reward_validates():
    with pytest.raises(ValueError, match="divisible"):
        kimi_length_reward(t(1, 2, 3), t(1, 0, 1), 2)
    with pytest.raises(ValueError, match="lengths"):
        kimi_length_reward(t(1, -2, 3), t(1, 0, 1), 3)


# ---------------------------------------------------------------- K2 budget control


def test_budget_control_over_budget_is_penalised_regardless_of_correctness():
    rewards = t(1, 1, 0, 1, 0)
    lengths = torch.tensor([10, 30, 30, 20, 20])
    out = budget_control_reward(rewards, lengths, budget=20, penalty=-1.0)
    assert out.tolist() == [1.0, -1.0, -1.0, 1.0, 0.0]


def test_budget_control_per_task_budget_and_truncated_flags():
    rewards = t(1, 1, 1)
    lengths = torch.tensor([50, 50, 20])
    out = budget_control_reward(rewards, lengths, budget=torch.tensor([40, 60, 20]),
                                truncated=torch.tensor([False, False, True]))
    # over its budget; within; at the cap but cut by the sampler
    assert out.tolist() == [0.0, 1.0, 0.0]


def test_budget_control_validates():
    with pytest.raises(ValueError, match="budget"):
        budget_control_reward(t(1, 0), torch.tensor([1, 2]), budget=torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="lengths"):
        budget_control_reward(t(1, 0), torch.tensor([1, 2, 3]), budget=5)


# ---------------------------------------------------------------- LASER


def test_laser_reference_examples():
    rewards = t(1, 1, -0.5, -0.5)
    lengths = torch.tensor([3000, 5000, 3000, 5000])
    assert laser_reward(rewards, lengths, 4096, 0.5).tolist() == [1.5, 1.0, -0.5, -0.5]
    de = laser_reward(rewards, lengths, 4096, 0.5, variant="laser_de")
    assert de.tolist() == [1.5, 1.0, -0.5, 0.0]


def test_laser_never_punishes_and_uses_the_correct_flags():
    g = torch.Generator().manual_seed(1)
    rewards = torch.randint(0, 2, (50,), generator=g).to(D)
    lengths = torch.randint(1, 200, (50,), generator=g)
    out = laser_reward(rewards, lengths, 100, 0.5)
    assert (out >= rewards).all()
    assert torch.equal(out - rewards, 0.5 * ((rewards == 1) & (lengths <= 100)).to(D))
    # an explicit correct mask overrides rewards == 1; per-completion targets
    out = laser_reward(t(0.8, 0.8), torch.tensor([5, 5]), torch.tensor([4, 6]),
                       correct=torch.tensor([True, True]))
    assert torch.allclose(out, t(0.8, 1.3))


def test_laser_validates():
    with pytest.raises(ValueError, match="variant"):
        laser_reward(t(1), torch.tensor([1]), 4, variant="laser_d")
    with pytest.raises(ValueError, match="alpha"):
        laser_reward(t(1), torch.tensor([1]), 4, alpha=-1)


def test_laser_d_buckets_at_k8():
    c = torch.arange(9)
    assert laser_difficulty_buckets(c, 8).tolist() == [2, 2, 2, 1, 1, 1, 0, 0, 0]
    with pytest.raises(ValueError, match=r"\[0, k=8\]"):
        laser_difficulty_buckets(torch.tensor([9]), 8)


def test_laser_adaptive_target_ecr():
    # 40% of the medium bucket fits in 2048 tokens: ECR = 0.4 * 3 = 1.2 >= 1
    lengths = torch.tensor([1000, 1500, 3000, 5000, 9000])
    assert laser_adaptive_target(lengths, 3, lower=2048, upper=16384, interval=1024) == 2048
    # hard bucket |C| = 1 needs every response covered: the first candidate >= 9000
    assert laser_adaptive_target(lengths, 1, 2048, 16384, 1024) == 9216
    # nothing reaches ECR >= 1 below the window, or an empty bucket: the context window
    assert laser_adaptive_target(torch.tensor([20000]), 1, 2048, 16384, 1024) == 16384
    assert laser_adaptive_target(torch.tensor([], dtype=torch.long), 3, 2048, 16384, 1024) == 16384


# ---------------------------------------------------------------- DLER


def test_truncation_reward_zero_beyond_the_limit():
    out = truncation_reward(t(1, 1, 0, 1), torch.tensor([10, 40, 50, 41]), 40)
    assert out.tolist() == [1.0, 1.0, 0.0, 0.0]


def test_da_dler_lengths_and_the_tie():
    ratio = t(0.0, 0.25, 0.5, 0.75, 1.0)
    assert difficulty_truncation_lengths(ratio).tolist() == [4000, 4000, 2000, 2000, 2000]
    # per-prompt limits expand to completions and feed the truncation reward
    lim = difficulty_truncation_lengths(t(1.0, 0.0), 0.5, 20, 40).repeat_interleave(2)
    out = truncation_reward(t(1, 1, 1, 1), torch.tensor([15, 30, 15, 30]), lim)
    assert out.tolist() == [1.0, 0.0, 1.0, 1.0]
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        difficulty_truncation_lengths(t(1.5))


def test_shaped_rewards_feed_group_advantages():
    # every function returns (N,) rewards that the GRPO advantage takes unchanged
    rewards = t(1, 1, 0, 1)
    lengths = torch.tensor([10, 60, 20, 30])
    for shaped in (
        rewards + 0.2 * kimi_length_reward(lengths, rewards, 4),
        budget_control_reward(rewards, lengths, 40),
        laser_reward(rewards, lengths, 25),
        truncation_reward(rewards, lengths, 40),
    ):
        adv = group_advantages(shaped, 4)
        assert adv.shape == (4,) and abs(float(adv.sum())) < 1e-9
