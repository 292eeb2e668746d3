"""One sampling step over a batch of logits: which tokens may be drawn (top-k, top-p), the drawn
token, and its log-prob and entropy under the temperature-scaled full softmax.

Randomness. Sampling draws ``multinomial(probs, 1)``, which torch computes as
``argmax(probs / q)`` with ``q ~ Exp(1)`` drawn from the generator, one number per vocabulary
entry of each row it samples. The dynamic loop (:mod:`labkit.sampling.dynamic`) calls
``multinomial`` on its live rows; the fixed loop (:mod:`labkit.sampling.fixed`) draws the
Exp(1) noise itself (:func:`exponential_noise`) so that it can keep finished rows in the batch:

* on the CPU (:func:`draws_live_rows_only`) it reads the number of live rows (free: there is no
  device to wait for), draws exactly that many rows of Exp(1) and hands them to the live rows in
  order. The CPU generator yields the same numbers for one draw of n as for the first n of a
  longer draw, so every step sees the dynamic loop's numbers: the same tokens, and the
  generator ends in the same state (``tests/test_rollout_fixed.py`` checks both, and that
  drawing for every row would diverge after the first row finishes);
* elsewhere (CUDA) every row draws every step, finished ones included, so no host read is
  needed. The numbers then come from another stretch of the stream (same distribution): a
  seeded GPU run is reproducible on this loop, not token for token equal to the dynamic loop's,
  which it could not be anyway (CUDA's generator hands out numbers in blocks whose size depends
  on the draw's).
"""

from __future__ import annotations

import torch


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Set logits outside the top-k / nucleus top-p set to -inf. ``logits``: (B, V)."""
    if top_k and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        # drop a token when the mass before it already reaches top_p (the first always stays)
        drop_sorted = (cum - sorted_logits.softmax(-1)) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def draws_live_rows_only(device) -> bool:
    """Whether the fixed loop draws random numbers for the live rows only, as the dynamic loop
    does (see the module docstring): on the CPU, where counting the live rows needs no device
    sync; elsewhere every row draws."""
    return torch.device(device).type == "cpu"


def exponential_noise(probs: torch.Tensor, alive: torch.Tensor, live_rows: int | None,
                      generator) -> torch.Tensor:
    """Exp(1) noise for ``argmax(probs / noise)`` (what ``torch.multinomial(probs, 1)`` computes).
    ``live_rows`` given: draw that many rows and hand them to the live rows in order, as the
    dynamic loop's draw over its live rows does; None: every row draws (no host read)."""
    if live_rows is None:
        return torch.empty_like(probs).exponential_(generator=generator)
    noise = torch.ones_like(probs)
    noise[alive] = torch.empty((live_rows, probs.size(1)), dtype=probs.dtype,
                               device=probs.device).exponential_(generator=generator)
    return noise


def sample_next(logits, *, temperature: float, top_p: float, top_k: int, greedy: bool,
                noise=None):
    """One sampling step over (B, V) float32 logits: ``(token, log-prob, entropy)`` per row.

    The log-prob and entropy are those of the temperature-scaled full softmax (see
    :mod:`labkit.sampling`); ``noise`` is the Exp(1) draw for sampling (unused when greedy).
    """
    scaled = logits if greedy else logits / temperature
    logp_all = torch.log_softmax(scaled, dim=-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1).nan_to_num(0.0)
    if greedy:
        token = scaled.argmax(-1)
    else:
        token = (filter_logits(scaled, top_k, top_p).softmax(-1) / noise).argmax(-1)
    return token, logp_all.gather(-1, token[:, None]).squeeze(-1), entropy


__all__ = ["draws_live_rows_only", "exponential_noise", "filter_logits", "sample_next"]
