"""Notebook 07's methods (labkit.tricks.temperature, labkit.tricks.reference, labkit.tricks.token_filters,
labkit.rewards.diversity, RL-PLUS's weights): the checkable properties of each, with the papers'
own examples."""

import itertools
import math

import pytest
import torch

from labkit.config import TrainConfig
from labkit.losses import focal_weight, mis_ratio
from labkit.rewards.diversity import dra_weights, ngram_embeddings
from labkit.tricks.reference import mix_reference, move_reference
from labkit.tricks.temperature import temperature_at
from labkit.tricks.token_filters import (
    clip_cov_mask,
    covariance,
    kl_cov_mask,
    token_filters,
    top_entropy_mask,
)


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_temperature_schedules_start_end_and_never_rise(schedule):
    temps = [temperature_at(s, 50, 1.2, 0.7, schedule) for s in range(50)]
    assert temps[0] == pytest.approx(1.2) and temps[-1] == pytest.approx(0.7)
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(temps))
    assert temperature_at(10, 50, 1.2, 0.7, "constant") == 1.2
    assert temperature_at(10, 50, 1.2, None, "cosine") == 1.2
    with pytest.raises(ValueError, match="schedule"):
        temperature_at(0, 10, 1.0, 0.5, "step")


def test_rlplus_mis_ratio_and_focal_weight_checks():
    """RL-PLUS's checks: r^m(p_old = p, p) = 4p / (3p + 1); C(1) = 0, C(0.5) = 0.7071."""
    p = torch.tensor([1.0, 0.5, 0.1])
    torch.testing.assert_close(mis_ratio(p.log(), p.log()), torch.tensor([1.0, 0.8, 0.30769]),
                               atol=1e-4, rtol=0)
    torch.testing.assert_close(focal_weight(torch.tensor([0.0, math.log(0.5)]), 0.5),
                               torch.tensor([0.0, 0.70711]), atol=1e-4, rtol=0)
    # the weight is detached: it rescales, it adds no gradient of its own
    logp = torch.tensor([math.log(0.3)], requires_grad=True)
    assert not focal_weight(logp).requires_grad
    # the MIS ratio stays at most 4 even where the old policy gave the token nothing
    assert mis_ratio(torch.tensor(0.0), torch.tensor(-30.0)) <= 4


def test_dra_weights_paper_checks():
    eye = torch.eye(4)
    torch.testing.assert_close(dra_weights(eye, 4), torch.ones(4))  # orthogonal: unchanged
    same = torch.ones(4, 3)
    torch.testing.assert_close(dra_weights(same, 4), torch.full((4,), 0.25))  # identical: 1/G
    pair = torch.stack([eye[0], eye[0], eye[2], eye[3]])
    torch.testing.assert_close(dra_weights(pair, 4), torch.tensor([0.5, 0.5, 1.0, 1.0]))
    # groups are separate: the same vectors in two groups do not discount each other
    torch.testing.assert_close(dra_weights(torch.cat([eye[:2], eye[:2]]), 2), torch.ones(4))


def test_ngram_embeddings_are_deterministic_and_see_duplicates():
    texts = ["<think>1+2</think><answer>3</answer>"] * 2 + ["<think></think><answer>17</answer>"]
    tags = ("<think>", "</think>", "<answer>", "</answer>")
    e = ngram_embeddings(texts, ignore=tags)
    assert torch.equal(e, ngram_embeddings(texts, ignore=tags))
    sim = e @ e.T
    assert sim[0, 1] == pytest.approx(1.0) and sim[0, 2] < 0.2
    # with the tags counted, every completion looks alike: why the trainer strips them
    with_tags = ngram_embeddings(texts)
    assert (with_tags @ with_tags.T)[0, 2] > 0.5


def test_top_entropy_mask_keeps_the_top_share():
    entropy = torch.arange(10.0).view(2, 5)
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[1, 4] = False  # padding is never kept
    kept = top_entropy_mask(entropy, mask, 0.2)
    assert kept.sum() == 2 and kept[1, 3] and kept[1, 2] and not kept[1, 4]
    assert torch.equal(top_entropy_mask(entropy, mask, 1.0), mask)


def test_clip_cov_picks_candidates_in_the_band():
    cov = torch.tensor([[0.5, 2.0, 3.0, 6.0], [1.5, 4.0, -1.0, 2.5]])
    mask = torch.ones(2, 4, dtype=torch.bool)
    clipped = torch.zeros(2, 4, dtype=torch.bool)
    clipped[1, 1] = True  # PPO clipped it already: not a candidate
    chosen = clip_cov_mask(cov, mask, clipped, ratio=0.5, low=1, high=5,
                           generator=torch.Generator().manual_seed(0))
    assert chosen.sum() == 4
    candidates = (cov > 1) & (cov < 5) & ~clipped
    assert not (chosen & ~candidates).any()


