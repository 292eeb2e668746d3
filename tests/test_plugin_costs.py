"""What CONTRIBUTING.md says each plug-in costs, proved: a throwaway plug-in is written as a file
in its package's folder (here a temporary folder on the package's path) and its one import line
is run in the package's ``__init__`` namespace, exactly as the line would be added there. Nothing
else is touched, and the plug-in reaches the config's validation (or a spec's), the catalog, the
catalog's own tests and ``python -m labkit where``. The test is the third place: it checks the
plug-in's formula.

* a loss with a setting: its file, one import line, its formula test;
* an advantage estimator: its file and one import line, and it imports like its siblings;
* a named reward: its file and one import line.
"""

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import test_catalog
import torch

import labkit.advantages
import labkit.losses
import labkit.rewards
from labkit.catalog import catalog_frame
from labkit.commands.reference_runs import reward_funcs
from labkit.commands.where import where
from labkit.config import FIELD_DOCS, GENERIC_FIELDS, RESUMABLE_CHANGES, TrainConfig, preset
from labkit.losses import policy_loss
from labkit.trl_bridge import NOT_CARRIED


def catalog_tests_pass():
    """The catalog's own checks, unchanged, with the throwaway plug-in registered."""
    test_catalog.test_ids_are_unique_and_cover_the_brief_in_order()
    test_catalog.test_every_method_switch_of_the_config_belongs_to_an_implemented_entry()
    test_catalog.test_every_registered_method_is_listed()
    test_catalog.test_catalog_frame_has_one_row_per_method()


@pytest.fixture
def plug_in(tmp_path):
    """``plug_in(package, name, source, line)``: write ``source`` as ``name.py`` on ``package``'s
    path and run ``line`` (the one import line) in the package's namespace. The line must have
    the form of the lines already in the package's ``__init__.py``. Undone afterwards."""
    added = []

    def add(package, name, source, line):
        siblings = Path(package.__file__).read_text()
        form = line.replace(name, "{}")
        assert any(form.format(sibling.stem) in siblings
                   for sibling in Path(package.__file__).parent.glob("*.py")), \
            f"{line!r} is not the form of {package.__name__}'s import lines"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        package.__path__.append(str(tmp_path))
        importlib.invalidate_caches()
        before = set(vars(package))
        exec(line, vars(package))  # noqa: S102 (the import line, run as __init__.py runs it)
        added.append((package, name, set(vars(package)) - before))

    yield add
    for package, name, names in added:
        for attribute in names:
            delattr(package, attribute)
        sys.modules.pop(f"{package.__name__}.{name}", None)
        package.__path__.remove(str(tmp_path))


LOSS = """
    import torch

    from labkit.losses.registry import register_policy_loss
    from labkit.plugins import Setting, between


    @register_policy_loss(
        "toy_wreinforce", aggregation="token_mean",
        options={"toy_wreinforce_lambda": Setting(
            0.1, between(0, 1), "W-REINFORCE: the weight of positive samples", trl=None)},
        paper=("The Surprising Effectiveness of Negative Reinforcement in LLM Reasoning",
               "2506.01347"),
        summary="REINFORCE with positive samples weighted by lambda")
    def _toy_wreinforce(x, toy_wreinforce_lambda):
        weight = torch.where(x.advantages > 0, toy_wreinforce_lambda, 1.0)
        return -weight * x.advantages * x.logp
"""


def check_the_loss_plug_in():
    """Run in a fresh interpreter whose ``labkit.losses`` ran the toy loss's import line before
    ``labkit.config`` was imported, as the line in ``labkit/losses/__init__.py`` would: the
    config is built once, at its import, with every setting registered by then."""
    # the formula: -lambda * A * logp for A > 0, -A * logp otherwise, token mean
    logp = torch.zeros(2, 3, requires_grad=True)
    loss, _ = policy_loss(logp, None, torch.tensor([1.0, -2.0]), torch.ones(2, 3),
                          loss_type="toy_wreinforce", toy_wreinforce_lambda=0.5)
    loss.backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-0.5] * 3, [2.0] * 3]) / 6)
    # the config: a field with its default, range and doc; the loss type is accepted
    assert TrainConfig().toy_wreinforce_lambda == 0.1
    assert FIELD_DOCS["toy_wreinforce_lambda"].startswith("W-REINFORCE")
    # its facts come from its declaration: TRL has neither loss nor knob, no resume may change it
    assert NOT_CARRIED["toy_wreinforce_lambda"] == "loss_type='toy_wreinforce' only (refused)"
    assert "toy_wreinforce_lambda" not in RESUMABLE_CHANGES | GENERIC_FIELDS
    preset("grpo", loss_type="toy_wreinforce", toy_wreinforce_lambda=0.3)
    with pytest.raises(ValueError, match=r"toy_wreinforce_lambda must be in \[0, 1\]"):
        TrainConfig(loss_type="toy_wreinforce", toy_wreinforce_lambda=2.0)
    # the catalog lists it with its setting, and the catalog's tests pass unchanged
    note = catalog_frame().set_index("id").loc["toy-wreinforce", "note"]
    assert "setting toy_wreinforce_lambda (default 0.1)" in note
    catalog_tests_pass()
    assert where("toy_wreinforce")[0].file.endswith("toy_wreinforce.py")


