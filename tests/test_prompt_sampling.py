"""labkit.tricks.prompt_sampling: curriculum, prioritized and multi-task samplers, and the trainer's
feedback to them."""

import copy
import itertools

import pytest
import torch

from labkit.config import preset
from labkit.models import build_char_tokenizer, tiny_qwen_config
from labkit.tasks import load_split
from labkit.trainer import Trainer
from labkit.tricks.prompt_sampling import (
    CurriculumOrder,
    MultiTaskOrder,
    PrioritizedOrder,
    UniformOrder,
    iwu_step,
    make_prompt_order,
)


def test_uniform_passes_cover_every_prompt_once_per_epoch():
    sampler = UniformOrder(10, seed=0)
    first = sampler.take(10)
    assert sorted(first) == list(range(10))
    state = sampler.state_dict()
    nxt = sampler.take(4)
    sampler.load_state_dict(state)
    assert sampler.take(4) == nxt


def test_curriculum_allows_harder_prompts_over_time():
    difficulties = [1, 1, 2, 2, 3, 3, 4, 4]
    sampler = CurriculumOrder(difficulties, seed=0, total_steps=10, ratio=0.6)
    assert {difficulties[i] for i in sampler.take(2)} == {1}
    seen_max = []
    for _ in range(10):
        seen_max.append(max(difficulties[i] for i in sampler.take(4)))
        sampler.end_batch()
    assert seen_max[0] <= 2 and seen_max[-1] == 4
    assert all(b >= a - 1 for a, b in itertools.pairwise(seen_max))
    assert sampler.allowed_difficulty() == 4


def test_prioritized_sampling_follows_one_minus_solve_rate():
    sampler = PrioritizedOrder(4, seed=0, floor=0.0, ema=1.0)
    sampler.observe([0, 1, 2, 3], [1.0, 1.0, 0.5, 0.0])
    assert sampler.weights() == [0.0, 0.0, 0.5, 1.0]  # Kimi's p_i ~ 1 - s_i
    counts = [0] * 4
    for _ in range(300):
        counts[sampler.take(1)[0]] += 1
    assert counts[0] == counts[1] == 0 and 1.5 < counts[3] / counts[2] < 2.7
    floored = PrioritizedOrder(2, seed=0, floor=0.05, ema=1.0)
    floored.observe([0, 1], [1.0, 1.0])
    assert sorted(floored.take(2)) == [0, 1]  # all solved: the floor keeps the draw possible


def test_iwu_step_paper_checks():
    logits = iwu_step([0.0, 0.0, 0.0], [0.2, 0.5, 0.8], lr=1.0)
    assert logits == pytest.approx([0.1, 0.0, -0.1])  # g = (-0.1, 0, 0.1)
    assert iwu_step([0.3, -0.2], [0.4, 0.4], lr=0.5) == pytest.approx([0.3, -0.2])


def test_multitask_weights_move_toward_the_worst_family():
    families = ["add"] * 5 + ["mul"] * 5
    sampler = MultiTaskOrder(families, seed=0, lam=1.0, lr=1.0)
    for _ in range(5):
        sampler.observe(list(range(10)), [0.9] * 5 + [0.1] * 5)
    weights = sampler.family_weights()
    assert weights["mul"] > 0.6 > weights["add"]
    drawn = [families[i] for i in sampler.take(200 // 4 * 0 + 8)]
    assert drawn.count("mul") >= drawn.count("add")
    state = sampler.state_dict()
    other = MultiTaskOrder(families, seed=0)
    other.load_state_dict(state)
    assert other.family_weights() == pytest.approx(weights)


def test_make_prompt_order_needs_its_column():
    data = load_split("train").select(range(20)).remove_columns(["difficulty"])
    with pytest.raises(ValueError, match="difficulty"):
        make_prompt_order("curriculum", data, 0, total_steps=10)


def test_the_trainer_feeds_solve_rates_back():
    from transformers import Qwen3ForCausalLM

    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(tiny_qwen_config(len(tokenizer)))
    data = load_split("train").select(range(40))
    config = preset("grpo", prompts_per_step=4, num_generations=2, max_completion_length=8,
                    max_steps=2, progress=False, prompt_sampler="prioritized")

    def parity(prompts, completions, **columns):
        return [float(len(c[0]["content"]) % 2) for c in completions]

    trainer = Trainer(config, model=copy.deepcopy(model), tokenizer=tokenizer,
                      train_dataset=data, reward_funcs=[parity])
    trainer.train()
    seen = [i for i, s in enumerate(trainer.prompt_order.solve_rate) if s != 0]
    # the random model never answers right: solve rates stay 0, but the trainer called observe
    assert isinstance(trainer.prompt_order, PrioritizedOrder) and seen == []
    assert {f"accuracy_{f}" for f in set(data["family"])} & set(trainer.history.columns)
    multi = Trainer(preset("grpo", prompts_per_step=4, num_generations=2,
                           max_completion_length=8, max_steps=2, progress=False,
                           prompt_sampler="multitask"),
                    model=copy.deepcopy(model), tokenizer=tokenizer, train_dataset=data,
                    reward_funcs=[parity])
    multi.train()
    assert multi.prompt_order.last_accuracy  # fed after each step
