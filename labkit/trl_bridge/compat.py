"""TRL's ``GRPOConfig`` and ``GRPOTrainer`` signatures on the lab's trainer: a TRL script runs here
by changing its imports.

A GRPO script from TRL's docs, the HF course or a Colab reads::

    from trl import GRPOConfig, GRPOTrainer

    def reward_len(completions, **kwargs):
        return [-abs(20 - len(c[0]["content"])) for c in completions]

    args = GRPOConfig(output_dir="out", per_device_train_batch_size=4,
                      gradient_accumulation_steps=2, logging_steps=2)
    trainer = GRPOTrainer(model="data/models/tiny-qwen", reward_funcs=reward_len, args=args,
                          train_dataset=dataset)
    trainer.train()

Replace the first line with ``from labkit.trl_bridge.compat import GRPOConfig, GRPOTrainer``
and the same script trains on :class:`labkit.trainer.Trainer`, on the CPU, with everything the
lab shows (``trainer.history``, the run doctor, the viz functions); switch the import back and it
runs in TRL. The settings are translated as a whole by :func:`labkit.trl_bridge.from_grpo_config`
(TRL's per-device batch geometry becomes prompts per step, mini-batches and micro-batches; TRL's
defaults apply to what the script leaves out, ``loss_type="dapo"`` and ``learning_rate=1e-6``
included), and a setting the lab does not have is refused by name.

What is the same: the algorithm each setting names, the reward functions (called with keywords,
as TRL calls them), the dataset's ``prompt`` column and the extra columns passed to the rewards,
a peft ``LoraConfig`` (:data:`PEFT_FIELDS`), ``environment_factory`` (episodes with tools; an
environment's own ``get_reward`` joins the rewards as TRL adds it) and
``train(resume_from_checkpoint=...)``. What is not: the lab samples with its own KV-cached loop
(same distribution, other random streams), so the two runs do not produce the same numbers; the
lab evaluates nothing unless asked; ``train()`` returns TRL's ``TrainOutput`` fields
(``global_step`` counts optimizer steps, as TRL's).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections import namedtuple
from pathlib import Path

from labkit.trl_bridge.tables import TRL_DEFAULTS
from labkit.trl_bridge.trl_to_lab import from_grpo_config

#: peft ``LoraConfig`` field -> the lab's LoRA setting (:mod:`labkit.training.lora`) it becomes; TRL's
#: ``get_peft_config`` builds a LoraConfig from the same settings of its ``ModelConfig``.
PEFT_FIELDS = {"r": "lora_r", "lora_alpha": "lora_alpha", "lora_dropout": "lora_dropout",
               "target_modules": "lora_target_modules", "use_rslora": "use_rslora",
               "use_dora": "use_dora"}
#: LoraConfig fields the lab's LoRA has one value of (:func:`labkit.training.lora.lora_config`), and
#: those that only record where the adapter came from; every other field must keep peft's
#: default, or the peft_config is refused naming it (the lab would train something else).
PEFT_FIXED = {"task_type": ("CAUSAL_LM", None), "bias": ("none",), "inference_mode": (False,)}
PEFT_RECORDS = ("peft_type", "auto_mapping", "peft_version", "base_model_name_or_path",
                "revision")

#: What :meth:`GRPOTrainer.train` returns: TRL's (transformers') ``TrainOutput`` fields.
TrainOutput = namedtuple("TrainOutput", ["global_step", "training_loss", "metrics"])


class GRPOConfig:
    """TRL's ``GRPOConfig(...)`` arguments, kept as given; the lab's settings are read from them
    when the trainer starts (:func:`labkit.trl_bridge.from_grpo_config`). Reading an attribute
    gives the given value or TRL's default (``args.num_generations`` is 8 unless set)."""

    def __init__(self, output_dir: str | None = None, **kwargs):
        self.settings = {"output_dir": output_dir, **kwargs} if output_dir else dict(kwargs)

    def __getattr__(self, name):
        settings = self.__dict__.get("settings", {})
        if name in settings:
            return settings[name]
        if name in TRL_DEFAULTS:
            return TRL_DEFAULTS[name]
        raise AttributeError(f"GRPOConfig has no setting {name!r} here (the lab reads the TRL "
                             f"settings in labkit.trl_bridge.TRL_DEFAULTS)")

    def __repr__(self):
        return f"GRPOConfig({', '.join(f'{k}={v!r}' for k, v in self.settings.items())})"


