"""Policy-gradient losses: importance ratios, surrogates, aggregation, KL, value and entropy terms.

Everything returns a quantity to MINIMISE (papers maximise J; code minimises L = -J). Shapes:
B sequences (completions) by T response tokens, with a 0/1 (or bool) response ``mask``; log-probs
are those of the sampled tokens, e.g. from :func:`labkit.logprobs.token_logprobs`.

Building blocks, composed by :func:`policy_loss` the way TRL's ``GRPOTrainer._compute_loss`` does:

====================================  ============================================================
ratio                                 ``token_log_ratio`` (PPO/GRPO), ``sequence_log_ratio`` (GSPO),
                                      ``gspo_token_log_ratio`` (GSPO-token, stop-gradient form)
surrogate (per token)                 ``clipped_surrogate`` (PPO clip, clip-higher, ``delta``,
                                      dual-clip), ``no_clip_surrogate``, ``cispo_surrogate``,
                                      ``sapo_surrogate``, ``vespo_surrogate``
aggregation                           ``aggregate`` with TRL's ``loss_type`` names
KL to the reference                   ``kl_estimate`` (k1, k2, k3)
critic and exploration                ``value_loss``, ``entropy_bonus``
====================================  ============================================================

Deliberate departures from TRL 1.16 / verl (each is tested):

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

from __future__ import annotations

import math

import torch

__all__ = [
    "aggregate",
    "cispo_surrogate",
    "clipped_surrogate",
    "entropy_bonus",
    "gspo_token_log_ratio",
    "kl_estimate",
    "no_clip_surrogate",
    "policy_loss",
    "rlplus_surrogate",
    "sapo_surrogate",
    "sequence_log_ratio",
    "token_log_ratio",
    "value_loss",
    "vespo_surrogate",
]

#: ``loss_type`` values: TRL's names (each fixes a surrogate and an aggregation), plus the lab's
#: ``sequence_sum``. The one list the config, the trainer and :func:`policy_loss` accept.
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "vespo", "rlplus",
              "sequence_sum")
#: ``importance_sampling_level`` values: TRL's two, plus GSPO-token.
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence", "sequence_token")
#: Schulman's KL estimators.
KL_ESTIMATORS = ("k1", "k2", "k3")
#: Loss types that use the PPO clipped surrogate (so ``delta`` and ``dual_clip`` apply).
CLIPPED_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "sequence_sum")
_LOG_RATIO_LIMIT = 20.0


def _check_same_shape(ref: torch.Tensor, ref_name: str, **tensors: torch.Tensor | None) -> None:
    for name, t in tensors.items():
        if t is not None and t.shape != ref.shape:
            raise ValueError(
                f"{name} must have the shape of {ref_name} {tuple(ref.shape)}, got {tuple(t.shape)}"
            )


def _check_non_negative(**values: float | None) -> None:
    for name, v in values.items():
        if v is not None and not v >= 0:
            raise ValueError(f"{name} must be >= 0 (float('inf') allowed), got {v}")


def _check_finite_number(**values: float | None) -> None:
    for name, v in values.items():
        if v is not None and not math.isfinite(v):
            raise ValueError(f"{name} must be a finite number, got {v}")


def _masked_mean(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over True entries of the bool mask ``m`` (0 if there are none)."""
    x = x.expand(m.shape)
    return torch.where(m, x, 0).sum() / m.sum().clamp(min=1)


# --------------------------------------------------------------------------------------------
# importance ratios
# --------------------------------------------------------------------------------------------


