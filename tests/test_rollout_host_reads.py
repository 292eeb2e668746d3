"""Reads from the device to the host (each one a GPU sync): the fixed-shape decode loop reads whether
every row finished every CHECK_EVERY tokens, not after each token, and the training step's
helpers read what they need once per call, not once per row or per metric. Counted on the CPU
by intercepting the tensor-to-Python conversions, which on a GPU wait for the queue to drain."""

import math
from contextlib import contextmanager

import pytest
import torch

from labkit.logprobs import logprobs_and_entropy
from labkit.metrics import StepStats
from labkit.sampling import DecodePlan, Decoder, generate, plan_decoding
from labkit.sampling import fixed as fixed_loop
from labkit.tasks import load_split
from labkit.training.forward import length_packed_micro_batches

pytestmark = pytest.mark.usefixtures("one_thread")

CONVERSIONS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__")
#: Operations whose output shape depends on the data, so the host waits for it.
DATA_SHAPED = ("nonzero", "unique", "masked_select")


@contextmanager
def host_reads():
    """Count the tensor-to-Python conversions and data-shaped operations made inside the block
    (a proxy for the syncs a GPU would make: what happens inside C++ operations is not seen)."""
    counted = {"reads": 0}
    originals = {name: getattr(torch.Tensor, name) for name in CONVERSIONS + DATA_SHAPED}
    functions = {name: getattr(torch, name) for name in DATA_SHAPED}

    def counting(original):
        def convert(self, *args, **kwargs):
            counted["reads"] += 1
            return original(self, *args, **kwargs)
        return convert

    for name, original in originals.items():
        setattr(torch.Tensor, name, counting(original))
    for name, original in functions.items():
        setattr(torch, name, counting(original))
    try:
        yield counted
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
        for name, original in functions.items():
            setattr(torch, name, original)


def test_the_fixed_loop_reads_the_finished_rows_every_check_every_tokens(shipped_tiny,
                                                                         monkeypatch):
    """On a GPU (every row draws): at most one read per CHECK_EVERY tokens in the loop itself,
    where the dynamic loop reads after every token."""
    model, tokenizer = shipped_tiny
    prompts = load_split("train").select(range(4))["prompt"]
    monkeypatch.setattr(fixed_loop, "draws_live_rows_only", lambda device: False)
    calls = []
    real = fixed_loop.decode_fixed

    def counted(*args, **kwargs):
        with host_reads() as reads:
            result = real(*args, **kwargs)
        calls.append(reads["reads"])
        return result

    monkeypatch.setattr("labkit.sampling.generation.decode_fixed", counted)
    length = 48
    rollout = generate(model, tokenizer, prompts, num_generations=4, max_completion_length=length,
                       decoder=Decoder("fixed"), generator=torch.Generator().manual_seed(0))
    steps = int(rollout.lengths.max())
    assert steps > 2 * fixed_loop.CHECK_EVERY
    # one read per check (the live and non-finite counts together), at most one more check for
    # the steps after the last row ended, and none per token
    assert calls == [math.ceil(steps / fixed_loop.CHECK_EVERY)] or \
        calls == [math.ceil(steps / fixed_loop.CHECK_EVERY) + 1]


def test_packing_micro_batches_reads_the_lengths_once():
    prompts = torch.tensor([5, 3, 9, 4, 4, 7, 2, 8])
    completions = torch.tensor([1, 6, 2, 2, 9, 3, 5, 4])
    with host_reads() as reads:
        packs = length_packed_micro_batches(prompts, completions, max_rows=3, device_type="cpu")
    assert reads["reads"] == 1  # was 2 per row + 1
    assert sorted(torch.cat(packs).tolist()) == list(range(8))


def test_the_trainers_log_probs_skip_the_range_check_only_when_told():
    logits = torch.randn(2, 3, 11)
    tokens = torch.randint(0, 11, (2, 3))
    with host_reads() as reads:
        checked = logprobs_and_entropy(logits, tokens)
    assert reads["reads"] > 0
    with host_reads() as reads:
        unchecked = logprobs_and_entropy(logits, tokens, check_tokens=False)
    assert reads["reads"] == 0
    assert all(torch.equal(a, b) for a, b in zip(checked, unchecked))
    with pytest.raises(ValueError, match=r"tokens must lie in \[0, V\)"):
        logprobs_and_entropy(logits, tokens - 5)


def test_a_steps_metrics_are_read_in_one_transfer_with_the_same_values():
    stats = StepStats()
    generator = torch.Generator().manual_seed(0)
    expected = {}
    for name in ("loss", "clip_low", "entropy", "kl_old"):
        values = torch.rand(3, generator=generator)
        weights = torch.tensor([7, 0, 12])
        for value, weight in zip(values, weights):
            stats.add(name, value, None if name == "loss" else weight)
        if name == "loss":
            total = values[0] + values[1] + values[2]
            expected[name] = float(total / 2)
        else:
            total = values[0] * weights[0] + values[1] * weights[1] + values[2] * weights[2]
            expected[name] = float(total / weights.sum())
    stats.add("ptx_loss", 0.25, weight=1)
    stats.add("value_loss", torch.tensor(1.0), torch.tensor(0))  # no tokens: NaN
    stats.optimizer_steps = 2
    stats.count("skipped_nonfinite", 0)
    with host_reads() as reads:
        row = stats.result()
    assert reads["reads"] == 1  # was one per metric (and one more per tensor weight)
    for name, value in expected.items():
        assert row[name] == value, name  # bit for bit the values one read per metric gave
    assert row["ptx_loss"] == 0.25 and math.isnan(row["value_loss"])
    assert row["skipped_nonfinite"] == 0 and math.isnan(row["clip_high"])


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_the_decode_step_reads_nothing_back_as_a_cuda_graph_requires(monkeypatch, attention):
    """A CUDA graph cannot capture a step that reads a value back to the host: the fixed loop's
    step (mask column, model forward on the static cache, logits copy, counters) makes no read,
    on both attention implementations it drives (transformers' Qwen3 here)."""
    from labkit.models import load_policy

    model, tokenizer = load_policy("tiny", device="cpu", dtype="float32",
                                   attn_implementation=attention)
    monkeypatch.setattr(Decoder, "plan", lambda self, model: (
        plan_decoding(model, self.path, self.cuda_graphs) if self.path == "dynamic"
        else DecodePlan("fixed", True, "test")))
    reads = []

    def capture(workspace, model):
        with host_reads() as counted:
            workspace.step(model)
        reads.append(counted["reads"])
        workspace.graph = None  # decode with eager steps from here

    monkeypatch.setattr(fixed_loop.Workspace, "capture", capture)
    prompts = load_split("train").select(range(2))["prompt"]
    decoder = Decoder()
    for _ in range(2):  # captured at the second use of the shape
        generate(model, tokenizer, prompts, num_generations=2, max_completion_length=8,
                 decoder=decoder)
    assert reads == [0]
