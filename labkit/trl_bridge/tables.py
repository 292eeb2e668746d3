"""The TRL bridge's tables: where each lab field goes in TRL's ``GRPOConfig``, and what cannot go.

Every :class:`~labkit.config.TrainConfig` field is in exactly one table: shared with TRL
(:data:`SHARED_FIELDS`, renamed values in :data:`TRL_VALUES`), shaping TRL's config by another
road (:data:`DERIVED_FIELDS`), lab-only and refused off its neutral value (:data:`LAB_ONLY`, some
of it :data:`DROPPABLE`), or without effect on TRL (:data:`NOT_CARRIED`). The loss types'
settings classify themselves at registration (:class:`labkit.config.fields.Setting`'s ``trl``),
so these tables read the loss registry at each use. :func:`check_supported` holds a config
against them, so a field nobody classified is refused rather than silently ignored by TRL. The
TRL side:
:data:`TRL_PINNED` (TRL knobs pinned to the lab's behaviour), :data:`TRL_METRICS` (TRL's log
keys in the lab's names), :data:`TRL_DEFAULTS` and :data:`TRL_HOUSEKEEPING` (what
:func:`labkit.trl_bridge.from_grpo_config` reads and what it ignores).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping

from labkit.config import TrainConfig
from labkit.losses import LOSS_REGISTRY


class _WithSettings(Mapping):
    """One of the bridge's field tables: the entries written below, plus those that the loss
    types' own settings (:class:`labkit.config.fields.Setting`) classify themselves, read from the
    loss registry at each use, so a loss registered later is classified by its registration."""

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
    "use_peft": "peft_config = labkit.scale.lora.lora_config(config), given to GRPOTrainer by "
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
        "multi-task samplers (labkit.tricks.prompt_sampling) have no GRPOConfig setting: order "
        "or weight the dataset yourself")),
    "sampling_dtype": (None, (
        "the lab's stand-in for an inference engine (a sampler in another dtype); TRL samples "
        "with the trained model itself, or with vLLM (use_vllm=True, vllm_importance_sampling_* "
        "correct the mismatch there)")),
    "resume_from": (None, (
        "a lab checkpoint cannot resume a TRL run: TRL resumes its own with "
        "trainer.train(resume_from_checkpoint=...)")),
    "max_staleness": (0, (
        "TRL's GRPOTrainer is synchronous; its asynchronous trainer, "
        "trl.experimental.async_grpo.AsyncGRPOTrainer (max_staleness, default 4), samples with "
        "a vLLM server, which the bridge does not start")),
    "offpolicy_correction": ("none", (
        "TRL's AsyncGRPOTrainer takes the vLLM server's log-probs as the old policy (the lab's "
        "'coupled') and has no TIS, IcePop or decoupled PPO weight for stale samples")),
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
    "async_mode": "max_staleness only (refused)",
    "offpolicy_weight_cap": "offpolicy_correction only (refused)",
    "offpolicy_weight_floor": "offpolicy_correction only (refused)",
    "staleness_admission": "max_staleness only (refused)",
    "admission_train_time": "max_staleness only (refused)",
    "partial_rollouts": "max_staleness only (refused)",
    "partial_rollout_chunk": "max_staleness only (refused)",
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
    "wandb_log_unique_prompts", "log_unique_prompts", "disable_dropout", "bf16_full_eval",
    "fp16_full_eval", "local_rank",
    "use_liger_kernel", "chat_template_kwargs", "cache_implementation", "generation_kwargs",
    "include_num_input_tokens_seen", "use_transformers_paged", "label_names",
    "ds3_gather_for_generation", "resume_from_checkpoint", "num_train_epochs",
    "accelerator_config", "debug", "pad_to_multiple_of", "fsdp", "fsdp_config", "deepspeed",
    "torch_empty_cache_steps", "full_determinism", "skip_memory_metrics", "hub_always_push",
    "save_on_each_node", "logging_nan_inf_filter", "log_on_each_node", "log_level_replica",
})



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
                             f"ignore it: classify it in labkit.trl_bridge.tables, or leave it at "
                             f"its default ({defaults.get(name)!r})")
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

