"""The composed policy loss of one micro-batch: ratio, the registered surrogate, KL, aggregation,
entropy, and the clip metrics, as TRL's ``GRPOTrainer._compute_loss`` composes them."""

from __future__ import annotations

import math

import torch

from labkit.losses.aggregation import aggregate
from labkit.losses.clipped import upper_clip
from labkit.losses.kl import KL_ESTIMATORS, kl_estimate
from labkit.losses.ratios import IMPORTANCE_SAMPLING_LEVELS, importance_log_weight, token_log_ratio
from labkit.losses.registry import LossType, SurrogateInputs, get_loss_type, option_owners
from labkit.losses.validation import (
    check_finite_number,
    check_non_negative,
    check_same_shape,
    masked_mean,
)
from labkit.losses.value import entropy_bonus


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
    beta: float = 0.0,
    ref_logp: torch.Tensor | None = None,
    kl_estimator: str = "k3",
    use_bias_correction_kl: bool = False,
    max_completion_length: int | None = None,
    num_items_in_batch: int | torch.Tensor | None = None,
    num_sequences_in_batch: int | None = None,
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    token_weights: torch.Tensor | None = None,
    token_penalty: torch.Tensor | None = None,
    terms=None,
    **options,
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
    2. per-token surrogate of the registered ``loss_type`` (:data:`LOSS_REGISTRY`: the PPO clip
       family grpo, bnpo, dr_grpo, dapo, sequence_sum; ``cispo`` (weight capped at
       ``epsilon_high``), ``sapo`` (soft gate), ``vespo`` (Gamma kernel of the sequence
       weight), ``rlplus`` (no clip, demonstrations), and any loss a file registers), then times
       ``token_weights`` when given (the trainer's token filters: top-entropy quantile, Clip-Cov,
       importance-sampling correction), plus ``token_penalty`` when given (KL-Cov's
       ``coef * |log r|`` on its chosen tokens);
    3. :math:`+\beta\,k` with :math:`k` = ``kl_estimate(logp, ref_logp, kl_estimator)``, times
       :math:`w` if ``use_bias_correction_kl`` (DeepSeek-V3.2);
    4. :func:`aggregate` with the loss type's aggregation;
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
    ``terms``                                what computes the loss once the inputs are checked:
                                             None = :func:`policy_loss_terms`, eager (the
                                             trainer's compiled loss path passes its compiled
                                             copy: :mod:`labkit.training.compiled`)
    ``**options``                            the loss type's own keywords
                                             (``LOSS_REGISTRY[loss_type].keywords``), e.g.
                                             ``delta`` and ``dual_clip`` for the clipped family,
                                             ``sapo_temperature_pos``, ``vespo_k_pos``,
                                             ``demonstrations`` (RL-PLUS: (B,) bool rows that are
                                             external demonstrations), ``exploration_gamma``
    returns ``loss``             ()          scalar to back-propagate
    returns ``metrics``          dict        detached 0-dim tensors (no device sync), see below
    ===========================  ==========  ==========================================================

    Hyper-parameters use TRL's names and meanings: ``epsilon`` (lower clip, default 0.2),
    ``epsilon_high`` (upper clip, None = ``epsilon``; for ``cispo`` the absolute cap on the IS
    weight, required, 5.0 recommended), ``delta`` (cap of the unclipped ratio, > 1), ``beta``,
    ``max_completion_length`` (``dr_grpo``), ``num_items_in_batch`` (``dapo``/``cispo``),
    ``sapo_temperature_pos/neg``, ``vespo_k_pos``... ``dual_clip`` is verl's ``clip_ratio_c``.
    Both epsilons may be ``float('inf')`` to switch clipping off. ``num_sequences_in_batch``:
    see :func:`aggregate`.

    Metrics, named as in :data:`labkit.metrics.METRICS`: ``loss`` (the aggregated surrogate),
    ``kl_ref`` (mean per-token KL term, when ``beta > 0``), ``entropy`` (mean, when given),
    ``clip_low`` (A < 0 and w < 1 - eps), ``clip_high`` (A > 0 and w > 1 + eps_high; for cispo
    w > cap), ``clip_region`` (either), ``clip_dual`` (A < 0 and w > c), ``kl_old`` and
    ``kl_old_k1`` (k3 and k1 estimates of KL(old || current) from the token log-ratios),
    ``ratio_mean|min|max|std`` of w. All are means over valid tokens of this micro-batch (TRL
    averages sequence-level clip flags over sequences; here a clipped sequence counts all its
    tokens, as in the GSPO paper).

    Raises ``ValueError`` for unknown names, bad shapes, negative epsilons/beta, infinite beta or
    entropy_coef, an option the loss type does not take (``delta`` or ``dual_clip`` with a loss
    type that does not clip), missing ``ref_logp``/``entropy``/``epsilon_high`` where needed, and
    NaN/inf at valid positions of the inputs.
    """
    loss = get_loss_type(loss_type)
    options = _loss_options(loss, options)
    if importance_sampling_level not in IMPORTANCE_SAMPLING_LEVELS:
        raise ValueError(
            f"importance_sampling_level must be one of {IMPORTANCE_SAMPLING_LEVELS}, got {importance_sampling_level!r}"
        )
    if kl_estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {kl_estimator!r}")
    if logp.dim() != 2:
        raise ValueError(f"logp must have shape (B, T), got {tuple(logp.shape)}")
    check_same_shape(
        logp, "logp", old_logp=old_logp, mask=mask, ref_logp=ref_logp, entropy=entropy,
        token_weights=token_weights, token_penalty=token_penalty,
    )
    check_non_negative(epsilon=epsilon, epsilon_high=epsilon_high, beta=beta)
    check_finite_number(beta=beta, entropy_coef=entropy_coef)
    if beta > 0 and ref_logp is None:
        raise ValueError("beta > 0 needs ref_logp (log-probs of the reference model)")
    if entropy_coef != 0 and entropy is None:
        raise ValueError("entropy_coef != 0 needs the per-token entropy")

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
    return (policy_loss_terms if terms is None else terms)(
        logp, old_logp, adv, m, loss=loss, options=options,
        importance_sampling_level=importance_sampling_level, epsilon=epsilon,
        epsilon_high=epsilon_high, beta=beta, ref_logp=ref_logp, kl_estimator=kl_estimator,
        use_bias_correction_kl=use_bias_correction_kl,
        max_completion_length=max_completion_length, num_items_in_batch=num_items_in_batch,
        num_sequences_in_batch=num_sequences_in_batch, entropy=entropy,
        entropy_coef=entropy_coef, token_weights=token_weights, token_penalty=token_penalty)


def policy_loss_terms(
    logp: torch.Tensor,
    old_logp: torch.Tensor | None,
    adv: torch.Tensor,
    m: torch.Tensor,
    *,
    loss: LossType,
    options: dict,
    importance_sampling_level: str,
    epsilon: float,
    epsilon_high: float | None,
    beta: float,
    ref_logp: torch.Tensor | None,
    kl_estimator: str,
    use_bias_correction_kl: bool,
    max_completion_length: int | None,
    num_items_in_batch: int | torch.Tensor | None,
    num_sequences_in_batch: int | None,
    entropy: torch.Tensor | None,
    entropy_coef: float,
    token_weights: torch.Tensor | None,
    token_penalty: torch.Tensor | None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Steps 1-5 of :func:`policy_loss` on inputs it has checked: ``adv`` (B, 1) or (B, T) in
    ``logp``'s dtype, ``m`` the bool mask, ``loss`` the registered :class:`LossType` and
    ``options`` all its options; the rest as :func:`policy_loss` takes them. Tensor math only:
    no check of a tensor's values and no read back to the host, so ``torch.compile`` can
    capture it as one graph (:mod:`labkit.training.compiled`)."""
    # Masked positions are replaced by 0 so that whatever padding holds cannot reach the loss.
    logp = torch.where(m, logp, 0)
    old_logp = logp.detach() if old_logp is None else torch.where(m, old_logp, 0)

    token_lr = token_log_ratio(logp, old_logp, m)
    log_w = (token_lr if importance_sampling_level == "token"
             else importance_log_weight(logp, old_logp, m, importance_sampling_level))
    inputs = SurrogateInputs(logp=logp, old_logp=old_logp, log_w=log_w, token_log_ratio=token_lr,
                             advantages=adv, mask=m, epsilon=epsilon, epsilon_high=epsilon_high,
                             importance_sampling_level=importance_sampling_level)
    per_token = loss.surrogate(inputs, **options)
    if token_weights is not None:
        per_token = per_token * token_weights.detach()
    if token_penalty is not None:
        per_token = per_token + token_penalty

    agg = {
        "mask": m,
        "aggregation": loss.aggregation,
        "max_completion_length": max_completion_length,
        "num_items_in_batch": num_items_in_batch,
        "num_sequences_in_batch": num_sequences_in_batch,
    }
    pg_loss = aggregate(per_token, **agg)
    total = pg_loss
    metrics: dict[str, torch.Tensor] = {"loss": pg_loss.detach()}

    if beta > 0:
        kl = kl_estimate(logp, torch.where(m, ref_logp, 0), kl_estimator)
        if use_bias_correction_kl:
            kl = kl * torch.exp(log_w)
        # Aggregation is linear, so aggregating the KL separately equals aggregating the sum.
        total = total + beta * aggregate(kl, **agg)
        metrics["kl_ref"] = masked_mean(kl.detach(), m)
    if entropy is not None:
        metrics["entropy"] = masked_mean(entropy.detach(), m)
        if entropy_coef != 0:
            # Weighted like bnpo so that micro-batch losses still add up to the full-batch value.
            share = m.shape[0] / (
                m.shape[0] if num_sequences_in_batch is None else num_sequences_in_batch
            )
            total = total + entropy_bonus(torch.where(m, entropy, 0), m, entropy_coef) * share

    high = upper_clip(epsilon, epsilon_high)
    with torch.no_grad():
        metrics.update(_ratio_metrics(log_w, token_lr, adv, m, loss, epsilon, high,
                                      options.get("dual_clip")))
    return total, metrics


