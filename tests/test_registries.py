"""Adding a method is one file and one registration: a toy loss and a toy estimator, registered
from this test file alone or from a module written to a temporary folder, are reachable from
TrainConfig, trained by the trainer, refused by name by the TRL bridge and listed by the catalog,
with no edit anywhere else. A loss's own setting becomes a field when its module is imported
by ``labkit/losses/__init__.py``, since the config is built once, at import: a later one is
refused, and tests/test_plugin_costs.py proves the import line in a fresh interpreter."""

import copy
import dataclasses
import importlib.util
import inspect
import textwrap

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
    LOSS_REGISTRY,
    get_loss_type,
    policy_loss,
    register_policy_loss,
    unregister_policy_loss,
)
from labkit.plugins import Setting, between
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


#: A new method as a contributor writes it: one module, nothing else touched (CONTRIBUTING.md).
TOY_MODULE = """
    import math

    from labkit.advantages import Advantages, group_rows, register_advantage_estimator
    from labkit.plugins import Setting, between
    from labkit.losses import register_policy_loss


    @register_policy_loss("toy_scaled", aggregation="token_mean", summary="-2 A log pi")
    def _toy_scaled(x):
        return -2 * x.advantages * x.logp


    @register_advantage_estimator("toy_max", summary="r minus the group's best reward")
    def _toy_max(x):
        groups = group_rows(x.rewards, x.num_generations)
        return Advantages((groups - groups.max(-1, keepdim=True).values).reshape(-1))
"""


@pytest.fixture
def toy_module(tmp_path):
    path = tmp_path / "toy_method.py"
    path.write_text(textwrap.dedent(TOY_MODULE))
    spec = importlib.util.spec_from_file_location("toy_method", path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    yield
    unregister_policy_loss("toy_scaled")
    unregister_advantage_estimator("toy_max")


def test_a_loss_and_an_estimator_from_one_module_train(toy_module, random_tiny):
    # a loss with a setting of its own is a loss whose module labkit/losses/__init__.py imports
    # (the config is built once, at import): tests/test_plugin_costs.py proves that one
    config = preset("grpo", loss_type="toy_scaled", advantage_estimator="toy_max",
                    **{**SMALL, "max_steps": 2})  # step 1: lr 0
    model, tokenizer, data = random_tiny
    trainer = Trainer(config, model=copy.deepcopy(model), tokenizer=tokenizer, train_dataset=data,
                      reward_funcs=[length_reward])
    before = [p.detach().clone() for p in trainer.model.parameters()]
    history = trainer.train().history
    assert history["skipped_nonfinite"].sum() == 0 and history["completions_trained"].sum() > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
    # the bridge refuses the loss and the estimator by name
    with pytest.raises(ValueError, match="advantage_estimator='toy_max' cannot be expressed"):
        to_grpo_config(config, output_dir="unused")
    with pytest.raises(ValueError, match="loss_type='toy_scaled' has no TRL equivalent"):
        to_grpo_config(preset("grpo", loss_type="toy_scaled", **SMALL), output_dir="unused")
    # the catalog lists both
    rows = catalog_frame().set_index("id")
    assert rows.loc["toy-scaled", "changes"] == "loss"
    assert rows.loc["toy-max", "changes"] == "advantage"


def test_a_setting_registered_after_the_config_is_built_is_refused_naming_the_import_line():
    """The config is built once, at import, with the settings of the losses registered by then
    (every module labkit/losses/__init__.py imports). A loss registered later may read existing
    fields; a new setting would need a new field, so that registration is refused."""
    with pytest.raises(ValueError, match=r"declares the setting\(s\) 'toy_late_scale' after "
                                         r"TrainConfig was built.*labkit/losses/__init__\.py"):
        register_policy_loss("toy_late", aggregation="token_mean", options={
            "toy_late_scale": Setting(1.0, between(0, 2), "late")})(
                lambda x, toy_late_scale: x.logp)
    assert "toy_late" not in LOSS_REGISTRY
    assert "toy_late_scale" not in {f.name for f in dataclasses.fields(TrainConfig)}


def test_an_option_no_field_holds_is_refused_naming_its_registration():
    """Before, such a loss registered fine and then broke every config with a bare
    AttributeError."""
    with pytest.raises(ValueError, match=r"loss_type 'toy_knob' \(registered in .*\) reads "
                                         r"option 'toy_knob_tau', which is no TrainConfig field"):
        register_policy_loss("toy_knob", aggregation="token_mean",
                             options={"toy_knob_tau": 1.0})(lambda x, toy_knob_tau: x.logp)
    assert "toy_knob" not in LOSS_REGISTRY
    assert TrainConfig().loss_type == "grpo"


def test_a_setting_is_declared_once():
    with pytest.raises(ValueError, match="declares the setting 'epsilon', which TrainConfig "
                                         "already has"):
        register_policy_loss("toy_eps", aggregation="token_mean", options={
            "epsilon": Setting(0.3, between(0, 1), "again")})(lambda x, epsilon: x.logp)
    with pytest.raises(ValueError, match="declares the setting 'sapo_temperature_pos' "
                                         "differently from loss_type 'sapo'"):
        register_policy_loss("toy_sapo", aggregation="token_mean", options={
            "sapo_temperature_pos": Setting(2.0, between(0, 9), "mine")})(
                lambda x, sapo_temperature_pos: x.logp)
    assert "toy_eps" not in LOSS_REGISTRY and "toy_sapo" not in LOSS_REGISTRY


@pytest.mark.parametrize("name", list(LOSS_REGISTRY))
def test_registered_defaults_are_the_config_defaults(name):
    """Each option's default lives in its registration: the config's field and the surrogate
    (which gets every option from policy_loss) cannot disagree with it."""
    loss = LOSS_REGISTRY[name]
    config = TrainConfig()
    for option, default in loss.options.items():
        assert getattr(config, option) == default, option
        parameter = inspect.signature(loss.surrogate).parameters[option]
        assert parameter.default in (inspect.Parameter.empty, default), option
