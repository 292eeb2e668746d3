"""LoRA through ``peft``: train a low-rank update of the policy's linear layers, not the layers.

LoRA (Hu et al. 2021, arXiv 2106.09685, section 4.1, eq. 3) freezes each chosen weight ``W0``
(d_out x d_in) and learns ``h = W0 x + (alpha / r) * B A x`` with ``A`` (r x d_in, random) and
``B`` (d_out x r, zero at the start, so the first forward is the base model's). Only ``A`` and
``B`` train: at r = 16 on Qwen2.5-0.5B's attention and MLP projections that is about 1.8% of
the weights, and AdamW's two moments shrink with them (the memory a small GPU does not have).

The lab's conventions, TRL's names (``trl.ModelConfig`` and ``trl.get_peft_config``):

==========================  ===================================================================
``use_peft``                the switch (TRL's); the others are read only when it is on
``lora_r``                  the rank r (TRL default 16)
``lora_alpha``              alpha; the update is scaled by alpha / r (TRL default 32)
``lora_dropout``            dropout on the adapter's input (TRL default 0.05)
``lora_target_modules``     module names (``("q_proj", "v_proj")``), ``"all-linear"`` (every
                            linear layer but the output head), or None = peft's default for the
                            architecture (q_proj and v_proj for Qwen), as in TRL
``use_rslora``              scale by alpha / sqrt(r) instead (rsLoRA, arXiv 2312.03732, section
                            3: with alpha / r the update of a high rank vanishes)
``use_dora``                DoRA (arXiv 2402.09353, eq. 5): the weight's magnitude trains as its
                            own vector and LoRA adapts its direction only
==========================  ===================================================================

Two consequences the trainer relies on:

* **the reference is free**: the base model is the LoRA model with its adapters switched off
  (``model.disable_adapter()``), so with ``beta > 0`` the KL term's reference forward costs no
  second copy of the weights (TRL does the same with a peft model);
* **what cannot work**: anything that moves the reference toward the policy (ProRL's reset,
  TR-DPO's sync) would have to rewrite the frozen base, and PPO's critic is a second full trunk,
  which is what LoRA exists to avoid; :class:`labkit.config.TrainConfig` refuses those.

:func:`merge_and_save` folds ``(alpha / r) B A`` into ``W0`` and writes a plain model that any
``AutoModelForCausalLM.from_pretrained`` (or vLLM) loads without peft.
"""

from __future__ import annotations

import copy
import os
import warnings
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch

from labkit.plugins import config_rule

#: ``lora_target_modules`` value that adapts every linear layer except the output head (peft's).
ALL_LINEAR = "all-linear"


def lora_config(config):
    """The ``peft.LoraConfig`` of a :class:`labkit.config.TrainConfig` (None when ``use_peft``
    is off), built exactly as TRL's ``get_peft_config`` builds it from its ``ModelConfig``."""
    if not config.use_peft:
        return None
    from peft import LoraConfig

    targets = config.lora_target_modules
    return LoraConfig(task_type="CAUSAL_LM", r=config.lora_r, lora_alpha=config.lora_alpha,
                      lora_dropout=config.lora_dropout, bias="none",
                      target_modules=list(targets) if isinstance(targets, tuple) else targets,
                      use_rslora=config.use_rslora, use_dora=config.use_dora)


def wrap_with_lora(model, config):
    """``model`` with fresh LoRA adapters (``peft.get_peft_model``): only the adapters train.

    The adapters are initialised from torch's global generator (seed it for a repeatable run).
    With gradient checkpointing on, the input embeddings are made to require grad so the
    checkpointed blocks still see a graph (frozen inputs would give adapters no gradient).
    """
    from peft import get_peft_model

    peft_config = lora_config(config)
    if peft_config is None:
        raise ValueError("wrap_with_lora needs a config with use_peft=True")
    if is_lora_model(model):
        raise ValueError("the model already has LoRA adapters: pass the base model, or train "
                         "the adapted one with use_peft=False")
    with warnings.catch_warnings():  # peft reads transformers' deprecated attribute name
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
        wrapped = get_peft_model(model, peft_config)
    checkpointing = getattr(model, "is_activation_checkpointing", None)  # transformers 5 name
    if checkpointing is None:
        checkpointing = getattr(model, "is_gradient_checkpointing", False)
    if checkpointing:
        wrapped.enable_input_require_grads()
    return wrapped


def is_lora_model(model) -> bool:
    """True for a ``peft`` model (it has a ``peft_config``)."""
    return hasattr(model, "peft_config")


@contextmanager
def adapters_disabled(model):
    """Within the block, a LoRA model computes its base model's outputs (adapters off); any
    other model is left as it is."""
    with model.disable_adapter() if is_lora_model(model) else nullcontext():
        yield model


def trainable_parameter_count(model) -> tuple[int, int]:
    """``(trainable, total)`` distinct parameters (tied weights counted once)."""
    unique = {id(p): p for p in model.parameters()}.values()
    return (sum(p.numel() for p in unique if p.requires_grad), sum(p.numel() for p in unique))


def merge_and_save(model, tokenizer, out_dir: str | os.PathLike) -> Path:
    """Fold the adapters into the weights and save a plain ``transformers`` model (and the
    tokenizer) to ``out_dir``; ``model`` itself keeps its adapters (a copy is merged).

    The merged model computes the adapted model's outputs (up to float rounding: ``W0 + s B A``
    is summed once instead of at every forward) and loads with
    ``AutoModelForCausalLM.from_pretrained(out_dir)``, no peft needed.
    """
    if not is_lora_model(model):
        raise ValueError("merge_and_save needs a LoRA (peft) model; a plain model is saved with "
                         "model.save_pretrained(out_dir)")
    out_dir = Path(out_dir)
    merged = copy.deepcopy(model).merge_and_unload()
    merged.eval()
    with torch.no_grad():
        merged.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


__all__ = ["ALL_LINEAR", "adapters_disabled", "is_lora_model", "lora_config", "merge_and_save",
           "trainable_parameter_count", "wrap_with_lora"]


@config_rule
def _check_lora(config) -> None:
    """What LoRA cannot honour: a reference that moves, a critic."""
    from labkit.advantages import get_estimator

    if not config.use_peft:
        return
    if config.ref_reset_every or config.ref_reset_patience:
        raise ValueError("use_peft with ref_reset_every / ref_reset_patience: with LoRA the "
                         "reference is the frozen base model (adapters disabled), which ProRL's "
                         "reset cannot move; set them to 0 or use_peft=False")
    if config.sync_ref_model:
        raise ValueError("use_peft with sync_ref_model: with LoRA the reference is the frozen "
                         "base model (adapters disabled), which TR-DPO's sync cannot move; set "
                         "sync_ref_model=False or use_peft=False")
    if get_estimator(config.advantage_estimator).critic:
        raise ValueError(f"use_peft with advantage_estimator={config.advantage_estimator!r}: "
                         f"PPO's critic is a second full copy of the policy's trunk, the memory "
                         f"LoRA exists to save; use a group estimator (grpo, rloo, remax, opo) "
                         f"or use_peft=False")
