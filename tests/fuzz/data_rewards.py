"""Surface 13: data that keys or judges nothing. Datasets whose rows share an ``id``
(evaluation, rejection sampling, RFT, the trainer's evaluation: everything that groups samples
by id), datasets the accuracy reward cannot judge a single row of (an unknown family such as
``"Add"``, answers all None), reference-run specs whose environment rewards have no environment
to read, the guessing game with a spec's own ``data``, and environments whose ``get_reward()``
is not an accuracy (evaluation) or not a number (training)."""

from __future__ import annotations

import functools
import json
import math

from fuzz.harness import Case
from fuzz.scratch import write

SURFACE = 13


@functools.cache
def _policy(name: str = "tiny"):
    import torch

    from labkit.models import load_policy

    torch.set_num_threads(1)
    return load_policy(name, device="cpu", dtype="float32")


def _tools():
    return _policy("tiny-tools")


def _rows(n: int = 4, **columns):
    """``n`` rows of the task suite's eval split, with ``columns`` replaced (one value per row)."""
    from labkit.tasks import load_split

    data = load_split("eval").select(range(n))
    for name, values in columns.items():
        data = data.remove_columns(name).add_column(name, list(values))
    return data


#: Two rows share the id "dup", with different prompts (and answers).
def _duplicated():
    return _rows(4, id=["dup", "b", "dup", "d"])


def _evaluate(data, **kwargs):
    from labkit.evaluate import evaluate

    model, tokenizer = _policy()
    return evaluate(model, tokenizer, data, k=1, max_completion_length=8, **kwargs)


def _sample_answers(data):
    from labkit.evaluate import sample_answers

    model, tokenizer = _policy()
    return sample_answers(model, tokenizer, data, k=1, max_completion_length=8)


def _rejection_sample(data):
    from labkit.finetune.rft import rejection_sample

    model, tokenizer = _policy()
    return rejection_sample(model, tokenizer, data, k=1, max_completion_length=8)


def _rft(train, eval_dataset):
    from labkit.finetune.rft import rft

    model, tokenizer = _policy()
    return rft(model, tokenizer, train, rounds=1, k=1, eval_dataset=eval_dataset, eval_k=1,
               max_completion_length=8)


def _trainer(train=None, eval_dataset=None, reward_funcs=None, environment_factory=None,
             **overrides):
    import copy

    from labkit.config import preset
    from labkit.trainer import Trainer

    model, tokenizer = _policy()
    config = preset("grpo", **{"max_steps": 1, "prompts_per_step": 2, "num_generations": 2,
                               "max_completion_length": 8, "eval_every": 0, "eval_k": 1,
                               "progress": False, **overrides})
    return Trainer(config, model=copy.deepcopy(model), tokenizer=tokenizer,
                   train_dataset=_rows(4) if train is None else train,
                   eval_dataset=eval_dataset, reward_funcs=reward_funcs,
                   environment_factory=environment_factory)


def _trainer_eval(eval_dataset):
    return _trainer(eval_dataset=eval_dataset, eval_every=1).evaluate()


def _spec(name: str, **spec):
    path = write(f"{name}.json", json.dumps({"preset": "grpo", **spec}))

    def call():
        from labkit.commands.reference_runs import load_spec

        return load_spec(path)
    return call


def _game_rows(n: int = 2):
    from labkit.agents.guessing import guessing_dataset

    return guessing_dataset(n, seed=1)


def _env_with_reward(value):
    """The guessing game whose ``get_reward()`` returns ``value``."""
    from labkit.agents.guessing import GuessingEnv

    class Env(GuessingEnv):
        def get_reward(self):
            return value
    return Env


def _evaluate_game(value):
    from labkit.evaluate import evaluate

    def call():
        model, tokenizer = _tools()
        return evaluate(model, tokenizer, _game_rows(), k=1, max_completion_length=16,
                        max_tool_calling_iterations=1,
                        environment_factory=_env_with_reward(value))
    return call


