"""labkit.advantages and labkit.rewards.shaping: every "how to verify" property of the reference for the
advantage estimators (GRPO, Dr. GRPO, RLOO, ReMax, OPO, GDPO, DLER's batch scaling, GAE) and DAPO's
soft overlong punishment."""

import math

import pytest
import torch

from labkit.advantages import (
    batch_normalize,
    combine_rewards,
    explained_variance,
    gae,
    group_advantages,
    kl_penalized_rewards,
    kl_penalized_token_rewards,
    opo_advantages,
    outcome_to_token_rewards,
    remax_advantages,
    rloo_advantages,
)
from labkit.rewards.shaping import overlong_penalty

D = torch.float64


def t(*values):
    return torch.tensor(values, dtype=D)


@pytest.fixture
def rewards():
    g = torch.Generator().manual_seed(0)
    return torch.randn(4 * 6, dtype=D, generator=g)  # P = 4 prompts, G = 6


# ---------------------------------------------------------------- GRPO / Dr. GRPO / batch std


@pytest.mark.parametrize("scale", ["group", "batch", "none", True, False])
def test_group_advantages_sum_to_zero_per_group(rewards, scale):
    adv = group_advantages(rewards, 6, scale)
    torch.testing.assert_close(adv.view(4, 6).sum(-1), torch.zeros(4, dtype=D), rtol=0, atol=1e-12)


def test_bessel_std_gives_sum_of_squares_g_minus_1_and_population_gives_g(rewards):
    bessel = group_advantages(rewards, 6, eps=0.0)
    population = group_advantages(rewards, 6, eps=0.0, unbiased=False)
    torch.testing.assert_close((bessel.view(4, 6) ** 2).sum(-1), torch.full((4,), 5.0, dtype=D))
    torch.testing.assert_close((population.view(4, 6) ** 2).sum(-1), torch.full((4,), 6.0, dtype=D))


def test_grpo_formula_and_trl_epsilon():
    r = t(1, 0, 0, 1)
    std = r.std()  # Bessel
    torch.testing.assert_close(group_advantages(r, 4), (r - 0.5) / (std + 1e-4))
    assert group_advantages(r, 4, True).equal(group_advantages(r, 4, "group"))
    assert group_advantages(r, 4, False).equal(group_advantages(r, 4, "none"))


def test_dr_grpo_only_centres(rewards):
    torch.testing.assert_close(
        group_advantages(rewards, 6, "none"),
        (rewards.view(4, 6) - rewards.view(4, 6).mean(-1, keepdim=True)).view(-1),
    )


def test_batch_scale_divides_by_the_std_of_all_raw_rewards(rewards):
    centred = rewards.view(4, 6) - rewards.view(4, 6).mean(-1, keepdim=True)
    torch.testing.assert_close(
        group_advantages(rewards, 6, "batch"), (centred / (rewards.std() + 1e-4)).view(-1)
    )


def test_all_equal_rewards_give_exact_zero_even_when_the_mean_rounds():
    r = t(0.1, 0.1, 0.1, 0.7, 0.7, 0.7)  # 3 * 0.1 / 3 != 0.1 in floating point
    for scale in ("group", "batch", "none"):
        assert group_advantages(r, 3, scale).eq(0).all()
    assert rloo_advantages(r, 3).eq(0).all()
    assert opo_advantages(r, torch.tensor([3, 5, 7, 1, 2, 3]), 3).eq(0).all()


def test_group_of_one_gives_zero_not_nan():
    r = t(0.3, -2.0, 5.0)
    for scale in ("group", "batch", "none"):
        assert group_advantages(r, 1, scale).eq(0).all()
    assert rloo_advantages(r, 1).eq(0).all()
    assert opo_advantages(r, torch.tensor([1, 2, 3]), 1).eq(0).all()


def test_affine_invariance_of_the_std_normalised_advantage(rewards):
    base = group_advantages(rewards, 6, eps=0.0)
    torch.testing.assert_close(group_advantages(3.0 * rewards - 7.0, 6, eps=0.0), base)