def token_log_ratio(
    logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    r"""Per-token log importance ratio :math:`\log r_{i,t}=\log\pi_\theta-\log\pi_{\theta_{old}}`.

    ============  ======  ===========================================================
    name          shape   meaning
    ============  ======  ===========================================================
    ``logp``      (B, T)  current policy, differentiable
    ``old_logp``  (B, T)  behaviour policy (no gradient flows into it if detached)
    ``mask``      (B, T)  optional; masked positions get log-ratio 0 (ratio 1)
    returns       (B, T)  clamped to [-20, 20] (verl's bound) so ``exp`` cannot overflow
    ============  ======  ===========================================================
    """
    _check_same_shape(logp, "logp", old_logp=old_logp, mask=mask)
    log_ratio = (logp - old_logp).clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
    return log_ratio if mask is None else torch.where(mask.bool(), log_ratio, 0)


def sequence_log_ratio(
    logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    r"""GSPO's length-normalised sequence log-ratio (log of the geometric mean of token ratios).

    .. math::
        \log s_i = \frac{1}{|o_i|}\sum_{t} \log\frac{\pi_\theta(o_{i,t}\mid\cdot)}{\pi_{\theta_{old}}(o_{i,t}\mid\cdot)},
        \qquad s_i = \Big(\prod_t r_{i,t}\Big)^{1/|o_i|}

    ============  ======  ======================================================
    name          shape   meaning
    ============  ======  ======================================================
    ``logp``      (B, T)  current policy, differentiable
    ``old_logp``  (B, T)  behaviour policy
    ``mask``      (B, T)  response mask
    returns       (B,)    ``log s_i``; gradient reaches every token as 1/|o_i|
    ============  ======  ======================================================

    Edge case: a row with no tokens gets 0 (its length is clamped to 1, as in TRL and verl).
    """
    _check_same_shape(logp, "logp", old_logp=old_logp, mask=mask)
    m = mask.bool()
    return token_log_ratio(logp, old_logp, m).sum(-1) / m.sum(-1).clamp(min=1)


def gspo_token_log_ratio(
    logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    r"""GSPO-token ratio: the sequence ratio's value with a per-token gradient path.

    .. math::
        \log s_{i,t} = \log\pi_\theta(o_{i,t}\mid\cdot) - \mathrm{sg}[\log\pi_\theta(o_{i,t}\mid\cdot)]
                       + \mathrm{sg}[\log s_i]

    ============  ======  =========================================================
    name          shape   meaning
    ============  ======  =========================================================
    ``logp``      (B, T)  current policy, differentiable
    ``old_logp``  (B, T)  behaviour policy
    ``mask``      (B, T)  response mask; masked positions are 0
    returns       (B, T)  numerically ``log s_i`` on every valid token
    ============  ======  =========================================================

    With one advantage per sequence, GSPO-token's loss, clipping and gradient equal GSPO's; it only
    differs when advantages vary along the sequence. verl's ``gspo`` loss uses this form (and clamps
    the log-ratio at 10 from above; labkit clamps token log-ratios at +-20 instead).
    """
    m = mask.bool()
    seq = sequence_log_ratio(logp, old_logp, m).detach()
    return torch.where(m, logp - logp.detach() + seq[:, None], 0)


# --------------------------------------------------------------------------------------------
# surrogates (per-token losses to minimise)
# --------------------------------------------------------------------------------------------


def clipped_surrogate(
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    dual_clip: float | None = None,
) -> torch.Tensor:
    r"""PPO clipped surrogate with clip-higher, TRL's two-sided ``delta`` and verl's dual-clip.

    Textbook form (PPO, arXiv 1707.06347, eq. 7, negated)::

        ratio = torch.exp(log_ratio)
        return -torch.minimum(ratio * A, ratio.clamp(1 - eps_low, 1 + eps_high) * A)

    .. math::
        \ell = -\min\big(\hat r A,\ \mathrm{clip}(r, 1-\varepsilon_{low}, 1+\varepsilon_{high}) A\big),
        \qquad \hat r = \min(r, \delta)\ \text{if } \delta \text{ else } r

    and with dual-clip :math:`c`: :math:`\ell \leftarrow \min(\ell, -cA)` where :math:`A<0`.

    ================  ==========  ================================================================
    name              shape       meaning
    ================  ==========  ================================================================
    ``log_ratio``     (B, T) or   log importance ratio (token, GSPO-token) or (B, 1) sequence ratio
                      (B, 1)
    ``advantages``    broadcast   (B, 1) or (B, T)
    ``epsilon_low``   float       lower half-width >= 0 (0.2); > 1 disables the lower clip
    ``epsilon_high``  float       upper half-width >= 0; None = ``epsilon_low`` (DAPO: 0.28)
    ``delta``         float       cap on the unclipped ratio, > 1 (INTELLECT-2; TRL ``delta``)
    ``dual_clip``     float       c > 1 (verl ``clip_ratio_c``, customary 3)
    returns           broadcast   per-token loss
    ================  ==========  ================================================================

    Gradient w.r.t. :math:`\log\pi` (four sign cases): zero if A > 0 and r > 1+eps_high, or A < 0 and
    r < 1-eps_low, or A = 0 (the "clipped" tokens), and zero for A < 0 and r > c with dual-clip or
    r > delta; otherwise :math:`-A\,r`. At r = 1 this is REINFORCE weighted by A. For A < 0,
    ``delta`` and ``dual_clip`` give the same value (both cap the loss at ``c|A|``); ``delta`` also
    caps the ratio for A > 0, where it never binds because ``delta > 1 + eps_high`` is usual.
    ``float('inf')`` for both epsilons disables clipping (= :func:`no_clip_surrogate`).
    """
    epsilon_high = epsilon_low if epsilon_high is None else epsilon_high
    _check_non_negative(epsilon_low=epsilon_low, epsilon_high=epsilon_high)
    if delta is not None and not delta > 1:
        raise ValueError(
            f"delta caps the ratio from above and must be > 1 (TRL recommends > 1 + epsilon_high), got {delta}"
        )
    if dual_clip is not None and not dual_clip > 1:
        raise ValueError(f"dual_clip must be > 1 (verl asserts clip_ratio_c > 1), got {dual_clip}")
    # exp(89) overflows float32; clamping keeps the gradient finite (the clip zeroes it there).
    ratio = torch.exp(log_ratio.clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT))
    clipped = ratio.clamp(1 - epsilon_low, 1 + epsilon_high)
    unclipped = ratio if delta is None else ratio.clamp(max=delta)
    loss = -torch.minimum(unclipped * advantages, clipped * advantages)
    if dual_clip is not None:
        loss = torch.where(advantages < 0, torch.minimum(loss, -dual_clip * advantages), loss)
    return loss


def no_clip_surrogate(log_ratio: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    r"""Importance-weighted policy gradient without clipping: :math:`\ell = -r A`.

    ==============  =========  =================================
    name            shape      meaning
    ==============  =========  =================================
    ``log_ratio``   (B, T)/    any importance log-ratio
                    (B, 1)
    ``advantages``  broadcast  (B, 1) or (B, T)
    returns         broadcast  per-token loss, gradient -A r
    ==============  =========  =================================

    RL-PLUS drops the clip on purpose so low-probability tokens keep their gradient (its
    exploration weight and MIS ratio are separate); on-policy (r = 1) it is REINFORCE. Nothing
    bounds the update for a token whose ratio has grown: use with a single pass per batch.
    """
    return -torch.exp(log_ratio.clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)) * advantages


def cispo_surrogate(
    logp: torch.Tensor,
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    max_weight: float,
    min_weight: float | None = None,
) -> torch.Tensor:
    r"""CISPO (MiniMax-M1): REINFORCE with a clipped, detached importance weight.

    .. math::
        \ell = -\,\mathrm{sg}\big[\mathrm{clip}(r, w_{min}, w_{max})\big]\; A\; \log\pi_\theta(o_t\mid s_t)

    ===============  =========  ==============================================================
    name             shape      meaning
    ===============  =========  ==============================================================
    ``logp``         (B, T)     current log-probs (the gradient flows only through these)
    ``log_ratio``    (B, T)/    log importance ratio; (B, 1) for a sequence-level weight
                     (B, 1)
    ``advantages``   broadcast  (B, 1) or (B, T)
    ``max_weight``   float      absolute cap on the weight > 0: TRL ``epsilon_high`` for
                                ``loss_type="cispo"`` (recommended 5.0); the paper's 1 + eps_high
    ``min_weight``   float      optional lower bound (TRL: none; verl: 1 - clip_ratio_low)
    returns          (B, T)     per-token loss (its *value* is not ~0 on-policy, unlike PPO's)
    ===============  =========  ==============================================================

    Unlike PPO, clipping the weight never removes a token's gradient: beyond the cap it is
    :math:`-w_{max} A\,\nabla\log\pi` instead of 0; it is zero only when A = 0.
    """
    if not max_weight > 0:
        raise ValueError(f"max_weight (TRL epsilon_high for cispo) must be > 0, got {max_weight}")
    if min_weight is not None and not 0 <= min_weight <= max_weight:
        raise ValueError(f"min_weight must lie in [0, max_weight={max_weight}], got {min_weight}")
    weight = torch.exp(log_ratio.clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT))
    weight = weight.clamp(min=min_weight, max=max_weight).detach()
    return -weight * advantages * logp


def sapo_surrogate(
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    temperature_pos: float = 1.0,
    temperature_neg: float = 1.05,
) -> torch.Tensor:
    r"""SAPO soft gate (Qwen): a sigmoid in the ratio instead of a hard clip.

    .. math::
        \ell = -\frac{4}{\tau}\,\sigma\big(\tau (r-1)\big)\,A,\qquad
        \tau = \tau_{pos}\ \text{if } A>0 \text{ else } \tau_{neg}

    =====================  =========  ============================================
    name                   shape      meaning
    =====================  =========  ============================================
    ``log_ratio``          (B, T)/    token log-ratio (the paper's setting)
                           (B, 1)
    ``advantages``         broadcast  (B, 1) or (B, T)
    ``temperature_pos``    float      > 0, TRL ``sapo_temperature_pos`` (1.0)
    ``temperature_neg``    float      > 0, TRL ``sapo_temperature_neg`` (1.05)
    returns                broadcast  per-token loss
    =====================  =========  ============================================

    Gradient w.r.t. log pi is :math:`-A\,r\,4\sigma(1-\sigma)`: exactly -A at r = 1 (REINFORCE),
    smooth decay far from 1, never exactly zero. The loss value at r = 1 is -2A/tau, not -A.
    """
    if not (temperature_pos > 0 and temperature_neg > 0):
        raise ValueError(
            f"temperature_pos and temperature_neg must be > 0, got {temperature_pos}, {temperature_neg}"
        )
    ratio = torch.exp(log_ratio.clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT))
    # Temperatures built in the ratio's dtype so float64 tests are exact (TRL rounds them to float32).
    tau = torch.where(
        advantages > 0, ratio.new_tensor(temperature_pos), ratio.new_tensor(temperature_neg)
    )
    return -(4 / tau) * torch.sigmoid(tau * (ratio - 1)) * advantages


