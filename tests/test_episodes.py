"""Multi-turn episodes: a tool's reply comes back as tokens the policy did not write, every token
keeps its author, and only the policy's tokens enter the loss.

The bookkeeping is tested with a scripted sampler (what the policy "writes" is fixed by the
test, so every count is known); the trainer's use of it with the tiny tool model."""

import re

import pytest
import torch

from labkit.agents import episodes as episodes_module
from labkit.agents.calculator import CalculatorEnv
from labkit.agents.episodes import (
    ENVIRONMENT_TURN,
    action_mask_of,
    environment_turn_ids,
    run_episodes,
)
from labkit.agents.tool_calls import format_tool_call
from labkit.experience import Experience
from labkit.losses import policy_loss
from labkit.models import build_char_tokenizer
from labkit.sampling import Rollout

TOKENIZER = build_char_tokenizer(tool_tags=True)
CALL = "<think></think>" + format_tool_call("calculator", {"expression": "425*13"})
ANSWER = "<think></think><answer>5525</answer>"


class _Weights(torch.nn.Module):
    """Just enough of a model for run_episodes: a device and a dtype."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))


def scripted(turns_by_calls):
    """A stand-in for the sampler: the turn a row writes depends on how many tool replies its
    context already holds (``turns_by_calls[n]``); each token gets log-prob -0.5."""
    response = TOKENIZER.convert_tokens_to_ids("<tool_response>")

    def generate_from_ids(model, tokenizer, ids, mask, *, max_completion_length, **_):
        rows = []
        for row_ids, row_mask in zip(ids, mask):
            calls = int((row_ids[row_mask.bool()] == response).sum())
            text = turns_by_calls[min(calls, len(turns_by_calls) - 1)]
            rows.append(tokenizer(text + tokenizer.eos_token, add_special_tokens=False)
                        ["input_ids"][:max_completion_length])
        width = max(len(r) for r in rows)
        tokens = torch.full((len(rows), width), tokenizer.pad_token_id)
        cmask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            tokens[i, :len(r)] = torch.tensor(r)
            cmask[i, :len(r)] = 1
        lengths = cmask.sum(-1)
        truncated = torch.tensor([r[-1] != tokenizer.eos_token_id for r in rows])
        return Rollout(ids, mask, tokens, cmask, -0.5 * cmask.float(), cmask.float(), lengths,
                       truncated, [tokenizer.decode(r) for r in rows])

    return generate_from_ids


def run(monkeypatch, turns, n=2, **kwargs):
    monkeypatch.setattr(episodes_module, "generate_from_ids", scripted(turns))
    envs = [CalculatorEnv() for _ in range(n)]
    for env in envs:
        env.reset(answer="5525")
    kwargs.setdefault("max_completion_length", 400)
    return run_episodes(_Weights(), TOKENIZER, ["425*13=?"] * n, envs, **kwargs), envs


def test_the_environment_turn_is_what_the_chat_template_renders():
    messages = [{"role": "user", "content": "425*13=?"}, {"role": "assistant", "content": CALL},
                {"role": "tool", "content": "5525"}]
    before = TOKENIZER.apply_chat_template(messages[:2], tokenize=False)
    after = TOKENIZER.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    # the generated turn ends at the end-of-turn token; the template's newline after it and the
    # tool message are the environment's, as TRL computes them
    assert before.endswith("<|im_end|>\n")
    assert after[len(before) - 1:] == ENVIRONMENT_TURN.format(reply="5525")


def test_a_tool_call_gets_its_reply_as_masked_tokens(monkeypatch):
    episodes, envs = run(monkeypatch, [CALL, ANSWER])
    call_ids = TOKENIZER(CALL + TOKENIZER.eos_token, add_special_tokens=False)["input_ids"]
    reply_ids = environment_turn_ids(TOKENIZER, "5525")
    answer_ids = TOKENIZER(ANSWER + TOKENIZER.eos_token, add_special_tokens=False)["input_ids"]
    expected = call_ids + reply_ids + answer_ids
    for row in range(2):
        assert episodes.completion_ids[row, :len(expected)].tolist() == expected
        actions = episodes.action_mask[row, :len(expected)].tolist()
        assert actions == [1] * len(call_ids) + [0] * len(reply_ids) + [1] * len(answer_ids)
        # no sampling log-prob for the tool's tokens
        assert episodes.logprobs[row, len(call_ids):len(call_ids) + len(reply_ids)].eq(0).all()
    assert episodes.tool_calls.tolist() == [1, 1] and episodes.turns.tolist() == [2, 2]
    assert episodes.tool_errors.tolist() == [0, 0] and not episodes.truncated.any()
    assert [env.tool_calls for env in envs] == [1, 1]
    assert "<tool_response>\n5525\n</tool_response>" in episodes.texts[0]
    assert episodes.texts[0].endswith("<answer>5525</answer>")


def test_a_malformed_call_is_answered_with_an_error_and_counted(monkeypatch):
    bad = "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"2**\"}}\n"
    episodes, _ = run(monkeypatch, [bad + "</tool_call>", ANSWER], n=1)
    assert episodes.tool_calls.tolist() == [1] and episodes.tool_errors.tolist() == [1]
    assert "error: " in episodes.texts[0]


def test_the_turn_limit_leaves_the_call_unanswered(monkeypatch):
    episodes, envs = run(monkeypatch, [CALL, CALL, CALL, ANSWER],
                         max_tool_calling_iterations=2)
    assert episodes.tool_calls.tolist() == [2, 2] and episodes.turn_limit.all()
    assert episodes.turns.tolist() == [3, 3]
    assert [env.tool_calls for env in envs] == [2, 2]
    assert episodes.action_mask[0, episodes.lengths[0] - 1] == 1  # ends with its own call


def test_the_length_budget_counts_the_environments_tokens(monkeypatch):
    call_len = len(TOKENIZER(CALL + TOKENIZER.eos_token, add_special_tokens=False)["input_ids"])
    episodes, _ = run(monkeypatch, [CALL, ANSWER], max_completion_length=call_len + 5)
    # the reply does not fit after the call: the episode stops there, truncated
    assert episodes.truncated.all() and episodes.tool_calls.tolist() == [1, 1]
    assert (episodes.lengths == call_len).all()
    assert int(episodes.completion_mask.sum(-1).max()) <= call_len + 5


def test_the_action_mask_can_be_read_back_from_the_tokens(monkeypatch):
    episodes, _ = run(monkeypatch, [CALL, CALL, ANSWER])
    for row in range(2):
        ids = episodes.completion_ids[row]
        assert action_mask_of(TOKENIZER, ids) == episodes.action_mask[row].tolist()


def test_only_the_policys_tokens_enter_the_loss(monkeypatch):
    episodes, _ = run(monkeypatch, [CALL, ANSWER])
    batch = Experience.from_rollout(episodes, TOKENIZER.pad_token_id)
    assert torch.equal(batch.loss_mask, batch.completion_mask * episodes.action_mask)
    buggy = Experience.from_rollout(episodes, TOKENIZER.pad_token_id,
                                    train_on_environment_tokens=True)
    assert torch.equal(buggy.loss_mask, buggy.completion_mask)
    # the gradient reaches the policy's tokens only, and the token mean counts only them
    logp = torch.full(batch.completion_ids.shape, -1.0, requires_grad=True)
    loss, _ = policy_loss(logp, None, torch.tensor([1.0, -1.0]), batch.loss_mask,
                                loss_type="dapo")
    loss.backward()
    env = (batch.completion_mask == 1) & (episodes.action_mask == 0)
    assert logp.grad[env].eq(0).all()
    n_policy = int(batch.loss_mask.sum())
    assert torch.allclose(logp.grad[0][batch.loss_mask[0].bool()], torch.tensor(-1.0 / n_policy))


class _FailingCalculator(CalculatorEnv):
    """The calculator's tool, failing on every call with ``error`` (a tool written in a hurry)."""

    error = KeyError("expression")

    def calculator(self, expression: str) -> str:
        raise self.error


