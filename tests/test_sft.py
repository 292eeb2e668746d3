"""labkit.finetune.sft: the completion-only mask, batching, the schedule, and that a few steps learn."""

import math

import pytest
import torch

from labkit.finetune.sft import (
    encode_sft,
    fit,
    length_bucketed_batches,
    sft_optimizer,
    warmup_cosine,
)
from labkit.models import TINY_MODEL_DIR, build_char_tokenizer, load_policy
from labkit.sampling import prompt_text


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


EXAMPLES = [{"prompt": "12+7=?", "completion": "<think></think><answer>19</answer>"},
            {"prompt": [{"role": "user", "content": "3+4=?"}], "completion": "Y"}]


def test_labels_cover_exactly_the_completion_and_end_of_turn(tokenizer):
    ids, mask, labels = encode_sft(tokenizer, EXAMPLES, max_len=256)
    assert ids.shape == mask.shape == labels.shape and ids.size(0) == 2
    for i, ex in enumerate(EXAMPLES):
        prompt = tokenizer(prompt_text(tokenizer, [{"role": "user", "content": ex["prompt"]}]
                                       if isinstance(ex["prompt"], str) else ex["prompt"]),
                           add_special_tokens=False)["input_ids"]
        target = tokenizer(ex["completion"] + tokenizer.eos_token,
                           add_special_tokens=False)["input_ids"]
        n = len(prompt) + len(target)
        assert ids[i, :n].tolist() == prompt + target
        assert (labels[i, :len(prompt)] == -100).all()
        assert labels[i, len(prompt):n].tolist() == target
        assert (labels[i, n:] == -100).all() and mask[i].sum() == n
        assert (ids[i, n:] == tokenizer.pad_token_id).all()


def test_max_len_cuts_the_end(tokenizer):
    ids, mask, _ = encode_sft(tokenizer, EXAMPLES[:1], max_len=10)
    assert ids.shape == (1, 10) and mask.sum() == 10


def test_length_buckets_keep_every_example_once_and_are_seeded(tokenizer):
    examples = [{"prompt": "q" * (i % 7), "completion": "c" * i, "n": i} for i in range(50)]
    batches = length_bucketed_batches(tokenizer, examples, batch_size=4, seed=3, window=2)
    assert sorted(ex["n"] for b in batches for ex in b) == list(range(50))
    assert all(len(b) <= 4 for b in batches)
    again = length_bucketed_batches(tokenizer, examples, batch_size=4, seed=3, window=2)
    assert [[ex["n"] for ex in b] for b in batches] == [[ex["n"] for ex in b] for b in again]


def test_warmup_cosine_shape():
    lr = warmup_cosine(steps=100, warmup=10, floor=0.1)
    assert lr(0) == pytest.approx(0.1) and lr(9) == pytest.approx(1.0)
    assert lr(10) == pytest.approx(1.0) and lr(100) == pytest.approx(0.1)
    assert lr(55) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))


@pytest.mark.skipif(not TINY_MODEL_DIR.exists(), reason="the shipped tiny model is missing")
def test_a_few_steps_lower_the_loss_on_their_batch():
    torch.manual_seed(0)
    model, tokenizer = load_policy("tiny", device="cpu", dtype="float32")
    batch = [{"prompt": "12+7=?", "completion": "Y"}, {"prompt": "3+4=?", "completion": "N"}]
    optimizer, scheduler = sft_optimizer(model, lr=1e-3, steps=8, warmup=1)
    curve = fit(model, tokenizer, [batch] * 8, optimizer, scheduler, log_every=1, verbose=False)
    assert len(curve) == 8 and curve[-1][0] == 8
    assert curve[-1][1] < 0.5 * curve[0][1], curve
    assert not model.training