def vespo_surrogate(
    logp: torch.Tensor,
    token_log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    k_pos: float = 2.0,
    lambda_pos: float = 3.0,
    k_neg: float = 3.0,
    lambda_neg: float = 2.0,
) -> torch.Tensor:
    r"""VESPO (arXiv 2602.10693): REINFORCE scaled by a Gamma-shaped kernel of the sequence weight.

    .. math::
        w_i = \prod_t r_{i,t}\ \ (\text{not length-normalised}),\qquad
        \phi(w) = e^{\lambda}\,w^{k}\,e^{-\lambda w}\ \ (\phi(1) = 1),\qquad
        \ell_{i,t} = -\,\mathrm{sg}[\phi(w_i)]\,A_i\,\log\pi_\theta(o_{i,t})

    with :math:`(k, \lambda) = (k_+, \lambda_+)` if :math:`A_i \ge 0`, else :math:`(k_-,
    \lambda_-)`.

    ===================  =========  ===========================================================
    name                 shape      meaning
    ===================  =========  ===========================================================
    ``logp``             (B, T)     current log-probs (the gradient flows only through these)
    ``token_log_ratio``  (B, T)     per-token log-ratios (0 on padding)
    ``advantages``       (B, 1)     one per sequence
    ``mask``             (B, T)     response mask
    ``k_pos`` ...        float      TRL ``vespo_k_pos`` 2.0, ``vespo_lambda_pos`` 3.0,
                                    ``vespo_k_neg`` 3.0, ``vespo_lambda_neg`` 2.0
    returns              (B, T)     per-token loss
    ===================  =========  ===========================================================

    The kernel peaks at :math:`w = k/\lambda` and falls smoothly to 0 for stale sequences on both
    sides, so no token is hard-clipped; on-policy (w = 1) it is plain REINFORCE. As in TRL the
    log-weight is clamped to [log 1e-8, 20] and a non-finite kernel counts as 0.
    """
    m = mask.bool()
    log_w = torch.where(m, token_log_ratio.clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT), 0)
    log_w = log_w.sum(-1, keepdim=True).clamp(math.log(1e-8), _LOG_RATIO_LIMIT).detach()
    positive = advantages >= 0
    k = torch.where(positive, log_w.new_tensor(k_pos), log_w.new_tensor(k_neg))
    lam = torch.where(positive, log_w.new_tensor(lambda_pos), log_w.new_tensor(lambda_neg))
    lam = lam.clamp(min=1e-4)
    phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(0.0, 0.0, 0.0)
    return -phi * advantages * logp


