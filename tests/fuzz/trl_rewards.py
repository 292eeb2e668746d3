"""Surface 3: ``labkit.trl_bridge.train_with_trl`` with reward functions that raise or return
the wrong thing (wrong length, NaN, inf, None, strings, tensors of the wrong shape). Each case
trains one step of the tiny Qwen with TRL's GRPOTrainer (2 prompts x 2 completions of at most 8
tokens); the error must name the function."""

from __future__ import annotations

import copy
import functools
import math

import torch

from fuzz.harness import Case

SURFACE = 3


@functools.cache
def _tiny():
    from labkit.models import load_policy
    from labkit.tasks import load_split

    model, tokenizer = load_policy("tiny", device="cpu", dtype="float32")
    return model, tokenizer, load_split("train", families="add", difficulties=1).select(range(8))


def _train(reward):
    def call():
        from labkit.config import preset
        from labkit.trl_bridge import train_with_trl

        model, tokenizer, data = _tiny()
        config = preset("grpo", prompts_per_step=2, num_generations=2, max_completion_length=8,
                        max_steps=1, progress=False, device="cpu", dtype="float32")
        result = train_with_trl(config, model=copy.deepcopy(model), tokenizer=tokenizer,
                                train_dataset=data, reward_funcs=[reward])
        return result.history
    return call


def _returning(name, make):
    def reward(prompts, completions, **kwargs):
        return make(len(completions))
    reward.__name__ = name
    return reward


def _raising(prompts, completions, **kwargs):
    raise RuntimeError("judge server unreachable")


class ScoringService:
    """A callable object whose call fails: the error names its class."""

    def __call__(self, prompts, completions, **kwargs):
        return {"scores": [1.0] * len(completions)}


def _has_rows(history):
    assert len(history) == 1 and "reward" in history, f"history {history!r}"


def cases() -> list[Case]:
    c = []

    def refuse(name, reward, *fragments):
        c.append(Case(SURFACE, name, _train(reward), tuple(fragments), seconds=90.0, slow=True,
                      prepare=_tiny))

    def accept(name, reward):
        c.append(Case(SURFACE, name, _train(reward), None, check=_has_rows, seconds=90.0,
                      slow=True, prepare=_tiny))

    refuse("raises", _raising, "'_raising'", "judge server unreachable")
    refuse("one-short", _returning("short_reward", lambda n: [1.0] * (n - 1)), "'short_reward'",
           "returned 3")
    refuse("one-long", _returning("long_reward", lambda n: [1.0] * (n + 1)), "'long_reward'",
           "returned 5")
    refuse("nan", _returning("nan_reward", lambda n: [math.nan] * n), "'nan_reward'", "nan")
    refuse("inf", _returning("inf_reward", lambda n: [math.inf] + [0.0] * (n - 1)),
           "'inf_reward'", "inf")
    refuse("none-not-a-list", _returning("none_reward", lambda n: None), "'none_reward'",
           "NoneType")
    refuse("a-string", _returning("string_reward", lambda n: "1.0"), "'string_reward'", "str")
    refuse("strings", _returning("strings_reward", lambda n: ["1.0"] * n), "'strings_reward'",
           "'1.0'")
    refuse("tensor-2d", _returning("matrix_reward", lambda n: torch.ones(n, 2)),
           "'matrix_reward'", "Tensor")
    refuse("tensor-0d", _returning("scalar_reward", lambda n: torch.tensor(1.0)),
           "'scalar_reward'", "Tensor")
    refuse("a-dict-from-an-object", ScoringService(), "'ScoringService'", "dict")
    refuse("partial-raising", functools.partial(_raising), "'_raising'", "unreachable")
    accept("tensor-1d", _returning("vector_reward", lambda n: torch.arange(n, dtype=torch.float)))
    accept("all-none", _returning("abstaining_reward", lambda n: [None] * n))
    accept("bools", _returning("bool_reward", lambda n: [True, False] * (n // 2)))
    return c
