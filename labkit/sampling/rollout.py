"""What a sampling call returns (:class:`Rollout`), and what every call does to its prompts
first: render and encode them (:func:`encode_prompts`) and check that they leave room for the
completion in the model's context (:func:`check_context`: every caller that samples, evaluation,
rejection sampling, the trainer and episodes, goes through it)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Rollout:
    """The result of :func:`labkit.sampling.generate`. ``B`` = number of prompts x ``num_generations``.

    ============== ============ ==========================================================
    field          shape        meaning
    ============== ============ ==========================================================
    prompt_ids     (B, P) long  left-padded prompt tokens (chat template applied)
    prompt_mask    (B, P) long  1 on real prompt tokens
    completion_ids (B, L) long  right-padded sampled tokens, the end-of-turn token included
    completion_mask(B, L) long  1 on sampled tokens up to and including end-of-turn
    logprobs       (B, L) float sampling log-probs (0 on padding); float32
    entropies      (B, L) float entropy (nats) of each sampling distribution, before top-k/top-p
                                (0 on padding): the exploration metrics and the top-entropy
                                token filter read it
    lengths        (B,) long    completion_mask.sum(-1)
    truncated      (B,) bool    True when no end-of-turn token came within the budget
    texts          list[str]    decoded completions without the end-of-turn token
    ============== ============ ==========================================================
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    logprobs: torch.Tensor
    entropies: torch.Tensor
    lengths: torch.Tensor
    truncated: torch.Tensor
    texts: list[str]


def prompt_text(tokenizer, prompt) -> str:
    """Render one prompt: a list of chat messages goes through the chat template (with the
    assistant header appended); a plain string is used as it is.

    A message whose content holds one of the tokenizer's special tokens (``<|im_start|>``...)
    is refused: the tokenizer would turn that text into a real control token, letting data open
    a forged turn of the conversation (see :mod:`labkit.training.data`).
    """
    if isinstance(prompt, str):
        return prompt
    specials = [t for t in tokenizer.all_special_tokens if t]
    for message in prompt:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            found = next((t for t in specials if t in content), None)
            if found:
                raise ValueError(f"a {message.get('role', '?')} message contains {found!r}, a "
                                 f"chat-control token of this tokenizer; as text it would "
                                 f"become the real token and change the conversation's "
                                 f"structure. Remove it from the data: {content[:80]!r}")
    return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)


def encode_prompts(tokenizer, prompts, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokenize and left-pad a list of prompts; returns ``(ids, mask)`` of shape (N, P)."""
    texts = [prompt_text(tokenizer, p) for p in prompts]
    enc = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left",
                    add_special_tokens=False)
    return enc["input_ids"].to(device), enc["attention_mask"].to(device)


class ContextLengthError(ValueError):
    """A prompt plus ``max_completion_length`` does not fit in the model's positions. ``row`` is
    the prompt's row in the call (before the ``num_generations`` copies)."""

    def __init__(self, message: str, row: int):
        super().__init__(message)
        self.row = row


def check_context(model, prompt_mask: torch.Tensor, max_completion_length: int) -> None:
    """Refuse prompts that leave no room for ``max_completion_length`` tokens within the model's
    ``max_position_embeddings``: past them the positions were never trained, and the completions
    would be scored (often 0) as if nothing were wrong. Raises :class:`ContextLengthError`."""
    config = model.config.get_text_config(decoder=True) if hasattr(
        model.config, "get_text_config") else model.config
    context = getattr(config, "max_position_embeddings", None)
    if context is None or prompt_mask.numel() == 0:
        return
    prompt_lengths = prompt_mask.sum(-1)
    row = int(prompt_lengths.argmax())
    longest = int(prompt_lengths[row])
    if longest + max_completion_length > context:
        raise ContextLengthError(
            f"a prompt of {longest} tokens (row {row} of the call) with max_completion_length="
            f"{max_completion_length} exceeds the model's context of {context} positions "
            f"(max_position_embeddings); shorten the prompt or lower max_completion_length to "
            f"at most {max(context - longest, 0)}", row)


def assemble_rollout(tokenizer, prompt_ids, prompt_mask, tokens, logps, entropies, finished_at,
             max_completion_length: int) -> Rollout:
    """The :class:`Rollout` of a decode loop's output (tokens, log-probs and entropies (B, L), the
    step each row finished at, -1 when truncated), trimmed to the longest completion."""
    eos_id, pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    device = tokens.device
    truncated = finished_at < 0
    lengths = torch.where(truncated, max_completion_length, finished_at + 1)
    steps = torch.arange(max_completion_length, device=device)
    completion_mask = (steps[None, :] < lengths[:, None]).long()
    # trim columns no row used
    width = int(lengths.max())
    completion_ids = tokens[:, :width].masked_fill(completion_mask[:, :width] == 0, pad_id)
    completion_mask = completion_mask[:, :width]
    logps = logps[:, :width] * completion_mask
    entropies = entropies[:, :width] * completion_mask
    texts = tokenizer.batch_decode(
        completion_ids.masked_fill(completion_ids == eos_id, pad_id), skip_special_tokens=False
    )
    pad_tok = tokenizer.pad_token
    texts = [t.replace(pad_tok, "") for t in texts]
    return Rollout(prompt_ids, prompt_mask, completion_ids, completion_mask, logps, entropies,
                   lengths, truncated, texts)


def with_demonstrations(rollout: Rollout, tokenizer, demonstrations: list[str],
                        num_generations: int) -> Rollout:
    """The rollout with the last completion of each group replaced by an external demonstration
    (RL-PLUS, arXiv 2508.00222): ``demonstrations[p]`` is prompt p's text (without the
    end-of-turn token, which is appended). The demonstrations' sampling log-probs and entropies
    are unknown and set to 0; the trainer scores them with the old policy before the update.
    A demonstration longer than the widest completion widens the tensors (it is never cut)."""
    eos_id, pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    encoded = [tokenizer(text, add_special_tokens=False)["input_ids"] + [eos_id]
               for text in demonstrations]
    rows = [p * num_generations + num_generations - 1 for p in range(len(demonstrations))]
    width = max(rollout.completion_ids.size(1), *(len(ids) for ids in encoded))

    def widened(tensor, fill):
        extra = width - tensor.size(1)
        if extra == 0:
            return tensor.clone()
        return torch.cat([tensor, tensor.new_full((tensor.size(0), extra), fill)], dim=1)

    ids, mask = widened(rollout.completion_ids, pad_id), widened(rollout.completion_mask, 0)
    logps, entropies = widened(rollout.logprobs, 0.0), widened(rollout.entropies, 0.0)
    lengths, truncated, texts = rollout.lengths.clone(), rollout.truncated.clone(), \
        list(rollout.texts)
    for row, tokens, text in zip(rows, encoded, demonstrations):
        ids[row] = pad_id
        ids[row, :len(tokens)] = torch.tensor(tokens, device=ids.device)
        mask[row] = 0
        mask[row, :len(tokens)] = 1
        logps[row] = 0.0
        entropies[row] = 0.0
        lengths[row], truncated[row], texts[row] = len(tokens), False, text
    return Rollout(rollout.prompt_ids, rollout.prompt_mask, ids, mask, logps, entropies, lengths,
                   truncated, texts)


__all__ = ["ContextLengthError", "Rollout", "assemble_rollout", "check_context", "encode_prompts",
           "prompt_text", "with_demonstrations"]
