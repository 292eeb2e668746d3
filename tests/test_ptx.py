"""PTX loss (Kimi K2 arXiv 2507.20534 section 3.2.3; InstructGPT arXiv 2203.02155 eq. 2): the
gradient of one optimizer step is the RL gradient plus ptx_coef times the SFT gradient of the
step's warm-start batch; ptx_coef = 0 leaves the update exactly as it was."""

import copy

import pytest
import torch

from labkit.config import TrainConfig, preset
from labkit.finetune.ptx import PTXData, ptx_nll
from labkit.finetune.sft import encode_sft
from labkit.models import load_policy
from labkit.tasks import medium_cells
from labkit.trainer import Trainer


@pytest.fixture(scope="module")
def shipped():
    model, tokenizer = load_policy("tiny", device="cpu", dtype="float32")
    return model, tokenizer, medium_cells("train").select(range(16))


def _captured_update(trainer, batch):
    """Run trainer.update on ``batch`` and return the gradient the optimizer step saw."""
    seen = {}

    def capture(finite, stats):
        seen.update({n: p.grad.clone() for n, p in trainer.model.named_parameters()
                     if p.grad is not None})
        trainer.optimizer.zero_grad(set_to_none=True)
        stats.count("skipped_nonfinite", int(not finite))

    trainer._apply_gradients = capture
    trainer.update(batch)
    return seen


def _sft_gradient(model, tokenizer, examples):
    model = copy.deepcopy(model).train()
    ids, mask, labels = encode_sft(tokenizer, examples, 256)
    model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    return {n: p.grad for n, p in model.named_parameters()}


def _trainer(shipped, **overrides):
    model, tokenizer, data = shipped
    config = preset("grpo", prompts_per_step=2, num_generations=4, max_completion_length=32,
                    progress=False, seed=5, **overrides)
    return Trainer(config, model=copy.deepcopy(model), tokenizer=tokenizer, train_dataset=data)


def test_gradient_is_rl_plus_coef_times_sft(shipped):
    model, tokenizer, _ = shipped
    rl_only = _trainer(shipped)
    batch, _ = rl_only.sample_and_score()
    rl_only.compute_advantages(batch)
    assert (batch.sequence_advantages != 0).any(), "the batch must carry an RL signal"
    rl = _captured_update(rl_only, batch)

    mixed = _trainer(shipped, ptx_coef=0.5, ptx_batch_size=3)
    examples = mixed.ptx.batch(0)
    both = _captured_update(mixed, batch)
    sft = _sft_gradient(model, tokenizer, examples)
    for name, grad in both.items():
        expected = rl[name] + 0.5 * sft[name]
        scale = max(expected.abs().max().item(), 1.0)
        torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-6 * scale, msg=name)
    assert any((both[n] - rl[n]).abs().max() > 0 for n in both)  # the PTX term is really there


def test_silent_rl_leaves_the_sft_gradient(shipped):
    model, tokenizer, _ = shipped
    trainer = _trainer(shipped, ptx_coef=2.0, ptx_batch_size=2)
    batch, _ = trainer.sample_and_score()
    trainer.compute_advantages(batch)
    batch.sequence_advantages = torch.zeros_like(batch.sequence_advantages)
    grads = _captured_update(trainer, batch)
    sft = _sft_gradient(model, tokenizer, trainer.ptx.batch(0))
    for name, grad in grads.items():
        scale = max(sft[name].abs().max().item(), 1.0)
        torch.testing.assert_close(grad, 2.0 * sft[name], rtol=1e-4, atol=1e-6 * scale,
                                   msg=name)


def test_zero_coefficient_is_the_plain_update(shipped):
    off = _trainer(shipped, ptx_coef=0.0)
    assert off.ptx is None
    row = off.training_step()
    assert "ptx_loss" not in row and "loss" in row


def test_ptx_loss_is_logged_and_the_draw_is_seeded(shipped):
    trainer = _trainer(shipped, ptx_coef=0.1, ptx_batch_size=4, max_steps=1)
    history = trainer.train().history
    assert "ptx_loss" in history and 0 < history["ptx_loss"].iloc[-1] < 10
    again = PTXData(4, seed=5)
    assert again.batch(7) == trainer.ptx.batch(7) and again.batch(7) != again.batch(8)
    model, tokenizer, _ = shipped
    with torch.no_grad():
        nll = ptx_nll(model, tokenizer, again.batch(0))
    assert nll.dim() == 0 and torch.isfinite(nll)


@pytest.mark.parametrize("field, value", [("ptx_coef", -0.1), ("ptx_coef", float("nan")),
                                          ("ptx_batch_size", 0), ("ptx_batch_size", 2.5)])
def test_bad_ptx_settings_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{field: value})


def test_bad_ptx_data_is_refused():
    with pytest.raises(ValueError, match="empty"):
        PTXData(4, examples=[])
    with pytest.raises(ValueError, match="completion"):
        PTXData(4, examples=[{"prompt": "1+1"}])
