"""Per-token log-probabilities and entropies from logits, without a full-vocabulary float32 copy.

The policy-gradient losses need, for every completion token ``y_t`` of every sequence,

    log pi(y_t | s_t) = z_t[y_t] - logsumexp(z_t),        z_t = logits_t / temperature
    H_t               = logsumexp(z_t) - sum_v softmax(z_t)_v * z_t[v]      (nats)

The naive ``log_softmax(logits.float(), -1).gather(...)`` materialises a (B, T, V) float32 tensor
and autograd keeps it alive until backward: for a 150k vocabulary and 16k tokens that is ~10 GB.
Here the rows are processed in chunks, in a custom ``autograd.Function`` whose backward recomputes
the softmax chunk by chunk, so the extra memory is one chunk of float32 in both directions (the
gradient w.r.t. the logits is of course full size, in the logits' dtype).

Conventions and where this departs from TRL:

* ``logits`` must already be aligned with ``tokens`` (the caller drops the last position and the
  prompt, exactly as TRL's ``_get_per_token_logps_and_entropies`` does with ``logits_to_keep``).
* Arithmetic is done in float32 (float64 if the logits are float64, which the tests use for exact
  comparisons), even for bf16 logits; outputs have that dtype.
* The same ``temperature`` as sampling divides the logits (TRL, verl); top-p/top-k are not applied
  to the training distribution, as in TRL.
* Both outputs are differentiable (first order only; double backward is not supported). TRL
  computes the entropy without gradient unless its entropy bonus is on; here the caller decides by
  simply not back-propagating through it.
"""

from __future__ import annotations

import torch

__all__ = ["check_logprob_inputs", "logprobs_and_entropy", "token_entropy", "token_logprobs",
           "whole_logprobs_and_entropy"]

# Float elements per chunk: 2**24 float32 values = 64 MiB (about 110 rows of a 150k vocabulary).
_CHUNK_ELEMENTS = 2**24


def _compute_dtype(logits: torch.Tensor) -> torch.dtype:
    # float32 for bf16/fp16/fp32 logits; float64 stays float64 so tests can compare exactly.
    return torch.promote_types(logits.dtype, torch.float32)


