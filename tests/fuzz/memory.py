"""Surface 5: the memory planner (``labkit.scale.memory``) with absurd shapes: a model config edited to
hold 0, negative, fractional, NaN, string or 10**12 sizes; absurd run sizes; GPU lists that are
not sizes. A huge but real size must give a huge plan; anything else is refused by name."""

from __future__ import annotations

import copy
import functools
import math
import types

from fuzz.harness import Case

SURFACE = 5
CONFIG_FIELDS = ("num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size",
                 "num_attention_heads", "num_key_value_heads", "head_dim")


@functools.cache
def _tiny_config():
    from labkit.models import load_model_config

    return load_model_config("tiny")


def _edited(**values):
    """The tiny Qwen's config as a plain object with ``values`` edited in (a transformers config
    validates some assignments itself; the planner must not rely on that)."""
    config = types.SimpleNamespace(**_tiny_config().to_dict())
    config.model_type = _tiny_config().model_type
    for name, value in values.items():
        setattr(config, name, value)
    return config


def _assigned(**values):
    """The tiny Qwen's transformers config with ``values`` assigned (accepted by its setter)."""
    config = copy.deepcopy(_tiny_config())
    for name, value in values.items():
        setattr(config, name, value)
    return config


def _plan(model=None, **kwargs):
    from labkit.scale.memory import memory_plan

    return memory_plan(_tiny_config() if model is None else model, **kwargs)


def _memory_plan(model):
    from labkit.scale.memory import memory_plan

    return memory_plan(model)


def _run(**fields):
    from labkit.config import TrainConfig

    return TrainConfig(**fields)


def _huge_total(plan):
    total = plan.loc["total", "bytes"]
    assert total > 10**15 and all(plan["bytes"] >= 0), f"total {total}"
    assert all(math.isfinite(g) for g in plan["GiB"]), "GiB not finite"


def _sane(plan):
    assert all(plan["bytes"] >= 0) and plan.loc["total", "bytes"] > 0, plan["bytes"].tolist()


def cases() -> list[Case]:
    from labkit.scale.memory import gpu_fits, gpu_table, lora_trainable_parameters

    c = []

    def refuse(name, call, *fragments):
        c.append(Case(SURFACE, name, call, tuple(fragments), prepare=_tiny_config))

    def accept(name, call, check=_sane):
        c.append(Case(SURFACE, name, call, None, check=check, prepare=_tiny_config))

    for field in CONFIG_FIELDS:
        for value in (0, -1, 2.5, math.nan, math.inf, "128", True):
            refuse(f"config-{field}={value!r}",
                   lambda f=field, v=value: _plan(_edited(**{f: v})), field, repr(value))
        if field == "num_key_value_heads":  # more key/value heads than query heads
            refuse(f"config-{field}=10**12", lambda f=field: _plan(_edited(**{f: 10**12})),
                   field, str(10**12))
        else:
            accept(f"config-{field}=10**12",
                   lambda f=field: _plan(_edited(**{f: 10**12})), _huge_total)
    for field in ("num_key_value_heads", "head_dim"):
        accept(f"config-{field}=None", lambda f=field: _plan(_edited(**{f: None})))
    refuse("config-heads-do-not-divide-hidden",
           lambda: _plan(_edited(num_attention_heads=3, head_dim=None)), "hidden_size",
           "num_attention_heads")
    refuse("config-kv-heads-above-heads", lambda: _plan(_edited(num_key_value_heads=8)),
           "num_key_value_heads", "8")
    refuse("config-model-type-gpt2", lambda: _plan(_edited(model_type="gpt2")), "model_type",
           "'gpt2'")
    refuse("model-name-unknown", lambda: _plan("bogus-owner/no-such-model"),
           "'bogus-owner/no-such-model'")
    refuse("model-an-int", lambda: _plan(3), "model_config_or_name", "int")
    refuse("model-none", lambda: _memory_plan(None), "model_config_or_name", "NoneType")
    for value in (0, -3):
        refuse(f"transformers-config-num_hidden_layers={value}",
               lambda v=value: _plan(_assigned(num_hidden_layers=v)), "num_hidden_layers",
               repr(value))
    for value in (0, -1, 2.5, math.nan, "256", True):
        refuse(f"prompt-length={value!r}", lambda v=value: _plan(prompt_length=v),
               "prompt_length", repr(value))
    accept("prompt-length=10**12", lambda: _plan(prompt_length=10**12), _huge_total)
    for field in ("prompts_per_step", "num_generations", "max_completion_length"):
        accept(f"run-{field}=10**12", lambda f=field: _plan(train_config=_run(**{f: 10**12})),
               _huge_total)
    accept("run-lora-rank-10**12", lambda: _plan(train_config=_run(use_peft=True,
                                                                   lora_r=10**12)), _huge_total)
    refuse("train-config-a-dict", lambda: _plan(train_config={"num_generations": 8}),
           "train_config", "dict")
    refuse("optimizer-unknown", lambda: _plan(optimizer="Adam"), "optimizer", "'Adam'")
    refuse("device-mps", lambda: _plan(device="mps"), "device", "'mps'")
    for value in (0, -1, 2.5, True, "8"):
        refuse(f"lora-r={value!r}", lambda v=value: lora_trainable_parameters(
            _tiny_config(), v), "r", repr(value))
    refuse("lora-targets-empty", lambda: lora_trainable_parameters(_tiny_config(), 8, []),
           "lora_target_modules", "[]")
    refuse("lora-targets-unknown", lambda: lora_trainable_parameters(
        _tiny_config(), 8, ["q_proj", "lm_head"]), "lora_target_modules", "lm_head")
    for label, gpus in (("zero", [0]), ("negative", [-16]), ("nan", [math.nan]),
                        ("inf", [math.inf]), ("strings", ["16"]), ("bools", [True]),
                        ("empty", []), ("a-number", 16), ("a-string", "16"), ("none", None)):
        refuse(f"gpu-table-{label}", lambda g=gpus: gpu_table(_plan(), g), "gpus", repr(gpus))
    for value in (0, -1, math.nan, "80", None):
        refuse(f"gpu-fits={value!r}", lambda v=value: gpu_fits(_plan(), v), "gpu", repr(value))
    accept("gpu-fits-huge", lambda: gpu_fits(_plan(), 1e300), lambda fits: _is(fits, True))
    for value in (-1, math.nan, math.inf, "1", True, None):
        refuse(f"gpu-table-margin={value!r}", lambda v=value: gpu_table(_plan(), margin_gib=v),
               "margin_gib", repr(value))
        refuse(f"gpu-fits-margin={value!r}", lambda v=value: gpu_fits(_plan(), 80, margin_gib=v),
               "margin_gib", repr(value))
    refuse("gpu-table-plan-none", lambda: gpu_table(None), "plan", "NoneType")
    refuse("gpu-table-plan-without-total", lambda: gpu_table(_plan().drop(index="total")),
           "plan", "total")
    return c


def _is(value, expected):
    assert value is expected, f"{value!r} is not {expected!r}"