@pytest.mark.parametrize("error", [KeyError("expression"), TypeError("bad operand"),
                                   ZeroDivisionError("division by zero")])
def test_a_tool_that_raises_costs_a_turn_not_the_episode(monkeypatch, error):
    monkeypatch.setattr(episodes_module, "generate_from_ids", scripted([CALL, ANSWER]))
    monkeypatch.setattr(_FailingCalculator, "error", error)
    envs = [_FailingCalculator() for _ in range(2)]
    episodes = run_episodes(_Weights(), TOKENIZER, ["425*13=?"] * 2, envs,
                            max_completion_length=400)
    assert episodes.tool_calls.tolist() == [1, 1] and episodes.tool_errors.tolist() == [1, 1]
    assert f"calculator raised {type(error).__name__}" in episodes.texts[0]
    assert episodes.texts[0].endswith("<answer>5525</answer>")  # the policy answered after it


@pytest.mark.parametrize("limit", [1.5, True, "2", 0, -1, [2]])
def test_the_turn_limit_must_be_a_count(monkeypatch, limit):
    with pytest.raises(ValueError, match=f"max_tool_calling_iterations must be an integer >= 1, "
                                         f"got {re.escape(repr(limit))}"):
        run(monkeypatch, [CALL, ANSWER], max_tool_calling_iterations=limit)


def test_every_episode_needs_an_environment():
    with pytest.raises(ValueError, match="one environment per episode"):
        run_episodes(_Weights(), TOKENIZER, ["1+1=?"], [CalculatorEnv()], num_generations=2)


# ---------------------------------------------------------------------------------------------
# the trainer's episodes, with the tiny tool model


