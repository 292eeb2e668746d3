"""A memory planner: what a training run will hold in memory, component by component, before launch.

:func:`memory_plan` reads a model's architecture (a ``transformers`` config, or a name
:func:`labkit.models.load_model_config` knows, offline for the shipped Qwen shapes) and a
:class:`labkit.config.TrainConfig`, and returns a table: one row per component, its bytes, GiB
and the formula in words, then the total. :func:`gpu_table` / :func:`gpu_fits` compare the total
with GPU sizes and :func:`plot_memory_plan` draws the bill as stacked bars.

Symbols (read from the model config; ``s`` = bytes per element of the training dtype, 4 for
float32, 2 for bfloat16):

=======  ==========================================  ===========  ============
symbol   meaning                                     tiny Qwen    Qwen2.5-0.5B
=======  ==========================================  ===========  ============
``L``    decoder layers (``num_hidden_layers``)      4            24
``d``    hidden size (``hidden_size``)               128          896
``d_ff`` MLP width (``intermediate_size``)           384          4,864
``V``    vocabulary (``vocab_size``)                 104          151,936
``h``    query heads (``num_attention_heads``)       4            14
``h_kv`` key/value heads (``num_key_value_heads``)   2            2
``hd``   head dimension (``head_dim``, d / h)        32           64
``N``    parameters (tied embeddings counted once)   0.8 M        494 M
``r``    LoRA rank (``lora_r``, with ``use_peft``)
``n``    trainable parameters: N, or the adapters'   N            N
=======  ==========================================  ===========  ============

Run sizes (from the TrainConfig): ``G`` = ``num_generations``, ``p`` = ``prompts_per_step`` (all
sampled in one batch by :func:`labkit.rollout.generate`), ``P`` = prompt length (the argument
``prompt_length``), ``C`` = ``max_completion_length``, ``T = P + C``, ``b`` = completions per
micro-batch (``micro_batch_size``, else the whole mini-batch), ``c`` = rows of one chunk of the
chunked log-probs (``2**24 // V``, at most ``b (C + 1)``).

===========================  =========================================================  ==========
component                    bytes                                                      live in
===========================  =========================================================  ==========
weights                      ``N s`` (+ ``4 n`` for float32 LoRA adapters)              all phases
gradients                    ``n s_n`` (``s_n`` = bytes of a trainable parameter)       train, step
optimizer state              AdamW: ``2 n s_n`` (exp_avg, exp_avg_sq); SGD: 0           all phases
master weights               ``4 n`` with ``master_weights=True`` (mixed precision,     all phases
                             moments then float32: ``2 n 4``); none by default
optimizer step temporaries   ``n s_n`` (``rollback_nonfinite_weights``' copy) + AdamW's  step
                             ``sqrt(exp_avg_sq)``: ``n s_n`` on CUDA (foreach), twice
                             the largest tensor on the CPU (one tensor at a time)
activations                  ``b T a_L`` per layer x L; with shared prompts (no         train
                             checkpointing, ``u = min(p, b) < b`` distinct prompts)
                             ``(u P + b C) a_L + b P 2 h hd s`` per layer x L; with
                             checkpointing ``b T d s`` per layer x L + one layer's
                             ``b T a_L``; + ``2 d s`` per token (final norm, output
                             layer input)
logits                       ``2 b (C+1) V s`` (logits and their gradient) +            train
                             ``2 c V 4`` (two float32 chunks of :mod:`labkit.logprobs`)
KV cache (sampling)          ``G p T L h_kv hd 2 s'`` (keys and values; ``s'`` the      sampling;
                             sampler's dtype, ``sampling_dtype`` or the training one);  all with
                             with a CUDA graph T rounded up to 64 and the cache kept    a graph or
                             allocated between rounds (:mod:`labkit.decode`)            overlapped
sampling logits              ``5 G p V 4`` (float32 logits, scaled, log-softmax,         sampling;
                             its exp and the entropy product, one decoding step)        all when
                                                                                        overlapped
KV caches (other graphs)     with a CUDA graph, the static cache of every other shape   all phases
                             sampled again and again: dynamic sampling's refill
                             rounds (``n G`` rows, n < p), evaluation (``eval_k`` x a
                             batch of up to 64 prompts, and the last batch), ReMax's
                             greedy baseline (p rows); at most 4 graphs per model, the
                             largest counted
sampler copy                 ``(N + n_LoRA) s'``: the policy in ``sampling_dtype``,      all phases
                             synced every step
sampling thread's weights    ``async_mode="overlapped"``: two copies of the sampler's   all phases
                             weights (the ones the trainer publishes, the thread's)
reference model              ``N s`` when beta > 0 without LoRA; 0 when beta = 0 or     all phases
                             with LoRA (the base with adapters disabled)
critic (PPO)                 ``N_c s (1 + 1 + 2)`` weights, gradients, AdamW state;      all phases
                             ``N_c`` = N minus an untied output layer, plus ``d + 1``
critic activations (PPO)     ``L b T a_L + b T d s`` (same trunk, no logits)             train
total                        the largest phase: sampling, train (forward + backward of  --
                             one micro-batch) or step (clip + AdamW update); in
                             overlapped mode the sampling thread's buffers count in all
===========================  =========================================================  ==========

Activations per layer and token, ``a_L`` (bytes). Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models" (arXiv 2205.05198), section 4.1, eq. 1, count
``34 d + 5 h T`` bytes per token per layer for a GPT layer in 16-bit (attention 11 d + 5 h T,
MLP 19 d, two LayerNorms 4 d), and eq. 2 divides parts of it by the tensor-parallel size; with
full recomputation (section 4.3) only each layer's input ``2 d`` stays. Adapted here to a Qwen
decoder layer as ``transformers`` runs it, element by element:

* no dropout (Qwen trains with dropout 0): the ``d + 2 h T`` bytes of dropout masks go, and so
  does the ``h T`` score/softmax term, because the SDPA kernels (flash or memory-efficient, CPU
  and CUDA) keep only the log-sum-exp, ``4 h`` bytes per token, not the ``T x T`` scores;
* grouped-query attention: keys and values are projected at ``h_kv`` heads, but with a padding
  mask ``transformers`` repeats them to ``h`` heads before SDPA (``repeat_kv``), and the saved
  copies are the repeated ones: ``q, k, v`` = ``3 h hd s``; SDPA's output and the ``o_proj`` input
  (a contiguous copy of it) = ``2 h hd s``; the q/k/v input ``d s``;
* RMSNorm instead of LayerNorm, each of the two keeping its float32 input ``4 d``, its normalised
  value ``d s`` (for the weight's gradient) and ``4`` bytes of inverse RMS; Qwen3's per-head
  q/k norms add ``(h + h_kv) hd (4 + s) + 4 (h + h_kv)``;
* SwiGLU instead of GeLU with ``4 d``: the MLP keeps its input ``d s``, the gate output, SiLU's
  output, the up output and the down input, ``4 d_ff s``.

So ``a_L = s (2 d + 5 h hd + 4 d_ff) + 4 (2 d + 2 + h)`` (+ Qwen3's q/k norms); ``T`` is the
whole ``[prompt | completion]`` row. LoRA keeps the same activations (the frozen layers still
carry the gradient back to the adapters below; an upper bound when few modules are adapted), plus,
with ``lora_dropout > 0``, each adapted module's dropped input ``s`` and mask ``1`` byte per input
feature (in every layer; with gradient checkpointing, in the one layer being recomputed).

What the lab does, and the planner follows: the model trains in one dtype, with no float32 master
weights: in bfloat16 the weights, gradients and both AdamW moments are bfloat16 (``torch.optim.
AdamW`` allocates its moments like the parameter), 8 bytes per parameter, not the 16 of
mixed-precision training with float32 master weights and moments (DeepSpeed, Megatron). peft
keeps LoRA adapters in float32 under a bfloat16 base (``autocast_adapter_dtype``), so adapters,
their gradients and moments cost 16 bytes per adapter parameter. Gradients are set to None after
each optimizer step, so sampling never holds them; the AdamW state stays. The planner counts the
training forward as the trainer runs it: each distinct prompt of a micro-batch once, its
completions on top, whose attention saves the prompt's keys and values once per row (with
gradient checkpointing the trainer uses the plain ``[prompt | completion]`` forward, and so does
the planner); and gradients, activations and logits at once (exact from the second micro-batch
of a step on).

What the planner leaves out: the Python/torch runtime (about 0.4-0.5 GiB of process memory on a
CPU, the CUDA context on a GPU, neither counted by ``torch.cuda.max_memory_allocated``), the
allocator's fragmentation and caching, the data, the tokenizer, and transients smaller than a
chunk (masks, positions, per-token scalars).

Measured against real trainer steps (``python -m labkit bench_memory``: two steps, seed 0, the
peak over both, since AdamW's moments exist only from the second). On the lab's CPU: float32, one
thread, 2 prompts x G = 2 completions of at most 16 tokens, prompts of 30 tokens; measured = the
peak RSS minus the RSS before the model was built, after a warm-up step of the tiny Qwen had
loaded the runtime (about 0.5 GiB of baseline the planner leaves out). On one NVIDIA H100 (bf16,
``torch.cuda.max_memory_allocated``, the sampler's CUDA graph on; ``docs/measurements/gpu_h100.txt``),
prompts of 42 tokens:

==========================================  ==========  ==========  =======  ==============
model and run                               planned     measured    error    largest phase
==========================================  ==========  ==========  =======  ==============
tiny Qwen, CPU, 2 x 2 x 16                  0.018 GiB   0.021 GiB   -15%     train
Qwen2.5-0.5B shape, CPU, 2 x 2 x 16         10.22 GiB   10.44 GiB   -2.1%    optimizer step
Qwen2.5-0.5B shape, H100, 16 x 8 x 64       20.79 GiB   20.39 GiB   +2.0%    train
same, gradient checkpointing                10.03 GiB   8.65 GiB    +16%     train
Qwen3-0.6B shape, H100, 16 x 8 x 128        51.53 GiB   52.86 GiB   -2.5%    train
==========================================  ==========  ==========  =======  ==============

At the 0.5B shape in float32 with a tiny batch the optimizer step is the peak: weights, gradients
and both moments (7.36 GiB) plus the rollback copy (1.84 GiB) and AdamW's per-tensor temporaries
(two copies of the 0.54 GiB embedding). With a real batch on a GPU the training forward's
activations and logits are the peak, and the shared-prompt forward matters: counting plain
``[prompt | completion]`` rows instead planned 26.5 GiB for the 20.06 measured before the
sampler's CUDA graph (+32%). With
gradient checkpointing the plan adds the logits and their gradient to a whole layer's
activations, which are not live at the same time, so it overestimates. At the tiny size the C
allocator's page reuse moves the RSS by megabytes, hence ``tests/test_memory.py``'s factor of 2.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

__all__ = [
    "GPU_SIZES_GIB",
    "OPTIMIZERS",
    "PHASES",
    "gpu_fits",
    "gpu_table",
    "lora_trainable_parameters",
    "memory_plan",
    "model_parameters",
    "phase_totals",
]

GIB = 2**30
#: GPU memory sizes (GiB) the lab's figures mark: a T4/V100-16, a 24 GB consumer card (RTX
#: 3090/4090, A10), an A100-40GB and an 80 GB A100/H100.
GPU_SIZES_GIB = (16, 24, 40, 80)
#: ``optimizer`` values: AdamW keeps two moments per trainable parameter, plain SGD none.
OPTIMIZERS = ("adamw", "sgd")
#: The phases of a step whose peaks the total compares.
PHASES = ("sampling", "train", "step")
# the phases column of a component live throughout the step
_ALL_PHASES = ", ".join(PHASES)
#: Model types whose decoder layer the formulas describe (Llama-style: RMSNorm, GQA, SwiGLU).
SUPPORTED_MODEL_TYPES = ("qwen2", "qwen3", "llama", "mistral")
#: Projections of a decoder layer that LoRA can adapt: name -> (in features, out features).
_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
#: peft's default targets for Llama-style models (its TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES
#: _MAPPING for qwen2, qwen3 and llama).
_PEFT_DEFAULT_TARGETS = ("q_proj", "v_proj")
_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2}
# float32 elements per chunk of the chunked log-probs (labkit.logprobs._CHUNK_ELEMENTS)
_CHUNK_ELEMENTS = 2**24


class _Shape:
    """The model-size symbols of the module docstring, read from a transformers config."""

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
        """a_L: bytes one layer keeps for backward per token (module docstring)."""
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


def _dtype_bytes(dtype: str, device: str) -> tuple[str, int]:
    if dtype == "auto":  # labkit.models.pick_dtype: bfloat16 on (recent) GPUs, float32 elsewhere
        dtype = "bfloat16" if device == "cuda" else "float32"
    if dtype not in _BYTES:
        raise ValueError(f"dtype must be 'auto' or one of {', '.join(_BYTES)}, got {dtype!r}")
    return dtype, _BYTES[dtype]


def memory_plan(model_config_or_name, train_config=None, *, prompt_length: int | None = None,
                optimizer: str = "adamw", device: str = "cuda",
                master_weights: bool = False) -> pd.DataFrame:
    """The memory bill of one training step, one row per component (module docstring's table).

    Args:
        model_config_or_name: a ``transformers`` config of a Llama-style decoder (Qwen2, Qwen3,
            Llama, Mistral), or a name for :func:`labkit.models.load_model_config` (``"tiny"``,
            ``"Qwen/Qwen2.5-0.5B-Instruct"``...).
        train_config: a :class:`labkit.config.TrainConfig` (None = the default GRPO); read:
            dtype, LoRA (``use_peft``, ``lora_r``, ``lora_target_modules``, ``lora_dropout``), G,
            prompts per step, micro_batch_size, num_mini_batches, max_completion_length,
            gradient_checkpointing, beta, advantage_estimator, rollback_nonfinite_weights, the
            sampler (``sampling_dtype``, ``async_mode``, ``decode_path``, ``cuda_graphs``) and
            the shapes it samples besides the training batch (``dynamic_sampling``,
            ``max_resample_rounds``, ``eval_every``, ``eval_k``, ``eval_max_prompts``).
        prompt_length: P, tokens of the longest prompt (chat template included); None = 256, a
            round budget for a GSM8K-style question in Qwen's tokenizer. Measure yours.
        optimizer: ``"adamw"`` (the trainer's) or ``"sgd"`` (no state: a lower bound).
        device: ``"cuda"`` or ``"cpu"``: what ``dtype="auto"`` resolves to (bfloat16 / float32)
            and how AdamW steps (all tensors at once on CUDA, one at a time on the CPU).
        master_weights: False (the lab's trainer, and the default): AdamW keeps its moments in
            the trainable parameters' dtype, with no float32 copy, so a bfloat16 run is planned
            as pure bfloat16. True: mixed precision as DeepSpeed, FSDP and verl run it, a float32
            master copy of the trainable parameters (``4 n``) and float32 moments (``2 n 4``):
            16 bytes per trainable bfloat16 parameter with its gradient. No change when the
            trainable parameters are float32 already (they are their own master copy).

    Returns a DataFrame indexed by component with columns ``bytes`` (int), ``GiB``, ``phases``
    (when the component is live: sampling, train, step) and ``formula``; the last row,
    ``total``, is the largest phase (see :func:`phase_totals`), not the column's sum. A component
    that does not exist in this configuration (no reference model at beta = 0, no critic
    without PPO) has no row.
    """
    cfg, prompt_length = _checked_arguments(train_config, prompt_length, optimizer, device,
                                            master_weights)
    shape = _Shape(_config(model_config_or_name))
    t = _trainable(shape, cfg, device, master_weights)
    run = _RunSizes(G=cfg.num_generations, p=cfg.prompts_per_step, P=prompt_length,
                    C=cfg.max_completion_length, b=cfg.micro_batch_size or cfg.mini_batch_size)
    adamw = optimizer == "adamw"
    activations = _activations_row(shape, t, run, cfg)
    graph = _keeps_graph_cache(cfg, t, device)
    rows = [*_state_rows(t, adamw),
            _step_temporaries_row(shape, t, adamw, device, cfg.rollback_nonfinite_weights),
            activations,
            _logits_row(shape, t, run),
            *_sampling_rows(shape, t, run, cfg, graph),
            *([_graph_caches_row(shape, t, run, cfg)] if graph else []),
            *_sampler_copy_rows(t, cfg),
            *_model_copy_rows(shape, t, cfg, adamw, activations["bytes"])]
    return _with_total([row for row in rows if row is not None])


def _checked_arguments(train_config, prompt_length, optimizer, device, master_weights):
    """``(train_config, prompt_length)`` with their defaults filled in; TypeError/ValueError
    naming the argument when one of :func:`memory_plan`'s arguments is out of range."""
    from labkit.config import TrainConfig

    cfg = TrainConfig() if train_config is None else train_config
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"train_config must be a labkit.config.TrainConfig, got "
                         f"{type(cfg).__name__}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(map(repr, OPTIMIZERS))}, got "
                         f"{optimizer!r}")
    if device not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda' or 'cpu', got {device!r}")
    if not isinstance(master_weights, bool):
        raise TypeError(f"master_weights must be True or False, got {master_weights!r}")
    if prompt_length is None:
        prompt_length = 256
    if not isinstance(prompt_length, int) or isinstance(prompt_length, bool) or prompt_length < 1:
        raise ValueError(f"prompt_length must be an integer >= 1 (tokens), got {prompt_length!r}")
    return cfg, prompt_length


@dataclass(frozen=True)
class _Trainable:
    """What trains, and in which precision: the module docstring's ``N``, ``n``, ``r``, ``s``
    and ``s_n`` for one run."""

    dtype: str  # the training dtype, "auto" resolved
    s: int  # bytes per element of the training dtype
    n_params: int  # N
    lora_r: int  # r; 0 without LoRA
    targets: tuple[str, ...]  # the adapted projections; () without LoRA
    n_train: int  # n: N, or the adapters' parameters
    s_n: int  # bytes of a trainable parameter
    master: bool  # a float32 master copy and float32 AdamW moments
    s_opt: int  # bytes of an AdamW moment and of its step temporaries


def _trainable(shape: _Shape, cfg, device: str, master_weights: bool) -> _Trainable:
    """The run's :class:`_Trainable`: full training, or LoRA's adapters over a frozen base."""
    dtype, s = _dtype_bytes(cfg.dtype, device)
    n_params = shape.parameters()
    # LoRA is on with use_peft (TRL's switch); lora_r alone is only the rank it would use
    lora = bool(getattr(cfg, "use_peft", False)) and (getattr(cfg, "lora_r", 0) or 0) > 0
    lora_r = cfg.lora_r if lora else 0
    targets = _targets(getattr(cfg, "lora_target_modules", None)) if lora else ()
    # peft's autocast_adapter_dtype: adapters are float32 under a 16-bit base
    s_n = 4 if lora else s
    master = master_weights and s_n < 4  # float32 parameters are their own master copy
    return _Trainable(dtype=dtype, s=s, n_params=n_params, lora_r=lora_r, targets=targets,
                      n_train=_adapter_parameters(shape, lora_r, targets) if lora else n_params,
                      s_n=s_n, master=master, s_opt=4 if master else s_n)


@dataclass(frozen=True)
class _RunSizes:
    """The module docstring's run sizes: ``G``, ``p``, ``P``, ``C`` and ``b``; ``T = P + C``."""

    G: int
    p: int
    P: int
    C: int
    b: int

    @property
    def T(self) -> int:
        return self.P + self.C


def _row(component: str, value: int, phases: str, formula: str) -> dict:
    return {"component": component, "bytes": int(value), "phases": phases, "formula": formula}



def _state_rows(t: _Trainable, adamw: bool) -> list[dict]:
    """Weights, gradients, optimizer state and (mixed precision) master weights."""
    lora = bool(t.lora_r)
    rows = [
        _row("weights", t.n_params * t.s + (t.n_train * 4 if lora else 0), _ALL_PHASES,
             f"N x s = {t.n_params:,} x {t.s} ({t.dtype})"
             + (f" + LoRA adapters n x 4 = {t.n_train:,} x 4 (float32, rank {t.lora_r}, "
                f"{'/'.join(t.targets)})" if lora else "")),
        _row("gradients", t.n_train * t.s_n, "train, step",
             f"n x s_n = {t.n_train:,} trainable x {t.s_n}" + (" (adapters only)" if lora else "")),
        _row("optimizer state", 2 * t.n_train * t.s_opt if adamw else 0, _ALL_PHASES,
             (f"AdamW: 2 moments x n x 4 = 2 x {t.n_train:,} x 4 (float32, mixed precision)"
              if t.master
              else f"AdamW: 2 moments x n x s_n = 2 x {t.n_train:,} x {t.s_n} (in the parameters' "
                   f"dtype; no float32 master copy)") if adamw else "SGD: no state"),
    ]
    if t.master:
        rows.append(_row("master weights", t.n_train * 4, _ALL_PHASES,
                         f"mixed precision: a float32 copy of the trainable parameters n x 4 = "
                         f"{t.n_train:,} x 4"))
    return rows


def _step_temporaries_row(shape: _Shape, t: _Trainable, adamw: bool, device: str,
                          rollback: bool) -> dict:
    """The optimizer step's transients: the rollback copy and AdamW's ``sqrt(exp_avg_sq)``."""
    backup = t.n_train * t.s_n if rollback else 0
    if adamw:
        largest = _largest_trainable(shape, t.targets, t.lora_r) * t.s_opt
        temp = t.n_train * t.s_opt if device == "cuda" else 2 * largest
        how = (f"sqrt(exp_avg_sq) of all tensors at once (foreach): n x {t.s_opt}"
               if device == "cuda"
               else f"sqrt(exp_avg_sq) one tensor at a time: 2 x the largest ({largest:,} B)")
    else:
        temp, how = 0, "SGD: none"
    return _row("optimizer step temporaries", backup + temp, "step",
                (f"rollback copy of the trainable weights n x s_n = {backup:,} B; "
                 if backup else "no rollback copy; ") + how)


def _activations_row(shape: _Shape, t: _Trainable, run: _RunSizes, cfg) -> dict:
    """What the training forward of one micro-batch keeps for backward (module docstring's
    ``a_L``): shared prompts, gradient checkpointing or plain rows, plus LoRA's dropout."""
    from labkit.engine.forward import shares_prompts

    L, d, s = shape.L, shape.d, t.s
    P, C, T, b = run.P, run.C, run.T, run.b
    a_layer = shape.activation_bytes_per_token(s)
    per_layer = b * T * a_layer
    # Distinct prompts in a micro-batch: the whole batch holds p, a split of it at most min(p, b).
    # A trainer that shares prompts runs each once and its completions on top (labkit.engine.forward)
    u = min(run.p, b)
    tokens = b * T  # tokens through the training forward
    if shares_prompts(cfg) and u < b:
        tokens = u * P + b * C
        # each completion row's attention still saves the prompt's keys and values, repeated to
        # h heads: 2 h hd s per prompt position and row
        kv = 2 * shape.h * shape.hd * s
        activations = L * (tokens * a_layer + b * P * kv)
        act_formula = (f"shared prompts: L x ((u P + b C) x a_L + b P x 2 h hd s) = {L} x (({u} x "
                       f"{P} + {b} x {C}) x {a_layer} + {b} x {P} x {kv}) B, u = distinct "
                       f"prompts")
    elif cfg.gradient_checkpointing:
        activations = L * b * T * d * s + per_layer
        act_formula = (f"checkpointing: L x b x T x d x s (layer inputs) + one layer's b x T x "
                       f"a_L = {L} x {b} x {T} x {d} x {s} + {b} x {T} x {a_layer}")
    else:
        activations = L * per_layer
        act_formula = f"L x b x T x a_L = {L} x {b} x {T} x {a_layer} B/token"
    activations += 2 * tokens * d * s
    lora_dropout = getattr(cfg, "lora_dropout", 0.0) or 0.0
    if t.lora_r and lora_dropout > 0:
        inputs = sum(shape.linear_shapes()[n][0] for n in t.targets)
        # With checkpointing only the layer being recomputed holds its dropped inputs and masks.
        layers = 1 if cfg.gradient_checkpointing else L
        activations += layers * tokens * inputs * (s + 1)
        act_formula += f" + dropout: {layers} x {tokens:,} tokens x {inputs} inputs x (s + 1)"
    return _row("activations", activations, "train",
                act_formula + f" + final norm and output-layer input 2 x {tokens:,} tokens x d x s "
                f"(T = P + C = {P} + {C}, b = {b})")


def _logits_row(shape: _Shape, t: _Trainable, run: _RunSizes) -> dict:
    """The training logits and their gradient, plus the chunked log-probs' float32 chunks."""
    V, s, b, C = shape.V, t.s, run.b, run.C
    rows_logits = b * (C + 1)
    chunk_rows = min(rows_logits, max(1, _CHUNK_ELEMENTS // max(V, 1)))
    return _row("logits", 2 * rows_logits * V * s + 2 * chunk_rows * V * 4, "train",
                f"logits and their gradient 2 x b x (C+1) x V x s = 2 x {b} x {C + 1} x {V:,} x "
                f"{s} + two float32 chunks 2 x {chunk_rows} rows x V x 4")


def _keeps_graph_cache(cfg, t: _Trainable, device: str) -> bool:
    """Whether the run samples with a captured CUDA graph (:func:`labkit.decode.plan_decoding`:
    CUDA, the fixed loop, ``cuda_graphs``, no LoRA adapters), whose static KV cache stays
    allocated between calls, through the training forward and the optimizer step."""
    return (device == "cuda" and cfg.decode_path != "dynamic" and cfg.cuda_graphs
            and not t.lora_r)


def _overlapped(cfg) -> bool:
    """Whether a sampling thread samples while the trainer trains (``async_mode="overlapped"``,
    :class:`labkit.offpolicy.staleness.OverlappedSampler`)."""
    return cfg.async_mode == "overlapped"


def _sampler_bytes(cfg, t: _Trainable) -> int:
    """Bytes per element of the model that samples: ``sampling_dtype``'s, else the training
    dtype's."""
    return _BYTES[cfg.sampling_dtype] if cfg.sampling_dtype else t.s


def _sampling_rows(shape: _Shape, t: _Trainable, run: _RunSizes, cfg, graph: bool) -> list[dict]:
    """The KV cache of all G p rows sampled at once (in the sampler's dtype), and one decoding
    step's float32 logits.

    With a CUDA graph (``graph``) the cache is the captured step's static one: its length is
    rounded up to a multiple of :data:`labkit.decode.GRAPH_LENGTH_BUCKET` and it is live in
    every phase (a graph replays at fixed addresses, so the cache is kept for the next round).
    Measured on one H100 (Qwen3-0.6B shape, 16 x 8 x 128 tokens, ``docs/measurements``): without
    this the plan fell 7.5% short of the measured peak. In overlapped mode the sampling thread
    samples while the trainer trains and steps, so both rows are live in every phase."""
    from labkit.decode import GRAPH_LENGTH_BUCKET, graph_cache_length

    in_flight = run.G * run.p
    s = _sampler_bytes(cfg, t)
    length = graph_cache_length(run.T) if graph else run.T
    formula = (f"G x p x T x L x h_kv x hd x 2 x s = {run.G} x {run.p} x {length} x {shape.L} x "
               f"{shape.h_kv} x {shape.hd} x 2 x {s}")
    if graph:
        formula += (f" (T = {run.T} rounded up to a multiple of {GRAPH_LENGTH_BUCKET}: a CUDA "
                    f"graph's static cache, kept between rounds)")
    overlapped = " (the sampling thread's, while the trainer trains)" if _overlapped(cfg) else ""
    return [
        _row("KV cache (sampling)", in_flight * length * shape.L * shape.h_kv * shape.hd * 2 * s,
             _ALL_PHASES if graph or overlapped else "sampling", formula + overlapped),
        _row("sampling logits", 5 * in_flight * shape.V * 4,
             _ALL_PHASES if overlapped else "sampling",
             f"5 float32 (G p, V) buffers of one decoding step = 5 x {in_flight} x {shape.V:,} x 4"
             + overlapped),
    ]


def _other_captured_shapes(cfg, run: _RunSizes) -> tuple[list[tuple[str, int]],
                                                         list[tuple[str, int]]]:
    """The sampled batches besides the training batch that a CUDA graph captures, each a
    ``(description, rows)``, as ``(on the sampler, on the policy)``. The sampler (the policy, or
    its ``sampling_dtype`` or overlapped thread's copy) runs dynamic sampling's refill rounds:
    ``n G`` rows for each count n = 1 .. p - 1 of prompts still needed, all of which recur over a
    run. The policy runs evaluation (``eval_k`` samples of each prompt, in batches of
    :data:`labkit.evaluate.PROMPTS_PER_BATCH` prompts and a last, smaller batch; the eval set is
    ``eval_max_prompts``, else the task suite's eval split, the trainer's default) and ReMax's
    greedy baseline (p rows)."""
    from labkit.evaluate import PROMPTS_PER_BATCH
    from labkit.tasks.problems import DIFFICULTIES, EVAL_PER_CELL, FAMILIES

    refills = ([(f"refill {n} x {run.G}", n * run.G) for n in range(run.p - 1, 0, -1)]
               if cfg.dynamic_sampling and cfg.max_resample_rounds else [])
    policy = []
    if cfg.eval_every:
        prompts = cfg.eval_max_prompts or EVAL_PER_CELL * len(FAMILIES) * len(DIFFICULTIES)
        batches = sorted({min(prompts, PROMPTS_PER_BATCH), prompts % PROMPTS_PER_BATCH} - {0},
                         reverse=True)
        policy += [(f"evaluation {n} x {cfg.eval_k}", n * cfg.eval_k) for n in batches]
    if cfg.advantage_estimator == "remax":
        policy.append((f"ReMax greedy {run.p} x 1", run.p))
    return refills, policy


def _graph_caches_row(shape: _Shape, t: _Trainable, run: _RunSizes, cfg) -> dict | None:
    """The static KV caches that captured shapes other than the training batch keep between
    calls (:func:`_other_captured_shapes`), at most :data:`labkit.decode.GRAPHS_PER_MODEL` per
    model, the largest counted (the least recently used are dropped, so which stay depends on
    the order; the plan takes the worst). One model samples everything unless a
    ``sampling_dtype`` or overlapped copy samples the training batches; then the policy keeps
    its own. None when nothing else is captured."""
    from labkit.decode import GRAPHS_PER_MODEL, graph_cache_length

    refills, policy = _other_captured_shapes(cfg, run)
    if cfg.sampling_dtype or _overlapped(cfg):
        models = [(_sampler_bytes(cfg, t), refills, GRAPHS_PER_MODEL - 1),
                  (t.s, policy, GRAPHS_PER_MODEL)]
    else:  # the training batch's graph is one of the policy's
        models = [(t.s, refills + policy, GRAPHS_PER_MODEL - 1)]
    length = graph_cache_length(run.T)
    per_row = length * shape.L * shape.h_kv * shape.hd * 2
    total, kept = 0, []
    for s, shapes, room in models:
        for what, rows in sorted(shapes, key=lambda item: -item[1])[:room]:
            total += rows * per_row * s
            kept.append(f"{what} = {rows} rows (s = {s})")
    if not kept:
        return None
    return _row("KV caches (other graphs)", total, _ALL_PHASES,
                f"rows x T x L x h_kv x hd x 2 x s per captured shape, T = {length}: "
                f"{'; '.join(kept)} (at most {GRAPHS_PER_MODEL} graphs per model, the largest)")


def _sampler_copy_rows(t: _Trainable, cfg) -> list[dict]:
    """The copies of the weights that sample: the ``sampling_dtype`` copy of the policy (synced
    every step, :func:`labkit.engine.sampling.synced_sampling_model`) and, in overlapped mode,
    the sampling thread's two (the weights the trainer publishes and the thread's own), copies
    of the sampler's weights."""
    rows = []
    weights = t.n_params * t.s + (t.n_train * 4 if t.lora_r else 0)
    if cfg.sampling_dtype:
        s = _sampler_bytes(cfg, t)
        count = t.n_params + (t.n_train if t.lora_r else 0)
        weights = count * s
        rows.append(_row("sampler copy", weights, _ALL_PHASES,
                         f"the policy in {cfg.sampling_dtype}: "
                         f"{'(N + n)' if t.lora_r else 'N'} x s' = {count:,} x {s}"))
    if _overlapped(cfg):
        rows.append(_row("sampling thread's weights", 2 * weights, _ALL_PHASES,
                         f"overlapped: 2 copies of the sampler's weights (published by the "
                         f"trainer, the thread's own) = 2 x {weights:,} B"))
    return rows


def _model_copy_rows(shape: _Shape, t: _Trainable, cfg, adamw: bool,
                     activations: int) -> list[dict]:
    """The other models a run holds: the frozen reference (beta > 0 without LoRA) and PPO's
    critic with its activations (``advantage_estimator="gae"``)."""
    rows = []
    if cfg.needs_reference and not t.lora_r:
        rows.append(_row("reference model", t.n_params * t.s, _ALL_PHASES,
                         f"a frozen copy: N x s = {t.n_params:,} x {t.s}"))
    if cfg.advantage_estimator == "gae":
        n_critic = shape.parameters(with_output_layer=False) + shape.d + 1
        states = 2 if adamw else 0
        rows.append(_row("critic (PPO)", n_critic * t.s * (2 + states), _ALL_PHASES,
                         f"trunk + value head N_c = {n_critic:,}: weights, gradients"
                         f"{', 2 AdamW moments' if adamw else ''} x s"))
        rows.append(_row("critic activations (PPO)", activations, "train",
                         "the policy's activations, no logits (same trunk, same tokens)"))
    return rows


def _with_total(rows: list[dict]) -> pd.DataFrame:
    """The components as :func:`memory_plan`'s table: the ``GiB`` column and the ``total`` row,
    the largest phase."""
    plan = pd.DataFrame(rows).set_index("component")
    totals = phase_totals(plan)
    peak = totals.idxmax()
    total = pd.DataFrame([{"component": "total", "bytes": int(totals[peak]), "phases": peak,
                           "formula": f"largest phase: {peak} (sampling "
                                      f"{totals['sampling'] / GIB:.2f}, train "
                                      f"{totals['train'] / GIB:.2f}, step "
                                      f"{totals['step'] / GIB:.2f} GiB)"}]
                         ).set_index("component")
    plan = pd.concat([plan, total])
    plan.insert(1, "GiB", plan["bytes"] / GIB)
    return plan[["bytes", "GiB", "phases", "formula"]]


def _largest_trainable(shape: _Shape, targets, lora_r: int) -> int:
    """Elements of the largest trainable tensor (AdamW's per-tensor temporaries on the CPU)."""
    if lora_r:
        return max(lora_r * max(i, o) for n, (i, o) in shape.linear_shapes().items()
                   if n in targets)
    return max([shape.V * shape.d, *(i * o for i, o in shape.linear_shapes().values())])


def phase_totals(plan: pd.DataFrame) -> pd.Series:
    """Bytes live in each phase (sampling, train, step): the sum of the components listed in it.

    The phases never overlap in the trainer: sampling ends before the training forward, and the
    activations are freed before the optimizer steps, so a step's peak is the largest phase. (In
    overlapped mode a thread samples during the other two: its buffers are listed in all three.)
    """
    parts = plan.drop(index="total", errors="ignore")
    return pd.Series({phase: int(parts.loc[parts["phases"].str.contains(phase), "bytes"].sum())
                      for phase in PHASES})


def gpu_table(plan: pd.DataFrame, gpus: Sequence[float] = GPU_SIZES_GIB) -> pd.DataFrame:
    """One row per GPU size (GiB): the planned total, whether it fits and the headroom left.

    The planner's total leaves out the CUDA context and the allocator's caching (module
    docstring), so a plan within about 1 GiB of a card's size should be treated as not fitting.
    """
    total = _total_gib(plan)
    rows = [{"gpu_GiB": float(g), "planned_GiB": total, "fits": total <= float(g),
             "headroom_GiB": float(g) - total} for g in gpu_sizes(gpus)]
    return pd.DataFrame(rows)


def gpu_fits(plan: pd.DataFrame, gpu: float) -> bool:
    """True when the planned total is at most ``gpu`` GiB."""
    (size,) = gpu_sizes([gpu])
    return _total_gib(plan) <= size


def _total_gib(plan) -> float:
    """The planned total of a :func:`memory_plan` table."""
    if not isinstance(plan, pd.DataFrame) or "total" not in plan.index or "GiB" not in plan:
        raise TypeError(f"plan must be a memory_plan(...) table (a DataFrame with a 'total' row "
                        f"and a 'GiB' column), got {type(plan).__name__}")
    return float(plan.loc["total", "GiB"])


def gpu_sizes(gpus) -> list[float]:
    """``gpus`` as a list of sizes in GiB; ValueError unless a non-empty list of positive,
    finite numbers."""
    if isinstance(gpus, (str, bytes)) or not isinstance(gpus, Iterable):
        raise TypeError(f"gpus must be a list of positive sizes in GiB (e.g. {GPU_SIZES_GIB}), "
                        f"got {gpus!r}")
    sizes = list(gpus)
    if not sizes or not all(isinstance(g, (int, float)) and not isinstance(g, bool)
                            and math.isfinite(g) and g > 0 for g in sizes):
        raise ValueError(f"gpus must be positive sizes in GiB (e.g. {GPU_SIZES_GIB}), got "
                         f"{gpus!r}")
    return [float(g) for g in sizes]
