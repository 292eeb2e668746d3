"""Exploration and stability: the knobs a learner turns when entropy collapses or a run blows up.

Pure functions, each the computation of one method; the trainer calls them when their
``TrainConfig`` switch is on, and notebook 07 calls them on hand-made tensors.

==================================  ===============================================================
function                            method (switch)
==================================  ===============================================================
``temperature_at``                  Kimi K2 temperature decay (arXiv 2507.20534, section 3.2.3):
                                    constant, linear or cosine from ``temperature`` to
                                    ``temperature_final`` (``temperature_schedule``); ProRL's high
                                    constant temperature is ``temperature=1.2``
``reset_reference``                 ProRL reference reset (arXiv 2505.24864, section 2.3.1): the
                                    reference becomes the current policy and the optimizer state
                                    is cleared (``ref_reset_every``, ``ref_reset_patience``)
``mix_reference``                   TR-DPO's soft reference update (arXiv 2404.09656), TRL's
                                    ``sync_ref_model``: ref <- alpha * policy + (1 - alpha) * ref
``ngram_embeddings`` /              DRA-GRPO (arXiv 2505.09655): rewards of near-duplicate
``dra_weights``                     completions discounted by their similarity to the rest of the
                                    group (``diversity_adjustment``)
``top_entropy_mask``                "Beyond the 80/20 rule" (arXiv 2506.01939): the gradient only
                                    on the highest-entropy "forking" tokens
                                    (``top_entropy_quantile``, TRL's name)
``covariance`` / ``clip_cov_mask``  Clip-Cov and KL-Cov (arXiv 2505.22617, section 4): silence or
``/ kl_cov_mask``                   KL-penalise the few tokens whose log-prob covaries most with
                                    their advantage, the ones that drive entropy down
                                    (``cov_penalty``)
``token_filters``                   the two above, as the trainer applies them to one micro-batch
==================================  ===============================================================

Where the lab chooses (the papers leave it open or the lab is small): the temperature schedule's
shape and end point are unpublished (K2), so linear and cosine are both offered; DRA's similarity
is a character n-gram cosine by default, not a sentence embedder (there is none offline, and on
the lab's short arithmetic completions surface overlap is what separates duplicates), with the
policy's own mean hidden state as the alternative; the top-entropy threshold is computed over the
whole generation batch from the sampling-time entropies (TRL computes it per micro-batch from the
training forward; the two agree on-policy and the lab's does not depend on micro-batching).
"""

from __future__ import annotations

import math

import torch

from labkit.rules import config_rule

__all__ = [
    "TEMPERATURE_SCHEDULES",
    "clip_cov_mask",
    "covariance",
    "dra_weights",
    "kl_cov_mask",
    "mix_reference",
    "ngram_embeddings",
    "reset_reference",
    "temperature_at",
    "token_filters",
    "top_entropy_mask",
]

#: ``temperature_schedule`` values.
TEMPERATURE_SCHEDULES = ("constant", "linear", "cosine")


# ---- temperature ---------------------------------------------------------------------------------
def temperature_at(step: int, total_steps: int, start: float, final: float | None = None,
                   schedule: str = "constant") -> float:
    r"""Sampling temperature of step ``step`` (0-based) of ``total_steps``.

    Textbook form::

        progress = step / max(total_steps - 1, 1)                    # 0 at the first step, 1 at the last
        linear = start + (final - start) * progress
        cosine = final + (start - final) * (1 + cos(pi * progress)) / 2

    ``final=None`` or ``"constant"`` keeps ``start``. The training log-probs of a step use the
    same temperature (the trainer passes it to both), so the on-policy ratio stays exactly 1.
    """
    if schedule not in TEMPERATURE_SCHEDULES:
        raise ValueError(f"schedule must be one of {TEMPERATURE_SCHEDULES}, got {schedule!r}")
    if schedule == "constant" or final is None:
        return float(start)
    progress = min(max(step / max(total_steps - 1, 1), 0.0), 1.0)
    if schedule == "linear":
        return float(start + (final - start) * progress)
    return float(final + (start - final) * (1 + math.cos(math.pi * progress)) / 2)


# ---- the reference model -------------------------------------------------------------------------
@torch.no_grad()
def reset_reference(policy: torch.nn.Module, reference: torch.nn.Module,
                    optimizer: torch.optim.Optimizer | None = None) -> None:
    """ProRL's reset: copy the policy's weights into the reference and clear the optimizer state
    (Adam's moments and step counts), in place. The policy itself is unchanged, and right after
    a reset the KL to the reference is 0 (and so is its gradient)."""
    reference.load_state_dict(policy.state_dict())
    if optimizer is not None:
        optimizer.state.clear()


