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
from fuzz.harness import assert_good, case_params

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("case", case_params(classroom))
def test_classroom_commands_and_checkpoint_folders(case):
    assert_good(case)


@pytest.mark.parametrize("case", case_params(data_rewards))
def test_data_that_keys_or_judges_nothing(case):
    assert_good(case)


@pytest.mark.parametrize("case", case_params(agents))
def test_agent_episode_loop(case):
    assert_good(case)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # TRL's deprecations, as test_trl_bridge
@pytest.mark.parametrize("case", case_params(trl_in))
def test_trl_in(case):
    assert_good(case)