class TrainerState:
    """The part of TRL's ``trainer.state`` scripts read: ``log_history`` (one dict per step,
    the lab's column names) and ``global_step``."""

    def __init__(self):
        self.log_history: list[dict] = []
        self.global_step = 0


class GRPOTrainer:
    """TRL's ``GRPOTrainer(model, reward_funcs, args, train_dataset, ...)`` on the lab's trainer.

    ``model``: a folder or hub id (loaded with :func:`labkit.models.load_policy`, so ``"tiny"``
    works too) or a loaded causal LM, with ``processing_class`` its tokenizer. ``reward_funcs``:
    one callable or a list, TRL's signature; a reward *model* given by name is refused (the lab
    has no reward-model loader; wrap it in a function). ``peft_config``: a peft ``LoraConfig``,
    read by :func:`lora_settings`. ``environment_factory``: TRL's, handed to the lab's trainer
    (:mod:`labkit.agents.episodes`); as in TRL, when its environment has a ``get_reward`` method
    that reward (:func:`labkit.rewards.environment.environment_reward`) is added to
    ``reward_funcs`` with weight 1, and ``reward_funcs`` may then be left out. Anything else TRL
    accepts and the lab lacks is refused by name.
    """

    def __init__(self, model, reward_funcs=None, args: GRPOConfig | None = None,
                 train_dataset=None, eval_dataset=None, processing_class=None, callbacks=None,
                 peft_config=None, environment_factory=None, **others):
        from labkit.agents.episodes import environment_probe
        from labkit.models import load_policy
        from labkit.rewards.environment import environment_reward
        from labkit.trainer import Trainer

        if others:
            raise TypeError(f"GRPOTrainer here has no {', '.join(sorted(others))} (TRL "
                            f"arguments the lab's trainer lacks); run the script with TRL")
        if train_dataset is None:
            raise ValueError("train_dataset is required (a datasets.Dataset with a 'prompt' "
                             "column)")
        probe = None if environment_factory is None else environment_probe(environment_factory)
        environment_rewards = callable(getattr(type(probe), "get_reward", None))
        funcs = (list(reward_funcs) if isinstance(reward_funcs, (list, tuple))
                 else [] if reward_funcs is None and environment_rewards else [reward_funcs])
        for fn in funcs:
            if not callable(fn):
                raise TypeError(f"reward_funcs must be callables fn(completions, **kwargs) "
                                f"here; got {fn!r} (a reward model by name: wrap it in a "
                                f"function)")
        settings = dict((args or GRPOConfig(output_dir="trainer_output")).settings)
        config = from_grpo_config(settings, dataset_size=len(train_dataset))
        overrides = {"eval_every": 0}
        if environment_rewards:  # TRL appends the environment's reward with weight 1
            funcs.append(environment_reward)
            if config.reward_weights is not None:
                overrides["reward_weights"] = (*config.reward_weights, 1.0)
        if peft_config is not None:
            overrides.update(use_peft=True, **lora_settings(peft_config))
        for name, value in overrides.items():
            setattr(config, name, value)
        if isinstance(model, (str, Path)):
            model, loaded = load_policy(str(model), device=config.device, dtype=config.dtype,
                                        gradient_checkpointing=config.gradient_checkpointing)
            processing_class = processing_class or loaded
        elif processing_class is None:
            raise ValueError("a loaded model needs its tokenizer: pass processing_class=")
        self.args, self.config = args, config
        self.trainer = Trainer(config, model=model, tokenizer=processing_class,
                               train_dataset=train_dataset, eval_dataset=eval_dataset,
                               reward_funcs=funcs, callbacks=list(callbacks or ()),
                               environment_factory=environment_factory)
        self.model, self.processing_class = self.trainer.model, self.trainer.tokenizer
        self.state = TrainerState()

    @property
    def history(self):
        """The lab's history: one row per step (:data:`labkit.metrics.METRICS`)."""
        return self.trainer.history

    def train(self, resume_from_checkpoint=None) -> TrainOutput:
        """Train to ``max_steps``; returns TRL's ``TrainOutput`` (``global_step`` in optimizer
        steps, ``training_loss`` the mean logged loss). ``resume_from_checkpoint`` as TRL
        (transformers' ``Trainer.train``) reads it: a checkpoint folder, True for the latest
        ``checkpoint-<step>`` folder in ``output_dir`` (refused when there is none), False or
        None to start afresh."""
        result = self.trainer.train(resume_from=self._checkpoint(resume_from_checkpoint))
        cfg = self.config
        rows = result.history.to_dict("records")
        self.state.log_history = rows
        self.state.global_step = self.trainer.step * cfg.num_iterations * cfg.num_mini_batches
        losses = [r["loss"] for r in rows if isinstance(r.get("loss"), float)
                  and math.isfinite(r["loss"])]
        metrics = {"train_steps": self.trainer.step, "interrupted": result.interrupted}
        return TrainOutput(self.state.global_step, sum(losses) / max(len(losses), 1), metrics)

    def _checkpoint(self, resume):
        """The checkpoint folder ``train(resume_from_checkpoint=resume)`` resumes, or None."""
        if resume is None or resume is False:
            return None
        if isinstance(resume, (str, os.PathLike)):
            return resume
        if resume is not True:
            raise TypeError(f"resume_from_checkpoint must be a checkpoint folder, True (the "
                            f"latest checkpoint in output_dir) or False/None (start afresh), got "
                            f"{resume!r}")
        from transformers.trainer_utils import get_last_checkpoint

        folder = self.config.output_dir
        latest = get_last_checkpoint(folder) if folder and os.path.isdir(folder) else None
        if latest is None:
            raise ValueError(f"resume_from_checkpoint=True resumes the latest checkpoint-<step> "
                             f"folder of output_dir, and there is no checkpoint in {folder!r}: "
                             f"start afresh (False) or name a checkpoint folder")
        return latest

    def save_model(self, output_dir: str | None = None) -> None:
        """Save the model and tokenizer as TRL does (``output_dir`` defaults to the args')."""
        directory = Path(output_dir or self.config.output_dir or "trainer_output")
        directory.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(directory)
        self.processing_class.save_pretrained(directory)


