"""Turn-level credit (labkit.advantages.turn_level, advantage_estimator="turn_grpo"): each policy
turn's tokens get their own turn's group-relative return-to-go; the episodes record each turn's
reward where the turn ends; the trainer hands both to the estimator and an episode batch trains."""

import copy
import math
import re

import pytest
import torch

from labkit.advantages import group_advantages, policy_turn_ids, turn_level_advantages
from labkit.agents import GuessingEnv
from labkit.agents.tool_calls import format_tool_call

D = torch.float64

# Two groups of two episodes, ten completion columns. 1 = the policy wrote it, 0 = the
# environment (or padding). Each answered turn's reward sits on its last policy token; an
# episode's last turn got no reply, so a value there (row 0, column 8) must be ignored.
ACTIONS = torch.tensor([
    [1, 1, 0, 0, 1, 1, 0, 1, 1, 0],   # three turns: columns 0-1, 4-5, 7-8
    [1, 1, 1, 0, 0, 1, 0, 0, 0, 0],   # two turns: 0-2, 5
    [1, 0, 0, 1, 1, 1, 0, 0, 0, 0],   # two turns: 0, 3-5
    [1, 1, 0, 1, 0, 0, 0, 0, 0, 0],   # two turns: 0-1, 3
])
GAINS = torch.zeros(4, 10, dtype=D)
GAINS[0, 1], GAINS[0, 5], GAINS[0, 8] = 0.25, 0.5, 0.3
GAINS[1, 2] = 0.5
GAINS[2, 0] = 0.2
GAINS[3, 1] = 0.6
OUTCOME = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=D)


def pair(a, b):
    """GRPO's advantages of a group of two: +-(a - b) / 2 over the Bessel std |a - b| / sqrt(2)."""
    if a == b:
        return 0.0, 0.0
    std = abs(a - b) / math.sqrt(2)
    return (a - b) / 2 / (std + 1e-4), (b - a) / 2 / (std + 1e-4)


def by_hand(gamma):
    """The module docstring's formula written out for the batch above."""
    e0, e1 = pair(1.0, 0.0)                       # episode terms (outcome)
    e2, e3 = pair(0.0, 1.0)
    t00, t10 = pair(0.25 + gamma * 0.5, 0.5)      # turn 0 of group one: both answered
    t20, t30 = pair(0.2, 0.6)                     # turn 0 of group two
    # row 0's turn 1: the only answered turn 1 of its group, a turn term of 0; last turns: none
    expected = torch.zeros(4, 10, dtype=D)
    expected[0, 0:2], expected[0, 4:6], expected[0, 7:9] = e0 + t00, e0, e0
    expected[1, 0:3], expected[1, 5] = e1 + t10, e1
    expected[2, 0], expected[2, 3:6] = e2 + t20, e2
    expected[3, 0:2], expected[3, 3] = e3 + t30, e3
    return expected


@pytest.mark.parametrize("gamma", [0.0, 0.5, 1.0])
def test_hand_computed_advantages_on_a_tiny_batch(gamma):
    got = turn_level_advantages(OUTCOME, GAINS, ACTIONS, ACTIONS, 2, gamma=gamma)
    torch.testing.assert_close(got, by_hand(gamma), atol=1e-12, rtol=0)


def test_every_token_of_a_turn_gets_that_turns_value_and_the_environment_none():
    g = torch.Generator().manual_seed(3)
    actions = (torch.rand(12, 40, generator=g) < 0.6).long()
    gains = torch.rand(12, 40, generator=g, dtype=D) * actions
    outcome = (torch.rand(12, generator=g) < 0.5).to(D)
    adv = turn_level_advantages(outcome, gains, actions, actions, 4)
    ids = policy_turn_ids(actions)
    assert torch.all(adv[actions == 0] == 0), "an environment token got an advantage"
    assert ids.max() >= 3, "the random batch should hold episodes of several turns"
    varied = False
    for row in range(12):
        values = [adv[row][ids[row] == k].unique() for k in range(int(ids[row].max()) + 1)]
        assert all(v.numel() == 1 for v in values), f"row {row}: a turn holds two values"
        varied |= len({float(v) for v in values}) > 1
    assert varied, "no episode's turns differ: the advantage is not per turn"


