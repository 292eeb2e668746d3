"""labkit.grpo_minimal, GRPO on one screen, computes the trainer's gradient: the trainer's savings
(shared prompt forwards, skipped zero-advantage rows, length packing) change no gradient."""

import copy

import pytest
import torch

from labkit import grpo_minimal
from labkit.config import preset
from labkit.models import load_policy
from labkit.tasks import medium_cells
from labkit.trainer import Trainer


@pytest.fixture(scope="module")
def shipped():
    model, tokenizer = load_policy("tiny", device="cpu", dtype="float32")
    return model, tokenizer, medium_cells("train").select(range(32))


def test_minimal_gradient_equals_the_trainers(shipped):
    model, tokenizer, data = shipped
    config = preset("grpo", prompts_per_step=4, num_generations=4, max_completion_length=48,
                    progress=False, seed=3)
    trainer = Trainer(config, model=copy.deepcopy(model), tokenizer=tokenizer,
                      train_dataset=data)
    batch, _ = trainer.sample_and_score()
    trainer.compute_advantages(batch)
    assert (batch.sequence_advantages != 0).any(), "the batch must carry some signal"

    # the trainer's gradient, as one optimizer step accumulates it
    trainer.model.train()
    trainer.accumulate_gradients(batch, trainer.rows_with_gradient(batch),
                                 batch.loss_mask.sum())
    expected = {n: p.grad.clone() for n, p in trainer.model.named_parameters()}

    # the one-screen version on the same batch
    minimal = copy.deepcopy(model).train()
    advantages = grpo_minimal.group_advantages(batch.rewards, 4)
    torch.testing.assert_close(advantages, batch.sequence_advantages, rtol=1e-5, atol=1e-6)
    logp = grpo_minimal.token_logprobs(minimal, batch.prompt_ids, batch.prompt_mask,
                                       batch.completion_ids, batch.completion_mask, 1.0)
    loss = grpo_minimal.clipped_token_loss(logp, logp.detach(), advantages,
                                           batch.completion_mask, 0.2)
    loss.backward()
    for name, p in minimal.named_parameters():
        scale = expected[name].abs().max().item()
        torch.testing.assert_close(p.grad, expected[name], rtol=1e-4, atol=1e-6 * max(scale, 1),
                                   msg=name)
    assert sum(g.abs().sum() for g in expected.values()) > 0


def test_minimal_sampling_and_scoring_follow_the_lab(shipped):
    model, tokenizer, data = shipped
    cfg = grpo_minimal.MinimalConfig(num_generations=3, max_new_tokens=40)
    rows = data[:2]
    torch.manual_seed(0)
    prompt_ids, _, completion_ids, completion_mask, texts = grpo_minimal.sample(
        model, tokenizer, rows["prompt"], cfg)
    assert prompt_ids.shape[0] == completion_ids.shape[0] == len(texts) == 6
    lengths = completion_mask.sum(-1)
    for i, text in enumerate(texts):  # the mask stops at end-of-turn, which it includes
        ended = (completion_ids[i] == tokenizer.eos_token_id).any()
        if ended:
            assert completion_ids[i, lengths[i] - 1] == tokenizer.eos_token_id
        assert "<|im_end|>" not in text
    rewards = grpo_minimal.score(rows, texts, 3)
    assert rewards.shape == (6,) and ((rewards >= 0) & (rewards <= 2)).all()
    # the format tags survive decoding, so a well-formed answer earns its format reward
    assert any(t.startswith("<think>") for t in texts)
