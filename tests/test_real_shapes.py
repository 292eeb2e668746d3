"""The trainer at a real Qwen shape: the code that trains the tiny Qwen runs unchanged at 0.5B.

``load_policy("Qwen/Qwen2.5-0.5B-Instruct", random_init=True)`` builds the published architecture
(24 layers, hidden 896, 151,936-token vocabulary, tied embeddings) from the shipped
``config.json``, offline, with random weights and the lab's character tokenizer. Random weights
say nothing about quality; this proves shapes, memory and speed.

Measured (seed 0, float32, one CPU thread, 2 prompts x G = 2 completions of 8 tokens): 66 s
and 11.2 GiB peak RSS for the step; see :func:`test_one_grpo_step_at_the_qwen2_5_0_5b_shape`.
"""

import pytest
import torch

from labkit import logprobs as logprobs_module
from labkit.config import preset
from labkit.models import SHIPPED_CONFIGS, count_parameters, load_model_config, load_policy
from labkit.tasks import load_split
from labkit.trainer import Trainer
from labkit.training import compiled as loss_path_module
from labkit.training.run_control import peak_memory_mb

QWEN_0_5B = "Qwen/Qwen2.5-0.5B-Instruct"
VOCAB = 151_936

#: Published parameter counts (tied input/output embeddings counted once), from building each
#: shipped config on the meta device: 0.5B's 494,032,768 is the figure on its model card
#: ("0.49B"); Qwen3-0.6B's card says 0.6B, Qwen2.5-1.5B's 1.54B.
PUBLISHED_PARAMETERS = {
    "Qwen/Qwen2.5-0.5B-Instruct": 494_032_768,
    "Qwen/Qwen3-0.6B": 596_049_920,
    "Qwen/Qwen2.5-1.5B-Instruct": 1_543_714_304,
}


@pytest.mark.parametrize("hub_id", SHIPPED_CONFIGS)
def test_each_shipped_config_loads_offline_with_its_published_size(hub_id):
    from transformers import AutoModelForCausalLM

    config = load_model_config(hub_id)
    assert config.vocab_size == VOCAB
    with torch.device("meta"):  # the architecture without allocating a single weight
        model = AutoModelForCausalLM.from_config(config)
    assert count_parameters(model) == PUBLISHED_PARAMETERS[hub_id]
    # tied embeddings: the output layer is the input table, counted once
    assert (model.lm_head.weight is model.get_input_embeddings().weight) == \
        config.tie_word_embeddings


def alternating_reward(prompts, completions, **columns):
    """1, 0, 1, 0, ...: every group of 2 holds a 1 and a 0, so every advantage is +-1 whatever
    the (random-weight, near-empty) completions say."""
    return [float(i % 2 == 0) for i in range(len(completions))]


@pytest.mark.slow
def test_one_grpo_step_at_the_qwen2_5_0_5b_shape(one_thread, monkeypatch):
    """One real GRPO step of :class:`labkit.trainer.Trainer` at the Qwen2.5-0.5B shape.

    Its time and peak RSS on the lab's 2-core CPU are in ``docs/measurements/cpu_real_shape.txt``
    (this test's printed line). The bill: weights + gradients + the rollback copy of the trainable
    weights (the NaN guard, ``rollback_nonfinite_weights``) at four bytes a parameter each and
    AdamW's two moments at eight, plus torch itself, activations and the (b, l, 151,936) logits and
    their gradient.
    """
    model, tokenizer = load_policy(QWEN_0_5B, random_init=True, seed=0, dtype="float32",
                                   device="cpu")
    assert count_parameters(model) == PUBLISHED_PARAMETERS[QWEN_0_5B]
    # Spy on the chunked log-probs: record the width of every logits tensor they receive, and
    # shrink the chunk to 16 rows of the real vocabulary so this short batch spans several chunks.
    widths = []
    chunked = loss_path_module.logprobs_and_entropy  # the eager loss path's log-probs

    def spy(logits, tokens, temperature=1.0, **kwargs):
        widths.append((logits.shape[-1], logits.shape[0] * logits.shape[1]))
        return chunked(logits, tokens, temperature, **kwargs)

    monkeypatch.setattr(loss_path_module, "logprobs_and_entropy", spy)
    monkeypatch.setattr(logprobs_module, "_CHUNK_ELEMENTS", 16 * VOCAB)
    config = preset("grpo", prompts_per_step=2, num_generations=2, max_completion_length=8,
                    max_steps=1, progress=False, dtype="float32", device="cpu", seed=0,
                    learning_rate=1e-4, warmup_ratio=0.0)
    trainer = Trainer(config, model=model, tokenizer=tokenizer,
                      train_dataset=load_split("train").select(range(8)),
                      reward_funcs=[alternating_reward])
    layer = model.model.layers[0].self_attn.q_proj.weight
    embedding = model.get_input_embeddings().weight
    before = layer.detach().clone(), embedding[:512].detach().clone()

    row = trainer.training_step()

    assert widths and all(width == VOCAB for width, _ in widths)
    assert max(rows for _, rows in widths) > 16  # more rows than one chunk: chunking happened
    assert torch.isfinite(torch.tensor(row["loss"])) and row["completions_trained"] == 4
    assert row["skipped_nonfinite"] == 0
    assert not torch.equal(layer, before[0])
    assert not torch.equal(embedding[:512], before[1])  # the prompt's character ids moved
    assert torch.isfinite(layer).all()
    # The measured peak (docs/measurements/cpu_real_shape.txt), loosely: catches a second copy
    # of the model (a frozen reference where none is needed: +1.9 GiB), not a few percent of noise.
    peak = peak_memory_mb(torch.device("cpu"))
    print(f"0.5B-shape step: {row['step_time']:.1f} s (sampling {row['generation_time']:.1f} s),"
          f" peak RSS {peak:.0f} MiB")
    assert peak < 13_000