def lora_settings(peft_config) -> dict:
    """The lab's LoRA settings (:data:`PEFT_FIELDS`) of a peft ``LoraConfig``. A field the lab
    cannot honour (:data:`PEFT_FIXED` at another value, or any other field away from peft's
    default: ``modules_to_save``, ``layers_to_transform``, ``exclude_modules``, rank or alpha
    patterns, other initialisations ...) is refused by name rather than dropped."""
    from peft import LoraConfig

    if not isinstance(peft_config, LoraConfig):
        raise TypeError(f"peft_config must be a peft.LoraConfig (its rank, alpha, dropout, "
                        f"target modules, use_rslora and use_dora become the lab's LoRA "
                        f"settings), got {type(peft_config).__name__} {peft_config!r:.80}")
    default = LoraConfig()
    refused = []
    for field in dataclasses.fields(peft_config):
        value = getattr(peft_config, field.name)
        if field.name in PEFT_FIELDS or field.name in PEFT_RECORDS:
            continue
        allowed = PEFT_FIXED.get(field.name, (getattr(default, field.name),))
        if value not in allowed:
            refused.append(f"{field.name}={value!r}")
    if refused:
        raise ValueError(f"peft_config sets {', '.join(refused)}, which the lab's LoRA "
                         f"(labkit.training.lora) does not have: it adapts the target modules of "
                         f"every layer with plain LoRA, rsLoRA or DoRA (bias='none', causal LM); "
                         f"drop these settings or run the script with TRL")
    out = {lab: getattr(peft_config, name) for name, lab in PEFT_FIELDS.items()}
    targets = out["lora_target_modules"]
    if isinstance(targets, (set, list, tuple)):  # peft keeps a set: the lab's order is sorted
        out["lora_target_modules"] = tuple(sorted(targets))
    return out


__all__ = ["PEFT_FIELDS", "PEFT_FIXED", "PEFT_RECORDS", "GRPOConfig", "GRPOTrainer",
           "TrainOutput", "TrainerState", "lora_settings"]
