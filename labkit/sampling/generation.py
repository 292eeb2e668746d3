"""The sampling calls: :func:`generate` (chat prompts), :func:`generate_from_ids` (prompts as
token ids) and :func:`continue_rollout` (the unfinished rows of a partial rollout). Each runs one
prefill over the left-padded prompts, shared by a prompt's G samples, then the decode loop its
:class:`~labkit.sampling.Decoder` plans for the model (:mod:`labkit.sampling.plan`).
"""

from __future__ import annotations

import torch

from labkit.models import attention_kernels
from labkit.runtime.compat import cache_kwargs
from labkit.sampling.decoder import Decoder
from labkit.sampling.dynamic import decode_dynamic
from labkit.sampling.fixed import decode_fixed
from labkit.sampling.rollout import Rollout, assemble_rollout, check_context, encode_prompts


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
    decoder: Decoder | None = None,
) -> Rollout:
    """Sample ``num_generations`` completions for each prompt.

    ``prompts`` is a list of chat conversations (``[{"role": "user", "content": ...}]``) or of
    plain strings. ``generator`` makes sampling reproducible (it must live on the model's device).
    ``greedy=True`` takes the arg-max token (ReMax's baseline, deterministic evaluation).
    ``decoder`` chooses the decode loop and keeps its captured steps (:class:`Decoder`; None: a
    fresh one, ``decode_path="auto"`` with graphs on, that keeps nothing). A prompt that leaves
    no room for ``max_completion_length`` tokens in the model's context is refused
    (:func:`check_context`).
    """
    device = next(model.parameters()).device
    prompt_ids, prompt_mask = encode_prompts(tokenizer, prompts, device)
    return generate_from_ids(model, tokenizer, prompt_ids, prompt_mask,
                             num_generations=num_generations,
                             max_completion_length=max_completion_length, temperature=temperature,
                             top_p=top_p, top_k=top_k, greedy=greedy, generator=generator,
                             decoder=decoder)


@torch.inference_mode()
def generate_from_ids(model, tokenizer, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, *,
                      num_generations: int = 1, max_completion_length: int = 128,
                      temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                      greedy: bool = False, generator: torch.Generator | None = None,
                      decoder: Decoder | None = None,
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
    decoder = Decoder() if decoder is None else decoder
    plan = decoder.plan(model)
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
                cuda_graph=plan.cuda_graph, captured=decoder.captured, **sampling)
        else:
            if num_generations > 1:
                cache.batch_repeat_interleave(num_generations)
            tokens, logps, entropies, finished_at = decode_dynamic(
                model, cache, logits, prompt_mask, positions[:, -1] + 1, **sampling)
    if was_training:
        model.train()
    return assemble_rollout(tokenizer, prompt_ids, prompt_mask, tokens, logps, entropies,
                            finished_at, max_completion_length)


@torch.inference_mode()
def continue_rollout(model, tokenizer, head: Rollout, *, max_completion_length: int,
                     **sampling) -> Rollout:
    """Continue the completions of ``head`` that have not ended, with ``model``, up to
    ``max_completion_length`` tokens in all: the partial rollouts of
    :mod:`labkit.offpolicy.partial`, where ``head`` was sampled by older weights. The head must
    have been sampled with a budget of exactly its width (every unfinished row is full, so it
    continues from its last column). Each token keeps the sampling log-prob and entropy of the
    weights that sampled it; ``sampling`` takes :func:`generate`'s keywords (temperature, top_p,
    top_k, generator, decoder). Rows that ended in the head are not sampled again."""
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
    return assemble_rollout(tokenizer, head.prompt_ids, head.prompt_mask, tokens, logps,
                            entropies, finished_at, max_completion_length)


__all__ = ["continue_rollout", "generate", "generate_from_ids"]
