"""The training forward: the model's outputs at the positions that predict each completion token.

The textbook forward (notebook 02, :mod:`labkit.grpo_minimal`) runs ``[prompt | completion]``
through the model and reads the logits of positions ``P-1 .. P+L-2``. The trainer runs the same
computation with two savings that leave every value and gradient unchanged (up to float rounding;
``tests/test_forward.py`` checks both):

* **shared prompts** (:func:`shared_prompt_forward`): the G completions of a prompt share one
  forward of the prompt; its keys and values are repeated for each completion (a differentiable
  copy, so gradients still reach the prompt's positions G times), and the completions run on top
  of that cache. Prompts are about as long as completions in the lab, so this halves the work.
* **length packing** (:func:`length_packed_micro_batches`): micro-batches gather completions of
  similar length, so little compute goes to padding.

Every function here takes a ``call(ids, mask, positions, cache, keep)`` that runs one model and
returns its outputs at the last ``keep`` positions: :func:`policy_call` (logits of a causal LM)
or :func:`critic_call` (values of a :class:`labkit.models.ValueModel`). Batches are
:class:`labkit.experience.Experience` rows (left-padded prompts, right-padded completions).
"""

from __future__ import annotations

import torch

from labkit.logprobs import logprobs_and_entropy, token_logprobs
from labkit.models import attention_kernels
from labkit.runtime.compat import cache_kwargs
from labkit.training.lora import adapters_disabled
from labkit.tricks.mismatch import mismatch_metrics, mismatch_weights

#: What one extra forward + backward costs, in padded tokens' worth of compute: on a CPU the tiny
#: model's per-call overhead is small next to its per-token cost; on a GPU kernel launches
#: dominate, so wide micro-batches with some padding are cheaper than many narrow ones.
FORWARD_COST_IN_TOKENS = {"cpu": 256, "cuda": 8192}


def policy_call(model):
    """``call`` for a causal LM: logits at the last ``keep`` positions, (b, keep, V)."""
    def call(ids, mask, positions, cache, keep):
        return model(input_ids=ids, attention_mask=mask, position_ids=positions,
                     logits_to_keep=keep, **cache_kwargs(cache)).logits
    return call


def critic_call(critic):
    """``call`` for a :class:`labkit.models.ValueModel`: values at the last ``keep`` positions."""
    def call(ids, mask, positions, cache, keep):
        return critic(ids, mask, positions, cache=cache, values_to_keep=keep)
    return call


def plain_forward(call, batch) -> torch.Tensor:
    """Outputs predicting each completion token, (b, l, ...): one forward of
    ``[prompt | completion]``, the textbook way."""
    width = batch.completion_ids.size(1)
    return call(batch.input_ids, batch.attention_mask, batch.position_ids, None, width + 1)[:, :-1]


def shared_prompt_forward(call, batch) -> torch.Tensor:
    """Same result as :func:`plain_forward`, each distinct prompt (``batch.prompt_index``) run
    once and its cache repeated for its completions."""
    from transformers import DynamicCache

    prompt_width, width = batch.prompt_ids.size(1), batch.completion_ids.size(1)
    unique, inverse = torch.unique(batch.prompt_index, return_inverse=True)
    rows = torch.arange(len(batch), device=inverse.device)
    first = torch.empty_like(unique).scatter_(0, inverse, rows)  # one row per distinct prompt
    prompt_mask, cache = batch.prompt_mask[first], DynamicCache()
    positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
    # The last prompt position predicts the first completion token.
    head = call(batch.prompt_ids[first], prompt_mask, positions, cache, 1)[inverse]
    if width == 1:
        return head
    cache.batch_select_indices(inverse)
    tail = call(batch.completion_ids[:, :-1], batch.attention_mask[:, :-1],
                batch.position_ids[:, prompt_width:-1], cache, width - 1)
    return torch.cat([head, tail], dim=1)


def shares_prompts(config) -> bool:
    """Whether the training forwards of a run with ``config`` share each prompt's forward among
    its completions (:func:`shared_prompt_forward`): not with ``gradient_checkpointing``, whose
    recomputed forwards run without the shared cache."""
    return not config.gradient_checkpointing


