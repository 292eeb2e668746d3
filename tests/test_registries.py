"""Adding a method is one file and one registration: a toy loss and a toy estimator, registered
from this test file alone, are reachable from TrainConfig, trained by the trainer, refused by name
by the TRL bridge and listed by the catalog, with no edit anywhere else."""

import copy

import pytest
import torch
from text_rewards import length_reward

from labkit.advantages import (
    Advantages,
    get_estimator,
    group_rows,
    register_advantage_estimator,
    unregister_advantage_estimator,
)
from labkit.catalog import catalog_frame
from labkit.config import TrainConfig, preset
from labkit.losses import (
    get_loss_type,
    policy_loss,
    register_policy_loss,
    unregister_policy_loss,
)
from labkit.trainer import Trainer
from labkit.trl_bridge import to_grpo_config

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = {"prompts_per_step": 4, "num_generations": 4, "max_completion_length": 16,
         "max_steps": 1, "progress": False, "eval_every": 0}


@pytest.fixture
def toy_loss():
    """Plain REINFORCE with no ratio at all: -A log pi, token mean."""

    @register_policy_loss("toy_reinforce", aggregation="token_mean",
                          paper=("Simple statistical gradient-following algorithms", None),
                          summary="-A log pi, no importance ratio")
    def surrogate(x):
        return -x.advantages * x.logp

    yield "toy_reinforce"
    unregister_policy_loss("toy_reinforce")


@pytest.fixture
def toy_estimator():
    """Reward minus the group's median."""

    @register_advantage_estimator("toy_median", summary="r minus the group median")
    def compute(x):
        groups = group_rows(x.rewards, x.num_generations)
        return Advantages((groups - groups.median(-1, keepdim=True).values).reshape(-1))

    yield "toy_median"
    unregister_advantage_estimator("toy_median")


def test_a_loss_registered_here_is_a_loss_type_everywhere(toy_loss, random_tiny):
    assert get_loss_type(toy_loss).aggregation == "token_mean"
    # the pure function: the gradient of -A log pi over the tokens' mean is -A / N per token
    logp = torch.zeros(2, 3, requires_grad=True)
    loss, _ = policy_loss(logp, None, torch.tensor([1.0, -2.0]), torch.ones(2, 3),
                          loss_type=toy_loss)
    loss.backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.0] * 3, [2.0] * 3]) / 6)
    # the config accepts it, the trainer trains with it
    config = preset("grpo", loss_type=toy_loss, **{**SMALL, "max_steps": 2})
    model, tokenizer, data = random_tiny
    trainer = Trainer(config, model=copy.deepcopy(model), tokenizer=tokenizer, train_dataset=data,
                      reward_funcs=[length_reward])
    before = [p.detach().clone() for p in trainer.model.parameters()]
    history = trainer.train().history
    assert history["skipped_nonfinite"].sum() == 0 and history["completions_trained"].sum() > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
    # TRL has no such loss: the bridge refuses it by name
    with pytest.raises(ValueError, match="loss_type='toy_reinforce' has no TRL equivalent"):
        to_grpo_config(config, output_dir="unused")
    # the catalog lists it from its registration, status derived
    row = catalog_frame().set_index("id").loc["toy-reinforce"]
    assert row["status"] == "implemented" and row["switch"] == "loss_type='toy_reinforce'"
    assert row["title"] == "Simple statistical gradient-following algorithms"


def test_a_loss_registered_once_cannot_be_registered_again(toy_loss):
    with pytest.raises(ValueError, match="already registered"):
        register_policy_loss(toy_loss, aggregation="token_mean")(lambda x: x.logp)
    with pytest.raises(ValueError, match="aggregation must be one of"):
        register_policy_loss("toy_other", aggregation="median")


def test_an_unregistered_loss_is_refused_with_the_registered_names():
    with pytest.raises(ValueError, match="loss_type must be one of") as refused:
        TrainConfig(loss_type="toy_reinforce")
    assert "'grpo'" in str(refused.value) and "'cispo'" in str(refused.value)


def test_an_estimator_registered_here_is_an_estimator_everywhere(toy_estimator, random_tiny):
    assert get_estimator(toy_estimator).groups
    config = preset("grpo", advantage_estimator=toy_estimator, **SMALL)
    with pytest.raises(ValueError, match="compares the completions of a group"):
        preset("grpo", advantage_estimator=toy_estimator, **{**SMALL, "num_generations": 1})
    model, tokenizer, data = random_tiny
    trainer = Trainer(config, model=copy.deepcopy(model), tokenizer=tokenizer, train_dataset=data,
                      reward_funcs=[length_reward])
    batch, _ = trainer.sample_and_score()
    trainer.compute_advantages(batch)
    groups = batch.rewards.view(-1, 4)
    expected = (groups - groups.median(-1, keepdim=True).values).reshape(-1)
    torch.testing.assert_close(batch.sequence_advantages, expected)
    with pytest.raises(ValueError, match="advantage_estimator='toy_median' cannot be expressed"):
        to_grpo_config(config, output_dir="unused")
    row = catalog_frame().set_index("id").loc["toy-median"]
    assert row["status"] == "implemented" and row["changes"] == "advantage"
