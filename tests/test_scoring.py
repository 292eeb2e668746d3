"""labkit.training.scoring: the rewards of a step's completions, on the batch's device."""

from types import SimpleNamespace

import torch

from labkit.config import TrainConfig
from labkit.rewards import accuracy_reward, format_reward
from labkit.tasks import load_split
from labkit.training.scoring import score_completions


def test_every_reward_tensor_the_batch_keeps_is_on_the_rollouts_device():
    """The Experience indexes all its fields with one index, so the per-function reward table
    must live where the completions do (on a GPU, a CPU table broke every update). The meta
    device stands in for a GPU: it has no data, only a device."""
    rows = load_split("train")[:2]
    answers = [f"<think>x</think><answer>{a}</answer>" for a in rows["answer"]]
    rollout = SimpleNamespace(texts=[answers[0], "no", answers[1], "no"],
                              completion_ids=torch.zeros(4, 3, dtype=torch.long, device="meta"),
                              lengths=torch.full((4,), 3, device="meta"))
    per_function, totals, correct = score_completions(
        TrainConfig(), [accuracy_reward, format_reward], rows, rollout)
    assert per_function.shape == (4, 2)
    assert per_function.device.type == totals.device.type == "meta"
    assert correct.tolist() == [1.0, 0.0, 1.0, 0.0]  # kept on the CPU: read as a list