def rlplus_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    demonstrations: torch.Tensor | None = None,
    exploration_gamma: float = 0.5,
) -> torch.Tensor:
    r"""RL-PLUS (arXiv 2508.00222): no clip, and external demonstrations inside the group.

    .. math::
        \ell_{i,t} = \begin{cases} -\,r_{i,t}\,A_i & o_i \text{ sampled by the policy}\\
        -\,r^m_{i,t}\,C_{i,t}\,A_i & o_i \text{ an external demonstration}\end{cases}

    with the ordinary ratio :math:`r`, the MIS ratio :math:`r^m = 4\pi_\theta/(3\pi_{old}+1)`
    (:func:`labkit.exploration.mis_ratio`) and the exploration weight :math:`C = (1 -
    \mathrm{sg}[\pi_\theta])^\gamma` (:func:`labkit.exploration.focal_weight`), which, as in the
    released code, applies to demonstration tokens only.

    ======================  =====  ==========================================================
    name                    shape  meaning
    ======================  =====  ==========================================================
    ``logp``, ``old_logp``  (B,T)  current and behaviour log-probs (for a demonstration the
                                   behaviour policy is the old policy scoring it)
    ``advantages``          (B,1)  or (B, T)
    ``demonstrations``      (B,)   bool: rows that are external demonstrations; None = none
    ``exploration_gamma``   float  gamma >= 0 (code default 0.5)
    returns                 (B,T)  per-token loss
    ======================  =====  ==========================================================

    Nothing bounds the update: use one optimizer step per batch, or watch ``kl_old``.
    """
    from labkit.exploration import focal_weight, mis_ratio

    policy_rows = no_clip_surrogate(token_log_ratio(logp, old_logp), advantages)
    if demonstrations is None or not bool(demonstrations.any()):
        return policy_rows
    demo_rows = -mis_ratio(logp, old_logp) * focal_weight(logp, exploration_gamma) * advantages
    return torch.where(demonstrations.bool()[:, None], demo_rows, policy_rows)


# --------------------------------------------------------------------------------------------
# aggregation
# --------------------------------------------------------------------------------------------


