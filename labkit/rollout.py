"""Batched sampling with a KV cache: prompts in, completions, masks and sampling log-probs out.

Generation usually dominates an RL step, so this is a lean loop rather than ``model.generate``:
one prefill over the left-padded prompts, then one cached forward per new token, sampling from
``softmax(logits / temperature)`` with optional top-k / top-p, stopping each row at the end-of-turn
token and the whole batch as soon as every row has stopped (or at ``max_completion_length``).
Two decode loops share the prefill (:mod:`labkit.decode` says which runs where, and why):

* the **dynamic** loop, the CPU's (here): rows that finish drop out of the batch (their cache
  entries are removed), so a batch with a few long answers does not pay full price for the short
  ones; every step has a new shape;
* the **fixed-shape** loop, a GPU's (:func:`labkit.decode.decode_fixed`): a KV cache allocated
  once, finished rows kept in place and masked, the decode step replayed as a CUDA graph. On the
  CPU it samples the same tokens from the same random numbers (``decode_path="fixed"``).

A prompt that leaves no room for ``max_completion_length`` tokens in the model's context is
refused before anything is sampled (:func:`check_context`): every caller that samples
(evaluation, rejection sampling, the trainer, episodes) goes through it.

Departures from TRL's generation path, on purpose:

* the recorded ``logprobs`` are the log-probabilities of the sampled tokens under the
  temperature-scaled **full** softmax, before top-k/top-p truncation. That is the quantity the
  training forward recomputes (``labkit.logprobs.token_logprobs`` at the same temperature), so an
  on-policy ratio is exactly 1 up to float error; vLLM's "processed" log-probs would instead
  include the truncation.
* the G samples of a prompt are consecutive rows (TRL's layout); the prompt is encoded once and
  its KV cache repeated G times (with G = 8 this cut the tiny model's sampling time by a third,
  the prefill of 128 padded rows having cost as much as the decoding).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from labkit.decode import current_settings, decode_fixed, filter_logits, plan_decoding
from labkit.models import attention_kernels
from labkit.runtime.compat import cache_kwargs


@dataclass
class Rollout:
    """The result of :func:`generate`. ``B`` = number of prompts x ``num_generations``.

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
    a forged turn of the conversation (see :mod:`labkit.engine.data`).
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


@torch.inference_mode()
def generate(
    model,
    tokenizer,
    prompts,
    *,
    num_generations: int = 1,
    max_completion_length: int = 128,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    greedy: bool = False,
    generator: torch.Generator | None = None,
    decode_path: str | None = None,
    cuda_graphs: bool | None = None,
) -> Rollout:
    """Sample ``num_generations`` completions for each prompt.

    ``prompts`` is a list of chat conversations (``[{"role": "user", "content": ...}]``) or of
    plain strings. ``generator`` makes sampling reproducible (it must live on the model's device).
    ``greedy=True`` takes the arg-max token (ReMax's baseline, deterministic evaluation).
    ``decode_path`` (``"auto"``, ``"dynamic"``, ``"fixed"``) and ``cuda_graphs`` choose the
    decode loop (:mod:`labkit.decode`); None = the enclosing
    :func:`labkit.decode.decode_settings`, else ``"auto"`` with graphs on. A prompt that leaves
    no room for ``max_completion_length`` tokens in the model's context is refused
    (:func:`check_context`).
    """
    device = next(model.parameters()).device
    prompt_ids, prompt_mask = encode_prompts(tokenizer, prompts, device)
    return generate_from_ids(model, tokenizer, prompt_ids, prompt_mask,
                             num_generations=num_generations,
                             max_completion_length=max_completion_length, temperature=temperature,
                             top_p=top_p, top_k=top_k, greedy=greedy, generator=generator,
                             decode_path=decode_path, cuda_graphs=cuda_graphs)


