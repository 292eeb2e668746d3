"""Every entry point that samples refuses a prompt that leaves no room for max_completion_length
tokens in the model's context, naming the prompt's length, the budget and the context; before,
only the trainer's sampling step checked, and evaluation sampled past the tiny model's 512
positions and reported accuracy 0 as a result."""

import copy
import re

import pytest

from labkit.agents.calculator import CalculatorEnv
from labkit.agents.episodes import environments, run_episodes
from labkit.config import preset
from labkit.evaluate import evaluate
from labkit.finetune.rft import rejection_sample
from labkit.models import load_policy
from labkit.sampling import encode_prompts, generate
from labkit.tasks import load_split
from labkit.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_thread")

BUDGET = 16


def long_rows(tokenizer, context: int):
    """Two eval rows whose prompts take ``context - BUDGET + 1`` tokens: one too many."""
    rows = load_split("eval").select(range(2))
    template = encode_prompts(tokenizer, [[{"role": "user", "content": ""}]], "cpu")[1].sum()
    filler = "9" * (context - BUDGET + 1 - int(template))
    return rows.map(lambda row: {"prompt": [{"role": "user", "content": filler}]})


def refused(call, prompt_tokens: int, context: int):
    with pytest.raises(ValueError, match="exceeds the model's context") as caught:
        call()
    message = str(caught.value)
    assert re.search(rf"\b{prompt_tokens} tokens", message), message
    assert f"max_completion_length={BUDGET}" in message and f"{context} positions" in message


def test_generate_evaluate_rejection_sampling_and_the_trainers_eval_refuse(shipped_tiny):
    model, tokenizer = shipped_tiny
    context = model.config.max_position_embeddings
    rows = long_rows(tokenizer, context)
    length = context - BUDGET + 1
    refused(lambda: generate(model, tokenizer, rows["prompt"], max_completion_length=BUDGET),
            length, context)
    refused(lambda: evaluate(model, tokenizer, rows, k=1, max_completion_length=BUDGET),
            length, context)
    refused(lambda: rejection_sample(model, tokenizer, rows, k=1,
                                     max_completion_length=BUDGET), length, context)
    trainer = Trainer(preset("grpo", max_completion_length=BUDGET, eval_k=1, progress=False),
                      model=copy.deepcopy(model), tokenizer=tokenizer,
                      train_dataset=load_split("train").select(range(8)), eval_dataset=rows)
    refused(trainer.evaluate, length, context)


def test_the_trainers_step_names_the_dataset_row(shipped_tiny):
    """The step samples all four rows, in its own order; the error names the long one."""
    model, tokenizer = shipped_tiny
    context = model.config.max_position_embeddings
    train = load_split("train").select(range(4))
    long = long_rows(tokenizer, context)
    data = train.map(lambda row, i: {"prompt": long[0]["prompt"] if i == 2 else row["prompt"]},
                     with_indices=True)
    trainer = Trainer(preset("grpo", max_completion_length=BUDGET, prompts_per_step=4,
                             num_generations=2, progress=False),
                      model=copy.deepcopy(model), tokenizer=tokenizer, train_dataset=data)
    with pytest.raises(ValueError, match=r"train_dataset row 2: .*exceeds the model's context"):
        trainer.training_step()


def test_the_first_turn_of_an_episode_is_checked():
    model, tokenizer = load_policy("tiny-tools", device="cpu", dtype="float32")
    context = model.config.max_position_embeddings
    rows = long_rows(tokenizer, context)
    refused(lambda: run_episodes(model, tokenizer, rows["prompt"],
                                 environments(CalculatorEnv, rows[:], 1),
                                 max_completion_length=BUDGET), context - BUDGET + 1, context)


def test_a_prompt_that_fits_exactly_is_sampled(shipped_tiny):
    model, tokenizer = shipped_tiny
    context = model.config.max_position_embeddings
    prompt = long_rows(tokenizer, context)[0]["prompt"]  # one token too long for BUDGET
    rollout = generate(model, tokenizer, [prompt], max_completion_length=BUDGET - 1)
    assert int(rollout.prompt_mask.sum()) + BUDGET - 1 == context
