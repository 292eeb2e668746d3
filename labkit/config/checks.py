"""What a :class:`~labkit.config.TrainConfig` does besides holding its fields: validation on
construction and on every assignment, the derived sizes, and the range checks that need more than
one bound (the field declarations, :func:`labkit.config.knobs.knob`, use them).

A bad value raises ``ValueError`` naming the field and its allowed range, an impossible
combination raises one that says how to fix it, and a misspelt field raises ``AttributeError``.
"""

from __future__ import annotations

import math
import sys
import warnings
from dataclasses import asdict, fields

from labkit.advantages import estimators, get_estimator, group_estimators
from labkit.losses import get_loss_type
from labkit.losses.clipped import upper_clip
from labkit.losses.registry import all_options, option_owners
from labkit.models import DTYPES
from labkit.plugins import config_rules
from labkit.plugins.settings import (
    choice,
    device,
    integer,
    integer_tuple,
    number_tuple,
    refuse,
)


def inert_clip_higher_message(config) -> str:
    """The one wording of the inert clip-higher warning (config time and the run doctor)."""
    return (f"epsilon_high = {config.epsilon_high} > epsilon = {config.epsilon}, but every batch "
            f"trains one optimizer step (num_iterations = num_mini_batches = 1): the ratio is "
            f"exactly 1 and no clip ever binds, so clip-higher changes nothing; DAPO splits each "
            f"batch into 16 mini-batches (set num_mini_batches > 1 to make it act)")


# ---- ranges that need more than one bound (used in the field declarations) ----------------------
def check_device(cfg, name):
    device(cfg)


def check_dtype(cfg, name):
    choice(cfg, name, DTYPES)
    if getattr(cfg, name) in ("float16", "fp16"):
        raise ValueError("dtype='float16' cannot train here: without loss scaling the "
                         "updates overflow and the weights turn NaN after one step (measured "
                         "on the tiny Qwen: 796k of 800k weights). Use 'bfloat16' on a GPU "
                         "that has it, else 'float32'")


def group_size(cfg) -> int:
    return cfg.num_generations


def check_adaptive_k(cfg, name):
    if getattr(cfg, name) is not None:
        integer_tuple(cfg, name, 4, low=2, high=cfg.num_generations)


def check_reward_weights(cfg, name):
    if getattr(cfg, name) is not None:
        number_tuple(cfg, name)


def check_overlong_buffer(cfg, name):
    integer(cfg, name, low=0)
    if cfg.overlong_buffer_len >= cfg.max_completion_length:
        raise ValueError(
            f"overlong_buffer_len must be in [0, max_completion_length) = "
            f"[0, {cfg.max_completion_length}), got {cfg.overlong_buffer_len}")


def check_lora_targets(cfg, name):
    targets = cfg.lora_target_modules
    if targets is None or targets == "all-linear":
        return
    ok = (not isinstance(targets, (str, bytes, dict)) and hasattr(targets, "__iter__")
          and len(tuple(targets)) > 0
          and all(isinstance(t, str) and t.strip() for t in tuple(targets)))
    if not ok:
        raise ValueError(f"lora_target_modules must be None, 'all-linear' or a non-empty "
                         f"tuple of module names such as ('q_proj', 'v_proj'), got "
                         f"{targets!r}")
    object.__setattr__(cfg, "lora_target_modules", tuple(targets))