def _train_reward(value):
    """The training side: the environment reward of episodes whose get_reward() is ``value``."""
    from labkit.rewards import combine_rewards_by_weight
    from labkit.rewards.environment import environment_reward

    def call():
        env = _env_with_reward(value)()
        return combine_rewards_by_weight([environment_reward], None, ["p"], ["c"],
                                         environments=[env])
    return call


def _accuracy(expected):
    def check(table):
        got = float(table[table["family"] == "all"]["accuracy"].iloc[0])
        assert (math.isnan(got) and math.isnan(expected)) or got == expected, \
            f"eval accuracy {got}, expected {expected}"
    return check


def _prompts(n):
    def check(table):
        got = int(table[table["family"] == "all"]["prompts"].iloc[0])
        assert got == n, f"{got} prompts in the table, expected {n}"
    return check


def _built(trainer):
    assert trainer.train_dataset is not None


def cases() -> list[Case]:
    c = []

    def refuse(name, call, *fragments, seconds=10.0, prepare=_policy):
        c.append(Case(SURFACE, name, call, tuple(fragments), seconds=seconds, prepare=prepare))

    def accept(name, call, check=None, seconds=10.0, prepare=_policy):
        c.append(Case(SURFACE, name, call, None, check=check, seconds=seconds, prepare=prepare))

    # ---- rows that share an id (item 7) ----
    refuse("sample-answers-duplicate-ids", lambda: _sample_answers(_duplicated()), "id",
           "'dup'")
    refuse("evaluate-duplicate-ids", lambda: _evaluate(_duplicated()), "id", "'dup'")
    refuse("rejection-sample-duplicate-ids", lambda: _rejection_sample(_duplicated()), "id",
           "'dup'")
    refuse("rft-duplicate-ids", lambda: _rft(_duplicated(), None), "id", "'dup'")
    refuse("rft-duplicate-eval-ids", lambda: _rft(_rows(4), _duplicated()), "eval_dataset",
           "'dup'")
    refuse("trainer-evaluate-duplicate-ids", lambda: _trainer_eval(_duplicated()), "id",
           "'dup'", seconds=20.0)
    refuse("many-duplicate-ids-name-the-first", lambda: _evaluate(
        _rows(8, id=["a", "a", "b", "b", "c", "c", "d", "d"])), "'a'", "'b'", "'c'")
    refuse("integer-ids-shared", lambda: _evaluate(_rows(4, id=[7, 7, 8, 9])), "id", "7")
    accept("no-id-column-keys-by-row", lambda: _evaluate(_rows(4).remove_columns("id")),
           _prompts(4))
    accept("distinct-ids", lambda: _evaluate(_rows(4)), _prompts(4))

    # ---- data the accuracy reward cannot judge (item 8) ----
    refuse("train-family-Add", lambda: _trainer(_rows(4, family=["Add"] * 4)), "family",
           "'Add'", "'add'", seconds=20.0)
    refuse("train-family-unknown-mixed-case", lambda: _trainer(
        _rows(4, family=["Add", "SUB", "Add", "SUB"])), "family", "'Add'", "'SUB'",
        seconds=20.0)
    refuse("train-answers-all-none", lambda: _trainer(_rows(4, answer=[None] * 4)), "answer",
           "None", seconds=20.0)
    refuse("eval-family-Add", lambda: _trainer(eval_dataset=_rows(4, family=["Add"] * 4)),
           "eval_dataset", "family", "'Add'", seconds=20.0)
    refuse("evaluate-family-Add", lambda: _evaluate(_rows(4, family=["Add"] * 4)), "family",
           "'Add'")
    accept("train-some-rows-judged", lambda: _trainer(
        _rows(4, family=["Add", "add", "add", "add"])), _built, seconds=20.0)
    accept("train-no-answer-column-warns-only", lambda: _trainer(
        _rows(4).remove_columns("answer")), _built, seconds=20.0)
    accept("game-with-its-environment-reward", lambda: _trainer(
        _game_rows(4), eval_dataset=_game_rows(2), reward_funcs=[_environment_reward()],
        environment_factory=_game_env(), model_name_or_path="tiny-tools"), _built,
        seconds=20.0)
    refuse("game-with-the-accuracy-reward", lambda: _trainer(
        _game_rows(4), environment_factory=_game_env()), "family", "'guess'", seconds=20.0)
    refuse("environment-reward-without-environment", lambda: _trainer(
        reward_funcs=[_environment_reward()]), "environment_reward", "environment_factory",
        seconds=20.0)
    refuse("turn-reward-without-environment", lambda: _trainer(
        reward_funcs=[_turn_reward()]), "turn_reward", "environment_factory", seconds=20.0)

    # ---- reference-run specs (item 8) ----
    refuse("spec-environment-reward-no-environment", _spec(
        "env-none", reward_funcs=["environment"]), "'environment'", "no environment",
        prepare=None)
    refuse("spec-turns-no-environment", _spec("turns-none", reward_funcs=["format", "turns"]),
           "'turns'", "no environment", prepare=None)
    refuse("spec-turns-calculator", _spec(
        "turns-calc", reward_funcs=["turns"], environment="calculator"), "'turns'",
        "'calculator'", prepare=None)
    refuse("spec-environment-no-tools", _spec(
        "env-notools", reward_funcs=["environment"], environment="no_tools"), "'environment'",
        "'no_tools'", prepare=None)
    refuse("spec-environment-calculator", _spec(
        "env-calc", reward_funcs=["accuracy", "environment"], environment="calculator"),
        "'environment'", "'calculator'", prepare=None)
    refuse("spec-guessing-with-data", _spec(
        "guess-data", reward_funcs=["environment"], environment="guessing",
        data={"families": ["add"]}), "'guessing'", "'data'", prepare=None)
    refuse("spec-guessing-with-eval-data", _spec(
        "guess-eval", reward_funcs=["environment"], environment="guessing", eval_data={}),
        "'guessing'", "'eval_data'", prepare=None)
    refuse("spec-guessing-default-rewards", _spec("guess-default", environment="guessing"),
           "'guessing'", "accuracy", prepare=None)
    refuse("spec-guessing-accuracy", _spec(
        "guess-acc", environment="guessing", reward_funcs=["accuracy", "environment"]),
        "'guessing'", "accuracy", prepare=None)
    accept("spec-guessing-environment", _spec(
        "guess-ok", environment="guessing", reward_funcs=["environment"]), prepare=None)
    accept("spec-guessing-turns-and-format", _spec(
        "guess-turns", environment="guessing", reward_funcs=["format", "turns"]),
        prepare=None)
    accept("spec-calculator-default-rewards", _spec(
        "calc-ok", environment="calculator", data={"families": ["add"]}), prepare=None)

    # ---- an environment's get_reward() as evaluation accuracy (item 10) ----
    for value in (5.0, -3.0, 1.0000001):
        refuse(f"eval-get-reward-{value!r}", _evaluate_game(value), "get_reward", repr(value),
               "[0, 1]", prepare=_tools)
    for value in (math.inf, -math.inf, math.nan):
        refuse(f"eval-get-reward-{value!r}", _evaluate_game(value), "get_reward", repr(value),
               prepare=_tools)
    for value in ("0.5", [1.0], b"1"):
        refuse(f"eval-get-reward-{type(value).__name__}", _evaluate_game(value), "get_reward",
               repr(value), prepare=_tools)
    for value, expected in ((1.0, 1.0), (0, 0.0), (0.25, 0.25), (True, 1.0),
                            (None, math.nan)):
        accept(f"eval-get-reward-ok-{value!r}", _evaluate_game(value), _accuracy(expected),
               prepare=_tools)
    for value in ("0.5", b"1"):  # training reads the same value
        refuse(f"train-get-reward-{type(value).__name__}", _train_reward(value),
               "environment_reward", repr(value), prepare=None)
    return c


def _environment_reward():
    from labkit.rewards.environment import environment_reward

    return environment_reward


def _turn_reward():
    from labkit.rewards.environment import turn_reward

    return turn_reward


def _game_env():
    from labkit.agents.guessing import GuessingEnv

    return GuessingEnv