def test_turn_ids_count_runs_of_policy_tokens():
    assert policy_turn_ids(ACTIONS[:1]).tolist() == [[0, 0, -1, -1, 1, 1, -1, 2, 2, -1]]


def test_the_loss_mask_zeroes_what_it_leaves_out():
    mask = ACTIONS.clone()
    mask[0, 4:] = 0  # e.g. a truncated episode masked out past column 3
    got = turn_level_advantages(OUTCOME, GAINS, ACTIONS, mask, 2)
    assert torch.all(got[0, 4:] == 0)
    torch.testing.assert_close(got[:, :4], by_hand(0.0)[:, :4], atol=1e-12, rtol=0)


def test_without_turn_rewards_it_is_grpo():
    """Single-turn completions (no action mask), or episodes whose environment keeps no per-turn
    rewards: no turn term, GRPO's advantage on every policy token."""
    g = torch.Generator().manual_seed(0)
    rewards = torch.randn(4 * 6, dtype=D, generator=g)
    mask = (torch.arange(9)[None, :] < torch.randint(1, 10, (24, 1), generator=g)).long()
    for scale in ("group", "batch", "none"):
        got = turn_level_advantages(rewards, None, None, mask, 6, scale_rewards=scale)
        want = group_advantages(rewards, 6, scale)[:, None] * mask
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    episodes = turn_level_advantages(OUTCOME, None, ACTIONS, ACTIONS, 2)
    torch.testing.assert_close(episodes, group_advantages(OUTCOME, 2)[:, None] * ACTIONS,
                               atol=1e-12, rtol=0)


@pytest.mark.parametrize("kwargs, message", [
    ({"gamma": 1.5}, "gamma must lie in [0, 1] (a discount per turn), got gamma=1.5"),
    ({"gamma": -0.1}, "got gamma=-0.1"),
    ({"scale_rewards": "turn"}, "scale_rewards must be one of ('group', 'batch', 'none')"),
    ({"turn_rewards": GAINS[:, :5]}, "turn_rewards must have shape (4, 10)"),
    ({"turn_rewards": torch.where(ACTIONS.bool(), torch.nan, GAINS)},
     "turn_rewards contains non-finite (NaN/inf) values at rows [0, 1, 2, 3]"),
    ({"rewards": torch.tensor([1.0, math.inf, 0.0, 0.0], dtype=D)},
     "rewards contains infinite values at rows [1]"),
    ({"num_generations": 3}, "is not divisible by num_generations = 3"),
])
def test_bad_settings_are_refused_by_name_and_value(kwargs, message):
    args = {"rewards": OUTCOME, "turn_rewards": GAINS, "action_mask": ACTIONS, "mask": ACTIONS,
            "num_generations": 2, **kwargs}
    with pytest.raises(ValueError, match=re.escape(message)):
        turn_level_advantages(**args)


@pytest.mark.parametrize("overrides, message", [
    ({"importance_sampling_level": "sequence"},
     "importance_sampling_level='sequence' (GSPO) needs one advantage per completion"),
    ({"kl_in_reward": True, "beta": 0.04}, "kl_in_reward=True with advantage_estimator='turn_grpo'"),
    ({"gamma": 2.0}, "gamma"),
])
def test_the_config_refuses_what_turn_grpo_cannot_honour(overrides, message):
    from labkit.config import TrainConfig

    with pytest.raises(ValueError, match=re.escape(message)):
        TrainConfig(advantage_estimator="turn_grpo", **overrides)