class ConfigChecks:
    """The behaviour :class:`~labkit.config.TrainConfig` inherits: it validates itself on
    construction and again on every assignment (``cfg.beta = -1`` raises and leaves the old
    value), derives sizes from its fields, and resolves ``epsilon_high``'s None once
    (:attr:`upper_clip`)."""

    def __post_init__(self):
        self._check_values()
        self._check_combinations()
        object.__setattr__(self, "_validated", True)

    def __setattr__(self, name, value):
        """Assignment after construction is validated like construction; a refused value leaves
        the config as it was."""
        if not self.__dict__.get("_validated"):
            object.__setattr__(self, name, value)
            return
        if name not in self.__dataclass_fields__:
            raise AttributeError(f"TrainConfig has no field {name!r}; the fields are listed in "
                                 f"labkit.config.FIELD_DOCS")
        old = getattr(self, name)
        object.__setattr__(self, name, value)
        try:
            self._check_values()
            self._check_combinations()
        except Exception:
            object.__setattr__(self, name, old)
            raise

    # ---- derived sizes ---------------------------------------------------------------------------
    @property
    def generation_batch_size(self) -> int:
        """Completions sampled per step (TRL's name): prompts_per_step * num_generations."""
        return self.prompts_per_step * self.num_generations

    @property
    def kept_per_prompt(self) -> int:
        """Completions per prompt that train: GFPO's k (the largest adaptive k), else G."""
        if self.gfpo_adaptive_k is not None:
            return max(self.gfpo_adaptive_k)
        return self.num_remains_in_group or self.num_generations

    @property
    def train_batch_size(self) -> int:
        """Completions per step that reach the loss (after GFPO's filter)."""
        return self.prompts_per_step * self.kept_per_prompt

    @property
    def mini_batch_size(self) -> int:
        """Completions per optimizer step (the last mini-batch may be smaller)."""
        return math.ceil(self.train_batch_size / self.num_mini_batches)

    @property
    def gradient_accumulation_steps(self) -> int:
        """Micro-batches per optimizer step."""
        if self.micro_batch_size is None:
            return 1
        return math.ceil(self.mini_batch_size / self.micro_batch_size)

    @property
    def off_policy(self) -> bool:
        """True when the weights move between sampling and some update, so the loss needs the
        behaviour policy's log-probs (num_iterations > 1 or several mini-batches)."""
        return self.num_iterations > 1 or self.num_mini_batches > 1

    @property
    def clip_higher_inert(self) -> bool:
        """True when ``epsilon_high`` widens the band (DAPO's clip-higher) but the run is on-policy:
        every ratio is exactly 1 at its one update, no clip ever binds, and the setting changes
        nothing. (CISPO's ``epsilon_high`` is a weight cap, not a band, and is not counted.)"""
        return (self.upper_clip > self.epsilon and get_loss_type(self.loss_type).clipped
                and not self.off_policy)

    @property
    def upper_clip(self) -> float:
        """The upper clip parameter as the loss reads it: ``epsilon_high``, or ``epsilon`` when
        ``epsilon_high`` is None. TRL's rule, resolved here once for every reader of a config (the
        field keeps TRL's None, so ``to_dict``, checkpoints and the TRL bridge see what was set).
        For the clipped losses the band is ``[1 - epsilon, 1 + upper_clip]``; for ``cispo`` it
        is the absolute cap on the importance weight (TRL's meaning; cispo refuses None)."""
        return upper_clip(self.epsilon, self.epsilon_high)

    @property
    def needs_reference(self) -> bool:
        """A frozen reference model exists only when the KL coefficient is non-zero."""
        return self.beta != 0

    def to_dict(self) -> dict:
        return asdict(self)

    # ---- validation ------------------------------------------------------------------------------
    def _check_values(self):
        """Each field against the range beside it (a loss's settings: the range it declared)."""
        for f in fields(self):
            f.metadata["range"](self, f.name)

    def _check_combinations(self):
        gfpo = self.num_remains_in_group is not None or self.gfpo_adaptive_k is not None
        self._check_estimator()
        self._check_loss_type()
        if self.lr_scheduler_type == "constant" and self.warmup_ratio > 0:
            refuse("lr_scheduler_type='constant' ignores warm-up (as in transformers): use "
                    "lr_scheduler_type='constant_with_warmup' or warmup_ratio=0")
        for name in ("learning_rate", "value_learning_rate"):
            rate = getattr(self, name)
            if rate is not None and rate * self.weight_decay >= 1:
                refuse(f"{name} x weight_decay = {rate * self.weight_decay:g} >= 1: AdamW "
                        f"would shrink every weight by 100% or more per step; lower "
                        f"weight_decay (0 to 0.1 is usual)")
        if self.num_mini_batches > self.train_batch_size:
            refuse(f"num_mini_batches ({self.num_mini_batches}) exceeds the completions that "
                    f"train per step ({self.train_batch_size} = prompts_per_step x "
                    f"{'the GFPO k' if gfpo else 'num_generations'}): lower num_mini_batches "
                    f"or raise prompts_per_step")
        if self.micro_batch_size is not None and self.micro_batch_size > self.mini_batch_size:
            refuse(f"micro_batch_size ({self.micro_batch_size}) exceeds the mini-batch "
                    f"({self.mini_batch_size} completions): lower micro_batch_size or use None")
        high, low = (self.vllm_importance_sampling_clip_max,
                     self.vllm_importance_sampling_clip_min)
        if high is not None and low is not None and low > high:
            refuse(f"vllm_importance_sampling_clip_min ({low}) exceeds "
                   f"vllm_importance_sampling_clip_max ({high})")
        if self.save_every and self.output_dir is None:
            refuse("save_every > 0 writes checkpoints, and output_dir is None: set output_dir "
                    "or save_every=0")
        for rule in config_rules():  # each method module's rules (labkit.plugins.rules)
            rule(self)
        if (self.importance_sampling_level == "sequence"
                and get_loss_type(self.loss_type).aggregation != "sequence_mean"):
            warnings.warn(f"importance_sampling_level='sequence' with loss_type="
                          f"{self.loss_type!r} weighs each sequence by its length; GSPO as "
                          f"published uses loss_type='grpo' (TRL gives the same warning)",
                          stacklevel=_outside_stacklevel())
        if self.clip_higher_inert:
            warnings.warn(inert_clip_higher_message(self), stacklevel=_outside_stacklevel())

    def _check_estimator(self):
        """The chosen estimator's own rules (its file registers them)."""
        estimator = get_estimator(self.advantage_estimator)
        if estimator.groups and self.num_generations < 2:
            others = " or ".join(f"advantage_estimator={name!r}" for name in estimators()
                                 if name not in group_estimators())
            refuse(f"advantage_estimator={self.advantage_estimator!r} compares the completions "
                   f"of a group, which needs at least two: use num_generations >= 2 or {others}")
        if estimator.config_check is not None:
            estimator.config_check(self)

    def _check_loss_type(self):
        """The chosen loss type's own rules (its file registers them), and no switch of another
        loss type left on: an option that is off by default (None) and set for a loss that does
        not read it would silently do nothing."""
        loss = get_loss_type(self.loss_type)
        for name, default in all_options().items():
            if default is None and name not in loss.options and getattr(self, name) is not None:
                refuse(f"{name} acts on loss types {option_owners(name)}, and loss_type="
                        f"{self.loss_type!r} does not read it: use one of them or {name}=None")
        if loss.config_check is not None:
            loss.config_check(self)


#: The config modules whose frames a warning skips (the dataclass-generated ``__init__`` runs
#: with ``train_config``'s globals but no file of its own).
_CONFIG_MODULES = frozenset({__name__, "labkit.config.train_config", "labkit.config.knobs"})


def _outside_stacklevel() -> int:
    """``stacklevel`` that points a warning at the first caller outside the config (the user's
    ``TrainConfig(...)`` or assignment), however many frames of it lie in between."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") in _CONFIG_MODULES:
        level, frame = level + 1, frame.f_back
    return level