def _row_reader(logits: torch.Tensor):
    """Return ``read(start, end) -> (end-start, V)`` over the flattened (B*T) rows of ``logits``.

    A contiguous tensor is viewed without copying. A strided one (e.g. ``logits[:, :-1]`` of a
    longer tensor) cannot be flattened without copying everything, so rows are gathered one chunk
    at a time instead.
    """
    b, t, v = logits.shape
    try:
        flat = logits.view(b * t, v)
        return lambda start, end: flat[start:end]
    except RuntimeError:

        def read(start: int, end: int) -> torch.Tensor:
            idx = torch.arange(start, end, device=logits.device)
            return logits[idx // t, idx % t]

        return read


class _ChunkedLogprobEntropy(torch.autograd.Function):
    """Chunked selected log-softmax (+ entropy) with a recomputing backward.

    Backward, per row with p = softmax(z), log p = z - lse, one-hot e_y and temperature tau:
        d logp_y / dz = e_y - p
        d H      / dz = -p * (log p + H)
        d / dlogits   = (d / dz) / tau
    """

    @staticmethod
    def forward(ctx, logits, tokens, temperature, chunk_size, with_entropy):
        b, t, _ = logits.shape
        n = b * t
        dtype = _compute_dtype(logits)
        flat_tokens = tokens.reshape(n)
        read = _row_reader(logits)
        logp = torch.empty(n, dtype=dtype, device=logits.device)
        lse = torch.empty(n, dtype=dtype, device=logits.device)
        entropy = torch.empty(n if with_entropy else 0, dtype=dtype, device=logits.device)
        for start in range(0, n, chunk_size):
            end = min(start + chunk_size, n)
            z = read(start, end).to(dtype) / temperature
            lse[start:end] = torch.logsumexp(z, dim=-1)
            logp[start:end] = (
                z.gather(-1, flat_tokens[start:end, None]).squeeze(-1) - lse[start:end]
            )
            if with_entropy:
                p = torch.exp(z - lse[start:end, None])
                entropy[start:end] = lse[start:end] - (p * z).sum(-1)
        ctx.save_for_backward(logits, flat_tokens, lse, entropy)
        ctx.temperature, ctx.chunk_size, ctx.with_entropy = temperature, chunk_size, with_entropy
        return logp.view(b, t), entropy.view(b, t) if with_entropy else entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        logits, flat_tokens, lse, entropy = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None
        b, t, v = logits.shape
        n = b * t
        dtype = lse.dtype
        read = _row_reader(logits)
        grad_logits = torch.empty((b, t, v), dtype=logits.dtype, device=logits.device)
        flat_grad = grad_logits.view(n, v)
        g_lp = grad_logp.reshape(n).to(dtype)
        g_h = grad_entropy.reshape(n).to(dtype) if ctx.with_entropy else None
        for start in range(0, n, ctx.chunk_size):
            end = min(start + ctx.chunk_size, n)
            # In-place updates keep two chunk-sized float buffers alive (z, then p), not six.
            logp_all = (read(start, end).to(dtype) / ctx.temperature).sub_(lse[start:end, None])
            p = logp_all.exp()
            if g_h is None:
                coef = g_lp[start:end, None]
            else:
                coef = logp_all.add_(entropy[start:end, None]).mul_(g_h[start:end, None])
                coef.add_(g_lp[start:end, None])
            grad_z = p.mul_(coef).neg_()
            grad_z.scatter_add_(-1, flat_tokens[start:end, None], g_lp[start:end, None])
            flat_grad[start:end] = grad_z.div_(ctx.temperature)
        return grad_logits, None, None, None, None


def check_logprob_inputs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float,
                         check_tokens: bool = True) -> None:
    """The checks of :func:`logprobs_and_entropy` (its ``Raises``), shared with the trainer's
    compiled path (:mod:`labkit.training.compiled`), which runs them before its compiled call."""
    if logits.dim() != 3:
        raise ValueError(f"logits must have shape (B, T, V), got {tuple(logits.shape)}")
    if tokens.shape != logits.shape[:2]:
        raise ValueError(
            f"tokens must have shape (B, T) = {tuple(logits.shape[:2])} to match logits, "
            f"got {tuple(tokens.shape)}"
        )
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        raise ValueError(f"tokens must be an integer tensor, got {tokens.dtype}")
    if not (temperature > 0 and temperature < float("inf")):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature}")
    vocab = logits.shape[-1]
    if check_tokens and tokens.numel() > 0:
        lo, hi = torch.aminmax(tokens)
        lo, hi = int(lo), int(hi)
        if lo < 0 or hi >= vocab:
            raise ValueError(
                f"tokens must lie in [0, V) = [0, {vocab}); got values in [{lo}, {hi}]. "
                "Replace padding ids such as -100 by the pad token id and mask those positions."
            )


