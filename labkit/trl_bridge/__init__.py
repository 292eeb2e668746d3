"""The TRL bridge: run a lab :class:`~labkit.config.TrainConfig` with TRL's ``GRPOTrainer``.

The lab and TRL share most of GRPO's vocabulary, so a learner who tuned a run here can hand it to
TRL (and to its multi-GPU launchers, :mod:`labkit.trl_bridge.train`) without re-deriving anything:

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

The package, one job per module: :mod:`~labkit.trl_bridge.tables` (where each field goes, and
:func:`check_supported`), :mod:`~labkit.trl_bridge.lab_to_trl` (a lab config to TRL's),
:mod:`~labkit.trl_bridge.trl_to_lab` (TRL's config to the lab's), :mod:`~labkit.trl_bridge.run`
(training with TRL and its log), :mod:`~labkit.trl_bridge.compat` (TRL's ``GRPOConfig`` and
``GRPOTrainer`` signatures on the lab's trainer) and :mod:`~labkit.trl_bridge.train` (the
command, with the accelerate configs in ``launch/``). TRL's spellings that a ``TrainConfig``
refuses, with the lab's equivalent, live beside the config that reads them
(:mod:`labkit.config.trl_names`).
"""

from labkit.trl_bridge.lab_to_trl import (
    TRLRun,
    to_grpo_config,
    to_trl,
    trl_batch_sizes,
    trl_reward_funcs,
)
from labkit.trl_bridge.run import (
    TRLResult,
    history_from_logs,
    num_processes_from_env,
    train_with_trl,
)
from labkit.trl_bridge.tables import (
    DERIVED_FIELDS,
    DROPPABLE,
    LAB_ONLY,
    NOT_CARRIED,
    SHARED_FIELDS,
    TRL_DEFAULTS,
    TRL_HOUSEKEEPING,
    TRL_METRICS,
    TRL_PINNED,
    TRL_VALUES,
    check_supported,
)
from labkit.trl_bridge.trl_to_lab import from_grpo_config

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