def test_kl_cov_picks_the_largest_covariances():
    logp = torch.tensor([[-0.1, -2.0, -0.2, -3.0]])
    adv = torch.tensor([[1.0]]).expand(1, 4)
    adv = torch.tensor([[1.0, -1.0, 2.0, 0.5]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    cov = covariance(logp, adv, mask)
    assert cov.sum().abs() > 0
    chosen = kl_cov_mask(cov, mask, ratio=0.5)
    assert chosen.sum() == 2 and torch.equal(chosen[0], cov[0] >= cov[0].sort().values[2])



def test_token_filters_compose_top_entropy_with_clip_cov_and_kl_cov():
    """What the trainer applies per micro-batch: no switch, nothing; Clip-Cov zeroes weights on
    top of the top-entropy mask; KL-Cov adds a penalty on exactly the tokens it chose."""
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(4, 6, generator=g, dtype=torch.float64)
    old = logp + 0.3 * torch.randn(4, 6, generator=g, dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=torch.float64)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[3, 4:] = False
    top = (torch.rand(4, 6, generator=g) > 0.3).double() * mask
    assert token_filters(TrainConfig(), logp, old, adv, mask) == (None, None, None)
    weights, penalty, filtered = token_filters(TrainConfig(), logp, old, adv, mask, top)
    assert weights is top and penalty is None and torch.equal(filtered, top == 0)

    clip_cov = TrainConfig(cov_penalty="clip_cov", clip_cov_ratio=0.2, clip_cov_lb=-10.0,
                           clip_cov_ub=10.0, num_mini_batches=2)
    weights, penalty, filtered = token_filters(clip_cov, logp, old, adv, mask, top,
                                               torch.Generator().manual_seed(1))
    assert penalty is None and (weights <= top).all()
    assert ((top == 1) & (weights == 0)).any()  # Clip-Cov silenced some kept tokens
    assert torch.equal(filtered, weights == 0)

    kl_cov = TrainConfig(cov_penalty="kl_cov", kl_cov_ratio=0.2, kl_cov_coef=2.0,
                         num_mini_batches=2)
    weights, penalty, filtered = token_filters(kl_cov, logp, old, adv, mask)
    chosen = kl_cov_mask(covariance(logp, adv[:, None], mask), mask, 0.2)
    assert weights is None and torch.equal(filtered, chosen)
    torch.testing.assert_close(penalty, 2.0 * (logp - old).abs() * chosen)

def test_mix_reference_moves_the_reference_by_alpha():
    policy, ref = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    before = {k: v.clone() for k, v in ref.state_dict().items()}
    mix_reference(policy, ref, 0.6)
    for name, value in ref.state_dict().items():
        torch.testing.assert_close(value, 0.6 * policy.state_dict()[name] + 0.4 * before[name])
    mix_reference(policy, ref, 1.0)
    assert all(torch.equal(v, policy.state_dict()[k]) for k, v in ref.state_dict().items())


def test_move_reference_returns_the_step_count_and_changes_no_counter_of_its_own():
    """The caller keeps the optimizer-step count (a checkpoint saves it): move_reference takes
    it and returns the new one; TR-DPO syncs each time it crosses a multiple of
    ref_model_sync_steps, ProRL resets every ref_reset_every steps."""
    config = TrainConfig(beta=0.04, sync_ref_model=True, ref_model_sync_steps=3,
                         ref_model_mixup_alpha=1.0, num_mini_batches=2, ref_reset_every=0)
    policy, ref = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)
    count, events = move_reference(config, 0, 0, policy, ref, optimizer)
    assert (count, events) == (2, {})  # 2 optimizer steps a step, 3 not reached
    assert not torch.equal(ref.weight, policy.weight)
    count, events = move_reference(config, 1, count, policy, ref, optimizer)
    assert (count, events) == (4, {"ref_sync": 1})  # crossed 3: alpha = 1 copies the policy
    assert all(torch.equal(v, policy.state_dict()[k]) for k, v in ref.state_dict().items())
    reset = TrainConfig(beta=0.04, ref_reset_every=2)
    with torch.no_grad():
        policy.weight.add_(1.0)
    assert move_reference(reset, 0, 7, policy, ref, optimizer) == (7, {})  # no sync: unchanged
    assert move_reference(reset, 1, 7, policy, ref, optimizer) == (7, {"ref_reset": 1})
    assert torch.equal(ref.weight, policy.weight)
