"""Surface 14: the agent episode loop (``labkit.agents``: ``run_tool_call``, ``run_episodes``) and
a ``Trainer`` with ``environment_factory``: tools that raise on the policy's arguments, factories
that build no environment, turn limits that are not counts, RL-PLUS demonstrations beside an
environment, and ReMax's greedy baseline scored by the environment. Runs use the shipped tiny
tool model (2 prompts x 2 completions of at most 32 tokens)."""

from __future__ import annotations

import copy
import functools
import math

import torch

from fuzz.harness import Case

SURFACE = 14
SMALL = {"prompts_per_step": 2, "num_generations": 2, "max_completion_length": 32,
         "max_steps": 1, "progress": False, "device": "cpu", "dtype": "float32",
         "model_name_or_path": "tiny-tools", "max_tool_calling_iterations": 2}


@functools.cache
def _tool_model():
    from labkit.models import load_policy

    return load_policy("tiny-tools", device="cpu", dtype="float32")


@functools.cache
def _calculator_rows():
    """Eight four-digit products: the tool model calls the calculator on some of them."""
    from labkit.tasks import load_split

    return load_split("train", families=["mul"], difficulties=[4]).select(range(8))


def _env(**tools):
    """An environment (TRL's contract: ``reset`` and public methods as tools) with ``tools``."""
    return type("Env", (), {"reset": lambda self, **row: None, **tools})()


def _call(env, name="probe", **arguments):
    from labkit.agents.tool_calls import format_tool_call, last_tool_call, run_tool_call

    return lambda: run_tool_call(env, last_tool_call(format_tool_call(name, arguments)))


def _error_reply(*names):
    """The reply is one ``error: ...`` line that names ``names`` (the exception's type)."""
    def check(reply):
        assert isinstance(reply, str) and reply.startswith("error: "), reply
        assert "\n" not in reply and len(reply) <= 200, reply
        for name in names:
            assert name in reply, f"{reply!r} does not name {name}"
    return check


def _equals(expected):
    def check(value):
        assert value == expected, f"{value!r}, expected {expected!r}"
    return check


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text")


class _BadText:
    def __str__(self):
        raise ValueError("no text either")


def _escaped(call):
    """``call``, with an escaping :class:`_Unprintable` named (the harness prints errors)."""
    def wrapped():
        try:
            return call()
        except _Unprintable:
            raise RuntimeError("the tool's unprintable error escaped run_tool_call") from None
    return wrapped


def _raise(error):
    def tool(self, code: str):
        raise error
    return tool


def _episodes(limit, environment=None):
    from labkit.agents.calculator import CalculatorEnv
    from labkit.agents.episodes import environments, run_episodes

    def call():
        model, tokenizer = _tool_model()
        rows = _calculator_rows()[:]
        envs = environments(environment or CalculatorEnv, rows, 4)
        return run_episodes(model, tokenizer, rows["prompt"], envs, num_generations=4,
                            max_completion_length=256, max_tool_calling_iterations=limit,
                            generator=torch.Generator().manual_seed(0))
    return call


class _RaisingCalculator:
    """The calculator's name and argument, and a tool that fails on every call."""

    def reset(self, **row):
        self.row = row

    def calculator(self, expression: str) -> str:
        return {}[expression]  # KeyError


def _tool_errors(episodes):
    calls, errors = int(episodes.tool_calls.sum()), int(episodes.tool_errors.sum())
    assert calls > 0, "no episode called the tool"
    assert errors == calls, f"{errors} of {calls} failing calls counted as errors"
    # a reply that does not fit the length budget is counted but not appended
    assert any("calculator raised KeyError" in text for text in episodes.texts), \
        "no failed call's reply names the error"


def _answered(episodes):
    assert int(episodes.tool_calls.sum()) > 0 and int(episodes.tool_errors.sum()) == 0


def _trainer(factory, reward_funcs=None, **overrides):
    from labkit.config import TrainConfig
    from labkit.trainer import Trainer

    def call():
        model, tokenizer = _tool_model()
        data = _calculator_rows()
        return Trainer(TrainConfig(**{**SMALL, **overrides}), model=copy.deepcopy(model),
                       tokenizer=tokenizer, train_dataset=data, reward_funcs=reward_funcs,
                       environment_factory=factory)
    return call


def _built(trainer):
    assert trainer.environment_factory is not None


def _remax_step(environment, reward):
    """One ReMax step with an environment; returns the step's row and the baseline."""
    def call():
        from labkit.agents import CalculatorEnv, GuessingEnv, guessing_dataset
        from labkit.config import TrainConfig
        from labkit.rewards.environment import environment_reward, turn_reward
        from labkit.trainer import Trainer

        model, tokenizer = _tool_model()
        guessing = environment == "guessing"
        funcs = {"outcome": [environment_reward], "turns": [turn_reward]}.get(reward)
        trainer = Trainer(
            TrainConfig(**{**SMALL, "advantage_estimator": "remax", "max_completion_length": 64}),
            model=copy.deepcopy(model), tokenizer=tokenizer,
            train_dataset=guessing_dataset(4, seed=0) if guessing else _calculator_rows(),
            reward_funcs=funcs, environment_factory=GuessingEnv if guessing else CalculatorEnv)
        return trainer.training_step()
    return call