def test_doubling_rewards_doubles_dr_grpo_but_not_grpo(rewards):
    torch.testing.assert_close(
        group_advantages(2 * rewards, 6, "none"), 2 * group_advantages(rewards, 6, "none")
    )
    torch.testing.assert_close(
        group_advantages(2 * rewards, 6, eps=0.0), group_advantages(rewards, 6, eps=0.0)
    )


def test_nan_reward_is_missing_excluded_from_the_stats_with_zero_advantage():
    r = t(1.0, float("nan"), 0.0, 0.5, 2.0, 2.0, float("nan"), 2.0)
    adv = group_advantages(r, 4)
    assert torch.isfinite(adv).all()
    assert adv[1] == 0 and adv[6] == 0
    torch.testing.assert_close(adv[[0, 2, 3]], group_advantages(t(1.0, 0.0, 0.5), 3))
    assert adv[4:].eq(0).all()  # the present rewards of group 2 are all equal
    only_one = group_advantages(t(float("nan"), 3.0, float("nan")), 3)
    assert only_one.eq(0).all()


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: group_advantages(t(1, 2, 3), 2), "not divisible"),
        (lambda: group_advantages(t(1, 2, 3, 4).view(2, 2), 2), "1-D"),
        (lambda: group_advantages(t(1, float("inf")), 2), "infinite"),
        (lambda: group_advantages(t(1, 2), 0), "num_generations"),
        (lambda: group_advantages(t(1, 2), 2, "std"), "scale_rewards"),
        (lambda: group_advantages(t(1, 2), 2, eps=-1.0), "eps"),
        (lambda: rloo_advantages(t(1, float("nan")), 2), "non-finite"),
        (lambda: remax_advantages(t(1, 2, 3, 4), t(1, 2, 3), 2), "one entry per prompt"),
        (lambda: opo_advantages(t(1, 2), torch.tensor([1, -1]), 2), "lengths"),
        (lambda: opo_advantages(t(1, 2), torch.tensor([1, 2, 3]), 1), "lengths"),
    ],
)
def test_bad_inputs_raise_value_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------- RLOO, ReMax, OPO


def test_rloo_example_and_formula(rewards):
    torch.testing.assert_close(rloo_advantages(t(1, 0, 0, 1), 4), t(2, -2, -2, 2) / 3)
    grouped = rewards.view(4, 6)
    leave_one_out = grouped - (grouped.sum(-1, keepdim=True) - grouped) / 5
    torch.testing.assert_close(rloo_advantages(rewards, 6), leave_one_out.view(-1))
    torch.testing.assert_close(
        rloo_advantages(rewards, 6).view(4, 6).sum(-1), torch.zeros(4, dtype=D)
    )


def test_dr_grpo_times_g_over_g_minus_1_is_rloo(rewards):
    torch.testing.assert_close(
        group_advantages(rewards, 6, "none") * 6 / 5, rloo_advantages(rewards, 6)
    )


def test_remax_subtracts_the_greedy_reward_of_each_prompt():
    adv = remax_advantages(t(1, 0, 1, 1, 0, 0), t(1, 0), 3)
    torch.testing.assert_close(adv, t(0, -1, 0, 1, 0, 0))
    assert remax_advantages(t(0.5, 0.5), t(0.5), 2).eq(0).all()  # sampled == greedy -> 0


def test_any_action_independent_baseline_leaves_the_expected_gradient_unchanged():
    """Exact tabular bandit: E[(R - b) grad log pi] = E[R grad log pi] (the baseline theorem: a baseline that does not depend on the action adds no bias)."""
    theta = torch.tensor([0.3, -0.2, 0.5], dtype=D, requires_grad=True)
    reward = t(1.0, 0.0, 2.0)

    def expected_gradient(adv):
        logp = torch.log_softmax(theta, 0)
        (grad,) = torch.autograd.grad((logp.exp().detach() * adv * logp).sum(), theta)
        return grad

    with_baseline = remax_advantages(reward, t(0.77), 3)
    torch.testing.assert_close(expected_gradient(with_baseline), expected_gradient(reward))


