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

Replace the first line with ``from labkit.trl_compat import GRPOConfig, GRPOTrainer`` and the same
script trains on :class:`labkit.trainer.Trainer`, on the CPU, with everything the lab shows
(``trainer.history``, the run doctor, the viz functions); switch the import back and it runs in
TRL. The settings are translated as a whole by :func:`labkit.trl_bridge.from_grpo_config`
(TRL's per-device batch geometry becomes prompts per step, mini-batches and micro-batches; TRL's
defaults apply to what the script leaves out, ``loss_type="dapo"`` and ``learning_rate=1e-6``
included), and a setting the lab does not have is refused by name.

What is the same: the algorithm each setting names, the reward functions (called with keywords,
as TRL calls them), the dataset's ``prompt`` column and the extra columns passed to the rewards.
What is not: the lab samples with its own KV-cached loop (same distribution, other random
streams), so the two runs do not produce the same numbers; the lab evaluates nothing unless asked;
``train()`` returns TRL's ``TrainOutput`` fields (``global_step`` counts optimizer steps, as TRL's).
"""

from __future__ import annotations

import math
from collections import namedtuple
from pathlib import Path

from labkit.trl_bridge import TRL_DEFAULTS, from_grpo_config

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
    whose rank, alpha, dropout and target modules become the lab's LoRA fields. Anything else
    TRL accepts and the lab lacks is refused by name.
    """

    def __init__(self, model, reward_funcs=None, args: GRPOConfig | None = None,
                 train_dataset=None, eval_dataset=None, processing_class=None, callbacks=None,
                 peft_config=None, **others):
        from labkit.models import load_policy
        from labkit.trainer import Trainer

        if others:
            raise TypeError(f"GRPOTrainer here has no {', '.join(sorted(others))} (TRL "
                            f"arguments the lab's trainer lacks); run the script with TRL")
        if train_dataset is None:
            raise ValueError("train_dataset is required (a datasets.Dataset with a 'prompt' "
                             "column)")
        funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        for fn in funcs:
            if not callable(fn):
                raise TypeError(f"reward_funcs must be callables fn(completions, **kwargs) "
                                f"here; got {fn!r} (a reward model by name: wrap it in a "
                                f"function)")
        settings = dict((args or GRPOConfig(output_dir="trainer_output")).settings)
        config = from_grpo_config(settings, dataset_size=len(train_dataset))
        overrides = {"eval_every": 0}
        if peft_config is not None:
            missing = [k for k in ("r", "lora_alpha", "lora_dropout")
                       if not hasattr(peft_config, k)]
            if missing:
                raise TypeError(f"peft_config must be a peft.LoraConfig (rank, alpha, dropout and "
                                f"target modules become the lab's LoRA fields), got "
                                f"{type(peft_config).__name__} {peft_config!r}")
            targets = getattr(peft_config, "target_modules", None)
            overrides.update(use_peft=True, lora_r=peft_config.r,
                             lora_alpha=peft_config.lora_alpha,
                             lora_dropout=peft_config.lora_dropout,
                             lora_target_modules=(tuple(targets) if isinstance(targets, (set, list))
                                                  else targets))
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
                               reward_funcs=funcs, callbacks=list(callbacks or ()))
        self.model, self.processing_class = self.trainer.model, self.trainer.tokenizer
        self.state = TrainerState()

    @property
    def history(self):
        """The lab's history: one row per step (:data:`labkit.metrics.METRICS`)."""
        return self.trainer.history

    def train(self, resume_from_checkpoint=None) -> TrainOutput:
        """Train to ``max_steps``; returns TRL's ``TrainOutput`` (``global_step`` in optimizer
        steps, ``training_loss`` the mean logged loss)."""
        result = self.trainer.train(resume_from=resume_from_checkpoint)
        cfg = self.config
        rows = result.history.to_dict("records")
        self.state.log_history = rows
        self.state.global_step = self.trainer.step * cfg.num_iterations * cfg.num_mini_batches
        losses = [r["loss"] for r in rows if isinstance(r.get("loss"), float)
                  and math.isfinite(r["loss"])]
        metrics = {"train_steps": self.trainer.step, "interrupted": result.interrupted}
        return TrainOutput(self.state.global_step, sum(losses) / max(len(losses), 1), metrics)

    def save_model(self, output_dir: str | None = None) -> None:
        """Save the model and tokenizer as TRL does (``output_dir`` defaults to the args')."""
        directory = Path(output_dir or self.config.output_dir or "trainer_output")
        directory.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(directory)
        self.processing_class.save_pretrained(directory)


__all__ = ["GRPOConfig", "GRPOTrainer", "TrainOutput", "TrainerState"]
