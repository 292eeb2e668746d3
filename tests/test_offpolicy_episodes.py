"""Notebook 10's episodes trained stale (labkit.offpolicy with labkit.agents): the calculator
environment two steps behind the trainer, whole batches (no admission clock), with decoupled
PPO. The tiny tool model calls the calculator on notebook 10's hard cells (add and mul at
difficulties 3 and 4), so the batches hold environment tokens."""

import copy

import pytest
import torch

from labkit.agents.calculator import CalculatorEnv
from labkit.config import TrainConfig
from labkit.tasks import load_split
from labkit.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tool_model():
    from labkit.models import load_policy

    return load_policy("tiny-tools", device="cpu", dtype="float32")


def test_a_two_step_stale_calculator_run_trains_and_stamps_versions(tool_model):
    model, tokenizer = tool_model
    config = TrainConfig(model_name_or_path="tiny-tools", prompts_per_step=2, num_generations=4,
                         max_completion_length=192, max_tool_calling_iterations=2, max_steps=3,
                         max_staleness=2, offpolicy_correction="decoupled",
                         learning_rate=1e-4, device="cpu", dtype="float32", progress=False,
                         seed=0)
    trainer = Trainer(config, model=copy.deepcopy(model), tokenizer=tokenizer,
                      train_dataset=load_split("train", families=["add", "mul"],
                                               difficulties=[3, 4]).select(range(16)),
                      environment_factory=CalculatorEnv)
    seen = []
    producer_next = trainer.producer.next

    def spy(step):
        stamped = producer_next(step)
        seen.append((step, stamped))
        return stamped

    trainer.producer.next = spy
    history = trainer.train().history
    assert history["staleness"].tolist() == [0.0, 1.0, 2.0]
    assert history["skipped_nonfinite"].sum() == 0
    trained = history["completions_trained"] > 0  # a group of equal rewards trains nothing
    assert trained.any() and history.loss[trained].notna().all()
    assert history["offpolicy_kl"].iloc[-1] > 0  # the weights moved since step 0 sampled it
    environment_tokens = 0
    for step, stamped in seen:
        batch = stamped.batch
        assert stamped.version == 0  # k = 2: steps 0, 1 and 2 train the initial weights' batches
        policy = batch.completion_mask.bool() & batch.action_mask.bool()
        environment = batch.completion_mask.bool() & ~batch.action_mask.bool()
        assert batch.token_versions[policy].eq(0).all(), step
        assert batch.token_versions[~policy].eq(-1).all(), step  # environment tokens, padding
        environment_tokens += int(environment.sum())
    assert environment_tokens > 0, "no tool was called: the run did not test episodes"
    assert torch.isfinite(torch.tensor(history["offpolicy_ratio_mean"].tolist())).all()