@pytest.fixture(scope="module")
def tool_model():
    from labkit.models import load_policy

    return load_policy("tiny-tools", device="cpu", dtype="float32")


def _trainer(tool_model, config, data, factory, reward_funcs=None):
    import copy

    from labkit.trainer import Trainer

    model, tokenizer = tool_model
    return Trainer(config, model=copy.deepcopy(model), tokenizer=tokenizer, train_dataset=data,
                   reward_funcs=reward_funcs, environment_factory=factory)


@pytest.mark.usefixtures("one_thread")
def test_remax_scores_its_greedy_baseline_with_the_environments_reward(tool_model):
    """ReMax's baseline is a greedy *episode*: its guesses are answered and the guessing game's
    own reward (per-turn, kept by the environment) scores it; a single-turn greedy completion has
    no environment and scored NaN, which stopped the step."""
    from labkit.agents import GuessingEnv, guessing_dataset
    from labkit.agents.episodes import environments
    from labkit.config import TrainConfig
    from labkit.rewards.environment import turn_reward
    from labkit.training.batches import greedy_rewards

    config = TrainConfig(model_name_or_path="tiny-tools", advantage_estimator="remax",
                         prompts_per_step=2, num_generations=2, max_completion_length=96,
                         max_tool_calling_iterations=3, max_steps=1, device="cpu",
                         dtype="float32", progress=False, seed=0)
    data = guessing_dataset(4, seed=0)
    trainer = _trainer(tool_model, config, data, GuessingEnv, [turn_reward])
    batch, _ = trainer.sample_and_score()
    baseline = greedy_rewards(trainer.sampling.inputs(trainer.temperature), batch)
    assert torch.isfinite(baseline).all() and baseline.shape == (2,)
    # the same prompts played greedily by hand, scored by the environments they leave
    rows = data[batch.prompt_index[::2].tolist()]
    envs = environments(GuessingEnv, rows, 1)
    greedy = run_episodes(trainer.model, trainer.tokenizer, rows["prompt"], envs,
                          max_completion_length=96, max_tool_calling_iterations=3, greedy=True)
    assert greedy.tool_calls.sum() > 0, "the greedy episodes never guessed: no environment turn"
    expected = torch.tensor(turn_reward(rows["prompt"], greedy.texts, environments=envs))
    assert torch.equal(baseline.cpu(), expected)
    # and the whole step runs on it
    row = trainer.training_step()
    assert torch.isfinite(torch.tensor([row["reward"], row["loss"]])).all()


class _Counted(CalculatorEnv):
    built = 0

    def __init__(self):
        super().__init__()
        type(self).built += 1


@pytest.mark.parametrize("factory, named", [
    (lambda: None, "returned NoneType None, which has no reset method"),
    (object, "returned object <object object at"),
    (lambda: type("Env", (), {"reset": 3})(), "which has no reset method"),
    (CalculatorEnv(), "must be a callable that returns an environment"),
    ({"calculator": CalculatorEnv}, "TRL's dict of named environments"),
])
def test_the_factory_is_checked_when_the_trainer_is_built(tool_model, factory, named):
    from labkit.config import TrainConfig
    from labkit.tasks import load_split

    config = TrainConfig(model_name_or_path="tiny-tools", prompts_per_step=2, num_generations=2,
                         max_completion_length=32, max_steps=1, device="cpu", dtype="float32",
                         progress=False)
    with pytest.raises(TypeError, match=re.escape(named)) as refused:
        _trainer(tool_model, config, load_split("train").select(range(4)), factory)
    assert "environment_factory" in str(refused.value)


def test_the_factory_builds_one_environment_at_build_time(tool_model):
    from labkit.config import TrainConfig
    from labkit.tasks import load_split

    config = TrainConfig(model_name_or_path="tiny-tools", prompts_per_step=2, num_generations=2,
                         max_completion_length=32, max_steps=1, device="cpu", dtype="float32",
                         progress=False)
    _Counted.built = 0
    trainer = _trainer(tool_model, config, load_split("train").select(range(4)), _Counted)
    assert _Counted.built == 1 and trainer.environment_factory is _Counted


def test_rlplus_demonstrations_are_refused_beside_an_environment(tool_model):
    from labkit.config import TrainConfig
    from labkit.tasks import load_split

    config = TrainConfig(model_name_or_path="tiny-tools", prompts_per_step=2, num_generations=2,
                         max_completion_length=32, max_steps=1, device="cpu", dtype="float32",
                         progress=False, rlplus_demonstrations=True, loss_type="rlplus")
    with pytest.raises(ValueError, match="rlplus_demonstrations=True with an "
                                         "environment_factory: RL-PLUS's demonstrations are "
                                         "single-turn texts"):
        _trainer(tool_model, config, load_split("train").select(range(4)), CalculatorEnv)
