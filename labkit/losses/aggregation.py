"""Aggregation: how a per-token loss becomes the scalar that is back-propagated.

Each loss type names one of :data:`AGGREGATIONS` when it registers (TRL fixes the aggregation by
``loss_type`` too). With :math:`m` the mask, :math:`|o_i|=\\sum_t m_{i,t}`, :math:`N_{seq}` =
``num_sequences_in_batch`` and :math:`N_{tok}` = ``num_items_in_batch``:

===================  ==========================================================  ==================
aggregation          formula                                                     per-token weight
===================  ==========================================================  ==================
``sequence_mean``    :math:`\\frac1{N_{seq}}\\sum_i\\frac1{|o_i|}\\sum_t m\\ell`         1/(N_seq |o_i|)
``local_token_mean`` :math:`\\frac{B}{N_{seq}}\\cdot\\frac{\\sum m\\ell}{\\sum m}`         local token mean
``fixed_length``     :math:`\\frac{1}{N_{seq}L_{max}}\\sum_{i,t} m\\ell`                1/(N_seq L_max)
``token_mean``       :math:`\\frac{1}{N_{tok}}\\sum_{i,t} m\\ell`                       1/N_tok
``sequence_sum``     :math:`\\frac1{N_{seq}}\\sum_{i,t} m\\ell`                         1/N_seq
===================  ==========================================================  ==================

``local_token_mean`` (TRL's ``bnpo``) is the one whose value depends on which rows share a
micro-batch; the trainer keeps TRL's plain micro-batch split for it (:data:`LOCAL_AGGREGATIONS`).
"""

from __future__ import annotations

import torch


def _sequence_mean(total, m, n_seq, n_tok, max_completion_length):
    return (total.sum(-1) / m.sum(-1).clamp(min=1)).sum() / n_seq


def _local_token_mean(total, m, n_seq, n_tok, max_completion_length):
    return total.sum() / m.sum().clamp(min=1) * (m.shape[0] / n_seq)


def _fixed_length(total, m, n_seq, n_tok, max_completion_length):
    return total.sum() / (n_seq * max_completion_length)


def _token_mean(total, m, n_seq, n_tok, max_completion_length):
    n_tok = m.sum() if n_tok is None else torch.as_tensor(n_tok, device=total.device)
    return total.sum() / n_tok.clamp(min=1)


def _sequence_sum(total, m, n_seq, n_tok, max_completion_length):
    return total.sum() / n_seq


#: name -> reduction ``(masked per-token loss, bool mask, N_seq, N_tok, L_max) -> scalar``.
AGGREGATIONS = {
    "sequence_mean": _sequence_mean,
    "local_token_mean": _local_token_mean,
    "fixed_length": _fixed_length,
    "token_mean": _token_mean,
    "sequence_sum": _sequence_sum,
}
#: Aggregations whose value depends on how a batch is cut into micro-batches.
LOCAL_AGGREGATIONS = ("local_token_mean",)


def aggregate(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    aggregation: str,
    max_completion_length: int | None = None,
    num_items_in_batch: int | torch.Tensor | None = None,
    num_sequences_in_batch: int | None = None,
) -> torch.Tensor:
    r"""Reduce a per-token loss to a scalar with ``aggregation``, one of :data:`AGGREGATIONS`.

    A loss type's aggregation is ``labkit.losses.get_loss_type(name).aggregation``
    (:func:`labkit.losses.policy_loss` looks it up; this function knows no loss type, so the loss
    table can name the aggregations without the two modules importing each other).

    Textbook form (GRPO's ``"sequence_mean"``: mean per sequence, then over sequences)::

        m = mask.float()
        return ((per_token_loss * m).sum(-1) / m.sum(-1)).mean()

    The loss types and their aggregations (the module docstring has the formulas): grpo and
    sapo ``sequence_mean``; bnpo ``local_token_mean``; dr_grpo and rlplus ``fixed_length``; dapo,
    cispo and vespo ``token_mean``; sequence_sum ``sequence_sum``.

    ==========================  ==========  ======================================================
    name                        shape       meaning
    ==========================  ==========  ======================================================
    ``per_token_loss``          (B, T) or   from a surrogate (+ beta * KL); (B, 1) is broadcast
                                (B, 1)      over the mask (sequence-level GSPO)
    ``mask``                    (B, T)      response mask of this micro-batch
    ``aggregation``             str         a key of :data:`AGGREGATIONS`
    ``max_completion_length``   int         L_max, required by ``fixed_length`` (dr_grpo)
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
    still count in :math:`N_{seq}` (TRL; verl leaves them out, see ``docs/conventions.md``); an
    all-empty mask, and an empty batch, give 0, never NaN. Sequence-level ratios with a
    token-weighted aggregation weight each sequence by its length (TRL warns about this); use
    ``grpo`` for the paper's GSPO.
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {tuple(AGGREGATIONS)}, got {aggregation!r} "
                         f"(a loss type's is labkit.losses.get_loss_type(name).aggregation)")
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
    if aggregation == "fixed_length" and (max_completion_length is None
                                          or not max_completion_length > 0):
        raise ValueError(f"aggregation={aggregation!r} needs max_completion_length > 0, got "
                         f"{max_completion_length}")
    m = mask.bool()
    total = torch.where(m, per_token_loss.expand(m.shape), 0)
    n_seq = max(n_seq, 1)  # an empty batch sums to 0: 0 / 1, not 0 / 0
    return AGGREGATIONS[aggregation](total, m, n_seq, num_items_in_batch, max_completion_length)