#: The fresh interpreter: the import line runs in ``labkit.losses``' namespace before anything
#: imports ``labkit.config``, then this module's checks run.
FRESH = """
import sys

import labkit.losses

assert "labkit.config" not in sys.modules
labkit.losses.__path__.append({folder!r})
exec({line!r}, vars(labkit.losses))
sys.path.insert(0, {tests!r})
import test_plugin_costs

test_plugin_costs.check_the_loss_plug_in()
"""


def test_a_loss_with_a_setting_costs_its_file_one_import_line_and_its_formula_test(tmp_path):
    line = "from labkit.losses import toy_wreinforce"
    siblings = Path(labkit.losses.__file__).read_text()
    assert "from labkit.losses import cispo" in siblings, "not the form of the import lines"
    (tmp_path / "toy_wreinforce.py").write_text(textwrap.dedent(LOSS))
    script = FRESH.format(folder=str(tmp_path), line=line, tests=str(Path(__file__).parent))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=Path(__file__).parents[1], timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


ESTIMATOR = """
    import torch

    from labkit.advantages.groups import group_rows
    from labkit.advantages.registry import Advantages, register_advantage_estimator

    __all__ = ["toy_rank_advantages"]


    def toy_rank_advantages(rewards, num_generations):
        '''Each completion's centred rank in its group.'''
        groups = group_rows(rewards, num_generations)
        ranks = groups.argsort(-1).argsort(-1).to(rewards.dtype)
        return (ranks - ranks.mean(-1, keepdim=True)).reshape(-1)


    @register_advantage_estimator("toy_rank", summary="the centred rank in the group")
    def _toy_rank(x):
        return Advantages(toy_rank_advantages(x.rewards, x.num_generations))
"""


def test_an_estimator_costs_its_file_and_one_import_line_and_imports_like_its_siblings(plug_in):
    plug_in(labkit.advantages, "toy_rank", ESTIMATOR,
            "from labkit.advantages.toy_rank import *")
    try:
        from labkit.advantages import rloo_advantages, toy_rank_advantages  # siblings alike

        assert callable(rloo_advantages)
        rewards = torch.tensor([0.0, 3.0, 1.0, 5.0, 4.0, 2.0])
        torch.testing.assert_close(toy_rank_advantages(rewards, 3),
                                   torch.tensor([-1.0, 1.0, 0.0, 1.0, 0.0, -1.0]))
        assert "toy_rank" in labkit.advantages.estimators()
        preset("grpo", advantage_estimator="toy_rank")
        with pytest.raises(ValueError, match="compares the completions of a group"):
            preset("grpo", advantage_estimator="toy_rank", num_generations=1)
        assert catalog_frame().set_index("id").loc["toy-rank", "changes"] == "advantage"
        catalog_tests_pass()
        assert where("toy_rank")[0].file.endswith("toy_rank.py")
    finally:
        labkit.advantages.unregister_advantage_estimator("toy_rank")


REWARD = """
    from labkit.rewards.registry import register_reward
    from labkit.rewards.rule_based import completion_content, completion_list


    @register_reward("toy_repetition", summary="minus the share of repeated word 3-grams")
    def toy_repetition_reward(prompts, completions, **columns):
        rewards = []
        for completion in completion_list(completions):
            words = completion_content(completion).split()
            grams = list(zip(words, words[1:], words[2:]))
            rewards.append(-(1 - len(set(grams)) / len(grams)) if grams else 0.0)
        return rewards
"""


def test_a_reward_costs_its_file_and_one_import_line(plug_in):
    plug_in(labkit.rewards, "toy_repetition", REWARD, "from labkit.rewards import toy_repetition")
    try:
        (reward,) = reward_funcs({"reward_funcs": ["toy_repetition"]}, "spec.json")
        assert reward is labkit.rewards.named_reward("toy_repetition")
        assert reward(None, ["a b c a b c", "a b c d", 7]) == [-0.25, 0.0, 0.0]
        row = catalog_frame().set_index("id").loc["toy-repetition"]
        assert row["changes"] == "reward" and row["status"] == "implemented"
        catalog_tests_pass()
        assert where("toy_repetition")[0].file.endswith("toy_repetition.py")
    finally:
        labkit.rewards.registry.unregister_reward("toy_repetition")
    with pytest.raises(ValueError, match="is not one of the lab's named rewards"):
        reward_funcs({"reward_funcs": ["toy_repetition"]}, "spec.json")