def aggregate(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    loss_type: str,
    max_completion_length: int | None = None,
    num_items_in_batch: int | torch.Tensor | None = None,
    num_sequences_in_batch: int | None = None,
) -> torch.Tensor:
    r"""Reduce a per-token loss to a scalar, with TRL's ``loss_type`` names.

    Textbook form (``"grpo"``: mean over each sequence's tokens, then over sequences)::

        m = mask.float()
        return ((per_token_loss * m).sum(-1) / m.sum(-1)).mean()

    With :math:`m` the mask, :math:`|o_i|=\sum_t m_{i,t}`, :math:`N_{seq}` = ``num_sequences_in_batch``
    and :math:`N_{tok}` = ``num_items_in_batch``:

    ================  ==========================================================  ===================
    ``loss_type``     formula                                                     per-token weight
    ================  ==========================================================  ===================
    grpo, sapo        :math:`\frac1{N_{seq}}\sum_i\frac1{|o_i|}\sum_t m\ell`       :math:`1/(N_{seq}|o_i|)`
    bnpo              :math:`\frac{B}{N_{seq}}\cdot\frac{\sum m\ell}{\sum m}`       local token mean
    dr_grpo, rlplus   :math:`\frac{1}{N_{seq}L_{max}}\sum_{i,t} m\ell`              :math:`1/(N_{seq}L_{max})`
    dapo, cispo,      :math:`\frac{1}{N_{tok}}\sum_{i,t} m\ell`                     :math:`1/N_{tok}`
    vespo
    sequence_sum      :math:`\frac1{N_{seq}}\sum_{i,t} m\ell`                       :math:`1/N_{seq}`
    ================  ==========================================================  ===================

    ==========================  ==========  ======================================================
    name                        shape       meaning
    ==========================  ==========  ======================================================
    ``per_token_loss``          (B, T) or   from a surrogate (+ beta * KL); (B, 1) is broadcast
                                (B, 1)      over the mask (sequence-level GSPO)
    ``mask``                    (B, T)      response mask of this micro-batch
    ``max_completion_length``   int         L_max, required by ``dr_grpo``
    ``num_items_in_batch``      int/0-dim   response tokens in the whole optimisation batch
                                            (all micro-batches of one optimiser step); default:
                                            this micro-batch's count. With P data-parallel
                                            processes that average gradients, pass it divided by P
                                            (TRL does the same)
    ``num_sequences_in_batch``  int         sequences in the whole optimisation batch; default B
    returns                     ()          scalar loss
    ==========================  ==========  ======================================================

    Summing the results of the micro-batches of one step gives the full-batch value for every
    type (``bnpo`` by definition averages local token means, weighted by micro-batch size). With
    a single micro-batch the values equal TRL's. Edge cases: rows with no tokens contribute 0 and
    still count in :math:`N_{seq}` (TRL); an all-empty mask, and an empty batch, give 0, never NaN.
    Sequence-level ratios with ``dapo``/``bnpo``/``dr_grpo``/``cispo``/``sequence_sum`` weight each
    sequence by its length (TRL warns about this); use ``grpo`` for the paper's GSPO.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if mask.dim() != 2:
        raise ValueError(f"mask must have shape (B, T), got {tuple(mask.shape)}")
    batch = mask.shape[0]
    if per_token_loss.shape not in (mask.shape, (batch, 1)):
        raise ValueError(
            f"per_token_loss must have shape (B, T) = {tuple(mask.shape)} or (B, 1), got {tuple(per_token_loss.shape)}"
        )
    n_seq = batch if num_sequences_in_batch is None else num_sequences_in_batch
    if int(n_seq) != n_seq or n_seq < batch or n_seq < 0:
        raise ValueError(
            f"num_sequences_in_batch must be an integer >= B = {batch}, got {num_sequences_in_batch}"
        )
    m = mask.bool()
    total = torch.where(m, per_token_loss.expand(m.shape), 0)
    n_seq = max(n_seq, 1)  # an empty batch sums to 0: 0 / 1, not 0 / 0
    if loss_type in ("grpo", "sapo"):
        return (total.sum(-1) / m.sum(-1).clamp(min=1)).sum() / n_seq
    if loss_type == "bnpo":
        return total.sum() / m.sum().clamp(min=1) * (batch / n_seq)
    if loss_type in ("dr_grpo", "rlplus"):
        if max_completion_length is None or not max_completion_length > 0:
            raise ValueError(
                f"loss_type={loss_type!r} needs max_completion_length > 0, got "
                f"{max_completion_length}"
            )
        return total.sum() / (n_seq * max_completion_length)
    if loss_type == "sequence_sum":
        return total.sum() / n_seq
    n_tok = (
        m.sum()
        if num_items_in_batch is None
        else torch.as_tensor(num_items_in_batch, device=total.device)
    )
    return total.sum() / n_tok.clamp(min=1)


# --------------------------------------------------------------------------------------------
# KL, value, entropy
# --------------------------------------------------------------------------------------------


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    r"""Schulman's per-token estimators of :math:`\mathrm{KL}(\pi\,\|\,\pi_{ref})` from tokens sampled by :math:`\pi`.

    Textbook form::

        d = ref_logp - logp
        return {"k1": -d, "k2": d**2 / 2, "k3": d.exp() - d - 1}[kind]

    With :math:`d = \log\pi_{ref}(y_t) - \log\pi(y_t)` (the log of :math:`r=\pi_{ref}/\pi`):

    .. math::
        k_1 = -d,\qquad k_2 = \tfrac12 d^2,\qquad k_3 = e^{d} - d - 1\ (\ge 0)

    ==============  =====  ==============================================================
    name            shape  meaning
    ==============  =====  ==============================================================
    ``logp``        any    log-probs of the *sampling* policy (differentiable if a loss)
    ``ref_logp``    same   log-probs of the other policy at the same tokens
    returns         same   per-token estimate; mask and aggregate it yourself
    ==============  =====  ==============================================================

    Values: k1 and k3 are unbiased, k2 biased; k1 is negative for about half the samples; k2, k3
    >= 0 (Schulman, "Approximating KL Divergence", 2020). Gradients as a *loss* (autograd through
    ``logp``, samples fixed; derived per state, as in Tang and Munos, arXiv 2506.09477, and the
    placement study of Shah et al., arXiv 2512.21852):
    E[grad k1] = 0 (no regularisation at all); E[grad k2] = grad KL(pi || ref);
    E[grad k3] = grad KL(ref || pi), the *forward* KL (GRPO's choice, TRL/verl default). Placed *in
    the reward* (detached; :func:`labkit.advantages.kl_penalized_rewards`) k1 gives the unbiased
    reverse-KL gradient. The log-ratio inside k3 is clamped to [-20, 20] so ``exp`` cannot overflow
    (verl also clamps the value to [-10, 10]; labkit does not).

    The metric "approximate KL to the old policy" is ``kl_estimate(old_logp, logp, kind)``: the
    samples come from the old policy.
    """
    _check_same_shape(logp, "logp", ref_logp=ref_logp)
    d = ref_logp - logp
    if kind == "k1":
        return -d
    if kind == "k2":
        return 0.5 * d**2
    if kind == "k3":
        d = d.clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
        return torch.exp(d) - d - 1
    raise ValueError(f"kind must be one of {KL_ESTIMATORS}, got {kind!r}")


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip_range_value: float | None = 0.2,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""PPO critic loss with value clipping (OpenAI baselines ``ppo2``, TRL PPO, verl).

    Textbook form::

        clipped = old_values + (values - old_values).clamp(-eps_v, eps_v)
        loss = torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)
        return 0.5 * loss[mask].mean()

    .. math::
        V^{clip} = V_{old} + \mathrm{clip}(V - V_{old}, -\varepsilon_v, \varepsilon_v),\qquad
        L^{VF} = \tfrac12\,\operatorname{mean}_{t\in m}\max\big((V-\hat R)^2, (V^{clip}-\hat R)^2\big)

    ======================  ======  =========================================================
    name                    shape   meaning
    ======================  ======  =========================================================
    ``values``              (B, T)  current critic outputs, differentiable
    ``old_values``          (B, T)  critic outputs at rollout time
    ``returns``             (B, T)  targets R = A_GAE + V_old (before advantage whitening)
    ``mask``                (B, T)  response mask
    ``clip_range_value``    float   eps_v >= 0 (TRL 0.2, verl 0.5); None = no clipping
    returns                 ()      loss (token mean over this micro-batch)
    returns                 dict    ``value_clipfrac``: share of tokens where the clipped branch won
    ======================  ======  =========================================================

    Zero gradient exactly when the value left the band and the band edge is farther from the target
    than the value (e.g. V_old=0, eps=0.2, R=0.5, V=0.6); otherwise the gradient is (V - R)/n.
    """
    _check_same_shape(values, "values", old_values=old_values, returns=returns, mask=mask)
    _check_non_negative(clip_range_value=clip_range_value)
    m = mask.bool()
    # Zero the padding first: a NaN there would otherwise give NaN gradients (0 * NaN).
    values, old_values, returns = (torch.where(m, x, 0) for x in (values, old_values, returns))
    unclipped = (values - returns) ** 2
    if clip_range_value is None:
        clipped = unclipped
    else:
        v_clip = old_values + (values - old_values).clamp(-clip_range_value, clip_range_value)
        clipped = (v_clip - returns) ** 2
    loss = 0.5 * _masked_mean(torch.maximum(unclipped, clipped), m)
    with torch.no_grad():
        clipfrac = _masked_mean((clipped > unclipped).to(values.dtype), m)
    return loss, {"value_clipfrac": clipfrac}


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor, coef: float) -> torch.Tensor:
    r"""Entropy bonus as a loss term: :math:`-c\cdot\operatorname{mean}_{t\in m} H_t` (add it to the loss).

    ===========  ======  =================================================
    name         shape   meaning
    ===========  ======  =================================================
    ``entropy``  (B, T)  per-token entropy (differentiable to have effect)
    ``mask``     (B, T)  response mask
    ``coef``     float   c, finite (TRL ``entropy_coef``; GFPO paper 0.001)
    returns      ()      loss term; negative c penalises entropy
    ===========  ======  =================================================

    A token mean whatever the policy aggregation (TRL 1.16 does the same, so ``coef`` means the
    same for every ``loss_type``).
    """
    _check_same_shape(entropy, "entropy", mask=mask)
    _check_finite_number(coef=coef)
    return -coef * _masked_mean(entropy, mask.bool())


