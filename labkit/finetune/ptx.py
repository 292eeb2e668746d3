"""PTX loss: a supervised term on warm-start data mixed into the RL loss.

InstructGPT (arXiv 2203.02155, section 3.5, eq. 2) adds to its PPO objective a
log-likelihood term on pretraining data, weighted by a coefficient gamma, to stop RL from
eroding what the model could already do ("alignment tax"); Kimi K2 (arXiv 2507.20534, section
3.2.3, "PTX loss") does the same with a curated set of high-quality samples. As a loss:

.. math:: L = L_{RL} + \\gamma \\cdot \\mathrm{NLL}_{D_{ptx}}

with the NLL the token mean of the next-token cross-entropy over the completion tokens of a
batch drawn from :math:`D_{ptx}` each optimizer step. Neither paper publishes the gamma or the
mixing ratio it used for reasoning RL; the lab's default ``ptx_coef`` is 0 (off).

Where the lab departs from the papers: :math:`D_{ptx}` is the tiny Qwen's own warm-start
distribution (:func:`labkit.tasks.sft_examples`, the solution styles of
:data:`labkit.tasks.WARM_START_STYLE_WEIGHTS`, every family and difficulty, never an eval question),
not pretraining text; that is the data whose skills the RL run on a few cells may erode.
The term is computed at temperature 1 on its own forward, so it is independent of the rollouts.

=============== ======== ===================================================================
tensor          shape    meaning (:func:`ptx_nll`, N examples, T = longest)
=============== ======== ===================================================================
input_ids       (N, T)   chat-rendered question + solution + end-of-turn (:func:`labkit.finetune.sft.encode_sft`)
labels          (N, T)   the ids on solution tokens, -100 on the prompt and the padding
nll             ()       mean cross-entropy over the solution tokens of the batch (nats)
=============== ======== ===================================================================

Properties (tests/test_ptx.py): ``ptx_coef = 0`` leaves the trainer's update untouched; with the
RL term silent (zero advantages, no KL) the update's gradient is ``ptx_coef`` times the SFT
gradient of the same batch.
"""

from __future__ import annotations

import torch

from labkit.finetune.sft import encode_sft

__all__ = ["PTXData", "ptx_nll"]


def ptx_nll(model, tokenizer, examples, *, max_len: int = 256) -> torch.Tensor:
    """Token-mean negative log-likelihood (nats) of the examples' completions under ``model``.

    ``examples`` are dicts with ``prompt`` and ``completion`` (:mod:`labkit.finetune.sft`'s format). The
    prompt tokens are masked out of the loss; the result carries the graph for ``backward``.
    """
    device = next(model.parameters()).device
    ids, mask, labels = (t.to(device) for t in encode_sft(tokenizer, examples, max_len))
    return model(input_ids=ids, attention_mask=mask, labels=labels).loss


class PTXData:
    """A fixed pool of warm-start examples and a seeded draw of a batch per optimizer step.

    The pool (``pool_size`` examples of :func:`labkit.tasks.sft_examples`, seeded) is built
    once; :meth:`batch` draws ``batch_size`` of them without replacement from a generator seeded
    by ``(seed, optimizer_step)``, so a resumed run draws the batches an uninterrupted one would.
    ``examples`` replaces the pool with your own list of ``{"prompt", "completion"}`` dicts.
    """

    def __init__(self, batch_size: int, seed: int = 0, pool_size: int = 4096,
                 examples=None):
        from labkit.tasks import WARM_START_STYLE_WEIGHTS, sft_examples

        if examples is None:
            examples = sft_examples(pool_size, seed=seed, style_weights=WARM_START_STYLE_WEIGHTS)
        self.examples = list(examples)
        if not self.examples:
            raise ValueError("PTX data is empty: give at least one {'prompt', 'completion'} dict")
        for i, ex in enumerate(self.examples[:64]):
            if not isinstance(ex, dict) or "prompt" not in ex or "completion" not in ex:
                raise ValueError(f"PTX example {i} must be a dict with 'prompt' and 'completion', "
                                 f"got {ex!r}")
        self.batch_size = min(int(batch_size), len(self.examples))
        self.seed = int(seed)

    def batch(self, optimizer_step: int) -> list[dict]:
        """The examples of one optimizer step (the same for the same seed and step)."""
        generator = torch.Generator().manual_seed(self.seed * 1_000_033 + int(optimizer_step))
        picks = torch.randperm(len(self.examples), generator=generator)[: self.batch_size]
        return [self.examples[i] for i in picks.tolist()]
