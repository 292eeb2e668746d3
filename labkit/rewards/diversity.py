"""DRA-GRPO (arXiv 2505.09655): rewards of near-duplicate completions discounted by their
similarity to the rest of the group (``diversity_adjustment``).

Where the lab chooses: DRA's similarity is a character n-gram cosine by default, not a sentence
embedder (there is none offline, and on the lab's short arithmetic completions surface overlap is
what separates duplicates), with the policy's own mean hidden state as the alternative.
"""

from __future__ import annotations

import torch

#: ``diversity_adjustment`` values: the similarity DRA-GRPO measures.
DIVERSITY_SIMILARITIES = ("ngram", "hidden")


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
