"""Token in, token out: why an RL trainer keeps the ids the policy sampled.

A policy samples token ids, one at a time, from the whole vocabulary. A byte-pair tokenizer (BPE)
can write most texts in many ways ("220" as ``2|20``, ``22|0`` or ``2|2|0``) but encodes each text
in one way, its canonical split. A sampler is not bound to that split: the model may emit ``22``
then ``0``. A trainer that keeps only the decoded text and encodes it again (to append a tool's
reply, say) gets back the canonical ids, which are not the ids the policy sampled: the log-probs it
then computes, the ratio of PPO/GRPO and the loss mask all belong to a sequence nobody sampled,
often of another length. TRL's multi-turn GRPO loop had this bug and was fixed by concatenating ids
instead of re-rendering text (huggingface/trl issue 5224); vLLM returns the sampled ids through its
OpenAI-compatible server for the same reason ("retokenization drift", vLLM blog, 2025-10-22), and
rLLM (which traced KL spikes to it, rllm-org/rllm pull request 272), SkyRL and slime moved their
agent loops to token-in/token-out.
labkit's episode loop never re-encodes what the policy wrote (:mod:`labkit.agents.episodes`
continues sampling from ids, and the action mask is recorded at sampling time).

The tiny Qwen's tokenizer hides the problem: one token per character plus a few tag tokens, so a
decoded episode encodes back to the same ids (unless the policy spelt a tag out character by
character). These functions build a small BPE offline on the
lab's own text and measure the drift on it: :func:`train_bpe` (deterministic), :func:`lab_texts`
(the corpus), :func:`resplit` (a canonical sequence rewritten with some tokens split into smaller
vocabulary tokens, as a sampler may emit them), :func:`round_trip` (decode, then encode) and
:func:`drift_rows` (how often the round trip changes the ids).
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from labkit.agents.calculator import calculator_demonstration
from labkit.tasks.solutions import worked_solution


def train_bpe(texts: Iterable[str], merges: int = 300) -> Tokenizer:
    """A byte-level BPE (GPT-2's pre-tokenizer, as Qwen's) with at most ``merges`` merges on top of
    the 256 byte symbols, trained on ``texts``. Deterministic: the trainer breaks ties between
    equally frequent pairs by the pair's ids, which follow the sorted alphabet."""
    if isinstance(merges, bool) or not isinstance(merges, int) or merges < 1:
        raise ValueError(f"train_bpe: merges must be an integer >= 1, got {merges!r}")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=len(alphabet) + merges, initial_alphabet=alphabet,
                                  show_progress=False)
    tokenizer.train_from_iterator(list(texts), trainer)
    return tokenizer


def lab_texts(rows) -> list[str]:
    """What the policy of notebook 10 writes, from task-suite ``rows``: each question with its
    worked solution, and the calculator demonstration's turns (the tool call, then the answer)."""
    texts = []
    for row in rows:
        texts.append(row["question"] + worked_solution(row))
        texts.append("".join(turn for turn, _ in calculator_demonstration(row, use_tool=True)))
    return texts


def _checked_ids(tokenizer: Tokenizer, ids) -> list[int]:
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    ids = [int(i) for i in ids]
    bad = [i for i in ids if not 0 <= i < size]
    if bad:
        raise ValueError(f"ids: {bad[:5]} are not token ids of this tokenizer (0 to {size - 1})")
    return ids


def _random_split(piece: str, vocab: dict, rng: random.Random) -> list[int] | None:
    """``piece`` written as two or more vocabulary tokens, left to right, each cut chosen uniformly
    among the tokens that fit; None when no such split exists."""
    ids, start = [], 0
    while start < len(piece):
        ends = [end for end in range(start + 1, len(piece) + 1)
                if piece[start:end] in vocab and (start, end) != (0, len(piece))]
        if not ends:
            return None
        end = rng.choice(ends)
        ids.append(vocab[piece[start:end]])
        start = end
    return ids


def resplit(tokenizer: Tokenizer, ids, rate: float, rng: random.Random) -> list[int]:
    """``ids`` with each token of two or more symbols replaced, with probability ``rate``, by a
    random split of it into smaller tokens of the vocabulary: the same text, ids a sampler may emit
    that the tokenizer would not (its canonical split). ``rate`` 0 returns ``ids`` unchanged."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1:
        raise ValueError(f"resplit: rate must be a probability in [0, 1], got {rate!r}")
    vocab = tokenizer.get_vocab(with_added_tokens=False)
    out = []
    for token_id in _checked_ids(tokenizer, ids):
        piece = tokenizer.id_to_token(token_id)
        split = _random_split(piece, vocab, rng) if rng.random() < rate else None
        out += split if split is not None else [token_id]
    return out


def round_trip(tokenizer: Tokenizer, ids) -> list[int]:
    """Decode ``ids`` to text and encode the text again: the ids a text-based trainer would score."""
    text = tokenizer.decode(_checked_ids(tokenizer, ids), skip_special_tokens=False)
    return tokenizer.encode(text, add_special_tokens=False).ids


def drift_rows(tokenizer: Tokenizer, texts: Iterable[str], rates=(0.0, 0.01, 0.1),
               seed: int = 0) -> list[dict]:
    """For each ``rate``: every text encoded, re-split at that rate (:func:`resplit`, seeded),
    then round-tripped; one row per rate with the sequences, how many came back with other ids,
    and the mean length sampled and re-encoded."""
    texts = list(texts)
    if not texts:
        raise ValueError("drift_rows: texts is empty; give at least one text")
    rows = []
    for rate in rates:
        rng = random.Random(f"resplit-{seed}-{rate}")
        changed = sampled_tokens = encoded_tokens = 0
        for text in texts:
            sampled = resplit(tokenizer, tokenizer.encode(text, add_special_tokens=False).ids,
                              rate, rng)
            encoded = round_trip(tokenizer, sampled)
            changed += encoded != sampled
            sampled_tokens += len(sampled)
            encoded_tokens += len(encoded)
        rows.append({"split rate": rate, "sequences": len(texts), "ids changed": changed,
                     "tokens sampled": sampled_tokens / len(texts),
                     "tokens re-encoded": encoded_tokens / len(texts)})
    return rows