def _finite_step(row):
    """A finite reward, and a finite loss wherever a completion trained (with every advantage
    0 none does, and the loss is NaN by design)."""
    assert math.isfinite(row["reward"]), f"reward = {row['reward']}"
    assert not row["completions_trained"] or math.isfinite(row["loss"]), f"loss = {row['loss']}"


def cases() -> list[Case]:
    from labkit.agents import CalculatorEnv, NoTools

    c = []

    def refuse(name, call, *fragments, seconds=5.0, slow=False, prepare=None):
        c.append(Case(SURFACE, name, call, tuple(fragments), seconds=seconds, slow=slow,
                      prepare=prepare))

    def accept(name, call, check, seconds=5.0, slow=False, prepare=None):
        c.append(Case(SURFACE, name, call, None, check=check, seconds=seconds, slow=slow,
                      prepare=prepare))

    # a tool that raises on the policy's arguments: an error reply, as TRL gives one
    for label, error in (("key-error", KeyError("code")), ("type-error", TypeError("bad")),
                         ("zero-division", ZeroDivisionError("division by zero")),
                         ("runtime-error", RuntimeError("state")),
                         ("value-error", ValueError("nope")),
                         ("recursion-error", RecursionError("deep")),
                         ("assertion-error", AssertionError()),
                         ("index-error", IndexError("list index out of range"))):
        accept(f"tool-raises-{label}", _call(_env(probe=_raise(error)), code="1"),
               _error_reply(type(error).__name__))
    accept("tool-raises-a-multi-line-message",
           _call(_env(probe=_raise(ValueError("line one\nline two " + "x" * 5000))), code="1"),
           _error_reply("ValueError"))
    accept("tool-raises-an-unprintable-error",
           _escaped(_call(_env(probe=_raise(_Unprintable())), code="1")),
           _error_reply("_Unprintable"))
    accept("tool-returns-an-unprintable-value",
           _call(_env(probe=lambda self, code: _BadText()), code="1"), _error_reply("ValueError"))
    accept("tool-positional-only-called-by-name",
           _call(_env(probe=lambda self, code, /: code), code="1"), _error_reply("TypeError"))
    accept("tool-takes-any-keyword", _call(_env(probe=lambda self, **kw: sorted(kw)), code="1",
                                           other="2"), _equals("['code', 'other']"))
    accept("tool-takes-only-star-args", _call(_env(probe=lambda self, *args: len(args))),
           _equals("0"))
    c.append(Case(SURFACE, "tool-keyboard-interrupt-is-not-a-reply",
                  _call(_env(probe=_raise(KeyboardInterrupt("stop"))), code="1"), ("stop",),
                  errors=(KeyboardInterrupt,)))
    # the turn limit: a count of calls, or None
    for value in (1.5, True, "2", 0, -1, 2.0, [2]):
        refuse(f"episodes-turn-limit-{value!r}", _episodes(value), "max_tool_calling_iterations",
               repr(value), prepare=_tool_model)
    accept("episodes-turn-limit-none", _episodes(None), _answered, seconds=30.0,
           prepare=_tool_model)
    accept("episodes-tool-raises-key-error", _episodes(2, _RaisingCalculator), _tool_errors,
           seconds=30.0, prepare=_tool_model)
    # the trainer: the factory is checked once when the trainer is built (as TRL probes it)
    refuse("trainer-factory-returns-none", _trainer(lambda: None), "environment_factory",
           "None", "reset", prepare=_tool_model)
    refuse("trainer-factory-returns-no-reset", _trainer(object), "environment_factory",
           "object", "reset", prepare=_tool_model)
    refuse("trainer-factory-reset-not-callable",
           _trainer(lambda: type("Env", (), {"reset": 3})()), "environment_factory", "reset",
           prepare=_tool_model)
    refuse("trainer-factory-an-instance", _trainer(CalculatorEnv()), "environment_factory",
           "CalculatorEnv", prepare=_tool_model)
    refuse("trainer-factory-a-dict", _trainer({"calculator": CalculatorEnv}),
           "environment_factory", "dict", prepare=_tool_model)
    refuse("trainer-rlplus-demonstrations-with-an-environment",
           _trainer(CalculatorEnv, rlplus_demonstrations=True, loss_type="rlplus"), "rlplus_demonstrations",
           "environment_factory", prepare=_tool_model)
    for value in (1.5, True, "2", 0):
        refuse(f"trainer-turn-limit-{value!r}",
               _trainer(CalculatorEnv, max_tool_calling_iterations=value),
               "max_tool_calling_iterations", repr(value), prepare=_tool_model)
    accept("trainer-calculator", _trainer(CalculatorEnv), _built, seconds=10.0,
           prepare=_tool_model)
    accept("trainer-no-tools", _trainer(NoTools), _built, seconds=10.0, prepare=_tool_model)
    # ReMax's greedy baseline goes through the same episodes as the samples
    for environment, reward in (("guessing", "outcome"), ("guessing", "turns"),
                                ("calculator", None)):
        accept(f"remax-step-{environment}-{reward or 'default'}-reward",
               _remax_step(environment, reward), _finite_step, seconds=60.0, slow=True,
               prepare=_tool_model)
    return c
