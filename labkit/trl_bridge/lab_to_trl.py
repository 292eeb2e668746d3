"""A lab :class:`~labkit.config.TrainConfig` as TRL's run: ``trl.GRPOConfig`` and reward functions.

:func:`to_grpo_config` copies the shared fields, converts the batch geometry
(:func:`trl_batch_sizes`, the table in :mod:`labkit.trl_bridge`), sets the precision flags and
pins the TRL knobs that would change the algorithm; :func:`trl_reward_funcs` adds DAPO's soft
overlong punishment as TRL's own reward function; :func:`to_trl` gives both, consistent with
each other. A setting TRL cannot express is refused first, by
:func:`~labkit.trl_bridge.tables.check_supported`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from dataclasses import dataclass, field

import torch

from labkit.config import TrainConfig
from labkit.losses import LOCAL_AGGREGATIONS, get_loss_type
from labkit.trl_bridge.tables import (
    SHARED_FIELDS,
    TRL_PINNED,
    TRL_VALUES,
    _check_config,
    _check_processes,
    _defaults,
    _fields,
    check_supported,
)

#: TRL fields the bridge derives from the TrainConfig; ``overrides`` may not set them (set the
#: TrainConfig field instead), so the two sides cannot disagree by accident.
_PROTECTED = {*TRL_PINNED, "per_device_train_batch_size", "gradient_accumulation_steps",
              "steps_per_generation", "generation_batch_size", "max_steps", "warmup_steps",
              "warmup_ratio", "reward_weights", "activation_checkpointing"} - {"use_vllm"}


def _largest_divisor(n: int, cap: int) -> int:
    """The largest divisor of ``n`` that is at most ``cap`` (found among the divisor pairs up
    to sqrt(n), so a batch of 10**12 takes a second, not forever)."""
    if cap >= n:
        return n
    divisors = (x for d in range(1, math.isqrt(n) + 1) if n % d == 0 for x in (d, n // d))
    return max(x for x in divisors if x <= cap)


def trl_batch_sizes(config: TrainConfig, num_processes: int = 1) -> dict[str, int]:
    """TRL's batch sizes and step count for ``config`` on ``num_processes`` processes.

    Returns ``per_device_train_batch_size``, ``gradient_accumulation_steps``,
    ``steps_per_generation``, ``generation_batch_size`` (completions per generation, all
    processes) and ``max_steps`` (optimizer steps). Raises ``ValueError`` when the generation
    batch does not split into equal mini-batches, or a mini-batch over the processes.
    """
    _check_config(config)
    _check_processes(num_processes)
    generation = config.prompts_per_step * config.num_generations
    mini_batches = config.num_mini_batches
    if generation % mini_batches:
        raise ValueError(
            f"num_mini_batches={mini_batches} does not divide the generation batch "
            f"(prompts_per_step x num_generations = {config.prompts_per_step} x "
            f"{config.num_generations} = {generation} completions): TRL's optimizer steps all "
            f"take the same number of completions, so choose a divisor of {generation}")
    mini = generation // mini_batches
    if mini % num_processes:
        raise ValueError(
            f"a mini-batch of {mini} completions (prompts_per_step x num_generations / "
            f"num_mini_batches) does not split evenly over {num_processes} processes: change "
            f"prompts_per_step, num_mini_batches or the number of processes")
    local = mini // num_processes
    cap = min(config.micro_batch_size or local, local)
    micro = _largest_divisor(local, cap)
    per_micro_batch = get_loss_type(config.loss_type).aggregation in LOCAL_AGGREGATIONS
    if per_micro_batch and config.micro_batch_size is not None and micro != cap:
        raise ValueError(
            f"micro_batch_size={config.micro_batch_size} does not divide the per-process "
            f"mini-batch ({local} completions), and loss_type={config.loss_type!r} normalises per "
            f"micro-batch, "
            f"so TRL's micro-batches of {micro} would change the loss: use a divisor of {local}")
    accumulation = local // micro
    return {
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": accumulation,
        "steps_per_generation": accumulation * mini_batches,
        "generation_batch_size": generation,
        "max_steps": config.max_steps * config.num_iterations * mini_batches,
    }


def _on_cpu(device: str) -> bool:
    if device == "cpu":
        return True
    if device != "auto":
        return False
    mps = getattr(torch.backends, "mps", None)
    return not torch.cuda.is_available() and not (mps is not None and mps.is_available())


def _precision(config: TrainConfig) -> dict:
    """``use_cpu``/``bf16``/``fp16`` for the config's device and dtype."""
    cpu = _on_cpu(config.device)
    dtype = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(config.dtype,
                                                                             config.dtype)
    if dtype == "float16":
        raise ValueError("dtype='float16' cannot be handed to TRL as the lab's setting: the lab "
                         "does not train in float16 (no loss scaler), and TRL's fp16=True is "
                         "mixed precision with one; use dtype='bfloat16', or dtype='float32' "
                         "with the override fp16=True if that is what you want")
    if dtype == "auto":
        bf16 = (not cpu and torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    else:
        bf16 = dtype == "bfloat16"
    return {"use_cpu": cpu, "bf16": bf16, "fp16": False}


# ---- the conversion ------------------------------------------------------------------------------
def trl_reward_funcs(config: TrainConfig, reward_funcs=None) -> list:
    """The reward functions TRL gets: ``reward_funcs`` (default: the lab's accuracy and format
    rewards) and, when ``config.overlong_buffer_len > 0``, DAPO's soft overlong punishment as
    ``trl.rewards.get_soft_overlong_punishment`` (its weight comes from :func:`to_grpo_config`)."""
    from labkit.rewards import accuracy_reward, format_reward

    funcs = [accuracy_reward, format_reward] if reward_funcs is None else list(reward_funcs)
    if config.reward_weights is not None and len(config.reward_weights) != len(funcs):
        raise ValueError(f"reward_weights has {len(config.reward_weights)} weights for "
                         f"{len(funcs)} reward functions: give one weight per function")
    if config.overlong_buffer_len:
        from trl.rewards import get_soft_overlong_punishment

        funcs.append(get_soft_overlong_punishment(config.max_completion_length,
                                                  config.overlong_buffer_len))
    return funcs


def _reward_weights(config: TrainConfig, num_reward_funcs: int | None):
    weights = config.reward_weights
    if not config.overlong_buffer_len:
        return None if weights is None else list(weights)
    if weights is None:
        weights = [1.0] * (2 if num_reward_funcs is None else num_reward_funcs)
    elif num_reward_funcs is not None and num_reward_funcs != len(weights):
        raise ValueError(f"reward_weights has {len(weights)} weights for {num_reward_funcs} "
                         f"reward functions: give one weight per function")
    return [*weights, config.overlong_penalty_factor]


def to_grpo_config(config: TrainConfig, *, output_dir, num_processes: int = 1,
                   num_reward_funcs: int | None = None, drop_unsupported=(), **overrides):
    """A ``trl.GRPOConfig`` that runs ``config``'s algorithm on ``num_processes`` processes.

    ``num_reward_funcs``: how many reward functions the run has before DAPO's overlong
    punishment, which :func:`trl_reward_funcs` appends and whose weight
    (``overlong_penalty_factor``) this appends to ``reward_weights``; default
    ``len(config.reward_weights)`` or 2 (the lab's accuracy and format rewards).
    ``drop_unsupported``: see :func:`check_supported`. ``overrides``: any other ``GRPOConfig``
    argument (``report_to``, ``logging_steps``, ``use_vllm``, ``bf16`` ...); one the bridge derives
    from the TrainConfig is refused, so the two sides cannot silently disagree.

    Raises ``ValueError`` for a setting TRL cannot express (naming the field) and for batch
    sizes that do not divide (see :func:`trl_batch_sizes`).
    """
    from trl import GRPOConfig

    check_supported(config, drop_unsupported)
    if not isinstance(output_dir, (str, os.PathLike)):
        raise TypeError(f"output_dir must be a folder path (str or os.PathLike), got "
                        f"{output_dir!r}")
    if num_reward_funcs is not None and (type(num_reward_funcs) is not int
                                         or num_reward_funcs < 1):
        raise ValueError(f"num_reward_funcs must be None or an integer >= 1 (reward functions "
                         f"before the overlong punishment), got {num_reward_funcs!r}")
    clash = sorted(set(overrides) & {*_PROTECTED, *SHARED_FIELDS.values()})
    if clash:
        raise ValueError(f"{', '.join(clash)} follow(s) from the TrainConfig; set the lab field "
                         f"(see labkit.trl_bridge.SHARED_FIELDS) instead of overriding TRL's")
    trl_fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    _check_overrides(overrides, GRPOConfig)
    values = _fields(config)
    defaults = _defaults()
    kwargs = {name: value for name, value in TRL_PINNED.items() if name in trl_fields}
    for lab, trl in SHARED_FIELDS.items():
        if lab not in values:
            continue
        value = TRL_VALUES.get(lab, {}).get(values[lab], values[lab])
        if trl not in trl_fields:
            if values[lab] != defaults.get(lab):
                raise ValueError(f"{lab}={values[lab]!r} needs GRPOConfig.{trl}, which this TRL "
                                 f"version lacks: upgrade trl")
            continue
        kwargs[trl] = list(value) if isinstance(value, tuple) else value
    if "activation_checkpointing" in trl_fields:  # newer transformers: the new name, no warning
        kwargs["activation_checkpointing"] = kwargs["gradient_checkpointing"]
    sizes = trl_batch_sizes(config, num_processes)
    if values.get("top_entropy_quantile", 1.0) < 1 and (
            sizes["steps_per_generation"] > 1 or config.num_iterations > 1):
        raise ValueError(
            f"top_entropy_quantile={values['top_entropy_quantile']!r} with several optimizer "
            f"steps or micro-batches per generation: TRL computes the entropy threshold per "
            f"micro-batch from the training forward, the lab over the whole generation batch "
            f"from sampling; they agree only when one micro-batch (all processes together) is "
            f"the whole generation batch and num_iterations=1")
    kwargs.update({k: v for k, v in sizes.items() if k != "generation_batch_size"})
    if "warmup_ratio" in trl_fields:
        kwargs["warmup_ratio"] = config.warmup_ratio
    else:
        kwargs["warmup_steps"] = config.warmup_ratio
    kwargs["reward_weights"] = _reward_weights(config, num_reward_funcs)
    kwargs.update(_precision(config))
    steps_per_lab_step = config.num_iterations * config.num_mini_batches
    if config.save_every:
        kwargs.update(save_strategy="steps", save_steps=config.save_every * steps_per_lab_step)
    else:
        kwargs["save_strategy"] = "no"
    kwargs.update(output_dir=str(output_dir), logging_steps=1, report_to=[],
                  disable_tqdm=not config.progress, ddp_find_unused_parameters=False)
    kwargs.update(overrides)
    try:
        return GRPOConfig(**kwargs)
    except (TypeError, ValueError) as error:
        if not overrides:
            raise
        raise ValueError(f"GRPOConfig refused these settings with the overrides "
                         f"{', '.join(f'{k}={v!r}' for k, v in overrides.items())}: "
                         f"{type(error).__name__}: {error}") from error


def _check_overrides(overrides: dict, grpo_config) -> None:
    """Every override is a ``GRPOConfig`` field; one whose default is a bool takes a bool and one
    whose default is a number takes a number (the others are TRL's to check)."""
    fields = {f.name: f for f in dataclasses.fields(grpo_config)}
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not GRPOConfig field(s) of this TRL version; "
                         f"overrides take GRPOConfig's arguments (report_to, logging_steps, "
                         f"use_vllm, ...)")
    for name, value in overrides.items():
        default = fields[name].default
        if isinstance(default, bool) and not isinstance(value, bool):
            raise TypeError(f"override {name}={value!r}: GRPOConfig's {name} takes True or "
                            f"False")
        if (isinstance(default, int | float) and not isinstance(default, bool)
                and (isinstance(value, bool) or not isinstance(value, int | float))):
            raise TypeError(f"override {name}={value!r}: GRPOConfig's {name} takes a number "
                            f"(default {default!r})")


@dataclass
class TRLRun:
    """What :func:`to_trl` hands TRL's ``GRPOTrainer``."""

    args: object
    """the ``trl.GRPOConfig``"""
    reward_funcs: list
    """the lab's reward functions, plus DAPO's overlong punishment when it is on"""
    dropped: dict = field(default_factory=dict)
    """lab features dropped on request: ``{field: what and why}``"""


def to_trl(config: TrainConfig, reward_funcs=None, *, output_dir, num_processes: int = 1,
           drop_unsupported=(), **overrides) -> TRLRun:
    """The GRPOConfig and reward functions of ``config``, consistent with each other (the
    overlong function and its weight come together). Arguments as :func:`to_grpo_config`."""
    dropped = check_supported(config, drop_unsupported)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the drops were warned about once, just above
        funcs = trl_reward_funcs(config, reward_funcs)
        count = len(funcs) - (1 if config.overlong_buffer_len else 0)
        args = to_grpo_config(config, output_dir=output_dir, num_processes=num_processes,
                              num_reward_funcs=count, drop_unsupported=drop_unsupported,
                              **overrides)
    return TRLRun(args=args, reward_funcs=funcs, dropped=dropped)


