"""A model's shape for the memory planner: the size symbols (``L``, ``d``, ``d_ff``, ``V``, ``h``,
``h_kv``, ``hd``) read from a ``transformers`` config, its parameter count ``N`` and LoRA's
adapter count ``n``."""

from __future__ import annotations

#: Model types whose decoder layer the formulas describe (Llama-style: RMSNorm, GQA, SwiGLU).
SUPPORTED_MODEL_TYPES = ("qwen2", "qwen3", "llama", "mistral")
#: Projections of a decoder layer that LoRA can adapt: name -> (in features, out features).
_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
#: peft's default targets for Llama-style models (its TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES
#: _MAPPING for qwen2, qwen3 and llama).
_PEFT_DEFAULT_TARGETS = ("q_proj", "v_proj")


class _Shape:
    """The model-size symbols of the package docstring, read from a transformers config."""

    def __init__(self, config):
        model_type = getattr(config, "model_type", None)
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(f"model_config_or_name must describe one of "
                             f"{', '.join(SUPPORTED_MODEL_TYPES)} (Llama-style decoders), got "
                             f"model_type={model_type!r}")
        self.model_type = model_type
        self.L = _size(config, "num_hidden_layers")
        self.d = _size(config, "hidden_size")
        self.d_ff = _size(config, "intermediate_size")
        self.V = _size(config, "vocab_size")
        self.h = _size(config, "num_attention_heads")
        self.h_kv = _size(config, "num_key_value_heads", optional=True) or self.h
        self.hd = _size(config, "head_dim", optional=True)
        if self.hd is None:
            if self.d % self.h:
                raise ValueError(f"model config: hidden_size={self.d} is not a multiple of "
                                 f"num_attention_heads={self.h}, and head_dim is not given")
            self.hd = self.d // self.h
        if self.h_kv > self.h or self.h % self.h_kv:
            raise ValueError(f"model config: num_key_value_heads={self.h_kv} must divide "
                             f"num_attention_heads={self.h} (grouped-query attention)")
        self.tied = bool(getattr(config, "tie_word_embeddings", False))
        # Qwen2 always has q/k/v biases; the others say so in attention_bias
        self.qkv_bias = model_type == "qwen2" or bool(getattr(config, "attention_bias", False))
        self.mlp_bias = bool(getattr(config, "mlp_bias", False))
        self.qk_norm = model_type == "qwen3"

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in features, out features) of each projection of one layer."""
        d, q, kv, ff = self.d, self.h * self.hd, self.h_kv * self.hd, self.d_ff
        return {"q_proj": (d, q), "k_proj": (d, kv), "v_proj": (d, kv), "o_proj": (q, d),
                "gate_proj": (d, ff), "up_proj": (d, ff), "down_proj": (ff, d)}

    def layer_parameters(self) -> int:
        shapes = self.linear_shapes()
        weights = sum(i * o for i, o in shapes.values())
        biases = (self.h + 2 * self.h_kv) * self.hd if self.qkv_bias else 0
        if self.mlp_bias:
            biases += 2 * self.d_ff + self.d
        norms = 2 * self.d + (2 * self.hd if self.qk_norm else 0)
        return weights + biases + norms

    def parameters(self, with_output_layer: bool = True) -> int:
        embedding = self.V * self.d
        output = 0 if self.tied or not with_output_layer else self.V * self.d
        return embedding + self.L * self.layer_parameters() + self.d + output

    def activation_bytes_per_token(self, s: int) -> int:
        """a_L: bytes one layer keeps for backward per token (package docstring)."""
        d, h, hd, ff = self.d, self.h, self.hd, self.d_ff
        total = s * (2 * d + 5 * h * hd + 4 * ff) + 4 * (2 * d + 2 + h)
        if self.qk_norm:
            heads = self.h + self.h_kv
            total += heads * hd * (4 + s) + 4 * heads
        return total


def _size(config, name: str, optional: bool = False) -> int | None:
    """A size read from a model config: an integer >= 1 (None allowed when ``optional``)."""
    value = getattr(config, name, None)
    if value is None and optional:
        return None
    if type(value) is not int or value < 1:
        raise ValueError(f"model config {name} must be an integer >= 1, got {value!r}")
    return value


def _config(model_config_or_name):
    if isinstance(model_config_or_name, str):
        from labkit.models import load_model_config

        try:
            return load_model_config(model_config_or_name)
        except OSError as error:  # not shipped, no such folder, not in the hub cache offline
            raise ValueError(f"model_config_or_name {model_config_or_name!r} is neither a shipped "
                             f"shape, a local model folder nor a hub model this machine can "
                             f"reach ({type(error).__name__}: {str(error)[:200]})") from None
    if not hasattr(model_config_or_name, "num_hidden_layers"):
        raise ValueError(f"model_config_or_name must be a transformers config or a model name "
                         f"(e.g. 'tiny', 'Qwen/Qwen2.5-0.5B-Instruct'), got "
                         f"{type(model_config_or_name).__name__}")
    return model_config_or_name


def model_parameters(model_config_or_name) -> int:
    """N: parameters of the causal LM the config describes, tied embeddings counted once."""
    return _Shape(_config(model_config_or_name)).parameters()


def lora_trainable_parameters(model_config_or_name, r: int, target_modules=None) -> int:
    """Adapter parameters of LoRA at rank ``r``: ``r (in + out)`` per adapted projection per layer
    (A is r x in, B is out x r, no bias).

    ``target_modules``: projection names (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``,
    ``gate_proj``, ``up_proj``, ``down_proj``), ``"all-linear"`` (all seven; peft's shorthand,
    which leaves the output layer out), or None (peft's default for these models: q_proj,
    v_proj).
    """
    shape = _Shape(_config(model_config_or_name))
    if not isinstance(r, int) or isinstance(r, bool) or r < 1:
        raise ValueError(f"r (lora_r) must be an integer >= 1, got {r!r}")
    return _adapter_parameters(shape, r, _targets(target_modules))


def _adapter_parameters(shape: _Shape, r: int, names) -> int:
    """``r (in + out)`` per adapted projection ``names`` per layer."""
    shapes = shape.linear_shapes()
    return shape.L * sum(r * (shapes[n][0] + shapes[n][1]) for n in names)


def _targets(target_modules) -> tuple[str, ...]:
    if target_modules is None:
        return _PEFT_DEFAULT_TARGETS
    if target_modules == "all-linear":
        return _LINEARS
    names = (target_modules,) if isinstance(target_modules, str) else tuple(target_modules)
    unknown = [n for n in names if n not in _LINEARS]
    if not names or unknown:
        raise ValueError(f"lora_target_modules must be 'all-linear', None or names among "
                         f"{', '.join(_LINEARS)}; got {target_modules!r}")
    return tuple(dict.fromkeys(names))
