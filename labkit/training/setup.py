"""What a :class:`labkit.trainer.Trainer` builds before its first step: the policy, the reward
functions, the datasets, the frozen copies and the optimizer, each checked with an error that
says what to pass instead."""

from __future__ import annotations

import copy
import math

import torch

from labkit.models import load_policy
from labkit.rewards import accuracy_reward, format_reward, reward_function_names
from labkit.runtime.compat import enable_activation_checkpointing
from labkit.tasks import load_split
from labkit.training.data import as_dataset, check_prompt_dataset, check_unique_ids
from labkit.training.lora import wrap_with_lora


def prepare_policy(config, model=None, tokenizer=None):
    """``(model, tokenizer)``: the given pair, or ``load_policy(config.model_name_or_path)``;
    activation checkpointing switched on when the config asks; with ``use_peft``, fresh LoRA
    adapters from torch's global generator (:func:`labkit.training.lora.wrap_with_lora`), only
    they train. The model comes back in eval mode, as the trainer keeps it outside its update:
    peft's wrapper and a model built in code are in train mode, and a resumed run's first score
    forwards would otherwise run LoRA's dropout, which the uninterrupted run's do not."""
    if model is None:
        model, tokenizer = load_policy(config.model_name_or_path, device=config.device,
                                       dtype=config.dtype,
                                       gradient_checkpointing=config.gradient_checkpointing)
    elif tokenizer is None:
        raise ValueError("pass the model's tokenizer along with the model")
    elif config.gradient_checkpointing:
        enable_activation_checkpointing(model)
    if config.use_peft:
        model = wrap_with_lora(model, config)
    return model.eval(), tokenizer


def prepare_reward_funcs(config, reward_funcs=None) -> tuple[list, list[str]]:
    """``(functions, names)``: the given reward functions, or accuracy and format, checked
    against ``config.reward_weights``."""
    funcs = [accuracy_reward, format_reward] if reward_funcs is None else list(reward_funcs)
    if not funcs:
        raise ValueError("reward_funcs is empty: give at least one reward function, e.g. "
                         "[accuracy_reward, format_reward] from labkit.rewards")
    for fn in funcs:
        if not callable(fn):
            raise TypeError(f"reward_funcs must hold callables fn(prompts, completions, "
                            f"**columns); got {type(fn).__name__}")
    names = reward_function_names(funcs)
    if config.reward_weights is not None and len(config.reward_weights) != len(funcs):
        raise ValueError(f"reward_weights has {len(config.reward_weights)} weights for "
                         f"{len(funcs)} reward functions ({', '.join(names)}): give one weight "
                         f"per function")
    return funcs, names


def prepare_datasets(config, train_dataset=None, eval_dataset=None, needs_answers=True,
                     episodes=False):
    """``(train, eval)``: the given datasets (checked), or the task suite's splits; ``eval`` is
    None when none is given and the config never evaluates. ``needs_answers``: the accuracy
    reward trains; ``episodes``: evaluation runs episodes, whose environment may judge the rows
    the rule cannot (``get_reward()``), so the eval rows need no answer the rule can check."""
    train = (load_split("train") if train_dataset is None
             else as_dataset(train_dataset, "train_dataset"))
    check_prompt_dataset(train, "train_dataset", needs_answers=needs_answers)
    if eval_dataset is None and config.eval_every:
        eval_dataset = load_split("eval")
    if eval_dataset is not None:
        eval_dataset = as_dataset(eval_dataset, "eval_dataset")
        check_prompt_dataset(eval_dataset, "eval_dataset", needs_answers=not episodes)
        check_unique_ids(eval_dataset, "eval_dataset")  # evaluation groups by id
        if config.eval_max_prompts is not None:
            eval_dataset = eval_dataset.select(
                range(min(config.eval_max_prompts, len(eval_dataset))))
    return train, eval_dataset


def make_optimizer(config, model, value_model=None):
    """``(AdamW, scheduler)`` over the policy's trainable weights (and the critic's, at
    ``value_learning_rate``), the schedule counted in optimizer steps."""
    from transformers import get_scheduler

    param_groups = [{"params": [p for p in model.parameters() if p.requires_grad]}]
    if value_model is not None:
        param_groups.append({"params": list(value_model.parameters()),
                             "lr": config.value_learning_rate or config.learning_rate})
    optimizer = torch.optim.AdamW(param_groups, lr=config.learning_rate,
                                  betas=(config.adam_beta1, config.adam_beta2),
                                  weight_decay=config.weight_decay)
    steps = config.max_steps * config.num_iterations * config.num_mini_batches
    scheduler = get_scheduler(config.lr_scheduler_type, optimizer,
                              num_warmup_steps=math.ceil(config.warmup_ratio * steps),
                              num_training_steps=steps)
    return optimizer, scheduler


def frozen_copy(model, dtype: torch.dtype | None = None):
    """A copy of ``model`` in eval mode with no gradient (a reference, or a sampler)."""
    ref = copy.deepcopy(model).eval()
    ref.requires_grad_(False)
    return ref if dtype is None else ref.to(dtype)