def whole_logprobs_and_entropy(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`logprobs_and_entropy`'s values as one expression over the whole vocabulary, for
    ``torch.compile`` (:mod:`labkit.training.compiled`), on checked inputs.

    Run eagerly, this would hold the float32 (B, T, V) copy the chunked function avoids.
    Compiled, Inductor fuses it into per-row reductions, and its backward keeps what the chunked
    one keeps: the logits and a few (B, T) statistics (``tests/test_compile.py`` checks what
    autograd saves). Values differ from the chunked function's by float rounding only.
    """
    z = logits.to(_compute_dtype(logits)) / temperature
    lse = torch.logsumexp(z, dim=-1)
    logp = z.gather(-1, tokens[..., None]).squeeze(-1) - lse
    entropy = lse - (torch.softmax(z, dim=-1) * z).sum(-1)
    return logp, entropy


def logprobs_and_entropy(
    logits: torch.Tensor,
    tokens: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = True,
    chunk_size: int | None = None,
    check_tokens: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""Log-probability of each chosen token and the entropy of each next-token distribution.

    Textbook form::

        logp_all = torch.log_softmax(logits.float() / temperature, -1)
        logp = logp_all.gather(-1, tokens[..., None]).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)

    The code below does the same in chunks, so a 151k vocabulary never materialises a float32
    copy of all logits at once.

    .. math::
        z_t = \mathrm{logits}_t/\tau,\qquad
        \log\pi(y_t\mid s_t) = z_t[y_t]-\operatorname{logsumexp}(z_t),\qquad
        H_t = \operatorname{logsumexp}(z_t)-\textstyle\sum_v \mathrm{softmax}(z_t)_v\, z_t[v]

    =================  ===========  ===================================================
    argument / result  shape        meaning
    =================  ===========  ===================================================
    ``logits``         (B, T, V)    any float dtype; aligned with ``tokens`` (caller shifts)
    ``tokens``         (B, T)       integer ids in ``[0, V)``; padding may hold any valid id
    returns ``logp``   (B, T)       float32 (float64 for float64 logits), differentiable
    returns ``H``      (B, T)       same dtype, nats, differentiable; ``None`` if not asked
    =================  ===========  ===================================================

    Args:
        temperature: the sampling temperature (> 0). Use the one the rollout sampled with, or the
            ratio to the behaviour policy is not 1 on-policy.
        with_entropy: compute ``H`` in the same pass (costs one extra softmax per chunk).
        chunk_size: rows of (B*T) per chunk; default keeps a chunk near 2**24 float32 elements.
        check_tokens: refuse tokens outside ``[0, V)``. The check reads two numbers back from
            the device (a GPU sync); the trainer, whose tokens are the sampler's, skips it.

    Edge cases: padded positions get a finite value (mask them out downstream); a temperature
    different from 1 scales logits before the softmax, so ``logp`` is that of the tempered policy.
    Raises ``ValueError`` for wrong ranks/shapes, non-integer or out-of-range tokens, a
    non-positive temperature or chunk size.
    """
    check_logprob_inputs(logits, tokens, temperature, check_tokens)
    if chunk_size is None:
        chunk_size = max(1, _CHUNK_ELEMENTS // max(logits.shape[-1], 1))
    if int(chunk_size) < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size}")
    logp, entropy = _ChunkedLogprobEntropy.apply(
        logits, tokens.long(), float(temperature), int(chunk_size), bool(with_entropy)
    )
    return logp, entropy if with_entropy else None


def token_logprobs(
    logits: torch.Tensor,
    tokens: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int | None = None,
    check_tokens: bool = True,
) -> torch.Tensor:
    r"""``log pi(y_t | s_t)`` for each token: :func:`logprobs_and_entropy` without the entropy.

    ======== ========= ===========================
    name     shape     meaning
    ======== ========= ===========================
    logits   (B, T, V) aligned with ``tokens``
    tokens   (B, T)    ids in ``[0, V)``
    returns  (B, T)    float32 log-probabilities
    ======== ========= ===========================

    Equal (up to float rounding) to ``log_softmax(logits.float() / temperature, -1).gather(-1,
    tokens[..., None])[..., 0]`` and to TRL's ``selective_log_softmax``.
    """
    return logprobs_and_entropy(
        logits, tokens, temperature, with_entropy=False, chunk_size=chunk_size,
        check_tokens=check_tokens,
    )[0]


def token_entropy(
    logits: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> torch.Tensor:
    r"""Entropy ``H_t = -sum_v p_v log p_v`` (nats) of each tempered next-token distribution.

    ======== ========= =====================
    name     shape     meaning
    ======== ========= =====================
    logits   (B, T, V) any float dtype
    returns  (B, T)    float32 entropies >= 0
    ======== ========= =====================

    Equal to TRL's ``entropy_from_logits(logits / temperature)``; differentiable.
    """
    tokens = torch.zeros(logits.shape[:-1], dtype=torch.long, device=logits.device)
    return logprobs_and_entropy(
        logits, tokens, temperature, with_entropy=True, chunk_size=chunk_size
    )[1]