@torch.no_grad()
def mix_reference(policy: torch.nn.Module, reference: torch.nn.Module, alpha: float) -> None:
    """TR-DPO's soft update of the reference, in place: ``ref <- alpha * policy + (1 - alpha) *
    ref`` for every floating-point tensor (TRL: ``ref_model_mixup_alpha``, 0.6 by default)."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    policy_state = policy.state_dict()
    for name, tensor in reference.state_dict().items():
        if tensor.is_floating_point():
            tensor.mul_(1 - alpha).add_(policy_state[name].to(tensor.dtype), alpha=alpha)


# ---- DRA-GRPO --------------------------------------------------------------------------------------
def ngram_embeddings(texts: list[str], n: int = 3, dim: int = 4096,
                     ignore: tuple[str, ...] = ()) -> torch.Tensor:
    """Hashed character n-gram counts of each text, L2-normalised: (len(texts), dim) float32.

    ``ignore``: substrings removed first (the trainer drops the format tags, which every
    completion shares and which would make any two completions look about 60% alike). Python's
    ``hash`` is salted per process, so the buckets come from a fixed polynomial hash instead: the
    same texts give the same vectors in every run.
    """
    out = torch.zeros(len(texts), dim)
    for row, text in enumerate(texts):
        for piece in ignore:
            text = text.replace(piece, " ")
        padded = f"\x02{text}\x03"
        for i in range(max(len(padded) - n + 1, 1)):
            bucket = 0
            for ch in padded[i:i + n]:
                bucket = (bucket * 1_000_003 + ord(ch)) % 2_147_483_647
            out[row, bucket % dim] += 1
    return torch.nn.functional.normalize(out, dim=-1)


def dra_weights(embeddings: torch.Tensor, num_generations: int) -> torch.Tensor:
    r"""DRA-GRPO's diversity weight of each completion, from its group's embeddings.

    Textbook form (one group of G unit vectors ``E``)::

        S = E @ E.T                          # cosine similarities, S[i, i] = 1
        w = 1 / S.sum(-1)                    # = 1 / (1 + SMI({o_i}, group minus o_i))

    ``embeddings`` is (N, D) with the G completions of each prompt consecutive; returns (N,)
    weights in (0, 1] that multiply the rewards before the group advantage. Negative
    similarities are clamped to 0 (a lab choice: the sum stays >= 1). Checks: orthogonal
    completions keep weight 1; G identical ones get 1/G; two identical in an otherwise orthogonal
    group get 1/2 each.
    """
    n, _ = embeddings.shape
    if n % num_generations:
        raise ValueError(f"{n} embeddings do not split into groups of {num_generations}")
    e = torch.nn.functional.normalize(embeddings.float(), dim=-1).view(-1, num_generations,
                                                                       embeddings.shape[-1])
    similarity = (e @ e.transpose(1, 2)).clamp(min=0)
    return (1 / similarity.sum(-1)).reshape(-1)


# ---- token filters: top-entropy, Clip-Cov, KL-Cov -------------------------------------------------
def top_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, quantile: float) -> torch.Tensor:
    r"""Bool (B, T): the valid tokens whose entropy reaches the :math:`(1-\rho)`-quantile of all
    valid tokens' entropies, :math:`\rho` = ``quantile`` (arXiv 2506.01939 keeps the top 20%,
    ``quantile=0.2``; 1.0 keeps every token). The others keep their place in the normalisers but
    give no gradient."""
    if not 0 < quantile <= 1:
        raise ValueError(f"quantile must lie in (0, 1], got {quantile}")
    m = mask.bool()
    if quantile == 1 or not m.any():
        return m
    threshold = torch.quantile(entropy[m].float(), 1 - quantile)
    return m & (entropy >= threshold)


def covariance(logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    r"""Per-token centred product :math:`(A_t - \bar A)(\log\pi_t - \overline{\log\pi})` over
    the valid tokens, detached; 0 on padding. Its mean is the covariance that arXiv 2505.22617
    shows drives the entropy change of a softmax policy: tokens with high probability and high
    advantage (or low and low) lower the entropy."""
    m = mask.bool()
    a = advantages.expand_as(logp).detach().float()
    lp = logp.detach().float()
    count = m.sum().clamp(min=1)
    a_mean = torch.where(m, a, 0).sum() / count
    lp_mean = torch.where(m, lp, 0).sum() / count
    return torch.where(m, (a - a_mean) * (lp - lp_mean), 0)


def clip_cov_mask(cov: torch.Tensor, mask: torch.Tensor, already_clipped: torch.Tensor,
                  ratio: float = 2e-4, low: float = 1.0, high: float = 5.0,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """Bool (B, T): the tokens Clip-Cov silences. Among valid tokens not clipped by PPO already
    and with ``low < cov < high``, ``max(1, int(ratio * valid tokens))`` are drawn at random
    (paper defaults 2e-4, 1, 5; verl's ``clip_cov_*``)."""
    m = mask.bool()
    candidates = (m & ~already_clipped.bool() & (cov > low) & (cov < high)).reshape(-1)
    chosen = torch.zeros_like(candidates)
    available = candidates.nonzero().squeeze(-1)
    if len(available):
        count = min(max(1, int(ratio * int(m.sum()))), len(available))
        pick = torch.randperm(len(available), generator=generator,
                              device=generator.device if generator is not None else "cpu")
        chosen[available[pick[:count].to(available.device)]] = True
    return chosen.view_as(m)


def kl_cov_mask(cov: torch.Tensor, mask: torch.Tensor, ratio: float = 2e-3) -> torch.Tensor:
    """Bool (B, T): the ``max(1, int(ratio * valid tokens))`` valid tokens of largest covariance,
    the ones KL-Cov penalises with ``coef * |log pi - log pi_old|`` (paper default 2e-3)."""
    m = mask.bool()
    valid = int(m.sum())
    chosen = torch.zeros_like(m)
    if valid == 0:
        return chosen
    count = min(max(1, int(ratio * valid)), valid)
    scores = torch.where(m, cov, -torch.inf).reshape(-1)
    chosen.view(-1)[scores.topk(count).indices] = True
    return chosen


def token_filters(config, logp: torch.Tensor, old_logp: torch.Tensor | None,
                  advantages: torch.Tensor, mask: torch.Tensor,
                  token_weights: torch.Tensor | None = None,
                  generator: torch.Generator | None = None):
    """What the token-level switches do to one micro-batch's loss: ``(weights, penalty,
    filtered)``, each (B, T) or None.

    ``token_weights`` is the step's top-entropy mask (or None); ``config.cov_penalty`` then adds
    Clip-Cov's silenced tokens (their weight set to 0) or KL-Cov's penalty
    ``kl_cov_coef * |log pi - log pi_old|`` on the chosen tokens, whose clip
    :func:`labkit.losses.policy_loss` must then drop. ``filtered`` (bool) marks every token the
    filters touched, for the ``tokens_masked`` metric. ``advantages`` is (B,) or (B, T);
    ``old_logp`` None means on-policy (the ratio is 1). ``(None, None, None)`` when no filter is
    on.
    """
    weights = token_weights
    if config.cov_penalty is None:
        return weights, None, None if weights is None else weights == 0
    old = logp.detach() if old_logp is None else old_logp
    advantages = advantages[:, None] if advantages.dim() == 1 else advantages
    cov = covariance(logp, advantages, mask)
    if config.cov_penalty == "kl_cov":
        chosen = kl_cov_mask(cov, mask, config.kl_cov_ratio)
        penalty = config.kl_cov_coef * (logp - old).abs() * chosen
        filtered = chosen if weights is None else chosen | (weights == 0)
        return weights, penalty, filtered
    ratio = torch.exp((logp - old).detach())
    high = 1 + (config.epsilon if config.epsilon_high is None else config.epsilon_high)
    clipped = (((advantages > 0) & (ratio > high))
               | ((advantages < 0) & (ratio < 1 - config.epsilon)))
    silenced = clip_cov_mask(cov, mask, clipped, config.clip_cov_ratio, config.clip_cov_lb,
                             config.clip_cov_ub, generator)
    keep = (~silenced).float()
    weights = keep if weights is None else weights * keep
    return weights, None, weights == 0


@config_rule
def _check_exploration(config) -> None:
    """Temperature schedules, reference moves and Clip-Cov/KL-Cov."""
    from labkit.losses import clipped_loss_types, get_loss_type

    if config.temperature_schedule != "constant" and config.temperature_final is None:
        raise ValueError(f"temperature_schedule={config.temperature_schedule!r} decays to "
                         f"temperature_final: set it (e.g. 0.7)")
    if ((config.ref_reset_every or config.ref_reset_patience or config.sync_ref_model)
            and config.beta == 0):
        raise ValueError("ref_reset_every, ref_reset_patience and sync_ref_model move the "
                         "reference model, and beta = 0 has none: set beta > 0 (ProRL keeps the "
                         "KL term)")
    if config.ref_reset_patience and not config.eval_every:
        raise ValueError("ref_reset_patience watches eval_accuracy: set eval_every > 0")
    if config.clip_cov_lb >= config.clip_cov_ub:
        raise ValueError(f"clip_cov_lb ({config.clip_cov_lb}) must be below clip_cov_ub "
                         f"({config.clip_cov_ub})")
    if config.cov_penalty is not None and not get_loss_type(config.loss_type).clipped:
        raise ValueError(f"cov_penalty acts on PPO's clipped surrogate; loss_type="
                         f"{config.loss_type!r} is not one: use one of {clipped_loss_types()}")
