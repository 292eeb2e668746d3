r"""Correcting stale samples: the behaviour weight of asynchronous RL, and how each method bounds it.

In an asynchronous trainer the batch of step :math:`t` was sampled by the weights of an earlier
step :math:`v \le t` (the *behaviour* policy :math:`\pi_{\text{behav}}`, whose log-probs the
sampler recorded: ``Experience.sample_logp``, at the sampling temperature). Three policies meet
in the update:

* :math:`\pi_{\text{behav}}`: the weights that sampled the tokens (version :math:`v`);
* :math:`\pi_{\text{prox}}`: the *proximal* policy, the weights at the start of this update
  (version :math:`t`): the trainer's recomputed ``old_logp``, a no-gradient forward;
* :math:`\pi_\theta`: the weights being optimised.

Hilton et al. (arXiv 2110.00641, "Batch size-invariance for policy optimization", section 4,
eq. 5) split PPO's one "old" policy into the two roles it plays: the clip keeps
:math:`\pi_\theta` near :math:`\pi_{\text{prox}}` (a trust region around recent weights), and an
importance weight :math:`w = \pi_{\text{prox}} / \pi_{\text{behav}}` corrects for who sampled.
AReaL (Fu et al., arXiv 2505.24298, section 5.2, eq. 5) calls this *decoupled PPO* and uses it
for stale rollouts:

.. math::

    J(\theta) = \mathbb{E}_{y \sim \pi_{\text{behav}}}\Big[\sum_t w_t\,
      \min\big(r_t A_t,\ \mathrm{clip}(r_t, 1-\epsilon, 1+\epsilon_{\text{high}})A_t\big)\Big],
    \quad r_t = \frac{\pi_\theta(y_t)}{\pi_{\text{prox}}(y_t)},\quad
    w_t = \frac{\pi_{\text{prox}}(y_t)}{\pi_{\text{behav}}(y_t)}

The weight is unbounded in the paper; every implementation bounds it, and the corrections here
differ only in how (:data:`CORRECTIONS`, config field ``offpolicy_correction``):

==============  ====================================================================================
``none``        no behaviour weight: the stale batch trains as if the current weights had sampled
                it (PPO's ratio against :math:`\pi_{\text{prox}}`), the control of every comparison
``coupled``     PPO's ratio against the behaviour policy itself (``old_logp`` = the sampling
                log-probs, no proximal forward): what TRL's ``AsyncGRPOTrainer`` and prime-rl do;
                the clip then binds on staleness as well as on the update
``tis``         :math:`w` truncated to ``[offpolicy_weight_floor, offpolicy_weight_cap]``
                (truncated IS: Yao et al. 2025, the sampler/trainer mismatch blog cited in
                :mod:`labkit.tricks.mismatch`, applied to stale samples; verl's ``token_truncate``)
``icepop``      :math:`w` set to 0 outside ``[floor, cap]`` (masked IS, token level: IcePop, Ring-1T,
                arXiv 2510.18855, section 3.1; the paper's bounds are 0.5 and 5)
``decoupled``   :math:`w` set to 0 above ``cap``, no floor (AReaL's decoupled PPO with its
                rejection of large weights, ``behav_imp_weight_cap``, now
                ``rejection_sampling.upper`` = 5.0, action ``mask``)
==============  ====================================================================================

The weights come from :func:`labkit.tricks.mismatch.mismatch_weights` at token level (``token_truncate``
for TIS, ``token_mask`` for IcePop and decoupled): the sampler/trainer mismatch and staleness are
the same correction against the same recorded log-probs, so they share one function.

Where the lab departs: ``decoupled``, ``tis`` and ``icepop`` all anchor the clip on the proximal
policy (the decoupled form); the papers of TIS and IcePop wrote it for a synchronous trainer, where
proximal and behaviour policies differ only by the engines' numerics. The lab reads the weight at
token level only (AReaL and verl also offer sequence-level weights; :mod:`labkit.tricks.mismatch` has the
sequence modes for the sampler mismatch). Padding counts as a zero log-ratio (weight 1, then 0 by
the mask) and a NaN behaviour log-prob as weight 1, as in :mod:`labkit.tricks.mismatch`.

:func:`offpolicy_terms` is the pure function behind both the trainer and the notebook's widget:
given log-prob tensors it returns the ratio, the weights and the clip region.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from labkit.losses import kl_estimate, upper_clip
from labkit.plugins import config_rule
from labkit.plugins.settings import number
from labkit.tricks.mismatch import mismatch_weights

#: ``offpolicy_correction`` values, in the order of the module docstring's table.
CORRECTIONS = ("none", "coupled", "tis", "icepop", "decoupled")
#: What each correction does with the behaviour weight: the :mod:`labkit.tricks.mismatch` mode it uses
#: (None: no weight) and whether it reads the floor.
_MODES = {"none": None, "coupled": None, "tis": "token_truncate", "icepop": "token_mask",
          "decoupled": "token_mask"}
#: Quantiles of the behaviour ratio logged per step (``offpolicy_ratio_q05`` ...).
RATIO_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


@dataclass
class OffPolicyTerms:
    """What :func:`offpolicy_terms` returns; every tensor is (B, T), zero or False on padding.

    Attributes:
        ratio: the behaviour ratio :math:`\\pi_{\\text{prox}}/\\pi_{\\text{behav}}` per token.
        weights: the multiplier of each token's loss (1 for ``none`` and ``coupled``).
        corrected: tokens whose weight the bound truncated or masked.
        clip_region: tokens whose behaviour ratio lies outside PPO's band
            ``[1 - epsilon, 1 + epsilon_high]``: the tokens a clip anchored on the behaviour
            policy (``coupled``) silences at the first update, whatever the sign of A.
    """

    ratio: torch.Tensor
    weights: torch.Tensor
    corrected: torch.Tensor
    clip_region: torch.Tensor


def check_correction(correction: str) -> None:
    if not isinstance(correction, str) or correction not in CORRECTIONS:
        raise ValueError(f"offpolicy_correction must be one of "
                         f"{', '.join(map(repr, CORRECTIONS))}, got {correction!r}")


def check_bounds(cap: float | None, floor: float | None) -> None:
    """The config's rules for the weight's bounds (``offpolicy_weight_cap`` a finite number in
    (0, inf), ``offpolicy_weight_floor`` one in [0, inf), each or None, the floor at most the
    cap), with the config's messages: a NaN bound would compare False with every weight and
    bound nothing, a negative cap would mask every token."""
    bounds = SimpleNamespace(offpolicy_weight_cap=cap, offpolicy_weight_floor=floor)
    if cap is not None:
        number(bounds, "offpolicy_weight_cap", 0, math.inf, low_open=True)
    if floor is not None:
        number(bounds, "offpolicy_weight_floor", 0, math.inf)
    if cap is not None and floor is not None and floor > cap:
        raise ValueError(f"offpolicy_weight_floor ({floor}) must not exceed "
                         f"offpolicy_weight_cap ({cap})")


def offpolicy_terms(prox_logp: torch.Tensor, behav_logp: torch.Tensor, mask: torch.Tensor,
                    correction: str = "decoupled", cap: float | None = 5.0,
                    floor: float | None = None, epsilon: float = 0.2,
                    epsilon_high: float | None = None) -> OffPolicyTerms:
    """The behaviour ratio, the loss weights and the clip region of one batch.

    ``prox_logp``: (B, T) log-probs of the sampled tokens under the weights at the start of the
    update; ``behav_logp``: (B, T) under the weights that sampled them; ``mask``: (B, T) loss
    tokens. ``cap`` / ``floor`` bound the weight as ``correction`` says (module docstring; None =
    unbounded on that side; the config's ranges, :func:`check_bounds`); ``epsilon`` /
    ``epsilon_high`` (None = epsilon) give the clip band.
    """
    check_correction(correction)
    check_bounds(cap, floor)
    m = mask.bool()
    ratio = torch.where(m, torch.exp(torch.nan_to_num(prox_logp - behav_logp, nan=0.0)), 0.0)
    mode = _MODES[correction]
    if mode is None:
        weights, corrected = m.to(ratio.dtype), torch.zeros_like(m)
    else:
        weights, corrected = mismatch_weights(prox_logp, behav_logp, mask, mode, clip_max=cap,
                                              clip_min=None if correction == "decoupled"
                                              else floor)
        corrected = corrected & m
    high = upper_clip(epsilon, epsilon_high)
    clip_region = m & ((ratio < 1 - epsilon) | (ratio > 1 + high))
    return OffPolicyTerms(ratio, weights, corrected, clip_region)


def offpolicy_metrics(terms: OffPolicyTerms, prox_logp: torch.Tensor, behav_logp: torch.Tensor,
                      mask: torch.Tensor) -> dict[str, float]:
    """The step's correction columns over the loss tokens: ``offpolicy_ratio_mean`` and the
    quantiles ``offpolicy_ratio_q05`` ... ``_q95`` of the behaviour ratio, ``offpolicy_kl`` (k3
    estimate of KL(behaviour || proximal) per token, from the behaviour's samples),
    ``offpolicy_clip_frac`` (share of tokens in the clip region) and
    ``offpolicy_corrected_frac`` (share the bound truncated or masked)."""
    m = mask.bool()
    ratio = terms.ratio[m].float()
    nan = math.nan
    row = {"offpolicy_ratio_mean": float(ratio.mean()) if ratio.numel() else nan}
    quantiles = (torch.quantile(ratio, torch.tensor(RATIO_QUANTILES, dtype=ratio.dtype))
                 .tolist() if ratio.numel() else [nan] * len(RATIO_QUANTILES))
    row.update({f"offpolicy_ratio_q{round(q * 100):02d}": v
                for q, v in zip(RATIO_QUANTILES, quantiles, strict=True)})
    log_ratio = torch.nan_to_num(prox_logp - behav_logp, nan=0.0)
    kl = kl_estimate(torch.zeros_like(log_ratio), log_ratio, "k3")[m]
    row["offpolicy_kl"] = float(kl.mean()) if kl.numel() else nan
    row["offpolicy_clip_frac"] = float(terms.clip_region[m].float().mean()) if m.any() else nan
    row["offpolicy_corrected_frac"] = (float(terms.corrected[m].float().mean()) if m.any()
                                       else nan)
    return row


def correct_batch(batch, config, staleness: int) -> dict[str, float]:
    """The trainer's correction of a stale batch, after its score forwards (which computed the
    proximal log-probs, ``batch.old_logp``, whenever ``max_staleness > 0``): ``coupled`` puts the
    behaviour log-probs in ``old_logp``, ``tis``/``icepop``/``decoupled`` set the loss weights
    (``batch.is_weights``). Returns the step's columns: ``staleness``, the ratio and clip columns
    of :func:`offpolicy_metrics`. Nothing happens, and nothing is logged, when
    ``max_staleness == 0`` (the synchronous trainer)."""
    if config.max_staleness == 0:
        return {}
    row = {"staleness": float(staleness)}
    if len(batch) == 0:
        return row
    terms = offpolicy_terms(batch.old_logp, batch.sample_logp, batch.loss_mask,
                            config.offpolicy_correction, config.offpolicy_weight_cap,
                            config.offpolicy_weight_floor, config.epsilon, config.epsilon_high)
    row.update(offpolicy_metrics(terms, batch.old_logp, batch.sample_logp, batch.loss_mask))
    if config.offpolicy_correction == "coupled":
        batch.old_logp = batch.sample_logp.clone()
    elif _MODES[config.offpolicy_correction] is not None:
        batch.is_weights = terms.weights
    return row


@config_rule
def _check_correction(config):
    correction, floor = config.offpolicy_correction, config.offpolicy_weight_floor
    if correction != "none" and config.max_staleness == 0:
        raise ValueError(f"offpolicy_correction={correction!r} corrects stale batches, and "
                         f"max_staleness=0 trains each batch with the weights that sampled it: "
                         f"set max_staleness >= 1, or offpolicy_correction='none' (the sampler/"
                         f"trainer mismatch of one version is vllm_importance_sampling_correction)")
    cap = config.offpolicy_weight_cap
    if floor is not None and cap is not None and floor > cap:
        raise ValueError(f"offpolicy_weight_floor ({floor}) exceeds offpolicy_weight_cap ({cap})")
    if floor is not None and correction not in ("tis", "icepop"):
        raise ValueError(f"offpolicy_weight_floor bounds the weight of offpolicy_correction "
                         f"'tis' or 'icepop', and offpolicy_correction={correction!r} does not "
                         f"read it: use one of them or offpolicy_weight_floor=None")
    if correction == "icepop" and floor is None:
        raise ValueError("offpolicy_correction='icepop' masks the tokens whose weight lies "
                         "outside [offpolicy_weight_floor, offpolicy_weight_cap]: set "
                         "offpolicy_weight_floor (IcePop's 0.5), or use 'decoupled' (a cap only)")
    if correction in ("tis", "icepop", "decoupled") \
            and config.vllm_importance_sampling_correction:
        raise ValueError(f"offpolicy_correction={correction!r} and "
                         f"vllm_importance_sampling_correction both weigh each token against the "
                         f"sampler's recorded log-probs (the stale weights and the sampler's "
                         f"numerics are one difference): keep one of them")


__all__ = ["CORRECTIONS", "RATIO_QUANTILES", "OffPolicyTerms", "check_bounds",
           "check_correction", "correct_batch", "offpolicy_metrics", "offpolicy_terms"]
