"""The dynamic decode loop, the CPU's: the KV cache grows by one position per token and rows that
finish leave the batch (their cache entries are removed), so a batch with a few long answers does
not pay full price for the short ones. Every step has a new shape, which a CPU does not mind and
a GPU does (:mod:`labkit.sampling.fixed`)."""

from __future__ import annotations

import torch

from labkit.runtime.compat import cache_kwargs
from labkit.sampling.draw import filter_logits


def decode_dynamic(model, cache, logits, attn, next_pos, *, max_completion_length: int,
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


__all__ = ["decode_dynamic"]
