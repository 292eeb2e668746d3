"""labkit.training.forward: the trainer's savings leave values and gradients as the textbook forward has
them (shared prompts, length packing)."""

import copy
import dataclasses

import pytest
import torch

from labkit.config import preset
from labkit.models import ValueModel, build_char_tokenizer, tiny_qwen_config
from labkit.tasks import load_split
from labkit.trainer import Trainer
from labkit.training.forward import (
    completion_outputs,
    critic_call,
    length_packed_micro_batches,
    plain_forward,
    policy_call,
    shared_prompt_forward,
)


@pytest.fixture(scope="module")
def batch_and_models():
    """A sampled batch (4 prompts x 4 completions) of a random tiny Qwen, and a critic."""
    from transformers import Qwen3ForCausalLM

    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(tiny_qwen_config(len(tokenizer)))
    config = preset("grpo", prompts_per_step=4, num_generations=4, max_completion_length=12,
                    progress=False)
    trainer = Trainer(config, model=model, tokenizer=tokenizer,
                      train_dataset=load_split("train").select(range(16)),
                      reward_funcs=[lambda prompts, completions, **kw: [0.0] * len(completions)])
    batch, _ = trainer.sample_and_score()
    return batch.trimmed(), model, ValueModel(model)


@pytest.mark.parametrize("which", ["policy", "critic"])
def test_shared_prompt_forward_equals_the_plain_forward(batch_and_models, which):
    batch, model, critic = batch_and_models
    module = copy.deepcopy(model if which == "policy" else critic).train()
    call = policy_call(module) if which == "policy" else critic_call(module)
    assert len(torch.unique(batch.prompt_index)) < len(batch)  # prompts repeat: sharing happens
    results = []
    for forward in (shared_prompt_forward, plain_forward):
        out = forward(call, batch)
        assert out.shape[:2] == batch.completion_ids.shape
        mask = batch.completion_mask.bool()
        weight = torch.linspace(0.5, 1.5, out[mask].numel()).view_as(out[mask])
        (out[mask] * weight).sum().backward()
        results.append({"output": out[mask].detach(),
                        **{n: p.grad.clone() for n, p in module.named_parameters()
                           if p.grad is not None}})
        module.zero_grad()
    for name, value in results[0].items():
        scale = value.abs().max().item()
        torch.testing.assert_close(value, results[1][name], rtol=1e-4, atol=1e-5 * scale,
                                   msg=name)


def test_completion_outputs_shares_only_when_prompts_repeat(batch_and_models):
    batch, model, _ = batch_and_models
    distinct = dataclasses.replace(batch, prompt_index=torch.arange(len(batch)))
    with torch.no_grad():
        torch.testing.assert_close(completion_outputs(policy_call(model), distinct),
                                   plain_forward(policy_call(model), distinct))


def test_length_packing_covers_every_row_once_and_respects_the_cap():
    prompts = torch.tensor([10, 10, 30, 12, 11, 29, 10, 31])
    completions = torch.tensor([5, 300, 6, 4, 299, 7, 5, 301])
    packs = length_packed_micro_batches(prompts, completions, max_rows=3, device_type="cpu")
    rows = torch.cat(packs).sort().values
    assert rows.tolist() == list(range(8))
    assert all(len(p) <= 3 for p in packs)
    # short and long completions are not mixed when the padding would cost more than a forward
    for pack in packs:
        lengths = completions[pack]
        assert lengths.max() - lengths.min() < 100