@torch.inference_mode()
def generate_from_ids(model, tokenizer, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, *,
                      num_generations: int = 1, max_completion_length: int = 128,
                      temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                      greedy: bool = False, generator: torch.Generator | None = None,
                      decode_path: str | None = None, cuda_graphs: bool | None = None,
                      check_context_length: bool = True) -> Rollout:
    """:func:`generate` from already tokenized, left-padded prompts ``(N, P)`` and their mask:
    the multi-turn episodes (:mod:`labkit.agents.episodes`) continue from token ids, since
    decoding and re-encoding text could merge characters the policy sampled one by one into a
    tag token. ``check_context_length=False`` skips :func:`check_context`: for a caller that
    checked its own budget (an episode's later turns, whose rows each have less room than the
    longest row's budget would suggest)."""
    if max_completion_length < 1:
        raise ValueError(f"max_completion_length must be >= 1, got {max_completion_length}")
    if not greedy and temperature <= 0:
        raise ValueError(f"temperature must be > 0 when sampling, got {temperature}")
    if check_context_length:
        check_context(model, prompt_mask, max_completion_length)
    settings = current_settings(decode_path, cuda_graphs)
    plan = plan_decoding(model, settings.path, settings.cuda_graphs)
    device = prompt_ids.device
    eos_id, pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id

    was_training = model.training
    model.eval()
    from transformers import DynamicCache

    with attention_kernels(device):
        cache = DynamicCache()
        positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
        out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions,
                    logits_to_keep=1, **cache_kwargs(cache))
        logits = out.logits[:, -1].float()
        if num_generations > 1:  # one prefill per prompt, shared by its G samples
            logits = logits.repeat_interleave(num_generations, dim=0)
            positions = positions.repeat_interleave(num_generations, dim=0)
            prompt_ids = prompt_ids.repeat_interleave(num_generations, dim=0)
            prompt_mask = prompt_mask.repeat_interleave(num_generations, dim=0)
        sampling = {"max_completion_length": max_completion_length, "temperature": temperature,
                    "top_p": top_p, "top_k": top_k, "greedy": greedy, "generator": generator,
                    "eos_id": eos_id, "pad_id": pad_id}
        if plan.path == "fixed":
            tokens, logps, entropies, finished_at = decode_fixed(
                model, cache, logits, prompt_mask, positions[:, -1] + 1, repeats=num_generations,
                cuda_graph=plan.cuda_graph, **sampling)
        else:
            if num_generations > 1:
                cache.batch_repeat_interleave(num_generations)
            tokens, logps, entropies, finished_at = _decode_dynamic(
                model, cache, logits, prompt_mask, positions[:, -1] + 1, **sampling)
    if was_training:
        model.train()
    return _rollout(tokenizer, prompt_ids, prompt_mask, tokens, logps, entropies, finished_at,
                    max_completion_length)


