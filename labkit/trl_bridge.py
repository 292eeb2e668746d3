"""The TRL bridge: run a lab :class:`~labkit.config.TrainConfig` with TRL's ``GRPOTrainer``.

The lab and TRL share most of GRPO's vocabulary, so a learner who tuned a run here can hand it to
TRL (and to its multi-GPU launchers, :mod:`labkit.trl_train`) without re-deriving anything:

* :func:`to_grpo_config` turns a ``TrainConfig`` into a ``trl.GRPOConfig``: the shared fields
  (:data:`SHARED_FIELDS`) are copied, the batch sizes and step counts are converted
  (:func:`trl_batch_sizes`), the precision and device flags follow ``dtype``/``device``, and the
  TRL knobs whose defaults would silently change the lab's algorithm are pinned
  (:data:`TRL_PINNED`, e.g. ``use_bias_correction_kl=False``);
* :func:`trl_reward_funcs` gives TRL the lab's reward functions plus DAPO's soft overlong
  punishment as TRL's own ``trl.rewards.get_soft_overlong_punishment`` (the lab adds it to the
  reward; TRL sums it in as one more weighted reward function, which is the same total);
* :func:`train_with_trl` does both and trains, returning TRL's log as a frame in the lab's column
  names (:data:`TRL_METRICS`), one row per optimizer step.

What TRL's ``GRPOTrainer`` cannot express is refused with a ``ValueError`` naming the field, its
value, why, and TRL's nearest equivalent (:data:`LAB_ONLY`): a user never gets a silently
different algorithm. A few lab features may be dropped on explicit request
(``drop_unsupported=("dynamic_sampling",)``, :data:`DROPPABLE`); what was dropped is returned,
warned about and printed by the entry point. How the presets fare:

==========  =========================================================================
preset      with TRL's GRPOTrainer
==========  =========================================================================
grpo        maps
dr_grpo     maps
gspo        maps (4 mini-batches = ``steps_per_generation`` 4 x ``gradient_accumulation``)
dapo        refused for ``dynamic_sampling`` (TRL does not resample groups); runs with
            ``drop_unsupported=("dynamic_sampling",)``, the rest of DAPO maps (clip-higher,
            token-level loss, overlong filtering and the soft overlong punishment)
ppo         refused: ``advantage_estimator="gae"`` needs a critic, which GRPOTrainer lacks
gfpo        refused: ``num_remains_in_group`` (GFPO's filter, arXiv 2508.09726) is not in TRL
==========  =========================================================================

Batch sizes. A lab step samples ``prompts_per_step x num_generations`` completions (TRL's
``generation_batch_size``), then makes ``num_iterations x num_mini_batches`` optimizer steps, each
over a mini-batch accumulated in micro-batches of at most ``micro_batch_size``. TRL generates once
every ``steps_per_generation`` micro-steps per process and steps the optimizer every
``gradient_accumulation_steps``; over ``N`` processes:

=================================  ==============================================================
TRL field                          from the lab config
=================================  ==============================================================
``per_device_train_batch_size``    largest divisor of the per-process mini-batch
                                   ``P x G / num_mini_batches / N`` that is <= ``micro_batch_size``
                                   (the whole per-process mini-batch when it is None; with
                                   ``loss_type="bnpo"``, which normalises per micro-batch, the
                                   cap must divide it)
``gradient_accumulation_steps``    per-process mini-batch / ``per_device_train_batch_size``
``steps_per_generation``           ``gradient_accumulation_steps x num_mini_batches``
``generation_batch_size``          (derived by TRL) ``per_device x N x steps_per_generation =
                                   P x G``
``max_steps``                      lab ``max_steps x num_iterations x num_mini_batches``:
                                   TRL counts optimizer steps, the lab generation batches
``warmup_steps``                   ``warmup_ratio`` (transformers reads a value < 1 as a ratio of
                                   the optimizer steps, as the lab's scheduler does)
=================================  ==============================================================

so both sample the same completions per generation and take the same optimizer steps on them.

Deliberate differences that remain (none changes the expected gradient): TRL samples with
``model.generate`` and the lab with its own KV-cached loop (same distribution, other random
streams); the lab skips the training forward of zero-advantage completions; a group whose
rewards are all equal gets advantage exactly 0 in the lab and, in TRL, the group mean's rounding
error divided by 1e-4 (0 for 0/1 rewards, up to 2.4e-3 for rewards like 0.3); TRL averages
sequence-level clip flags over sequences, the lab over tokens.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import os
import re
import tempfile
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd
import torch

from labkit.config import TrainConfig
from labkit.config.fields import int_at_least
from labkit.losses import LOCAL_AGGREGATIONS, LOSS_REGISTRY, get_loss_type


# ---- the tables ----------------------------------------------------------------------------------
class _WithSettings(Mapping):
    """One of the bridge's field tables: the entries written below, plus those that the loss
    types' own settings (:class:`labkit.config.fields.Setting`) classify themselves, read from the loss
    registry at each use, so a loss registered later is classified by its registration."""

    def __init__(self, written: dict, derive):
        self._written, self._derive = written, derive

    def _all(self) -> dict:
        return {**self._written, **self._derive()}

    def __getitem__(self, name):
        return self._all()[name]

    def __iter__(self):
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __repr__(self) -> str:
        return repr(self._all())


def _settings(shared: bool):
    """``(name, Setting, loss type)`` of every registered setting that TRL shares (``trl`` set)
    or not."""
    return [(name, setting, loss) for loss in LOSS_REGISTRY.values()
            for name, setting in loss.settings.items() if (setting.trl is not None) == shared]


def _lab_only_settings() -> dict:
    # a loss TRL runs: its lab-only knob at another value would run another algorithm there
    return {name: (setting.default, setting.why or f"TRL's {loss.trl_name} loss has no such "
                   f"setting (declared by loss_type={loss.name!r})")
            for name, setting, loss in _settings(False) if loss.trl_name is not None}


def _not_carried_settings() -> dict:
    return {name: f"loss_type={loss.name!r} only (refused)"
            for name, setting, loss in _settings(False) if loss.trl_name is None}


#: Lab field -> ``GRPOConfig`` field of the same meaning, copied as is (after
#: :data:`TRL_VALUES`' renames). A field missing from the ``TrainConfig`` is skipped. With the
#: loss types' settings that name their TRL field.
SHARED_FIELDS = _WithSettings({
    "num_generations": "num_generations",
    "max_completion_length": "max_completion_length",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "scale_rewards": "scale_rewards",
    "mask_truncated_completions": "mask_truncated_completions",
    "loss_type": "loss_type",
    "importance_sampling_level": "importance_sampling_level",
    "epsilon": "epsilon",
    "epsilon_high": "epsilon_high",
    "delta": "delta",
    "beta": "beta",
    "entropy_coef": "entropy_coef",
    "num_iterations": "num_iterations",
    "learning_rate": "learning_rate",
    "lr_scheduler_type": "lr_scheduler_type",
    "weight_decay": "weight_decay",
    "adam_beta1": "adam_beta1",
    "adam_beta2": "adam_beta2",
    "max_grad_norm": "max_grad_norm",
    "seed": "seed",
    "gradient_checkpointing": "gradient_checkpointing",
    "multi_objective_aggregation": "multi_objective_aggregation",
    "use_bias_correction_kl": "use_bias_correction_kl",
    "sync_ref_model": "sync_ref_model",
    "ref_model_mixup_alpha": "ref_model_mixup_alpha",
    "ref_model_sync_steps": "ref_model_sync_steps",
    "top_entropy_quantile": "top_entropy_quantile",
    "max_tool_calling_iterations": "max_tool_calling_iterations",
}, lambda: {name: setting.trl for name, setting, _ in _settings(True)})

class _TRLLossNames(Mapping):
    """Lab loss type -> TRL's ``loss_type``, read from the loss registry at each use (each loss
    type declares its TRL name when it registers; one without it is refused by name)."""

    def __getitem__(self, name):
        trl_name = LOSS_REGISTRY[name].trl_name if name in LOSS_REGISTRY else None
        if trl_name is None:
            raise KeyError(name)
        return trl_name

    def __iter__(self):
        return (name for name, loss in LOSS_REGISTRY.items() if loss.trl_name is not None)

    def __len__(self):
        return sum(1 for _ in self)


class _EstimatorRefusals(Mapping):
    """Why TRL cannot run an estimator, as each registered estimator declares it."""

    def __getitem__(self, name):
        from labkit.advantages import ESTIMATOR_REGISTRY

        reason = ESTIMATOR_REGISTRY[name].trl_refusal if name in ESTIMATOR_REGISTRY else None
        return reason or f"GRPOTrainer has no advantage estimator {name!r}"

    def __iter__(self):
        from labkit.advantages import ESTIMATOR_REGISTRY

        return iter(ESTIMATOR_REGISTRY)

    def __len__(self):
        return sum(1 for _ in self)


#: Values of shared fields that TRL spells differently, and the values TRL has at all. labkit's
#: ``sequence_sum`` (sum over a sequence's tokens, mean over sequences) is TRL's ``luspo``
#: aggregation (arXiv 2602.05261); ``tests/test_trl_crosscheck.py`` checks they agree.
TRL_VALUES = {
    "loss_type": _TRLLossNames(),
    "importance_sampling_level": {"token": "token", "sequence": "sequence"},
    "scale_rewards": {"group": "group", "batch": "batch", "none": "none"},
    "lr_scheduler_type": {s: s for s in ("constant", "constant_with_warmup", "linear", "cosine")},
}

#: Lab fields that shape TRL's config by another road (see the module docstring).
DERIVED_FIELDS = {
    "prompts_per_step": "generation_batch_size = prompts_per_step x num_generations",
    "num_mini_batches": "steps_per_generation / gradient_accumulation_steps",
    "micro_batch_size": "per_device_train_batch_size (a cap; see trl_batch_sizes)",
    "max_steps": "max_steps x num_iterations x num_mini_batches optimizer steps",
    "warmup_ratio": "warmup_steps (a ratio below 1)",
    "reward_weights": "reward_weights, plus overlong_penalty_factor for the overlong function",
    "overlong_buffer_len": "trl.rewards.get_soft_overlong_punishment as an extra reward function",
    "overlong_penalty_factor": "the weight of that extra reward function",
    "dtype": "bf16 / fp16 mixed-precision flags (and the dtype train_with_trl loads in)",
    "device": "use_cpu when the run is on the CPU",
    "output_dir": "output_dir when none is given",
    "save_every": "save_strategy='steps', save_steps in optimizer steps",
    "progress": "disable_tqdm",
    "model_name_or_path": "the model train_with_trl loads when given none",
    "use_peft": "peft_config = labkit.lora.lora_config(config), given to GRPOTrainer by "
                "train_with_trl (TRL's ModelConfig/get_peft_config names)",
    "lora_r": "peft_config's r",
    "lora_alpha": "peft_config's lora_alpha",
    "lora_dropout": "peft_config's lora_dropout",
    "lora_target_modules": "peft_config's target_modules",
    "use_rslora": "peft_config's use_rslora",
    "use_dora": "peft_config's use_dora",
}

#: Lab-only settings: ``field -> (value that TRL's GRPOTrainer also has, {value: why not})``.
#: A config whose field holds another value is refused; the reasons name TRL's nearest tool.
#: With the lab-only settings of the loss types TRL has (refused off their default).
LAB_ONLY = _WithSettings({
    "advantage_estimator": ("grpo", _EstimatorRefusals()),
    "num_remains_in_group": (None, (
        "GFPO's filter (keep k of G completions per group, arXiv 2508.09726) is not in TRL's "
        "GRPOTrainer")),
    "dynamic_sampling": (False, (
        "TRL's GRPOTrainer does not drop zero-variance groups and resample (DAPO, arXiv "
        "2503.14476); their advantage is 0 there")),
    "dual_clip": (None, (
        "dual-clip PPO (arXiv 1912.09729) bounds the loss of negative advantages; TRL's "
        "nearest is `delta`, which caps the ratio for both signs")),
    "kl_in_reward": (False, (
        "TRL adds the KL to the loss only (beta, k3); a KL penalty inside the reward has no "
        "GRPOConfig setting")),
    "kl_estimator": ("k3", "TRL's KL term is the k3 estimator; k1/k2 have no GRPOConfig setting"),
    "temperature_schedule": ("constant", (
        "TRL samples at one temperature for the whole run; the lab's decaying schedule (Kimi K2, "
        "arXiv 2507.20534) has no GRPOConfig setting")),
    "diversity_adjustment": (None, (
        "DRA-GRPO's similarity-discounted rewards (arXiv 2505.09655) are not in TRL's "
        "GRPOTrainer")),
    "ref_reset_every": (0, (
        "ProRL's reference resets (arXiv 2505.24864) are not in TRL; its nearest is "
        "sync_ref_model (TR-DPO's soft update, also a lab field)")),
    "ref_reset_patience": (0, (
        "ProRL's reference resets (arXiv 2505.24864) are not in TRL; its nearest is "
        "sync_ref_model (TR-DPO's soft update, also a lab field)")),
    "cov_penalty": (None, (
        "Clip-Cov / KL-Cov (arXiv 2505.22617) are not in TRL's GRPOTrainer")),
    "train_on_environment_tokens": (False, (
        "TRL always keeps tool results out of the loss (its tool_mask); training on them is "
        "the lab's demonstration of the masking bug")),
    "rlplus_demonstrations": (False, (
        "RL-PLUS's demonstration completions (arXiv 2508.00222) are not in TRL's GRPOTrainer")),
    "gfpo_adaptive_k": (None, (
        "adaptive-difficulty GFPO (arXiv 2508.09726, Algorithm 2) is not in TRL's GRPOTrainer")),
    "length_reward": (None, (
        "the lab's length shaping (labkit.rewards.length: Kimi, LASER, budget, DLER) uses group "
        "statistics or per-prompt solve rates that TRL's reward functions do not see; TRL's "
        "nearest is trl.rewards.get_soft_overlong_punishment (the lab's overlong_buffer_len)")),
    "eval_every": (0, (
        "the lab's pass@1 evaluation is not run under TRL: evaluate the returned model with "
        "labkit.evaluate.evaluate")),
    "ptx_coef": (0.0, (
        "TRL's GRPOTrainer has no supervised term in its loss (Kimi K2's PTX loss, arXiv "
        "2507.20534); mix SFT data in with a second trainer or a custom loss")),
    "prompt_sampler": ("uniform", (
        "TRL draws prompts uniformly (its RepeatSampler); the lab's curriculum, prioritized and "
        "multi-task samplers (labkit.tricks.prompt_sampling) have no GRPOConfig setting: order or "
        "weight the dataset yourself")),
    "sampling_dtype": (None, (
        "the lab's stand-in for an inference engine (a sampler in another dtype); TRL samples "
        "with the trained model itself, or with vLLM (use_vllm=True, vllm_importance_sampling_* "
        "correct the mismatch there)")),
    "resume_from": (None, (
        "a lab checkpoint cannot resume a TRL run: TRL resumes its own with "
        "trainer.train(resume_from_checkpoint=...)")),
}, _lab_only_settings)

#: Lab-only features a user may drop on purpose (``drop_unsupported``): the value they become.
DROPPABLE = {"dynamic_sampling": False, "dual_clip": None, "eval_every": 0}

#: Lab fields with no effect on what the bridge hands TRL, and why. With the settings of the loss
#: types TRL lacks (the loss type itself is refused).
NOT_CARRIED = _WithSettings({
    "gamma": "GAE only (advantage_estimator='gae' is refused)",
    "lam": "GAE only",
    "vf_coef": "critic only",
    "clip_range_value": "critic only",
    "value_learning_rate": "critic only",
    "max_resample_rounds": "dynamic sampling only (refused or dropped)",
    "gfpo_metric": "GFPO only (refused)",
    "length_reward_weight": "length_reward only (refused)",
    "length_target": "length_reward only (refused)",
    "length_target_easy": "length_reward only (refused)",
    "temperature_final": "temperature_schedule only (refused)",
    "clip_cov_ratio": "cov_penalty only (refused)",
    "clip_cov_lb": "cov_penalty only (refused)",
    "clip_cov_ub": "cov_penalty only (refused)",
    "kl_cov_ratio": "cov_penalty only (refused)",
    "kl_cov_coef": "cov_penalty only (refused)",
    "entropy_threshold": "a metric's threshold (entropy_high_frac), not the algorithm",
    "decode_path": "the lab sampler's decode loop (TRL samples with transformers' generate or "
                   "vLLM)",
    "cuda_graphs": "the lab sampler's decode loop on CUDA",
    "eval_temperature": "lab evaluation only",
    "eval_k": "lab evaluation only",
    "eval_max_prompts": "lab evaluation only",
    "ptx_batch_size": "ptx_coef only (refused)",
    "curriculum_ratio": "prompt_sampler only (refused)",
    "prioritized_floor": "prompt_sampler only (refused)",
    "multitask_lambda": "prompt_sampler only (refused)",
    "multitask_lr": "prompt_sampler only (refused)",
    "save_on_interrupt": "lab checkpointing; TRL saves on its save_strategy",
    "max_nonfinite_steps": "the lab skips NaN/inf steps; TRL has no such guard",
    "rollback_nonfinite_weights": "the lab's NaN/inf guard; TRL has none",
    "vllm_importance_sampling_correction": "TRL applies it to vLLM samples only (use_vllm, "
                                           "which the bridge leaves to overrides)",
    "vllm_importance_sampling_mode": "vllm_importance_sampling_correction only",
    "vllm_importance_sampling_clip_max": "vllm_importance_sampling_correction only",
    "vllm_importance_sampling_clip_min": "vllm_importance_sampling_correction only",
}, _not_carried_settings)

#: TRL knobs the lab does not have, pinned to the lab's behaviour so that TRL's defaults cannot
#: change the algorithm. ``use_bias_correction_kl``: TRL defaults to True (DeepSeek-V3.2's
#: ratio-weighted KL, arXiv 2512.02556); the lab's KL term is the plain k3 of GRPO
#: (arXiv 2402.03300). A ``TrainConfig`` that has one of these fields overrides the pin.
TRL_PINNED = {
    "use_bias_correction_kl": False,
    "multi_objective_aggregation": "sum_then_normalize",
    "top_entropy_quantile": 1.0,
    "off_policy_mask_threshold": None,
    "use_adaptive_entropy": False,
    "sync_ref_model": False,
    "min_p": None,
    "repetition_penalty": 1.0,
    "cast_lm_head_to_fp32": False,
    "use_vllm": False,
}

#: TRL log key -> lab column (:data:`labkit.metrics.METRICS`). Per-function rewards
#: ``rewards/<fn>/mean`` become ``reward_<fn without _reward>``; TRL's ``policy_loss`` (logged
#: with an entropy bonus) wins over its ``loss``; see :func:`history_from_logs`.
TRL_METRICS = {
    "reward": "reward",
    "reward_std": "reward_std",
    "rewards/accuracy_reward/mean": "accuracy",
    "completions/mean_length": "completion_length",
    "completions/max_length": "completion_length_max",
    "completions/clipped_ratio": "truncation_rate",
    "frac_reward_zero_std": "frac_reward_zero_std",
    "loss": "loss",
    "policy_loss": "loss",
    "clip_ratio/low_mean": "clip_low",
    "clip_ratio/high_mean": "clip_high",
    "clip_ratio/region_mean": "clip_region",
    "cispo_clip_ratio": "clip_high",
    "kl": "kl_ref",
    "entropy": "entropy",
    "grad_norm": "grad_norm",
    "learning_rate": "learning_rate",
    "step_time": "step_time",
    # episodes with tools: calls answered per episode, and the share of calls that failed
    "tools/call_frequency": "tool_calls",
    "tools/failure_frequency": "tool_error_rate",
}
_REWARD_KEY = re.compile(r"^rewards/(?P<name>.+)/mean$")
_OVERLONG_NAME = "soft_overlong_punishment_reward"

#: TRL fields the bridge derives from the TrainConfig; ``overrides`` may not set them (set the
#: TrainConfig field instead), so the two sides cannot disagree by accident.
_PROTECTED = {*TRL_PINNED, "per_device_train_batch_size", "gradient_accumulation_steps",
              "steps_per_generation", "generation_batch_size", "max_steps", "warmup_steps",
              "warmup_ratio", "reward_weights", "activation_checkpointing"} - {"use_vllm"}


# ---- checks --------------------------------------------------------------------------------------
def _fields(config: TrainConfig) -> dict:
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}


def _defaults() -> dict:
    out = {}
    for f in dataclasses.fields(TrainConfig):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def check_supported(config: TrainConfig, drop_unsupported=()) -> dict[str, str]:
    """Raise ``ValueError`` for the first setting TRL's GRPOTrainer cannot express.

    ``drop_unsupported`` names lab features (:data:`DROPPABLE`) the caller accepts to lose.
    Returns ``{field: what was dropped and why}`` for those that were actually set.
    """
    _check_config(config)
    values = _fields(config)
    drop = _drop_names(drop_unsupported)
    unknown = drop - set(DROPPABLE)
    if unknown:
        raise ValueError(f"drop_unsupported may name {sorted(DROPPABLE)}, got {sorted(unknown)}: "
                         f"the others define the algorithm and cannot be dropped")
    dropped = {}
    for name, (neutral, reasons) in LAB_ONLY.items():
        if name not in values:
            continue
        value = values[name]
        if name == "kl_estimator" and not values.get("beta"):
            continue  # no KL term at all
        if value == neutral:
            continue
        why = reasons.get(value, "") if isinstance(reasons, Mapping) else reasons
        if name in drop:
            dropped[name] = f"{name}={value!r} dropped (now {DROPPABLE[name]!r}): {why}"
            continue
        hint = (f"; pass drop_unsupported=({name!r},) to run without it"
                if name in DROPPABLE else "")
        raise ValueError(f"{name}={value!r} cannot be expressed with TRL's GRPOTrainer: {why}"
                         f"{hint}")
    for name, allowed in TRL_VALUES.items():
        if name in values and values[name] not in allowed:
            raise ValueError(f"{name}={values[name]!r} has no TRL equivalent: TRL's GRPOTrainer "
                             f"takes {', '.join(map(repr, allowed))} (lab names)")
    if (values.get("multi_objective_aggregation", "sum_then_normalize") != "sum_then_normalize"
            and values.get("overlong_buffer_len")):
        raise ValueError("overlong_buffer_len with multi_objective_aggregation="
                         f"{values['multi_objective_aggregation']!r}: the lab adds the overlong "
                         "penalty after the aggregation, TRL would normalise it as a reward "
                         "function of its own; use sum_then_normalize or overlong_buffer_len=0")
    known = {*SHARED_FIELDS, *DERIVED_FIELDS, *LAB_ONLY, *NOT_CARRIED}
    defaults = _defaults()
    for name, value in values.items():
        if name not in known and value != defaults.get(name, object()):
            raise ValueError(f"{name}={value!r} is not known to the TRL bridge, so TRL would "
                             f"ignore it: classify it in labkit.trl_bridge, or leave it at its "
                             f"default ({defaults.get(name)!r})")
    for name, message in dropped.items():
        warnings.warn(f"TRL run differs from the lab config: {message}", stacklevel=3)
    return dropped


def _check_config(config) -> None:
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a labkit.config.TrainConfig (e.g. preset('grpo')), got "
                        f"{type(config).__name__}")


def _drop_names(drop_unsupported) -> set:
    """``drop_unsupported`` as a set of names: one name, or a list or tuple of them."""
    if isinstance(drop_unsupported, str):
        return {drop_unsupported}
    if not isinstance(drop_unsupported, (list, tuple, set, frozenset)):
        raise TypeError(f"drop_unsupported must be a tuple of field names among "
                        f"{sorted(DROPPABLE)}, got {drop_unsupported!r}")
    return set(drop_unsupported)


def _check_processes(num_processes) -> None:
    if type(num_processes) is not int or num_processes < 1:
        raise ValueError(f"num_processes must be an integer >= 1, got {num_processes!r}")


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


# ---- the log -------------------------------------------------------------------------------------
def _reward_column(name: str) -> str:
    if name == _OVERLONG_NAME:
        return "reward_overlong"
    return "reward_" + name.removesuffix("_reward")


def history_from_logs(log_history, steps_per_lab_step: int = 1) -> pd.DataFrame:
    """TRL's ``trainer.state.log_history`` as the lab's history frame, one row per optimizer step.

    Columns: ``step`` (the lab's step, one per generation batch), ``optimizer_step`` (TRL's
    ``global_step``) and the lab names of TRL's metrics (:data:`TRL_METRICS`; per-function means
    become ``reward_<name>``, DAPO's punishment ``reward_overlong``). TRL logs a generation's
    metrics (rewards, lengths) on the first optimizer step after it; the other optimizer steps of
    the same lab step have NaN there. ``history.groupby("step").mean()`` gives the lab's one row
    per generation batch. The run's summary entry (``train_runtime`` ...) is left out.

    ``loss`` is the lab's policy surrogate where TRL logs it apart (``policy_loss``, when an
    entropy bonus is on); otherwise TRL's training loss, which with ``beta > 0`` also holds the
    KL term that the lab logs separately (``kl_ref``).
    """
    rows = []
    for entry in log_history:
        if "train_runtime" in entry or "step" not in entry or any(
                k.startswith("eval_") for k in entry):
            continue
        global_step = int(entry["step"])
        row = {"step": math.ceil(global_step / steps_per_lab_step), "optimizer_step": global_step}
        for key, value in entry.items():
            if key in TRL_METRICS:
                row[TRL_METRICS[key]] = value
            match = _REWARD_KEY.match(key)
            if match:
                row[_reward_column(match["name"])] = value
        if "policy_loss" in entry:  # the surrogate alone, as the lab logs it (entropy bonus on)
            row["loss"] = entry["policy_loss"]
        rows.append(row)
    frame = pd.DataFrame(rows)
    return frame.astype({c: float for c in frame.columns if c not in ("step", "optimizer_step")})


def _checked(reward_funcs) -> list:
    """The user's reward functions wrapped in :class:`labkit.rewards.CheckedReward` (a faulty
    result names the function), leaving TRL's own functions, reward models and async functions
    to TRL."""
    from labkit.rewards.rule_based import CheckedReward

    def plain(fn) -> bool:
        inner = fn.func if isinstance(fn, functools.partial) else fn
        return (callable(fn) and not isinstance(fn, (str, torch.nn.Module))
                and not str(getattr(inner, "__module__", "")).startswith("trl.")
                and not inspect.iscoroutinefunction(inner)
                and not inspect.iscoroutinefunction(type(inner).__call__))

    return [CheckedReward(fn) if plain(fn) else fn for fn in reward_funcs]


class _HistoryCallback:
    """Keeps every train log TRL emits (``on_log``), on every process."""

    def __init__(self):
        from transformers import TrainerCallback

        outer = self

        class Callback(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs:
                    outer.logs.append({"step": state.global_step, **logs})

        self.logs: list[dict] = []
        self.callback = Callback()


# ---- training ------------------------------------------------------------------------------------
@dataclass
class TRLResult:
    """What :func:`train_with_trl` returns."""

    trainer: object
    """the ``trl.GRPOTrainer`` after training (``trainer.model`` is the trained policy)"""
    history: pd.DataFrame
    """one row per optimizer step in the lab's column names, see :func:`history_from_logs`"""
    args: object
    """the ``trl.GRPOConfig`` the bridge built"""
    dropped: dict = field(default_factory=dict)
    """lab features dropped on request"""

    def __iter__(self):
        """``trainer, history = train_with_trl(...)`` also works."""
        return iter((self.trainer, self.history))


