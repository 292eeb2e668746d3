"""Supervised fine-tuning (SFT) on (prompt, completion) pairs, with the loss on completion tokens only.

The lab uses SFT three times: the tiny Qwen's warm-start (:mod:`labkit.commands.build_tiny`), rejection
sampling fine-tuning (:mod:`labkit.finetune.rft`, the policy's own correct samples as targets) and the
generative judge (:mod:`labkit.commands.build_judge`, "yes"/"no" as the target). All three go through the
same two functions:

* :func:`encode_sft` renders each prompt with the chat template (as the sampler does, so the
  model is trained on exactly the context it will see when generating), appends the completion
  and the end-of-turn token, and masks the prompt out of the labels: the model learns to *write*
  the completion, not to predict the question (InstructGPT, arXiv 2203.02155, section 3.5, and
  TRL's ``completion_only_loss``);
* :func:`sft_step` does one AdamW step on one batch; :func:`fit` loops it over batches with a
  learning-rate schedule and returns the loss curve.

An example is a dict with ``prompt`` (the user message as a string, or a chat message list) and
``completion`` (the assistant's text, without the end-of-turn token), or, for a multi-turn episode
with a tool (:mod:`labkit.agents`), ``turns``: a list of ``(assistant text, reply)`` pairs, each
reply (None after the last turn) appended as the environment's turn
(:data:`labkit.agents.episodes.ENVIRONMENT_TURN`) and masked out of the labels like the prompt:
the model learns to write its turns, not to predict the tool.

=============== ====== ========================================================================
tensor          shape  meaning (from :func:`encode_sft`; N examples, T = longest, right-padded)
=============== ====== ========================================================================
input_ids       (N, T) chat-rendered prompt + completion + end-of-turn, then pad tokens
attention_mask  (N, T) 1 on real tokens
labels          (N, T) the input ids on completion tokens (end-of-turn included), -100 elsewhere
=============== ====== ========================================================================

The model's own forward shifts the labels by one (``labels[t]`` is predicted from positions
``< t``) and averages the cross-entropy over the tokens whose label is not -100: a token mean over
the batch, so long completions weigh more than short ones, as in TRL's ``SFTTrainer``.
"""

from __future__ import annotations

import math
import random

import torch

from labkit.sampling import prompt_text

__all__ = ["encode_sft", "fit", "length_bucketed_batches", "sft_optimizer", "sft_step",
           "warmup_cosine"]


def _messages(prompt) -> list[dict]:
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)


def encode_sft(tokenizer, examples, max_len: int):
    """Tokenize SFT examples into padded tensors with a completion-only loss mask.

    Returns ``input_ids`` (N, T), ``attention_mask`` (N, T) and ``labels`` (N, T) where labels are
    -100 on prompt and padding tokens. Padding is on the right (training does not need left pad).
    Sequences longer than ``max_len`` tokens are cut at ``max_len`` (their end is not learned).
    """
    rows, label_rows = [], []
    for ex in examples:
        prompt = tokenizer(prompt_text(tokenizer, _messages(ex["prompt"])),
                           add_special_tokens=False)["input_ids"]
        completion, learned = _completion_ids(tokenizer, ex)
        ids = (prompt + completion)[:max_len]
        labels = ([-100] * len(prompt) + learned)[:max_len]
        rows.append(ids)
        label_rows.append(labels)
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id
    input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (r, lab) in enumerate(zip(rows, label_rows)):
        input_ids[i, : len(r)] = torch.tensor(r)
        labels[i, : len(lab)] = torch.tensor(lab)
        mask[i, : len(r)] = 1
    return input_ids, mask, labels


def _completion_ids(tokenizer, example) -> tuple[list[int], list[int]]:
    """The completion's ids and its labels (-100 on the environment's turns)."""
    turns = example.get("turns")
    if turns is None:
        ids = tokenizer(example["completion"] + tokenizer.eos_token,
                        add_special_tokens=False)["input_ids"]
        return ids, list(ids)
    from labkit.agents.episodes import environment_turn_ids

    ids, labels = [], []
    for text, reply in turns:
        turn = tokenizer(text + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
        ids += turn
        labels += turn
        if reply is not None:
            env = environment_turn_ids(tokenizer, reply)
            ids += env
            labels += [-100] * len(env)
    return ids, labels


def length_bucketed_batches(tokenizer, examples, batch_size: int, seed: int, window: int = 32):
    """Shuffle, then batch examples of similar length together (within windows of ``window``
    batches) and shuffle the batches: the same data, about half the padding compute.

    Length is measured in characters of prompt + completion (one token per character for the
    tiny Qwen's tokenizer; a proxy for others). Deterministic from ``seed``.
    """
    rng = random.Random(seed)
    examples = list(examples)
    rng.shuffle(examples)
    size = batch_size * window
    batches = []
    for start in range(0, len(examples), size):
        chunk = sorted(examples[start:start + size],
                       key=lambda ex: len(_text(ex["prompt"])) + _completion_chars(ex))
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def _completion_chars(example) -> int:
    if "turns" in example:
        return sum(len(text) + len(reply or "") + 40 for text, reply in example["turns"])
    return len(example["completion"])


def _text(prompt) -> str:
    return prompt if isinstance(prompt, str) else "".join(m.get("content", "") for m in prompt)


def warmup_cosine(steps: int, warmup: int, floor: float = 0.1):
    """A learning-rate multiplier: linear warm-up over ``warmup`` steps, then cosine decay to
    ``floor`` at ``steps`` (for ``torch.optim.lr_scheduler.LambdaLR``)."""
    def lr_at(step):
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    return lr_at


def sft_optimizer(model, *, lr: float, steps: int, warmup: int | None = None,
                  weight_decay: float = 0.01, betas=(0.9, 0.98), floor: float = 0.1):
    """AdamW with :func:`warmup_cosine` (warm-up defaults to 5% of ``steps``): the warm-start's
    settings. Returns ``(optimizer, scheduler)``."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay,
                                  betas=betas)
    warmup = max(1, steps // 20) if warmup is None else max(1, warmup)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(steps, warmup, floor))
    return optimizer, scheduler


def sft_step(model, tokenizer, examples, optimizer, scheduler=None, *, max_len: int = 256,
             max_grad_norm: float = 1.0) -> float:
    """One optimizer step of completion-only cross-entropy on ``examples``; returns the loss.

    The batch is moved to the model's device; the gradient norm is clipped to ``max_grad_norm``
    (0 = no clipping).
    """
    device = next(model.parameters()).device
    ids, mask, labels = (t.to(device) for t in encode_sft(tokenizer, examples, max_len))
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    if max_grad_norm:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return out.loss.item()


def fit(model, tokenizer, batches, optimizer, scheduler=None, *, max_len: int = 256,
        max_grad_norm: float = 1.0, log_every: int = 50, verbose: bool = True):
    """:func:`sft_step` over each batch of ``batches`` in order; returns the loss curve, a list
    of ``(step, mean loss since the previous point)``, one point every ``log_every`` steps and
    one at the end. The model is left in eval mode."""
    model.train()
    curve, running, steps = [], 0.0, len(batches)
    for step, batch in enumerate(batches):
        running += sft_step(model, tokenizer, batch, optimizer, scheduler, max_len=max_len,
                            max_grad_norm=max_grad_norm)
        if (step + 1) % log_every == 0 or step + 1 == steps:
            n = (step % log_every) + 1
            curve.append((step + 1, running / n))
            if verbose:
                print(f"step {step + 1:5d}  loss {running / n:.4f}", flush=True)
            running = 0.0
    model.eval()
    return curve