def test_opo_length_weighted_baseline_example():
    adv = opo_advantages(t(1, 0, 1, 0), torch.tensor([100, 300, 200, 400]), 4)
    torch.testing.assert_close(adv, t(0.7, -0.3, 0.7, -0.3))  # b* = 0.3, plain mean would be 0.5


def test_opo_weighted_sum_is_zero_and_zero_length_counts_as_one(rewards):
    lengths = torch.randint(1, 50, (24,))
    adv = opo_advantages(rewards, lengths, 6)
    torch.testing.assert_close(
        (adv * lengths).view(4, 6).sum(-1), torch.zeros(4, dtype=D), rtol=0, atol=1e-10
    )
    torch.testing.assert_close(opo_advantages(t(1, 0), torch.tensor([0, 1]), 2), t(0.5, -0.5))


# ---------------------------------------------------------------- batch normalisation


def test_batch_normalize_dler_example():
    centred = group_advantages(t(1, 0, 0, 1, 1, 1, 1, 0), 4, "none")
    normalised = batch_normalize(centred, eps=0.0)
    torch.testing.assert_close(normalised, t(1, -1, -1, 1, 0.5, 0.5, 0.5, -1.5))
    torch.testing.assert_close(normalised.mean(), torch.tensor(0.0, dtype=D), rtol=0, atol=1e-12)
    torch.testing.assert_close(normalised.std(), torch.tensor(1.0, dtype=D))


def test_batch_normalize_with_a_mask_whitens_valid_tokens_only():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 5, dtype=D, generator=g)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    x_padded = torch.where(mask.bool(), x, float("nan"))  # padding content never matters
    out = batch_normalize(x_padded, mask, eps=0.0)
    valid = x[mask.bool()]
    torch.testing.assert_close(out[mask.bool()], (valid - valid.mean()) / valid.std())
    assert out[~mask.bool()].eq(0).all()
    with pytest.raises(ValueError, match="non-finite"):
        batch_normalize(x_padded)


# ---------------------------------------------------------------- multi-reward (GDPO)


def test_gdpo_example_from_the_paper():
    # Two rollouts, two binary rewards: reward 1 = (0, 1), reward 2 = (0, 1) over the rollouts.
    r = t(0, 0, 1, 1).view(2, 2)
    trl_default = combine_rewards(r, None, 2, "sum_then_normalize")
    torch.testing.assert_close(trl_default, t(-1, 1) / math.sqrt(2), rtol=0, atol=1e-4)
    # Per-reward normalisation gives (-1.4142, 1.4142) before the batch step, (-0.7071, 0.7071) after.
    gdpo = combine_rewards(r, None, 2, "normalize_then_sum")
    torch.testing.assert_close(gdpo, t(-1, 1) / math.sqrt(2), rtol=0, atol=1e-4)


def test_gdpo_differs_from_sum_then_normalise_and_is_batch_standardised():
    g = torch.Generator().manual_seed(2)
    r = torch.stack(
        [torch.randint(0, 2, (12,), generator=g), torch.rand(12, generator=g, dtype=D) * 10], 1
    ).to(D)
    w = t(1.0, 0.5)
    gdpo = combine_rewards(r, w, 4, "normalize_then_sum", eps=0.0)
    torch.testing.assert_close(gdpo.mean(), torch.tensor(0.0, dtype=D), rtol=0, atol=1e-12)
    torch.testing.assert_close(gdpo.std(), torch.tensor(1.0, dtype=D))
    summed = group_advantages(r @ w, 4)
    torch.testing.assert_close(combine_rewards(r, w, 4), summed)
    assert not torch.allclose(gdpo, summed, atol=1e-2)


