"""The TRL bridge's tables: where each lab field goes in TRL's ``GRPOConfig``, and what cannot go.

Every :class:`~labkit.config.TrainConfig` field is in exactly one table: shared with TRL
(:data:`SHARED_FIELDS`, renamed values in :data:`TRL_VALUES`), shaping TRL's config by another
road (:data:`DERIVED_FIELDS`), lab-only and refused off its default (:data:`LAB_ONLY`, some of it
:data:`DROPPABLE`), or without effect on TRL (:data:`NOT_CARRIED`). The tables are derived from
each field's declaration (``trl=`` of :func:`labkit.config.knobs.knob`, or a loss setting's
:class:`labkit.plugins.Setting`; :data:`labkit.config.FIELDS`), so nothing here lists a field.
A field cannot be declared without ``trl=``, so none is silently ignored by TRL;
:func:`check_supported` holds a config against the tables. The TRL side:
:data:`TRL_PINNED` (TRL knobs pinned to the lab's behaviour), :data:`TRL_METRICS` (TRL's log
keys in the lab's names), :data:`TRL_DEFAULTS` and :data:`TRL_HOUSEKEEPING` (what
:func:`labkit.trl_bridge.from_grpo_config` reads and what it ignores).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping

from labkit.config import FIELDS, TrainConfig
from labkit.losses import LOSS_REGISTRY


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


#: Values of shared fields that TRL spells differently, and the values TRL has at all. labkit's
#: ``sequence_sum`` (sum over a sequence's tokens, mean over sequences) is TRL's ``luspo``
#: aggregation (arXiv 2602.05261); ``tests/test_trl_crosscheck.py`` checks they agree.
TRL_VALUES = {
    "loss_type": _TRLLossNames(),
    "importance_sampling_level": {"token": "token", "sequence": "sequence"},
    "scale_rewards": {"group": "group", "batch": "batch", "none": "none"},
    "lr_scheduler_type": {s: s for s in ("constant", "constant_with_warmup", "linear", "cosine")},
}

def _table(table: str, value=lambda k: k.trl.text) -> dict:
    return {name: value(k) for name, k in FIELDS.items() if k.trl.table == table}


#: Lab field -> ``GRPOConfig`` field of the same meaning, copied as is (after
#: :data:`TRL_VALUES`' renames); from the declarations' ``trl="..."``.
SHARED_FIELDS = _table("shared")
#: Lab fields that shape TRL's config by another road (``trl=derived(how)``).
DERIVED_FIELDS = _table("derived")
#: Lab-only settings: ``field -> (its default, which TRL's GRPOTrainer also has, why not | {value:
#: why not})`` (``trl=lab_only(why)``). A config whose field holds another value is refused; the
#: reasons name TRL's nearest tool.
LAB_ONLY = _table("lab_only", lambda k: (k.default, k.trl.text))
#: Lab-only features a user may drop on purpose (``drop_unsupported``): the value they become.
DROPPABLE = {name: k.default for name, k in FIELDS.items() if k.trl.droppable}
#: Lab fields with no effect on what the bridge hands TRL, and why (``trl=not_carried(why)``).
NOT_CARRIED = _table("not_carried")

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
    return {name: k.default for name, k in FIELDS.items()}


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