def completion_outputs(call, batch, share_prompts: bool = True) -> torch.Tensor:
    """:func:`shared_prompt_forward` when some prompt repeats in ``batch`` and sharing is allowed
    (the run's :func:`shares_prompts`), else :func:`plain_forward`. Attention runs the kernels
    chosen for the device (:func:`labkit.models.attention_kernels`: no cuDNN attention on CUDA)."""
    with attention_kernels(batch.completion_ids.device):
        if share_prompts and len(torch.unique(batch.prompt_index)) < len(batch):
            return shared_prompt_forward(call, batch)
        return plain_forward(call, batch)


def completion_logprobs(model, batch, temperature: float, share_prompts: bool = True):
    """Log-probs (b, l) of the completion tokens at ``temperature`` (no entropy)."""
    logits = completion_outputs(policy_call(model), batch, share_prompts)
    return token_logprobs(logits, batch.completion_ids, temperature, check_tokens=False)


def completion_logprobs_and_entropy(model, batch, temperature: float,
                                    share_prompts: bool = True, logprobs=None):
    """Log-probs and entropies (b, l) of the completion tokens at ``temperature``. ``logprobs``
    turns the logits into them: the trainer passes its run's loss path's
    (:class:`labkit.training.compiled.LossPath`, compiled with ``compile_loss``); None is
    :func:`labkit.logprobs.logprobs_and_entropy`, looked up at the call (a default bound at
    definition would hide a patched module attribute from the caller)."""
    logits = completion_outputs(policy_call(model), batch, share_prompts)
    # the tokens are the sampler's, in the model's range: no range check (a read from the GPU)
    return (logprobs or logprobs_and_entropy)(logits, batch.completion_ids, temperature,
                                              check_tokens=False)


def completion_values(critic, batch, share_prompts: bool = True) -> torch.Tensor:
    """Critic values (b, l) of the state before each completion token, float32."""
    return completion_outputs(critic_call(critic), batch, share_prompts).float()


def length_packed_micro_batches(prompt_lengths: torch.Tensor, completion_lengths: torch.Tensor,
                                max_rows: int | None, device_type: str) -> list[torch.Tensor]:
    """Split rows into micro-batches of similar lengths; returns a list of index tensors.

    Rows are sorted by total length; a micro-batch closes at ``max_rows`` rows, or when widening
    it for the next row would add more padding than one more forward costs
    (:data:`FORWARD_COST_IN_TOKENS` of ``device_type``). ``prompt_lengths`` and
    ``completion_lengths`` are (n,) real-token counts.
    """
    n = len(prompt_lengths)
    cap = max_rows or max(n, 1)
    order = (prompt_lengths + completion_lengths).argsort(stable=True)
    overhead = FORWARD_COST_IN_TOKENS.get(device_type, FORWARD_COST_IN_TOKENS["cuda"])
    batches, current, width = [], [], (0, 0)
    # one read from the device for every row (each int() of an element would be one sync)
    rows = torch.stack([order, prompt_lengths[order], completion_lengths[order]], 1).tolist()
    for i, p, c in rows:
        wider = (max(width[0], p), max(width[1], c))
        padding = len(current) * (sum(wider) - sum(width))
        if current and (len(current) == cap or padding > overhead):
            batches.append(current)
            current, wider = [], (p, c)
        current.append(i)
        width = wider
    if current:
        batches.append(current)
    device = prompt_lengths.device
    return [torch.tensor(b, device=device, dtype=torch.long) for b in batches]


__all__ = ["FORWARD_COST_IN_TOKENS", "completion_logprobs", "completion_logprobs_and_entropy",
           "completion_outputs", "completion_values", "critic_call", "length_packed_micro_batches",
           "plain_forward", "policy_call", "shared_prompt_forward", "shares_prompts"]


def micro_batches(batch, rows: torch.Tensor, micro_batch_size: int | None,
                  local_aggregation: bool = False) -> list[torch.Tensor]:
    """``rows`` of ``batch`` in micro-batches of at most ``micro_batch_size``, packed by length;
    a loss whose aggregation is local to a micro-batch (bnpo) keeps TRL's plain split."""
    if local_aggregation:
        cap = micro_batch_size or max(len(rows), 1)
        return list(rows.split(cap)) if len(rows) else []
    packs = length_packed_micro_batches(batch.prompt_mask.sum(-1)[rows],
                                        batch.completion_mask.sum(-1)[rows],
                                        micro_batch_size, rows.device.type)
    return [rows[pack] for pack in packs]


