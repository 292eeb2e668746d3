"""Reference solutions to the exercises of notebooks/09_scaling_up.ipynb.

Each function has the signature of the notebook's stub; the notebook checks it against labkit's
implementation (or, for the parameter count, against the model ``transformers`` builds) with
``labkit.exercises.check_function``. Import with ``importlib.import_module("solutions.09_scaling_up")``
(the name starts with a digit).
"""

import torch

#: the seven projections of a Llama-style decoder layer: name -> (in features, out features)
_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _projection_shapes(config) -> dict:
    d, ff = config.hidden_size, config.intermediate_size
    head_dim = getattr(config, "head_dim", None) or d // config.num_attention_heads
    q, kv = config.num_attention_heads * head_dim, config.num_key_value_heads * head_dim
    return {"q_proj": (d, q), "k_proj": (d, kv), "v_proj": (d, kv), "o_proj": (q, d),
            "gate_proj": (d, ff), "up_proj": (d, ff), "down_proj": (ff, d)}


def qwen_parameter_count(config) -> int:
    """Parameters of a Qwen2/Qwen3 causal LM, tied embeddings counted once."""
    d, vocab = config.hidden_size, config.vocab_size
    head_dim = getattr(config, "head_dim", None) or d // config.num_attention_heads
    layer = sum(i * o for i, o in _projection_shapes(config).values())
    layer += 2 * d  # the two RMSNorms (attention and MLP inputs)
    if config.model_type == "qwen2":  # biases on q, k and v
        layer += (config.num_attention_heads + 2 * config.num_key_value_heads) * head_dim
    if config.model_type == "qwen3":  # RMSNorm of each query and key head
        layer += 2 * head_dim
    embeddings = vocab * d * (1 if config.tie_word_embeddings else 2)
    return embeddings + config.num_hidden_layers * layer + d  # + the final norm


def lora_parameter_count(config, r, target_modules) -> int:
    """Trainable parameters of rank-r LoRA on the named projections of every layer: A (r x in)
    and B (out x r) per adapted projection."""
    names = _PROJECTIONS if target_modules == "all-linear" else target_modules
    shapes = _projection_shapes(config)
    return config.num_hidden_layers * sum(r * (shapes[n][0] + shapes[n][1]) for n in names)


def token_truncate_weights(trainer_logps, sampler_logps, mask, clip_max=3.0):
    """TIS at token level: min(pi_trainer / pi_sampler, C) per token, 0 on padding."""
    m = mask.to(trainer_logps.dtype)
    ratio = torch.exp((trainer_logps - sampler_logps) * m)
    return ratio.clamp(max=clip_max) * m


def sequence_mask_weights(trainer_logps, sampler_logps, mask, clip_max=3.0):
    """MIS at sequence level: the product of a sequence's token ratios, 0 for the whole
    sequence when it exceeds C; the same weight on every token of the sequence."""
    m = mask.to(trainer_logps.dtype)
    ratio = torch.exp(((trainer_logps - sampler_logps) * m).sum(-1, keepdim=True))
    ratio = torch.where(ratio > clip_max, torch.zeros_like(ratio), ratio)
    return ratio * m
