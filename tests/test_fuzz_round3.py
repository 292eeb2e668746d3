"""Round three of the hostile fuzz: the surfaces a hostile tester broke after round two (the cases
live in tests/fuzz/, one module per surface; ``python tests/fuzz/tally.py`` counts their outcomes
with the others). Surfaces: 12 the classroom commands and checkpoints' folders (save into a
folder the lab did not write, resume with other data or rewards, reference runs and section
times), 13 data that keys or judges nothing (shared ids, unjudgeable rows, environment rewards
without an environment, an environment's reward as accuracy), 14 the agent episode loop
(failing tools, bad factories, turn limits), 15 TRL in (GRPOConfig settings as a dict,
``scale_rewards`` booleans, peft's LoraConfig, ``train(resume_from_checkpoint=...)``).

Every case must end *clear* (refused, naming the input, its value and what is allowed) or
*handled* (accepted, with a result its check approves), as in round two.
"""

from __future__ import annotations

import pytest
from fuzz import agents, classroom, data_rewards, trl_in
from fuzz.harness import GOOD, run_case

pytestmark = pytest.mark.usefixtures("one_thread")


def _params(module):
    return [pytest.param(case, id=case.id, marks=[pytest.mark.slow] if case.slow else [])
            for case in module.cases()]


def _assert_good(case):
    result = run_case(case)
    assert result.outcome in GOOD, f"{case.id}: {result.outcome}: {result.detail}"


@pytest.mark.parametrize("case", _params(classroom))
def test_classroom_commands_and_checkpoint_folders(case):
    _assert_good(case)


@pytest.mark.parametrize("case", _params(data_rewards))
def test_data_that_keys_or_judges_nothing(case):
    _assert_good(case)


@pytest.mark.parametrize("case", _params(agents))
def test_agent_episode_loop(case):
    _assert_good(case)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # TRL's deprecations, as test_trl_bridge
@pytest.mark.parametrize("case", _params(trl_in))
def test_trl_in(case):
    _assert_good(case)
