"""Policy-gradient losses: importance ratios, surrogates, aggregation, KL, value and entropy terms.

Everything returns a quantity to MINIMISE (papers maximise J; code minimises L = -J). Shapes:
B sequences (completions) by T response tokens, with a 0/1 (or bool) response ``mask``; log-probs
are those of the sampled tokens, e.g. from :func:`labkit.logprobs.token_logprobs`.

One concept per file, composed by :func:`policy_loss` the way TRL's
``GRPOTrainer._compute_loss`` does:

=========================  ===================================================================
file                       what
=========================  ===================================================================
``ratios.py``              ``token_log_ratio`` (PPO/GRPO), ``sequence_log_ratio`` (GSPO),
                           ``gspo_token_log_ratio`` (GSPO-token, stop-gradient form)
``clipped.py``             ``clipped_surrogate`` (PPO clip, clip-higher, ``delta``, dual-clip),
                           ``no_clip_surrogate``; loss types grpo, bnpo, dr_grpo, dapo,
                           sequence_sum
``cispo.py``               ``cispo_surrogate``; loss type cispo
``sapo.py``                ``sapo_surrogate``; loss type sapo
``vespo.py``               ``vespo_surrogate``; loss type vespo
``rlplus.py``              ``rlplus_surrogate``, ``focal_weight``, ``mis_ratio``; loss type rlplus
``aggregation.py``         ``aggregate``: the reductions loss types name
``kl.py``                  ``kl_estimate`` (k1, k2, k3)
``value.py``               ``value_loss`` (PPO's critic), ``entropy_bonus``
``policy.py``              ``policy_loss``: the composition, checks and metrics
``registry.py``            ``register_policy_loss``, ``LOSS_REGISTRY``: the table of loss types
=========================  ===================================================================

A loss type is registered by the file that implements it (``@register_policy_loss("sapo",
aggregation="sequence_mean", ...)``, verl's pattern); the config, the trainer, the TRL bridge and
the catalog read the table. Adding one is a new file here plus its import line below.

Deliberate departures from TRL 1.16 / verl (each is tested; ``docs/conventions.md`` measures
every convention that differs):

* Log-ratios are clamped to [-20, 20] before ``exp`` (verl does this; TRL does not), and masked
  positions are zeroed first, so padding with garbage or infinite log-probs cannot turn the loss
  into NaN. Identical to TRL whenever the ratio lies in [2e-9, 5e8].
* The k3 estimator clamps its log-ratio to [-20, 20] for the same reason (verl also clamps the
  value to [-10, 10]; labkit does not, so the gradient is unchanged inside the clamp).
* ``use_bias_correction_kl`` defaults to False (TRL 1.16 defaults to True, TRL HEAD to False).
* ``loss_type="cispo"`` requires ``epsilon_high`` (the absolute cap on the IS weight): TRL
  silently falls back to ``epsilon`` = 0.2, which scales every gradient by 0.2.
* Micro-batching: every aggregation takes the size of the whole optimisation batch
  (``num_items_in_batch`` tokens, ``num_sequences_in_batch`` sequences), so the losses of the
  micro-batches of one optimiser step simply add up to the full-batch objective. TRL gets the same
  numbers by dividing ``grpo``/``bnpo``/``dr_grpo`` by the gradient-accumulation steps instead.
* NaN policy: the building blocks (surrogates, ``aggregate``, ``kl_estimate``, ``value_loss``)
  do not look for NaN, because a check costs a device sync inside inner loops; a NaN input gives a
  NaN output there, never a silently wrong finite number. ``policy_loss`` checks every valid
  (masked-in) input and raises, and the trainer checks log-probs, the loss, the gradients and the
  updated weights and skips the step. Infinite coefficients (``beta``, ``coef``) are refused.
* Metric names are the lab's one vocabulary (:data:`labkit.metrics.METRICS`: ``clip_low``,
  ``clip_region``, ``kl_old``...), the column names of a training history; TRL logs the same
  quantities as ``clip_ratio/low_mean``, ``clip_ratio/region_mean``...
* Extra options TRL 1.16 lacks: ``importance_sampling_level="sequence_token"`` (GSPO-token, in
  TRL only as a removed experimental trainer), ``dual_clip`` (verl), ``loss_type="sequence_sum"``
  (plain REINFORCE sum over tokens; TRL's ``luspo`` aggregation), k1/k2 in the loss.
"""

# The loss types, one file each: importing a file registers its loss types.
from labkit.losses import cispo, clipped, rlplus, sapo, vespo  # noqa: F401
from labkit.losses.aggregation import AGGREGATIONS, LOCAL_AGGREGATIONS, aggregate
from labkit.losses.cispo import cispo_surrogate
from labkit.losses.clipped import clipped_surrogate, no_clip_surrogate, upper_clip
from labkit.losses.kl import KL_ESTIMATORS, kl_estimate
from labkit.losses.policy import policy_loss, policy_loss_settings
from labkit.losses.ratios import (
    IMPORTANCE_SAMPLING_LEVELS,
    gspo_token_log_ratio,
    importance_log_weight,
    sequence_log_ratio,
    token_log_ratio,
)
from labkit.losses.registry import (
    LOSS_REGISTRY,
    LossType,
    SurrogateInputs,
    clipped_loss_types,
    get_loss_type,
    loss_types,
    register_policy_loss,
    unregister_policy_loss,
)
from labkit.losses.rlplus import focal_weight, mis_ratio, rlplus_surrogate
from labkit.losses.sapo import sapo_surrogate
from labkit.losses.value import entropy_bonus, value_loss
from labkit.losses.vespo import vespo_surrogate

__all__ = [
    "AGGREGATIONS",
    "IMPORTANCE_SAMPLING_LEVELS",
    "KL_ESTIMATORS",
    "LOCAL_AGGREGATIONS",
    "LOSS_REGISTRY",
    "LossType",
    "SurrogateInputs",
    "aggregate",
    "cispo_surrogate",
    "clipped_loss_types",
    "clipped_surrogate",
    "entropy_bonus",
    "focal_weight",
    "get_loss_type",
    "gspo_token_log_ratio",
    "importance_log_weight",
    "kl_estimate",
    "loss_types",
    "mis_ratio",
    "no_clip_surrogate",
    "policy_loss",
    "policy_loss_settings",
    "register_policy_loss",
    "rlplus_surrogate",
    "sapo_surrogate",
    "sequence_log_ratio",
    "token_log_ratio",
    "unregister_policy_loss",
    "upper_clip",
    "value_loss",
    "vespo_surrogate",
]