def no_grad_outputs(batch, forward, split) -> torch.Tensor:
    """Run ``forward`` on the micro-batches ``split(batch, rows)`` gives, under inference mode;
    (B, L) result, 0 on padding."""
    everything = torch.arange(len(batch), device=batch.completion_ids.device)
    with torch.inference_mode():
        pieces = [(rows, forward(batch.select(rows).trimmed()))
                  for rows in split(batch, everything)]
    out = batch.sample_logp.new_zeros(batch.completion_ids.shape)
    for rows, piece in pieces:
        out[rows, :piece.size(1)] = piece
    return out


def rows_with_gradient(batch, config, critic: bool = False) -> torch.Tensor:
    """Bool (B,): the rows whose loss terms can be non-zero.

    A row with an empty loss mask contributes nothing; a row with zero advantage contributes
    nothing unless a KL-in-loss, an entropy bonus or a critic gives it a term. The other rows
    still count in the global normalisers, so leaving them out changes no gradient; only a loss
    whose aggregation is local to a micro-batch (bnpo) depends on which rows share one, so it
    keeps every row.
    """
    from labkit.losses import LOCAL_AGGREGATIONS, get_loss_type

    if get_loss_type(config.loss_type).aggregation in LOCAL_AGGREGATIONS:
        return torch.ones(len(batch), dtype=torch.bool, device=batch.loss_mask.device)
    has_tokens = batch.loss_mask.any(-1)
    if critic or config.entropy_coef != 0 or (config.beta != 0 and not config.kl_in_reward):
        return has_tokens
    advantages = batch.advantages
    nonzero = advantages != 0 if advantages.dim() == 1 else (advantages != 0).any(-1)
    return has_tokens & nonzero


def score_forwards(batch, config, policy, ref_model, value_model, temperature: float,
                   split) -> dict:
    """The trainer's step 3: the no-grad forwards its update needs, and only those: the behaviour
    policy's log-probs when the update is off-policy (or demonstrations or the sampler mismatch
    need them), the reference's when ``beta != 0`` (``ref_model``; None with LoRA: the policy
    with its adapters off), the critic's values for PPO (``value_model``; None without one).
    Log-probs are at ``temperature`` (this step's); ``split(batch, rows)`` gives the
    micro-batches (:func:`micro_batches`). Sets the batch's fields and returns the
    sampler/trainer mismatch metrics when the correction is on (else ``{}``)."""
    cfg = config
    if len(batch) == 0:
        return {}
    share = shares_prompts(cfg)
    # demonstrations were not sampled by the policy: the old policy must score them; the
    # mismatch correction compares the trainer's old log-probs with the sampler's (TRL)
    if (cfg.off_policy or cfg.rlplus_demonstrations or cfg.max_staleness > 0
            or cfg.vllm_importance_sampling_correction):
        batch.old_logp = no_grad_outputs(batch, lambda mb: completion_logprobs(
            policy, mb, temperature, share), split)
        if cfg.rlplus_demonstrations:  # their "sampling" log-probs are the old policy's
            demo = batch.demonstrations[:, None]
            batch.sample_logp = torch.where(demo, batch.old_logp, batch.sample_logp)
    if cfg.needs_reference:  # LoRA: the policy itself with its adapters off
        with adapters_disabled(ref_model if ref_model is not None else policy) as reference:
            batch.ref_logp = no_grad_outputs(batch, lambda mb: completion_logprobs(
                reference, mb, temperature, share), split)
    if value_model is not None:
        batch.values = no_grad_outputs(batch, lambda mb: completion_values(
            value_model, mb, share), split)
    if not cfg.vllm_importance_sampling_correction:
        return {}
    mode = cfg.vllm_importance_sampling_mode
    batch.is_weights, corrected = mismatch_weights(
        batch.old_logp, batch.sample_logp, batch.completion_mask, mode,
        cfg.vllm_importance_sampling_clip_max, cfg.vllm_importance_sampling_clip_min)
    return mismatch_metrics(batch.old_logp, batch.sample_logp, batch.completion_mask,
                            batch.is_weights, corrected, mode)