def num_processes_from_env() -> int:
    """Processes of the current launch (``WORLD_SIZE`` from torchrun/accelerate, or MPI's)."""
    for name in ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"):
        text = os.environ.get(name)
        if text:
            count = int_at_least(text, 1)
            if count is None:
                raise ValueError(f"the environment variable {name}={text!r} must be a number "
                                 f"of processes >= 1 (set by torchrun, accelerate or MPI)")
            return count
    return 1


def train_with_trl(config: TrainConfig, *, model=None, tokenizer=None, train_dataset=None,
                   reward_funcs=None, output_dir=None, callbacks=(), num_processes=None,
                   drop_unsupported=(), trainer_class=None, environment_factory=None,
                   **grpo_overrides) -> TRLResult:
    """Train ``config``'s algorithm with TRL's ``GRPOTrainer``; returns a :class:`TRLResult`.

    Defaults as the lab's :class:`~labkit.trainer.Trainer`: the model of
    ``config.model_name_or_path`` (the shipped tiny Qwen: loaded offline on the CPU in float32
    when the run is on the CPU), the task suite's train split, ``[accuracy_reward,
    format_reward]``. ``output_dir`` defaults to ``config.output_dir``, else a temporary folder
    (TRL needs one; nothing is saved unless ``save_every``). ``num_processes`` defaults to the
    launch's (:func:`num_processes_from_env`). ``callbacks`` are ``transformers.TrainerCallback``
    objects; ``trainer_class`` a ``GRPOTrainer`` subclass; ``environment_factory`` goes to
    TRL's trainer as it goes to the lab's (episodes with tools, notebook 10: the config's
    ``max_tool_calling_iterations`` carries over; TRL 1.x calls the argument experimental, so
    its API may change); ``grpo_overrides`` go to
    :func:`to_grpo_config`.
    """
    from trl import GRPOTrainer

    from labkit.lora import lora_config
    from labkit.models import load_policy
    from labkit.tasks import load_split

    num_processes = num_processes_from_env() if num_processes is None else num_processes
    temporary = None
    if output_dir is None and config.output_dir is None:
        temporary = tempfile.TemporaryDirectory(prefix="labkit-trl-")
        output_dir = temporary.name
    output_dir = output_dir or config.output_dir
    run = to_trl(config, reward_funcs, output_dir=output_dir, num_processes=num_processes,
                 drop_unsupported=drop_unsupported, **grpo_overrides)
    if run.args.world_size != num_processes:
        raise ValueError(f"the config was built for {num_processes} process(es) but this launch "
                         f"has {run.args.world_size}: pass num_processes={run.args.world_size}")
    if model is None:
        dtype = config.dtype
        if dtype == "auto":  # the lab's choice: bfloat16 weights where TRL gets bf16, else fp32
            dtype = "bfloat16" if run.args.bf16 else "float32"
        model, loaded_tokenizer = load_policy(config.model_name_or_path, device="cpu",
                                              dtype=dtype)
        tokenizer = tokenizer or loaded_tokenizer
    if tokenizer is None:
        raise ValueError("a model without its tokenizer: pass tokenizer= as well")
    if train_dataset is None:
        train_dataset = load_split("train")
    history = _HistoryCallback()
    trainer_class = trainer_class or GRPOTrainer
    episodes = {} if environment_factory is None else {"environment_factory": environment_factory}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*loss_type.*")
        # TRL 1.x marks environment_factory experimental (its API may change); said above
        warnings.filterwarnings("ignore", message=".*'environment_factory'.*experimental")
        trainer = trainer_class(model=model, reward_funcs=_checked(run.reward_funcs),
                                args=run.args,
                                train_dataset=train_dataset, processing_class=tokenizer,
                                callbacks=[history.callback, *callbacks],
                                peft_config=lora_config(config), **episodes)
    if not config.progress:  # as quiet as the lab's trainer: no per-step log dicts on stdout
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            # TRL calls transformers APIs that newer transformers deprecate (TRL 1.16 reads
            # is_gradient_checkpointing under transformers 5.24): TRL's to move, not the learner's
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\.")
            trainer.train()
    finally:
        if temporary is not None:
            temporary.cleanup()
    frame = history_from_logs(history.logs, config.num_iterations * config.num_mini_batches)
    frame.attrs["train_seconds"] = time.perf_counter() - start
    return TRLResult(trainer=trainer, history=frame, args=run.args, dropped=run.dropped)