# --------------------------------------------------------------------------------------------
# the composed policy loss
# --------------------------------------------------------------------------------------------


def _advantages_2d(advantages: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    batch = shape[0]
    if advantages.shape in ((batch,), (batch, 1)):
        return advantages.reshape(batch, 1)
    if advantages.shape == shape:
        return advantages
    raise ValueError(
        f"advantages must have shape (B,), (B, 1) or (B, T) = {tuple(shape)}, got {tuple(advantages.shape)}"
    )


def _check_finite(
    m: torch.Tensor, advantages: torch.Tensor, **tensors: torch.Tensor | None
) -> None:
    """Raise if a valid (masked-in) entry is NaN/inf; one device sync for all tensors."""
    named = {k: torch.where(m, t.detach(), 0) for k, t in tensors.items() if t is not None}
    named["advantages"] = advantages.detach()
    flags = torch.stack([torch.isfinite(t).all() for t in named.values()])
    if bool(flags.all()):
        return
    bad = [name for name, ok in zip(named, flags.tolist()) if not ok]
    raise ValueError(f"{bad[0]} has non-finite (NaN/inf) values at valid (unmasked) positions")


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    loss_type: str = "dapo",
    importance_sampling_level: str = "token",
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    dual_clip: float | None = None,
    beta: float = 0.0,
    ref_logp: torch.Tensor | None = None,
    kl_estimator: str = "k3",
    use_bias_correction_kl: bool = False,
    max_completion_length: int | None = None,
    num_items_in_batch: int | torch.Tensor | None = None,
    num_sequences_in_batch: int | None = None,
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
    vespo_k_pos: float = 2.0,
    vespo_lambda_pos: float = 3.0,
    vespo_k_neg: float = 3.0,
    vespo_lambda_neg: float = 2.0,
    demonstrations: torch.Tensor | None = None,
    exploration_gamma: float = 0.5,
    token_weights: torch.Tensor | None = None,
    token_penalty: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""The policy loss of one micro-batch, as TRL's ``GRPOTrainer._compute_loss`` composes it.

    Textbook form (token ratios, PPO clip, ``loss_type="grpo"``, k3 KL in the loss)::

        ratio = torch.exp(logp - old_logp)
        A = advantages[:, None]
        per_token = -torch.minimum(ratio * A, ratio.clamp(1 - epsilon, 1 + epsilon_high) * A)
        d = ref_logp - logp
        per_token = per_token + beta * (d.exp() - d - 1)
        loss = ((per_token * mask).sum(-1) / mask.sum(-1)).mean()

    The code below adds the other ratio levels, surrogates and aggregations, input checks, the
    masking of padding and the metrics.

    1. importance weight :math:`w` at ``importance_sampling_level``: ``"token"`` :math:`r_{i,t}`;
       ``"sequence"`` :math:`s_i` (GSPO, :func:`sequence_log_ratio`); ``"sequence_token"``
       :math:`s_{i,t}` (GSPO-token, :func:`gspo_token_log_ratio`);
    2. per-token surrogate by ``loss_type``: clipped (grpo, bnpo, dr_grpo, dapo, sequence_sum),
       ``cispo`` (weight capped at ``epsilon_high``), ``sapo`` (soft gate), ``vespo`` (Gamma
       kernel of the sequence weight), then times ``token_weights`` when given (the trainer's
       token filters: top-entropy quantile, Clip-Cov, importance-sampling correction), plus
       ``token_penalty`` when given (KL-Cov's ``coef * |log r|`` on its chosen tokens);
    3. :math:`+\beta\,k` with :math:`k` = ``kl_estimate(logp, ref_logp, kl_estimator)``, times
       :math:`w` if ``use_bias_correction_kl`` (DeepSeek-V3.2);
    4. :func:`aggregate` by ``loss_type``;
    5. :math:`-c\,\bar H` if ``entropy_coef`` = c is non-zero.

    ===========================  ==========  ==========================================================
    name                         shape       meaning
    ===========================  ==========  ==========================================================
    ``logp``                     (B, T)      current log-probs of the sampled tokens, differentiable
    ``old_logp``                 (B, T)      behaviour policy; None = on-policy (``logp.detach()``:
                                             ratio 1 in value, gradient of log pi)
    ``advantages``               (B,), (B,   one per sequence, or per token
                                 1), (B, T)
    ``mask``                     (B, T)      response mask (bool or 0/1)
    ``ref_logp``                 (B, T)      reference log-probs, required when ``beta > 0``
    ``entropy``                  (B, T)      per-token entropy, required when ``entropy_coef != 0``;
                                             also logged when given
    ``token_weights``            (B, T)      optional non-negative multiplier of each token's
                                             surrogate (0 drops a token's gradient); the
                                             normalisers still count every masked-in token
    ``token_penalty``            (B, T)      optional differentiable per-token term added
                                             to the surrogate before aggregation
    ``demonstrations``           (B,)        ``rlplus``: rows that are external demonstrations
    returns ``loss``             ()          scalar to back-propagate
    returns ``metrics``          dict        detached 0-dim tensors (no device sync), see below
    ===========================  ==========  ==========================================================

    Hyper-parameters use TRL's names and meanings: ``epsilon`` (lower clip, default 0.2),
    ``epsilon_high`` (upper clip, None = ``epsilon``; for ``cispo`` the absolute cap on the IS
    weight, required, 5.0 recommended), ``delta`` (cap of the unclipped ratio, > 1), ``beta``,
    ``max_completion_length`` (``dr_grpo``), ``num_items_in_batch`` (``dapo``/``cispo``),
    ``sapo_temperature_pos/neg``, ``vespo_k_pos``... ``dual_clip`` is verl's ``clip_ratio_c``. Both epsilons may be
    ``float('inf')`` to switch clipping off. ``num_sequences_in_batch``: see :func:`aggregate`.

    Metrics, named as in :data:`labkit.metrics.METRICS`: ``loss`` (the aggregated surrogate),
    ``kl_ref`` (mean per-token KL term, when ``beta > 0``), ``entropy`` (mean, when given),
    ``clip_low`` (A < 0 and w < 1 - eps), ``clip_high`` (A > 0 and w > 1 + eps_high; for cispo
    w > cap), ``clip_region`` (either), ``clip_dual`` (A < 0 and w > c), ``kl_old`` and
    ``kl_old_k1`` (k3 and k1 estimates of KL(old || current) from the token log-ratios),
    ``ratio_mean|min|max|std`` of w. All are means over valid tokens of this micro-batch (TRL
    averages sequence-level clip flags over sequences; here a clipped sequence counts all its
    tokens, as in the GSPO paper).

    Raises ``ValueError`` for unknown names, bad shapes, negative epsilons/beta, infinite beta or
    entropy_coef, ``delta`` or
    ``dual_clip`` with a loss type that does not clip, missing ``ref_logp``/``entropy``/
    ``epsilon_high`` where needed, and NaN/inf at valid positions of the inputs.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if importance_sampling_level not in IMPORTANCE_SAMPLING_LEVELS:
        raise ValueError(
            f"importance_sampling_level must be one of {IMPORTANCE_SAMPLING_LEVELS}, got {importance_sampling_level!r}"
        )
    if kl_estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {kl_estimator!r}")
    if logp.dim() != 2:
        raise ValueError(f"logp must have shape (B, T), got {tuple(logp.shape)}")
    _check_same_shape(
        logp, "logp", old_logp=old_logp, mask=mask, ref_logp=ref_logp, entropy=entropy,
        token_weights=token_weights, token_penalty=token_penalty,
    )
    _check_non_negative(epsilon=epsilon, epsilon_high=epsilon_high, beta=beta)
    _check_finite_number(beta=beta, entropy_coef=entropy_coef)
    if loss_type == "cispo" and epsilon_high is None:
        raise ValueError(
            "loss_type='cispo' needs epsilon_high, the absolute cap on the importance weight "
            "(e.g. 5.0); TRL would silently use epsilon=0.2 and shrink every gradient fivefold"
        )
    if loss_type not in CLIPPED_LOSS_TYPES and (delta is not None or dual_clip is not None):
        raise ValueError(
            f"delta and dual_clip only apply to the clipped loss types {CLIPPED_LOSS_TYPES}, not {loss_type!r}"
        )
    if beta > 0 and ref_logp is None:
        raise ValueError("beta > 0 needs ref_logp (log-probs of the reference model)")
    if entropy_coef != 0 and entropy is None:
        raise ValueError("entropy_coef != 0 needs the per-token entropy")
    epsilon_high = epsilon if epsilon_high is None else epsilon_high

    m = mask.bool()
    adv = _advantages_2d(advantages, logp.shape).to(logp.dtype)
    _check_finite(
        m,
        adv,
        logp=logp,
        old_logp=old_logp,
        ref_logp=ref_logp if beta > 0 else None,
        entropy=entropy,
    )
    # Masked positions are replaced by 0 so that whatever padding holds cannot reach the loss.
    logp = torch.where(m, logp, 0)
    old_logp = logp.detach() if old_logp is None else torch.where(m, old_logp, 0)

    token_lr = token_log_ratio(logp, old_logp, m)
    if importance_sampling_level == "token":
        log_w = token_lr
    elif importance_sampling_level == "sequence":
        log_w = sequence_log_ratio(logp, old_logp, m)[:, None]
    else:
        log_w = gspo_token_log_ratio(logp, old_logp, m)

    if loss_type == "cispo":
        per_token = cispo_surrogate(logp, log_w, adv, max_weight=epsilon_high)
    elif loss_type == "sapo":
        per_token = sapo_surrogate(log_w, adv, sapo_temperature_pos, sapo_temperature_neg)
    elif loss_type == "rlplus":
        if importance_sampling_level != "token":
            raise ValueError("loss_type='rlplus' uses token ratios (importance_sampling_level="
                             "'token')")
        per_token = rlplus_surrogate(logp, old_logp, adv, demonstrations, exploration_gamma)
    elif loss_type == "vespo":
        if adv.shape[1] != 1:
            raise ValueError("loss_type='vespo' weighs whole sequences: give one advantage per "
                             "sequence, shape (B,) or (B, 1)")
        per_token = vespo_surrogate(logp, token_lr, adv, m, vespo_k_pos, vespo_lambda_pos,
                                    vespo_k_neg, vespo_lambda_neg)
    else:
        per_token = clipped_surrogate(log_w, adv, epsilon, epsilon_high, delta, dual_clip)
    if token_weights is not None:
        per_token = per_token * token_weights.detach()
    if token_penalty is not None:
        per_token = per_token + token_penalty

    agg = {
        "mask": m,
        "loss_type": loss_type,
        "max_completion_length": max_completion_length,
        "num_items_in_batch": num_items_in_batch,
        "num_sequences_in_batch": num_sequences_in_batch,
    }
    pg_loss = aggregate(per_token, **agg)
    loss = pg_loss
    metrics: dict[str, torch.Tensor] = {"loss": pg_loss.detach()}

    if beta > 0:
        kl = kl_estimate(logp, torch.where(m, ref_logp, 0), kl_estimator)
        if use_bias_correction_kl:
            kl = kl * torch.exp(log_w)
        # Aggregation is linear, so aggregating the KL separately equals aggregating the sum.
        loss = loss + beta * aggregate(kl, **agg)
        metrics["kl_ref"] = _masked_mean(kl.detach(), m)
    if entropy is not None:
        metrics["entropy"] = _masked_mean(entropy.detach(), m)
        if entropy_coef != 0:
            # Weighted like bnpo so that micro-batch losses still add up to the full-batch value.
            share = m.shape[0] / (
                m.shape[0] if num_sequences_in_batch is None else num_sequences_in_batch
            )
            loss = loss + entropy_bonus(torch.where(m, entropy, 0), m, entropy_coef) * share

    with torch.no_grad():
        metrics.update(
            _ratio_metrics(log_w, token_lr, adv, m, loss_type, epsilon, epsilon_high, dual_clip)
        )
    return loss, metrics


def _ratio_metrics(log_w, token_lr, adv, m, loss_type, epsilon, epsilon_high, dual_clip):
    """Clip fractions, ratio statistics and the KL to the old policy, over valid tokens."""
    w = torch.exp(log_w.detach()).expand(m.shape)
    a = adv.expand(m.shape)
    zero = torch.zeros_like(w, dtype=torch.bool)
    if loss_type == "cispo":
        low, high = zero, (w > epsilon_high) & (a > 0)  # TRL's cispo_clip_ratio
    elif loss_type in ("sapo", "vespo", "rlplus"):
        low = high = zero  # soft gate / kernel / no clip: nothing is hard-clipped
    else:
        low = (w < 1 - epsilon) & (a < 0)
        high = (w > 1 + epsilon_high) & (a > 0)
    dual = zero if dual_clip is None else (w > dual_clip) & (a < 0)
    # Min/max over valid tokens without boolean indexing (which would sync); 1 if there are none.
    has_valid = m.any()
    mean = _masked_mean(w, m)
    # Samples come from the old policy: KL(old || current) = kl_estimate(log pi_old, log pi).
    old_lp = torch.zeros_like(token_lr)
    return {
        "clip_low": _masked_mean(low.to(w.dtype), m),
        "clip_high": _masked_mean(high.to(w.dtype), m),
        "clip_region": _masked_mean((low | high).to(w.dtype), m),
        "clip_dual": _masked_mean(dual.to(w.dtype), m),
        "kl_old_k1": _masked_mean(kl_estimate(old_lp, token_lr, "k1"), m),
        "kl_old": _masked_mean(kl_estimate(old_lp, token_lr, "k3"), m),
        "ratio_mean": mean,
        "ratio_min": torch.where(has_valid, torch.where(m, w, torch.inf).amin(), 1),
        "ratio_max": torch.where(has_valid, torch.where(m, w, -torch.inf).amax(), 1),
        "ratio_std": _masked_mean((w - mean) ** 2, m).sqrt(),
    }