def test_combine_rewards_nan_entries_are_nansum_and_unscorable_rows_get_zero():
    nan = float("nan")
    r = t(1, nan, 0, 2, nan, nan, 1, 1).view(4, 2)  # row 2 is unscorable
    for mode in ("sum_then_normalize", "normalize_then_sum"):
        adv = combine_rewards(r, t(1.0, 2.0), 4, mode)
        assert torch.isfinite(adv).all() and adv[2] == 0
    # sum-then-normalise: the unscorable row is left out of the group statistics
    adv = combine_rewards(r, t(1.0, 2.0), 4, "sum_then_normalize")
    expected = group_advantages(t(1, 4, nan, 3), 4)  # nansum: 1, 0 + 2*2, (missing), 1 + 2
    torch.testing.assert_close(adv, expected)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"mode": "mean"}, "mode"),
        ({"weights": t(1.0, 2.0, 3.0)}, "weights"),
        ({"rewards_per_func": t(1, 2, 3, 4)}, r"\(N, K\)"),
    ],
)
def test_combine_rewards_bad_inputs(kwargs, match):
    args = {
        "rewards_per_func": t(1, 2, 3, 4).view(2, 2),
        "weights": None,
        "num_generations": 2,
    } | kwargs
    with pytest.raises(ValueError, match=match):
        combine_rewards(**args)


# ---------------------------------------------------------------- PPO token rewards and GAE


@pytest.fixture
def episode():
    g = torch.Generator().manual_seed(3)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]])
    rewards = torch.randn(3, 6, dtype=D, generator=g) * mask
    values = torch.randn(3, 6, dtype=D, generator=g) * mask
    return rewards, values, mask


def reward_to_go(r, gamma=1.0):
    out, running = torch.zeros_like(r), torch.zeros(r.shape[0], dtype=r.dtype)
    for i in reversed(range(r.shape[1])):
        running = r[:, i] + gamma * running
        out[:, i] = running
    return out


def test_gae_lambda_one_is_reward_to_go_minus_value(episode):
    rewards, values, mask = episode
    adv, returns = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    torch.testing.assert_close(adv, (reward_to_go(rewards) - values) * mask)
    torch.testing.assert_close(returns, (adv + values) * mask)
    adv_g, _ = gae(rewards, values, mask, gamma=0.9, lam=1.0)
    torch.testing.assert_close(adv_g, (reward_to_go(rewards, 0.9) - values) * mask)


def test_gae_lambda_zero_is_the_td_error(episode):
    rewards, values, mask = episode
    next_values = torch.cat([values[:, 1:], torch.zeros(3, 1, dtype=D)], 1) * torch.cat(
        [mask[:, 1:], torch.zeros(3, 1, dtype=mask.dtype)], 1
    )
    adv, _ = gae(rewards, values, mask, gamma=0.9, lam=0.0)
    torch.testing.assert_close(adv, (rewards + 0.9 * next_values - values) * mask)


def test_gae_skips_holes_in_the_mask(episode):
    rewards, values, mask = episode
    holey = mask.clone()
    holey[1, 2] = 0  # e.g. a tool-output token inside the response
    adv, _ = gae(rewards, values, holey, gamma=0.95, lam=0.9)
    keep = [0, 1, 3, 4, 5]
    compact, _ = gae(rewards[1:2, keep], values[1:2, keep], torch.ones(1, 5), gamma=0.95, lam=0.9)
    torch.testing.assert_close(adv[1, keep], compact[0])
    assert adv[1, 2] == 0