@torch.inference_mode()
def continue_rollout(model, tokenizer, head: Rollout, *, max_completion_length: int,
                     **sampling) -> Rollout:
    """Continue the completions of ``head`` that have not ended, with ``model``, up to
    ``max_completion_length`` tokens in all: the partial rollouts of
    :mod:`labkit.offpolicy.partial`, where ``head`` was sampled by older weights. The head must
    have been sampled with a budget of exactly its width (every unfinished row is full, so it
    continues from its last column). Each token keeps the sampling log-prob and entropy of the
    weights that sampled it; ``sampling`` takes :func:`generate`'s keywords (temperature, top_p,
    top_k, generator). Rows that ended in the head are not sampled again."""
    width = head.completion_ids.size(1)
    if max_completion_length <= width:
        raise ValueError(f"max_completion_length ({max_completion_length}) must exceed the "
                         f"head's {width} tokens to continue it")
    if not bool((head.lengths[head.truncated] == width).all()):
        raise ValueError("a truncated head row is shorter than the head: the head must be sampled "
                         "with max_completion_length equal to its width")
    rows = head.truncated.nonzero().squeeze(-1)
    batch, device = head.completion_ids.size(0), head.completion_ids.device
    tokens = torch.full((batch, max_completion_length), tokenizer.pad_token_id, dtype=torch.long,
                        device=device)
    logps = torch.zeros((batch, max_completion_length), dtype=torch.float32, device=device)
    entropies = torch.zeros_like(logps)
    tokens[:, :width], logps[:, :width] = head.completion_ids, head.logprobs
    entropies[:, :width] = head.entropies
    finished_at = torch.where(head.truncated, -1, head.lengths - 1)
    if rows.numel():
        tail = generate_from_ids(
            model, tokenizer, torch.cat([head.prompt_ids, head.completion_ids], 1)[rows],
            torch.cat([head.prompt_mask, head.completion_mask], 1)[rows],
            max_completion_length=max_completion_length - width, check_context_length=False,
            **sampling)
        grown = tail.completion_ids.size(1)
        tokens[rows, width:width + grown] = tail.completion_ids
        logps[rows, width:width + grown] = tail.logprobs
        entropies[rows, width:width + grown] = tail.entropies
        finished_at[rows] = torch.where(tail.truncated, -1, width + tail.lengths - 1)
    return _rollout(tokenizer, head.prompt_ids, head.prompt_mask, tokens, logps, entropies,
                    finished_at, max_completion_length)


def _decode_dynamic(model, cache, logits, attn, next_pos, *, max_completion_length: int,
                    temperature: float, top_p: float, top_k: int, greedy: bool, generator,
                    eos_id: int, pad_id: int):
    """The dynamic loop (the CPU's): one cached forward per token over the live rows only;
    finished rows leave the batch and the cache. Returns ``(tokens, logprobs, entropies,
    finished_at)``: (B, L) tokens (pad after the end), their sampling log-probs and entropies
    (0 after the end), and the step each row finished at (-1: truncated)."""
    batch, device = logits.size(0), logits.device
    tokens = torch.full((batch, max_completion_length), pad_id, dtype=torch.long, device=device)
    logps = torch.zeros((batch, max_completion_length), dtype=torch.float32, device=device)
    entropies = torch.zeros_like(logps)
    finished_at = torch.full((batch,), -1, dtype=torch.long, device=device)
    alive = torch.arange(batch, device=device)  # rows still generating, in cache order

    for step in range(max_completion_length):
        scaled = logits if greedy else logits / temperature
        logp_all = torch.log_softmax(scaled, dim=-1)
        entropies[alive, step] = -(logp_all.exp() * logp_all).sum(-1).nan_to_num(0.0)
        if greedy:
            tok = scaled.argmax(-1)
        else:
            probs = filter_logits(scaled, top_k, top_p).softmax(-1)
            tok = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        tokens[alive, step] = tok
        logps[alive, step] = logp_all.gather(-1, tok[:, None]).squeeze(-1)
        done = tok == eos_id
        if done.any():
            finished_at[alive[done]] = step
            keep = (~done).nonzero().squeeze(-1)
            if keep.numel() == 0:
                break
            # drop finished rows from the cache so later steps only compute live rows
            cache.batch_select_indices(keep)
            alive, tok, attn, next_pos = alive[keep], tok[keep], attn[keep], next_pos[keep]
        if step + 1 == max_completion_length:
            break
        attn = torch.cat([attn, attn.new_ones((attn.size(0), 1))], dim=1)
        out = model(input_ids=tok[:, None], attention_mask=attn, position_ids=next_pos[:, None],
                    **cache_kwargs(cache))
        logits = out.logits[:, -1].float()
        next_pos = next_pos + 1
    return tokens, logps, entropies, finished_at


def _rollout(tokenizer, prompt_ids, prompt_mask, tokens, logps, entropies, finished_at,
             max_completion_length: int) -> Rollout:
    """The :class:`Rollout` of a decode loop's output, trimmed to the longest completion."""
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
