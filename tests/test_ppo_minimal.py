"""labkit.ppo_minimal, PPO with its critic on one screen, computes the Trainer's (preset("ppo"))
values, advantages, returns and policy and critic gradients on the same batch and weights, and
the comparison catches a wrong piece."""

import copy

import pytest
import torch

from labkit import ppo_minimal
from labkit.config import preset
from labkit.grpo_minimal import token_logprobs
from labkit.models import load_policy
from labkit.tasks import medium_cells
from labkit.trainer import Trainer

#: |minimal - Trainer| <= ATOL * max(1, max |Trainer|) + RTOL * |Trainer|, per tensor. Not 0:
#: the Trainer adds the same float32 terms in another order (a shared forward of each prompt,
#: micro-batches packed by length and trimmed, its own whitening code). Measured on this batch:
#: at most 4% of the tolerance; each wrong piece below misses it by a factor of 2,000 or more.
RTOL, ATOL = 1e-4, 1e-5
LAM = 0.9  # not the preset's 1, so a GAE that ignores lambda shows


@pytest.fixture(scope="module")
def setup():
    """The Trainer's batch, scored (log-probs, values, GAE) with its initial weights, and a copy
    of its policy and critic moved as a few updates would move them, so the ratio and value
    clips act on some tokens (at the rollout's weights ratio = 1 and V = V_old: no clip acts)."""
    model, tokenizer = load_policy("tiny", device="cpu", dtype="float32")
    config = preset("ppo", prompts_per_step=4, num_generations=4, max_completion_length=48,
                    lam=LAM, progress=False, seed=3)
    trainer = Trainer(config, model=model, tokenizer=tokenizer,
                      train_dataset=medium_cells("train").select(range(32)))
    generator = torch.Generator().manual_seed(0)
    head = trainer.value_model.head
    with torch.no_grad():  # a critic that has learnt something: values not all 0
        head.weight.copy_(torch.randn(head.weight.shape, generator=generator) * 0.05)
    batch, _ = trainer.sample_and_score()
    trainer.score_forwards(batch)
    trainer.compute_advantages(batch)
    assert torch.equal(batch.loss_mask, batch.completion_mask)
    assert batch.rewards.unique().numel() > 1
    old = (copy.deepcopy(trainer.model), copy.deepcopy(trainer.value_model))
    with torch.no_grad():  # mid-update weights
        for p in trainer.model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05 * p.std())
        head.weight.add_(torch.randn(head.weight.shape, generator=generator) * 0.05)
    rows = torch.randperm(len(batch), generator=generator)[:len(batch) // 2]  # one mini-batch
    return trainer, batch, old, rows


def compare(setup, advantage_fn=ppo_minimal.gae, loss_fn=ppo_minimal.ppo_loss) -> dict:
    """{quantity: the largest |minimal - Trainer| as a share of the tolerance}: <= 1 agrees.
    NaN counts as a difference (the share is NaN, which is not <= 1)."""
    trainer, batch, (policy, critic), rows = setup
    cfg = ppo_minimal.PPOConfig(num_generations=4, lam=LAM)
    for field in ("gamma", "lam", "vf_coef", "clip_range_value", "epsilon", "temperature"):
        assert getattr(cfg, field) == getattr(trainer.config, field), field
    assert (cfg.epochs, cfg.mini_batches) == (trainer.config.num_iterations,
                                             trainer.config.num_mini_batches)
    tensors = (batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask)
    mask = batch.completion_mask
    with torch.no_grad():
        old_logp = token_logprobs(policy, *tensors, cfg.temperature)
        old_values = ppo_minimal.token_values(critic, *tensors)
    advantages, returns = advantage_fn(batch.rewards, old_values, mask, cfg.gamma, cfg.lam)
    advantages = ppo_minimal.whiten(advantages, mask)
    m = mask.bool()
    got = {"old_logp": (old_logp[m], batch.old_logp[m]), "values": (old_values[m], batch.values[m]),
           "advantages": (advantages, batch.token_advantages), "returns": (returns, batch.returns)}

    # one mini-batch at the moved weights: the Trainer's, then the minimal version's
    num_tokens = mask.sum() / trainer.config.num_mini_batches
    trainer.model.train(), trainer.value_model.train()
    trainer.optimizer.zero_grad(set_to_none=True)
    mine, my_critic = copy.deepcopy(trainer.model), copy.deepcopy(trainer.value_model)
    trainer.accumulate_gradients(batch.select(rows), trainer.rows_with_gradient(batch)[rows],
                                 num_tokens)
    mini = [x[rows] for x in tensors]
    loss = loss_fn(token_logprobs(mine, *mini, cfg.temperature), old_logp[rows],
                   ppo_minimal.token_values(my_critic, *mini), old_values[rows],
                   advantages[rows], returns[rows], mask[rows], num_tokens, cfg)
    loss.backward()
    for name, want, have in (("policy gradient", trainer.model, mine),
                             ("critic gradient", trainer.value_model, my_critic)):
        pairs = [(h.grad, w.grad) for h, w in zip(have.parameters(), want.parameters(),
                                                  strict=True) if w.grad is not None]
        assert pairs and all(h is not None for h, _ in pairs), name
        got[name] = (torch.cat([h.flatten() for h, _ in pairs]),
                     torch.cat([w.flatten() for _, w in pairs]))
    trainer.optimizer.zero_grad(set_to_none=True)
    return {name: (((have - want).abs() / (ATOL * max(1.0, want.abs().max().item())
                                           + RTOL * want.abs())).max().item())
            for name, (have, want) in got.items()}


def test_the_setup_makes_both_clips_act(setup):
    trainer, batch, _, rows = setup
    tensors = [x[rows] for x in (batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                                 batch.completion_mask)]
    m = tensors[3].bool()
    with torch.no_grad():
        logp = token_logprobs(trainer.model, *tensors, trainer.config.temperature)
        ratio = (logp - batch.old_logp[rows]).exp()[m]
        moved = (ppo_minimal.token_values(trainer.value_model, *tensors) - batch.values[rows])[m]
    assert 0 < ((ratio - 1).abs() > trainer.config.epsilon).float().mean() < 0.5
    assert 0 < (moved.abs() > trainer.config.clip_range_value).float().mean() < 1
    assert batch.values[batch.loss_mask.bool()].abs().min() > 0  # the critic's values are not 0


def test_minimal_equals_the_trainer(setup):
    shares = compare(setup)
    assert list(shares) == ["old_logp", "values", "advantages", "returns", "policy gradient",
                            "critic gradient"]
    assert all(share <= 1 for share in shares.values()), shares


def no_bootstrap(rewards, values, mask, gamma, lam):  # delta_t = r_t - V_t: gamma V_t+1 left out
    v = values * mask
    deltas = (ppo_minimal.gae(rewards, values, mask, gamma, 0.0)[0]  # lam = 0: A_t = delta_t
              - gamma * torch.cat([v[:, 1:], torch.zeros_like(v[:, :1])], 1) * mask)
    steps = torch.arange(v.size(1))
    gap = (steps[None, :] - steps[:, None]).float()  # s - t
    discount = torch.where(gap >= 0, (gamma * lam) ** gap.clamp(min=0), 0)
    advantages = deltas @ discount.T  # A_t = sum_s>=t (gamma lam)^(s-t) delta_s
    return advantages, advantages + v


def lam_ignored(rewards, values, mask, gamma, lam):  # A = the reward-to-go minus V
    return ppo_minimal.gae(rewards, values, mask, gamma, 1.0)


def value_unclipped(*args):
    cfg = args[-1]
    return ppo_minimal.ppo_loss(*args[:-1], ppo_minimal.PPOConfig(
        **{**cfg.__dict__, "clip_range_value": float("inf")}))


def policy_unclipped(*args):
    cfg = args[-1]
    return ppo_minimal.ppo_loss(*args[:-1], ppo_minimal.PPOConfig(
        **{**cfg.__dict__, "epsilon": float("inf")}))


def batch_mean_policy_term(logp, old_logp, values, old_values, advantages, returns, mask,
                           num_tokens, cfg):  # the mini-batch's own token mean: the paper's
    return ppo_minimal.ppo_loss(logp, old_logp, values, old_values, advantages, returns, mask,
                                mask.sum(), cfg)


@pytest.mark.parametrize("advantage_fn, loss_fn, caught", [
    (no_bootstrap, ppo_minimal.ppo_loss, "advantages"),
    (lam_ignored, ppo_minimal.ppo_loss, "advantages"),
    (ppo_minimal.gae, value_unclipped, "critic gradient"),
    (ppo_minimal.gae, policy_unclipped, "policy gradient"),
    (ppo_minimal.gae, batch_mean_policy_term, "policy gradient"),
])
def test_the_comparison_catches_a_wrong_piece(setup, advantage_fn, loss_fn, caught):
    shares = compare(setup, advantage_fn, loss_fn)
    assert not shares[caught] <= 1, shares
    upstream = ["old_logp", "values"] + (["advantages", "returns"]
                                         if advantage_fn is ppo_minimal.gae else [])
    assert all(shares[name] <= 1 for name in upstream), shares


def test_train_runs_two_steps():
    model, tokenizer = load_policy("tiny", device="cpu", dtype="float32")
    cfg = ppo_minimal.PPOConfig(prompts_per_step=2, num_generations=2, max_new_tokens=8,
                                steps=2)
    log = ppo_minimal.train(model, tokenizer, medium_cells("train").select(range(8)), cfg)
    assert [row["step"] for row in log] == [1, 2]
    assert all(torch.isfinite(torch.tensor(list(row.values()))).all() for row in log)
    assert log[0]["value"] == 0  # the critic's head starts at zero