# ---- the episodes record each turn's reward where it ends -------------------------------------
def test_episodes_put_each_guess_reward_on_its_turns_last_token(monkeypatch):
    from test_episodes import TOKENIZER, _Weights, scripted

    from labkit.agents import episodes as episodes_module
    from labkit.agents.episodes import run_episodes

    turns = ["<think></think>" + format_tool_call("guess", {"code": "55"}),
             "<think></think>" + format_tool_call("guess", {"code": "72"}),
             "<think></think><answer>72</answer>"]
    monkeypatch.setattr(episodes_module, "generate_from_ids", scripted(turns))
    envs = [GuessingEnv() for _ in range(2)]
    for env in envs:
        env.reset(code="73")
    out = run_episodes(_Weights(), TOKENIZER, ["Guess 2 digits"] * 2, envs,
                       max_completion_length=400)
    ids = policy_turn_ids(out.action_mask)
    for row, env in enumerate(envs):
        assert len(env.turn_rewards) == 2 and out.turns[row] == 3
        ends = [int((ids[row] == k).nonzero().max()) for k in range(3)]
        placed = out.turn_rewards[row]
        assert placed[ends[0]].item() == pytest.approx(env.turn_rewards[0])
        assert placed[ends[1]].item() == pytest.approx(env.turn_rewards[1])
        assert placed[ends[2]].item() == 0.0  # the answer calls nothing
        assert placed.sum().item() == pytest.approx(sum(env.turn_rewards))
        assert env.turn_rewards[0] > 0 and env.turn_rewards[1] > 0


def test_a_reply_cut_by_the_budget_records_no_reward(monkeypatch):
    """The call ran (the environment counted its reward) but its reply did not fit: the episode
    ends truncated, without the reply, and without the turn's reward."""
    from test_episodes import TOKENIZER, _Weights, scripted

    from labkit.agents import episodes as episodes_module
    from labkit.agents.episodes import environment_turn_ids, run_episodes

    turn = "<think></think>" + format_tool_call("guess", {"code": "55"})
    monkeypatch.setattr(episodes_module, "generate_from_ids", scripted([turn]))
    probe = GuessingEnv()
    probe.reset(code="73")
    written = len(TOKENIZER(turn + TOKENIZER.eos_token, add_special_tokens=False)["input_ids"])
    reply = len(environment_turn_ids(TOKENIZER, probe.guess(code="55")))
    env = GuessingEnv()
    env.reset(code="73")
    out = run_episodes(_Weights(), TOKENIZER, ["Guess 2 digits"], [env],
                       max_completion_length=written + reply)
    assert bool(out.truncated[0]) and int(out.lengths[0]) == written
    assert env.turn_rewards[0] > 0 and out.turn_rewards.sum() == 0


def test_an_environment_without_turn_rewards_records_none(monkeypatch):
    from test_episodes import run

    out, _ = run(monkeypatch, ["<think></think><answer>5525</answer>"])
    assert out.turn_rewards is None


# ---- the trainer hands them over and an episode batch trains ----------------------------------
@pytest.fixture(scope="module")
def tool_model():
    from labkit.models import load_policy

    return load_policy("tiny-tools", device="cpu", dtype="float32")


@pytest.mark.usefixtures("one_thread")
def test_an_episode_batch_trains_with_turn_level_credit(tool_model):
    from labkit.agents import guessing_dataset
    from labkit.config import TrainConfig
    from labkit.rewards.environment import environment_reward
    from labkit.trainer import Trainer

    model, tokenizer = tool_model
    config = TrainConfig(model_name_or_path="tiny-tools", advantage_estimator="turn_grpo",
                         prompts_per_step=2, num_generations=4, max_completion_length=200,
                         max_tool_calling_iterations=4, max_steps=1, device="cpu",
                         dtype="float32", progress=False, seed=0, warmup_ratio=0.0, gamma=0.0)
    trainer = Trainer(config, model=copy.deepcopy(model), tokenizer=tokenizer,
                      train_dataset=guessing_dataset(8, seed=0),
                      reward_funcs=[environment_reward], environment_factory=GuessingEnv)
    batch, _ = trainer.sample_and_score()
    assert batch.turn_rewards is not None and batch.turn_rewards.sum() > 0
    assert policy_turn_ids(batch.action_mask).max() >= 1, "no episode took a second turn"
    trainer.compute_advantages(batch)
    want = turn_level_advantages(batch.rewards, batch.turn_rewards, batch.action_mask,
                                 batch.loss_mask, 4, gamma=0.0)
    assert torch.equal(batch.token_advantages, want)
    assert torch.all(batch.token_advantages[batch.action_mask == 0] == 0)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    row = trainer.update(batch)
    assert row["skipped_nonfinite"] == 0 and math.isfinite(row["loss"]) and row["grad_norm"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
