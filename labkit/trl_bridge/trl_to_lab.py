"""A TRL run back to the lab: ``trl.GRPOConfig`` (or a dict of its arguments) to a ``TrainConfig``.

:func:`from_grpo_config` is the inverse of :func:`labkit.trl_bridge.to_grpo_config`: TRL's
per-device batch geometry becomes prompts per step, mini-batches and micro-batches, TRL's
defaults (:data:`~labkit.trl_bridge.tables.TRL_DEFAULTS`) fill what a script leaves out, and a
TRL setting the lab lacks is refused by name. :mod:`labkit.trl_bridge.compat` builds on it.
"""

from __future__ import annotations

import dataclasses
import math

from labkit.config import TrainConfig
from labkit.trl_bridge.tables import (
    SHARED_FIELDS,
    TRL_DEFAULTS,
    TRL_HOUSEKEEPING,
    TRL_PINNED,
    TRL_VALUES,
    _check_processes,
)


def _trl_settings(args) -> tuple[dict, dict]:
    """``(every setting over TRL's defaults, the settings the user chose)`` of a GRPOConfig (a
    field differing from its declared default) or of a dict of its arguments (its keys)."""
    if isinstance(args, dict):
        return {**TRL_DEFAULTS, **args}, dict(args)
    if not dataclasses.is_dataclass(args):
        raise TypeError(f"args must be a trl.GRPOConfig or a dict of its arguments, got "
                        f"{type(args).__name__}")
    values, chosen = {}, {}
    for f in dataclasses.fields(args):
        value = values[f.name] = getattr(args, f.name)
        default = (f.default if f.default is not dataclasses.MISSING else
                   f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        if value != default:
            chosen[f.name] = value
    return {**TRL_DEFAULTS, **values}, chosen


def _inert(name: str, trl: dict) -> bool:
    """Settings that act only under a switch the lab refuses anyway (vLLM, TRL's adaptive
    entropy), or that only log, save or report."""
    return (name in TRL_HOUSEKEEPING or name.startswith("_")
            or (name.startswith("vllm_") and not trl["use_vllm"])
            or (name.startswith(("entropy_coef_", "entropy_target"))
                and not trl["use_adaptive_entropy"]))


def overlong_buffer_of(reward_funcs) -> int | None:
    """The buffer length of TRL's soft overlong punishment among ``reward_funcs`` (what
    :func:`trl_reward_funcs` appends: ``trl.rewards.get_soft_overlong_punishment``'s callable,
    which keeps it as ``soft_punish_cache``); None when there is none."""
    for fn in reward_funcs or ():
        if (type(fn).__module__.startswith("trl.")
                and isinstance(getattr(fn, "soft_punish_cache", None), int)):
            return fn.soft_punish_cache
    return None


def from_grpo_config(args, *, reward_funcs=None, num_processes: int = 1,
                     dataset_size: int | None = None) -> TrainConfig:
    """The :class:`~labkit.config.TrainConfig` of a TRL run: the inverse of
    :func:`to_grpo_config` (``from_grpo_config(to_grpo_config(c))`` has ``c``'s settings).

    ``args`` is a ``trl.GRPOConfig`` or a dict of its arguments (TRL's defaults fill the rest,
    and what ``GRPOConfig`` derives from them is derived the same way, :func:`_trl_derived`, so
    TRL need not be installed). TRL's batch geometry becomes the lab's:

    ================================================  =========================================
    TRL                                               lab
    ================================================  =========================================
    ``generation_batch_size`` (default                ``prompts_per_step`` x ``num_generations``
    ``per_device_train_batch_size`` x processes x
    ``steps_per_generation``)
    ``steps_per_generation`` / ``gradient_accum...``  ``num_mini_batches``
    ``per_device_train_batch_size``                   ``micro_batch_size`` (None when it is the
                                                      whole mini-batch)
    ``max_steps`` (optimizer steps)                   ``max_steps`` x ``num_iterations`` x
                                                      ``num_mini_batches``
    ``warmup_steps`` (< 1: a ratio) / ``warmup_ratio``  ``warmup_ratio``
    ``bf16`` / ``use_cpu``                            ``dtype`` / ``device``
    ================================================  =========================================

    ``reward_funcs``: the run's reward functions; TRL's soft overlong punishment among them
    (``trl.rewards.get_soft_overlong_punishment``) becomes ``overlong_buffer_len`` with its
    weight as ``overlong_penalty_factor``. ``dataset_size``: rows of the train set, needed only
    when ``max_steps`` is -1 (TRL then counts epochs). Logging, saving and reporting fields are
    ignored (:data:`TRL_HOUSEKEEPING`); any other TRL setting the lab does not have is refused
    by name, as is a batch geometry that does not divide.
    """
    trl, chosen = _trl_settings(args)
    _check_processes(num_processes)
    _check_trl_values(trl)
    if isinstance(args, dict):  # a GRPOConfig derived these in its own __post_init__
        trl.update(_trl_derived(trl, num_processes))
    if dataset_size is not None and (type(dataset_size) is not int or dataset_size < 1):
        raise ValueError(f"dataset_size must be None or the number of rows of the train set "
                         f"(an integer >= 1), got {dataset_size!r}")
    if reward_funcs is not None and not isinstance(reward_funcs, (list, tuple)):
        raise TypeError(f"reward_funcs must be None or a list of the run's reward functions, "
                        f"got {reward_funcs!r}")
    refused = [f"{name}={trl[name]!r}" for name, pinned in TRL_PINNED.items()
               if name not in SHARED_FIELDS.values() and trl.get(name, pinned) != pinned]
    known = {*SHARED_FIELDS.values(), *TRL_PINNED, *TRL_DEFAULTS, "adam_epsilon"}
    refused += [f"{name}={value!r}" for name, value in chosen.items()
                if name not in known and not _inert(name, trl)]
    if trl.get("adam_epsilon", 1e-8) != 1e-8:  # the lab's AdamW keeps torch's eps
        refused.append(f"adam_epsilon={trl['adam_epsilon']!r}")
    if trl["fp16"]:
        refused.append("fp16=True")
    if refused:
        raise ValueError(f"the lab's trainer has no equivalent of {', '.join(refused)}: drop "
                         f"these TRL settings (the lab samples with its own loop, in float32 or "
                         f"bfloat16), or run the script with TRL itself")
    inverse = {trl_name: lab for lab, trl_name in SHARED_FIELDS.items()}
    values = {}
    for trl_name, lab in inverse.items():
        value = trl.get(trl_name, TRL_DEFAULTS.get(trl_name))
        names = TRL_VALUES.get(lab)
        if names is not None:
            back = {v: k for k, v in names.items()}
            if value not in back:
                raise ValueError(f"{trl_name}={value!r} has no lab equivalent: the lab takes "
                                 f"{', '.join(map(repr, back))}")
            value = back[value]
        values[lab] = tuple(value) if isinstance(value, list) else value
    if not values["beta"]:  # no KL term: TRL's KL options change nothing, the lab refuses them
        values["use_bias_correction_kl"] = False
    values["top_k"] = values["top_k"] or 0
    values.update(_lab_geometry(trl, values, num_processes, dataset_size))
    buffer = overlong_buffer_of(reward_funcs)
    weights = trl["reward_weights"]
    if buffer is not None:
        values["overlong_buffer_len"] = buffer
        if weights is not None:
            values["overlong_penalty_factor"], weights = weights[-1], weights[:-1]
    # weights of 1.0 each are TRL's None, and the lab's
    values["reward_weights"] = (None if weights is None or all(w == 1.0 for w in weights)
                                else tuple(weights))
    if trl["bf16"]:
        values["dtype"] = "bfloat16"
    if trl["use_cpu"]:
        values["device"] = "cpu"
    if trl["disable_tqdm"] is not None:
        values["progress"] = not trl["disable_tqdm"]
    steps_per_lab_step = values["num_iterations"] * values["num_mini_batches"]
    if trl["output_dir"]:
        values["output_dir"] = str(trl["output_dir"])
        strategy = getattr(trl["save_strategy"], "value", trl["save_strategy"])  # enum or text
        if strategy == "steps" and trl["save_steps"] >= 1:
            values["save_every"] = max(1, round(trl["save_steps"] / steps_per_lab_step))
        elif strategy == "steps":  # below 1, TRL reads save_steps as a share of the run
            values["save_every"] = max(1, round(trl["save_steps"] * values["max_steps"]))
    if trl["warmup_ratio"] is not None:
        values["warmup_ratio"] = trl["warmup_ratio"]
    else:
        warmup = trl["warmup_steps"]
        total = values["max_steps"] * steps_per_lab_step
        values["warmup_ratio"] = warmup if warmup < 1 else min(warmup / total, 0.99)
    if values["warmup_ratio"] and values["lr_scheduler_type"] == "constant":
        values["warmup_ratio"] = 0.0
    return TrainConfig(**values)


#: TRL settings :func:`from_grpo_config` computes with, and what each must be.
_COUNTS = ("per_device_train_batch_size", "gradient_accumulation_steps", "num_generations")
_OPTIONAL_COUNTS = ("steps_per_generation", "generation_batch_size")
_FLAGS = ("fp16", "use_cpu")
_OPTIONAL_FLAGS = ("bf16", "disable_tqdm")


def _check_trl_values(trl: dict) -> None:
    """Refuse, by name, a TRL setting of the wrong type or range before any arithmetic on it."""
    def number(value) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(
            value)

    problems = [f"{n} must be an integer >= 1, got {trl[n]!r}" for n in _COUNTS
                if type(trl[n]) is not int or trl[n] < 1]
    problems += [f"{n} must be None or an integer >= 1, got {trl[n]!r}" for n in _OPTIONAL_COUNTS
                 if trl[n] is not None and (type(trl[n]) is not int or trl[n] < 1)]
    problems += [f"{n} must be True or False, got {trl[n]!r}" for n in _FLAGS
                 if not isinstance(trl[n], bool)]
    problems += [f"{n} must be None, True or False, got {trl[n]!r}" for n in _OPTIONAL_FLAGS
                 if trl[n] is not None and not isinstance(trl[n], bool)]
    if type(trl["max_steps"]) is not int:
        problems.append(f"max_steps must be an integer (optimizer steps; -1: count epochs), got "
                        f"{trl['max_steps']!r}")
    for name, bound in (("num_train_epochs", "> 0"), ("save_steps", "> 0"),
                        ("warmup_steps", ">= 0")):
        value = trl[name]
        if not number(value) or value < 0 or (value == 0 and bound == "> 0"):
            problems.append(f"{name} must be a finite number {bound}, got {value!r}")
    weights = trl["reward_weights"]
    if weights is not None and (not isinstance(weights, (list, tuple))
                                or not all(number(w) for w in weights)):
        problems.append(f"reward_weights must be None or a list of finite numbers, got "
                        f"{weights!r}")
    if problems:
        raise ValueError("; ".join(problems))


def _trl_derived(trl: dict, num_processes: int) -> dict:
    """What TRL's ``GRPOConfig.__post_init__`` (TRL 1.16) derives from its arguments, for a dict
    of them: ``scale_rewards`` True and False read as ``"group"`` and ``"none"``, and the
    generation batch from whichever of ``generation_batch_size`` and ``steps_per_generation`` is
    given (``gradient_accumulation_steps`` steps when neither is); both at once, or a generation
    batch that the global batch does not divide, are refused as TRL refuses them. TRL's unset
    ``bf16`` (True unless ``fp16``: autocast over float32 weights) is not derived: the lab reads
    it as ``dtype="auto"`` (bfloat16 weights where the GPU has them, float32 on the CPU)."""
    out = {}
    if isinstance(trl["scale_rewards"], bool):
        out["scale_rewards"] = "group" if trl["scale_rewards"] else "none"
    per_device = trl["per_device_train_batch_size"]
    global_batch = per_device * num_processes
    generation, steps = trl["generation_batch_size"], trl["steps_per_generation"]
    if generation is not None and steps is not None:
        raise ValueError(f"generation_batch_size={generation} and steps_per_generation={steps} "
                         f"are both set: each follows from the other (generation_batch_size = "
                         f"per_device_train_batch_size x processes x steps_per_generation), and "
                         f"TRL refuses both; set one")
    if generation is None:
        steps = steps or trl["gradient_accumulation_steps"]
        generation = global_batch * steps
    elif generation % global_batch:
        raise ValueError(f"generation_batch_size={generation} is not a multiple of the global "
                         f"batch (per_device_train_batch_size x processes = {per_device} x "
                         f"{num_processes} = {global_batch}): TRL refuses it too")
    else:
        steps = generation // global_batch
    out.update(generation_batch_size=generation, steps_per_generation=steps)
    return out


def _lab_geometry(trl: dict, values: dict, num_processes: int, dataset_size) -> dict:
    """The lab's batch sizes from TRL's (the table of :func:`from_grpo_config`), once TRL's
    derivations have set both ``generation_batch_size`` and ``steps_per_generation``."""
    per_device = trl["per_device_train_batch_size"]
    accumulation = trl["gradient_accumulation_steps"]
    steps_per_generation = trl["steps_per_generation"]
    generation = trl["generation_batch_size"]
    group = values["num_generations"]
    if generation % group:
        raise ValueError(f"generation_batch_size={generation} (per_device_train_batch_size x "
                         f"processes x steps_per_generation) is not a multiple of "
                         f"num_generations={group}: TRL would refuse it too")
    if steps_per_generation % accumulation:
        raise ValueError(f"steps_per_generation={steps_per_generation} is not a multiple of "
                         f"gradient_accumulation_steps={accumulation}: the lab's optimizer steps "
                         f"per generation batch (num_mini_batches) would not be whole")
    mini_batches = steps_per_generation // accumulation
    out = {"prompts_per_step": generation // group, "num_mini_batches": mini_batches}
    mini = generation // mini_batches
    out["micro_batch_size"] = None if per_device * num_processes >= mini else per_device
    optimizer_steps = trl["max_steps"]
    per_lab_step = values["num_iterations"] * mini_batches
    if optimizer_steps is None or optimizer_steps < 0:
        if dataset_size is None:
            raise ValueError("max_steps=-1 (TRL then trains num_train_epochs epochs): set "
                             "max_steps, or give dataset_size so the epochs can be counted")
        # one epoch = each prompt once; TRL's sampler repeats each prompt num_generations times
        out["max_steps"] = max(1, math.ceil(trl["num_train_epochs"] * dataset_size
                                            / out["prompts_per_step"]))
    elif optimizer_steps % per_lab_step:
        raise ValueError(f"max_steps={optimizer_steps} optimizer steps is not a multiple of "
                         f"num_iterations x num_mini_batches = {per_lab_step}, the optimizer "
                         f"steps of one lab step: choose a multiple")
    else:
        out["max_steps"] = optimizer_steps // per_lab_step
    return out