def test_outcome_reward_on_last_token_and_kl_in_reward_gae():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0]])
    token_rewards = outcome_to_token_rewards(t(2.0, -1.0, 5.0, 3.0), mask)
    torch.testing.assert_close(
        token_rewards, t(0, 0, 2, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 3, 0).view(4, 4)
    )
    # beta = 0, V = 0: every valid token's advantage is R
    zeros = torch.zeros(4, 4, dtype=D)
    adv, _ = gae(token_rewards, zeros, mask)
    torch.testing.assert_close(adv, t(2.0, -1.0, 0.0, 3.0)[:, None] * mask)
    # with KL in the reward and V = 0: A_0 = R - beta * sum_t k_t
    kl = torch.rand(4, 4, dtype=D)
    penalised = kl_penalized_token_rewards(token_rewards, kl, 0.1, mask)
    adv, _ = gae(penalised, zeros, mask)
    torch.testing.assert_close(
        adv[:, 0], t(2.0, -1.0, 0.0, 3.0) - 0.1 * (kl * mask).sum(-1) * mask[:, 0]
    )


def test_kl_penalized_rewards_are_detached_sequence_penalties():
    kl = torch.rand(2, 3, dtype=D, requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    out = kl_penalized_rewards(t(1.0, 0.0), kl, 0.05, mask)
    torch.testing.assert_close(out, t(1.0, 0.0) - 0.05 * (kl.detach() * mask).sum(-1))
    assert not out.requires_grad
    assert not kl_penalized_token_rewards(torch.zeros(2, 3, dtype=D), kl, 0.05, mask).requires_grad
    with pytest.raises(ValueError, match="beta"):
        kl_penalized_rewards(t(1.0, 0.0), kl, -1.0, mask)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: gae(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3)), r"\(B, T\)"),
        (lambda: gae(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), gamma=1.5), "gamma"),
        (lambda: gae(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(3, 3)), "mask"),
        (lambda: outcome_to_token_rewards(torch.zeros(3), torch.ones(2, 3)), "same B"),
    ],
)
def test_token_level_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------- DAPO soft overlong punishment


def test_dapo_overlong_penalty_curve():
    lengths = torch.tensor([0, 16384, 17408, 18432, 20480, 20481])
    out = overlong_penalty(lengths, 20480, 4096)
    torch.testing.assert_close(out, torch.tensor([0.0, 0.0, -0.25, -0.5, -1.0, -1.0]))
    torch.testing.assert_close(
        overlong_penalty(lengths, 20480, 4096, penalty_factor=0.5), out * 0.5
    )


def test_overlong_penalty_zero_buffer_is_a_step_and_bad_arguments_raise():
    torch.testing.assert_close(
        overlong_penalty(torch.tensor([10, 11]), 10, 0), torch.tensor([0.0, -1.0])
    )
    with pytest.raises(ValueError, match="overlong_buffer_len"):
        overlong_penalty(torch.tensor([1]), 10, 11)
    with pytest.raises(ValueError, match="max_completion_length"):
        overlong_penalty(torch.tensor([1]), 0, 0)
    with pytest.raises(ValueError, match="lengths"):
        overlong_penalty(torch.tensor([-1]), 10, 2)
    with pytest.raises(ValueError, match="penalty_factor"):
        overlong_penalty(torch.tensor([1]), 10, 2, penalty_factor=-1)


def test_explained_variance_scores_perfect_constant_and_bad_critics():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    returns = torch.tensor([[1.0, 1.0, 1.0, 9.0], [0.0, 0.0, 5.0, 5.0]])
    # padding holds garbage that must not count
    assert explained_variance(returns, returns, mask) == pytest.approx(1.0)
    assert explained_variance(torch.zeros_like(returns), returns, mask) == pytest.approx(0.0)
    assert explained_variance(torch.full_like(returns, 0.6), returns, mask) == pytest.approx(0.0)
    # predicting the opposite outcome is worse than any constant
    assert explained_variance(1 - returns, returns, mask) < 0
    # half-way there: the error's variance is a quarter of the returns'
    assert explained_variance(returns / 2, returns, mask) == pytest.approx(0.75)
    assert math.isnan(explained_variance(torch.zeros(2, 4), torch.ones(2, 4), mask))
    with pytest.raises(ValueError, match="same shape"):
        explained_variance(returns, returns[:, :3], mask)
