"""TRL's spellings that a :class:`~labkit.config.TrainConfig` refuses, each with the lab's
equivalent.

A learner who brings a ``trl.GRPOConfig`` keyword (``per_device_train_batch_size=4``) to
``TrainConfig`` should learn how the lab spells it, not read ``unexpected keyword argument``. The
table sits beside its one reader: the config calls :func:`refuse_trl_names` before its generated
``__init__``, and the TRL bridge, which stands above the config, reads it from here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

#: TRL ``GRPOConfig`` names a learner brings from a TRL script, and the lab's equivalent. The lab
#: counts a step in prompts and optimizer steps per batch, not in per-device batches, so these are
#: refused with the way to translate them rather than accepted one by one.
TRL_NAMES = {
    "per_device_train_batch_size": "micro_batch_size caps the completions of one forward; a "
                                   "step samples prompts_per_step x num_generations completions",
    "gradient_accumulation_steps": "derived here (TrainConfig.gradient_accumulation_steps = "
                                   "mini-batch / micro_batch_size)",
    "steps_per_generation": "num_mini_batches optimizer steps per generation batch",
    "generation_batch_size": "prompts_per_step x num_generations (read-only property "
                             "generation_batch_size)",
    "num_train_epochs": "max_steps (steps of one generation batch each)",
    "warmup_steps": "warmup_ratio (a fraction of the optimizer steps)",
    "bf16": "dtype='bfloat16'", "fp16": "dtype (float16 is refused: it overflows unscaled)",
    "use_cpu": "device='cpu'", "save_steps": "save_every (in lab steps)",
    "save_strategy": "save_every", "logging_steps": "nothing: every step is one history row",
    "report_to": "nothing: the history is a pandas frame (result.history)",
    "use_vllm": "nothing: the lab samples with its own KV-cached loop (see sampling_dtype)",
    "run_name": "nothing", "logging_dir": "nothing", "push_to_hub": "nothing",
}


def refuse_trl_names(given: Iterable[str], lab_fields: Collection[str]) -> None:
    """``TypeError`` naming each of ``given`` that is TRL's spelling and not a lab field, with
    the lab's equivalent and the two ways to bring a whole TRL config."""
    trl_only = [name for name in given if name in TRL_NAMES and name not in lab_fields]
    if trl_only:
        hints = "; ".join(f"{name}: {TRL_NAMES[name]}" for name in trl_only)
        raise TypeError(
            f"TrainConfig got TRL's GRPOConfig name(s) {', '.join(trl_only)}, which the lab "
            f"spells differently ({hints}). To bring a whole TRL config, use "
            f"labkit.trl_bridge.from_grpo_config({{...}}) or "
            f"labkit.trl_bridge.compat.GRPOConfig(...), which translate TRL's batch geometry "
            f"as a whole")