__all__ = [
    "DERIVED_FIELDS",
    "DROPPABLE",
    "LAB_ONLY",
    "NOT_CARRIED",
    "SHARED_FIELDS",
    "TRL_DEFAULTS",
    "TRL_HOUSEKEEPING",
    "TRL_METRICS",
    "TRL_PINNED",
    "TRL_VALUES",
    "TRLResult",
    "TRLRun",
    "check_supported",
    "from_grpo_config",
    "history_from_logs",
    "num_processes_from_env",
    "to_grpo_config",
    "to_trl",
    "train_with_trl",
    "trl_batch_sizes",
    "trl_reward_funcs",
]


# ---- TRL in: a GRPOConfig back to the lab ---------------------------------------------------
#: TRL 1.16's defaults of the ``GRPOConfig`` fields :func:`from_grpo_config` reads, so a dict of
#: TRL settings translates without TRL installed (``tests/test_trl_compat.py`` checks them
#: against the installed TRL's).
TRL_DEFAULTS = {
    "num_generations": 8, "max_completion_length": 512, "temperature": 1.0, "top_p": 1.0,
    "top_k": 0, "scale_rewards": "group", "mask_truncated_completions": False,
    "loss_type": "dapo", "importance_sampling_level": "token", "epsilon": 0.2,
    "epsilon_high": None, "delta": None, "beta": 0.0, "entropy_coef": 0.0, "num_iterations": 1,
    "learning_rate": 1e-6, "lr_scheduler_type": "linear", "weight_decay": 0.0,
    "adam_beta1": 0.9, "adam_beta2": 0.999, "max_grad_norm": 1.0, "seed": 42,
    "gradient_checkpointing": True, "multi_objective_aggregation": "sum_then_normalize",
    "use_bias_correction_kl": True, "sapo_temperature_pos": 1.0, "sapo_temperature_neg": 1.05,
    "vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0, "vespo_k_neg": 3.0, "vespo_lambda_neg": 2.0,
    "sync_ref_model": False, "ref_model_mixup_alpha": 0.6, "ref_model_sync_steps": 512,
    "top_entropy_quantile": 1.0, "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1, "steps_per_generation": None,
    "generation_batch_size": None, "max_steps": -1, "num_train_epochs": 3.0, "warmup_steps": 0,
    "warmup_ratio": None, "reward_weights": None, "bf16": None, "fp16": False, "use_cpu": False,
    "save_strategy": "steps", "save_steps": 500, "output_dir": None, "disable_tqdm": None,
    "use_vllm": False, "off_policy_mask_threshold": None, "use_adaptive_entropy": False,
    "min_p": None, "repetition_penalty": 1.0, "cast_lm_head_to_fp32": False,
    "max_tool_calling_iterations": None,
}

