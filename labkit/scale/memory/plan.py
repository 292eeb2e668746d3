"""The memory plan: :func:`memory_plan` (the components of one training step and their total,
the largest phase) and :func:`phase_totals`."""

from __future__ import annotations

import pandas as pd

from labkit.scale.memory.rows import (
    PHASES,
    _activations_row,
    _graph_caches_row,
    _keeps_graph_cache,
    _logits_row,
    _model_copy_rows,
    _RunSizes,
    _sampler_copy_rows,
    _sampling_rows,
    _state_rows,
    _step_temporaries_row,
    _trainable,
)
from labkit.scale.memory.shape import _config, _Shape

GIB = 2**30
#: ``optimizer`` values: AdamW keeps two moments per trainable parameter, plain SGD none.
OPTIMIZERS = ("adamw", "sgd")


def memory_plan(model_config_or_name, train_config=None, *, prompt_length: int | None = None,
                optimizer: str = "adamw", device: str = "cuda",
                master_weights: bool = False) -> pd.DataFrame:
    """The memory bill of one training step, one row per component (package docstring's table).

    Args:
        model_config_or_name: a ``transformers`` config of a Llama-style decoder (Qwen2, Qwen3,
            Llama, Mistral), or a name for :func:`labkit.models.load_model_config` (``"tiny"``,
            ``"Qwen/Qwen2.5-0.5B-Instruct"``...).
        train_config: a :class:`labkit.config.TrainConfig` (None = the default GRPO); read:
            dtype, LoRA (``use_peft``, ``lora_r``, ``lora_target_modules``, ``lora_dropout``), G,
            prompts per step, micro_batch_size, num_mini_batches, max_completion_length,
            gradient_checkpointing, beta, advantage_estimator, rollback_nonfinite_weights, the
            sampler (``sampling_dtype``, ``async_mode``, ``decode_path``, ``cuda_graphs``) and
            the shapes it samples besides the training batch (``dynamic_sampling``,
            ``max_resample_rounds``, ``eval_every``, ``eval_k``, ``eval_max_prompts``).
        prompt_length: P, tokens of the longest prompt (chat template included); None = 256, a
            round budget for a GSM8K-style question in Qwen's tokenizer. Measure yours.
        optimizer: ``"adamw"`` (the trainer's) or ``"sgd"`` (no state: a lower bound).
        device: ``"cuda"`` or ``"cpu"``: what ``dtype="auto"`` resolves to (bfloat16 / float32)
            and how AdamW steps (all tensors at once on CUDA, one at a time on the CPU).
        master_weights: False (the lab's trainer, and the default): AdamW keeps its moments in
            the trainable parameters' dtype, with no float32 copy, so a bfloat16 run is planned
            as pure bfloat16. True: mixed precision as DeepSpeed, FSDP and verl run it, a float32
            master copy of the trainable parameters (``4 n``) and float32 moments (``2 n 4``):
            16 bytes per trainable bfloat16 parameter with its gradient. No change when the
            trainable parameters are float32 already (they are their own master copy).

    Returns a DataFrame indexed by component with columns ``bytes`` (int), ``GiB``, ``phases``
    (when the component is live: sampling, train, step) and ``formula``; the last row,
    ``total``, is the largest phase (see :func:`phase_totals`), not the column's sum. A component
    that does not exist in this configuration (no reference model at beta = 0, no critic
    without PPO) has no row.
    """
    cfg, prompt_length = _checked_arguments(train_config, prompt_length, optimizer, device,
                                            master_weights)
    shape = _Shape(_config(model_config_or_name))
    t = _trainable(shape, cfg, device, master_weights)
    run = _RunSizes(G=cfg.num_generations, p=cfg.prompts_per_step, P=prompt_length,
                    C=cfg.max_completion_length, b=cfg.micro_batch_size or cfg.mini_batch_size)
    adamw = optimizer == "adamw"
    activations = _activations_row(shape, t, run, cfg)
    graph = _keeps_graph_cache(cfg, t, device)
    rows = [*_state_rows(t, adamw),
            _step_temporaries_row(shape, t, adamw, device, cfg.rollback_nonfinite_weights),
            activations,
            _logits_row(shape, t, run),
            *_sampling_rows(shape, t, run, cfg, graph),
            *([_graph_caches_row(shape, t, run, cfg)] if graph else []),
            *_sampler_copy_rows(t, cfg),
            *_model_copy_rows(shape, t, cfg, adamw, activations["bytes"])]
    return _with_total([row for row in rows if row is not None])


def _checked_arguments(train_config, prompt_length, optimizer, device, master_weights):
    """``(train_config, prompt_length)`` with their defaults filled in; TypeError/ValueError
    naming the argument when one of :func:`memory_plan`'s arguments is out of range."""
    from labkit.config import TrainConfig

    cfg = TrainConfig() if train_config is None else train_config
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"train_config must be a labkit.config.TrainConfig, got "
                         f"{type(cfg).__name__}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(map(repr, OPTIMIZERS))}, got "
                         f"{optimizer!r}")
    if device not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda' or 'cpu', got {device!r}")
    if not isinstance(master_weights, bool):
        raise TypeError(f"master_weights must be True or False, got {master_weights!r}")
    if prompt_length is None:
        prompt_length = 256
    if not isinstance(prompt_length, int) or isinstance(prompt_length, bool) or prompt_length < 1:
        raise ValueError(f"prompt_length must be an integer >= 1 (tokens), got {prompt_length!r}")
    return cfg, prompt_length


def _with_total(rows: list[dict]) -> pd.DataFrame:
    """The components as :func:`memory_plan`'s table: the ``GiB`` column and the ``total`` row,
    the largest phase."""
    plan = pd.DataFrame(rows).set_index("component")
    totals = phase_totals(plan)
    peak = totals.idxmax()
    total = pd.DataFrame([{"component": "total", "bytes": int(totals[peak]), "phases": peak,
                           "formula": f"largest phase: {peak} (sampling "
                                      f"{totals['sampling'] / GIB:.2f}, train "
                                      f"{totals['train'] / GIB:.2f}, step "
                                      f"{totals['step'] / GIB:.2f} GiB)"}]
                         ).set_index("component")
    plan = pd.concat([plan, total])
    plan.insert(1, "GiB", plan["bytes"] / GIB)
    return plan[["bytes", "GiB", "phases", "formula"]]


def phase_totals(plan: pd.DataFrame) -> pd.Series:
    """Bytes live in each phase (sampling, train, step): the sum of the components listed in it.

    The phases never overlap in the trainer: sampling ends before the training forward, and the
    activations are freed before the optimizer steps, so a step's peak is the largest phase. (In
    overlapped mode a thread samples during the other two: its buffers are listed in all three.)
    """
    parts = plan.drop(index="total", errors="ignore")
    return pd.Series({phase: int(parts.loc[parts["phases"].str.contains(phase), "bytes"].sum())
                      for phase in PHASES})