def _loss_options(loss: LossType, given: dict) -> dict:
    """The loss's own keywords from ``given``, its registered defaults for the options not
    given; a keyword it does not take is refused, unless it is None (the value that switches
    another loss's option off)."""
    unknown = {k: v for k, v in given.items() if k not in loss.keywords}
    for name, value in unknown.items():
        owners = option_owners(name)
        if not owners:
            raise TypeError(f"policy_loss() got an unexpected keyword argument {name!r}; "
                            f"loss_type={loss.name!r} takes {loss.keywords or 'no options'}")
        if value is not None:
            raise ValueError(f"{name} only apply to the loss types {owners}, not "
                             f"{loss.name!r} (its options: {loss.keywords or 'none'})")
    return {**loss.options, **{k: v for k, v in given.items() if k in loss.keywords}}


def _ratio_metrics(log_w, token_lr, adv, m, loss, epsilon, epsilon_high, dual_clip):
    """Clip fractions, ratio statistics and the KL to the old policy, over valid tokens."""
    w = torch.exp(log_w.detach()).expand(m.shape)
    a = adv.expand(m.shape)
    zero = torch.zeros_like(w, dtype=torch.bool)
    # a loss without a hard clip (soft gate, kernel, no clip) silences no token
    low, high = (zero, zero) if loss.clip_flags is None else loss.clip_flags(w, a, epsilon,
                                                                             epsilon_high)
    dual = zero if dual_clip is None else (w > dual_clip) & (a < 0)
    # Min/max over valid tokens without boolean indexing (which would sync); 1 if there are none.
    has_valid = m.any()
    mean = masked_mean(w, m)
    # Samples come from the old policy: KL(old || current) = kl_estimate(log pi_old, log pi).
    old_lp = torch.zeros_like(token_lr)
    return {
        "clip_low": masked_mean(low.to(w.dtype), m),
        "clip_high": masked_mean(high.to(w.dtype), m),
        "clip_region": masked_mean((low | high).to(w.dtype), m),
        "clip_dual": masked_mean(dual.to(w.dtype), m),
        "kl_old_k1": masked_mean(kl_estimate(old_lp, token_lr, "k1"), m),
        "kl_old": masked_mean(kl_estimate(old_lp, token_lr, "k3"), m),
        "ratio_mean": mean,
        "ratio_min": torch.where(has_valid, torch.where(m, w, torch.inf).amin(), 1),
        "ratio_max": torch.where(has_valid, torch.where(m, w, -torch.inf).amax(), 1),
        "ratio_std": masked_mean((w - mean) ** 2, m).sqrt(),
    }


def policy_loss_settings(config) -> dict:
    """:func:`policy_loss`'s keywords that come from a :class:`~labkit.config.TrainConfig`: the
    shared ones and the loss type's own options (what the trainer passes, beside the batch).
    KL-Cov replaces the clip by its penalty, so it opens the band; a KL in the reward leaves the
    loss without one."""
    loss = get_loss_type(config.loss_type)
    unclipped = config.cov_penalty == "kl_cov"
    return {"loss_type": config.loss_type,
            "importance_sampling_level": config.importance_sampling_level,
            "epsilon": math.inf if unclipped else config.epsilon,
            "epsilon_high": math.inf if unclipped else config.upper_clip,
            "beta": 0.0 if config.kl_in_reward else config.beta,
            "kl_estimator": config.kl_estimator,
            "use_bias_correction_kl": config.use_bias_correction_kl,
            "max_completion_length": config.max_completion_length,
            "entropy_coef": config.entropy_coef, **loss.options_from(config)}