#: ``GRPOConfig`` fields about logging, saving, reporting and hardware that shape no number of
#: the algorithm: :func:`from_grpo_config` reads none of them and refuses none.
TRL_HOUSEKEEPING = frozenset({
    "logging_steps", "logging_strategy", "logging_first_step", "logging_dir", "log_level",
    "log_completions", "num_completions_to_print", "report_to", "run_name", "project",
    "trackio_space_id", "push_to_hub", "hub_model_id", "hub_strategy", "hub_token",
    "hub_private_repo", "save_total_limit", "save_only_model", "save_safetensors",
    "overwrite_output_dir", "dataloader_num_workers", "dataloader_pin_memory",
    "dataloader_drop_last", "dataloader_persistent_workers", "dataloader_prefetch_factor",
    "remove_unused_columns", "ddp_find_unused_parameters", "ddp_backend", "ddp_timeout",
    "eval_strategy", "eval_steps", "per_device_eval_batch_size", "do_eval", "do_train",
    "do_predict", "tf32", "torch_compile", "optim", "activation_checkpointing",
    "gradient_checkpointing_kwargs", "model_init_kwargs", "max_prompt_length",
    "vllm_importance_sampling_correction", "vllm_importance_sampling_mode",
    "vllm_importance_sampling_cap", "shuffle_dataset", "num_generations_eval",
    "wandb_log_unique_prompts", "log_unique_prompts", "disable_dropout", "bf16_full_eval", "fp16_full_eval", "local_rank",
    "use_liger_kernel", "chat_template_kwargs", "cache_implementation", "generation_kwargs",
    "include_num_input_tokens_seen", "use_transformers_paged", "label_names",
    "ds3_gather_for_generation", "resume_from_checkpoint", "num_train_epochs",
    "accelerator_config", "debug", "pad_to_multiple_of", "fsdp", "fsdp_config", "deepspeed",
    "torch_empty_cache_steps", "full_determinism", "skip_memory_metrics", "hub_always_push",
    "save_on_each_node", "logging_nan_inf_filter", "log_on_each_node", "log_level_replica",
})


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
