"""The memory bill's components, one row each (bytes, the phases it is live in, the formula in
words), from a model's shape, what trains and the run's sizes."""

from __future__ import annotations

from dataclasses import dataclass

from labkit.scale.memory.shape import _adapter_parameters, _Shape, _targets

#: The phases of a step whose peaks the total compares.
PHASES = ("sampling", "train", "step")
# the phases column of a component live throughout the step
_ALL_PHASES = ", ".join(PHASES)
_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2}
# float32 elements per chunk of the chunked log-probs (labkit.logprobs._CHUNK_ELEMENTS)
_CHUNK_ELEMENTS = 2**24


def _dtype_bytes(dtype: str, device: str) -> tuple[str, int]:
    if dtype == "auto":  # labkit.models.pick_dtype: bfloat16 on (recent) GPUs, float32 elsewhere
        dtype = "bfloat16" if device == "cuda" else "float32"
    if dtype not in _BYTES:
        raise ValueError(f"dtype must be 'auto' or one of {', '.join(_BYTES)}, got {dtype!r}")
    return dtype, _BYTES[dtype]


@dataclass(frozen=True)
class _Trainable:
    """What trains, and in which precision: the package docstring's ``N``, ``n``, ``r``, ``s``
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
    """The package docstring's run sizes: ``G``, ``p``, ``P``, ``C`` and ``b``; ``T = P + C``."""

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
    """What the training forward of one micro-batch keeps for backward (package docstring's
    ``a_L``): shared prompts, gradient checkpointing or plain rows, plus LoRA's dropout."""
    from labkit.training.forward import shares_prompts

    L, d, s = shape.L, shape.d, t.s
    P, C, T, b = run.P, run.C, run.T, run.b
    a_layer = shape.activation_bytes_per_token(s)
    per_layer = b * T * a_layer
    # Distinct prompts in a micro-batch: the whole batch holds p, a split of it at most min(p, b).
    # A trainer that shares prompts runs each once and its completions on top (labkit.training.forward)
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
    """Whether the run samples with a captured CUDA graph (:func:`labkit.sampling.plan_decoding`:
    CUDA, the fixed loop, ``cuda_graphs``, no LoRA adapters), whose static KV cache stays
    allocated between calls, through the training forward and the optimizer step."""
    return (device == "cuda" and cfg.decode_path != "dynamic" and cfg.cuda_graphs
            and not t.lora_r)


def _overlapped(cfg) -> bool:
    """Whether a sampling thread samples while the trainer trains (``async_mode="overlapped"``,
    :class:`labkit.offpolicy.staleness.OverlappedSource`)."""
    return cfg.async_mode == "overlapped"


def _sampler_bytes(cfg, t: _Trainable) -> int:
    """Bytes per element of the model that samples: ``sampling_dtype``'s, else the training
    dtype's."""
    return _BYTES[cfg.sampling_dtype] if cfg.sampling_dtype else t.s


def _sampling_rows(shape: _Shape, t: _Trainable, run: _RunSizes, cfg, graph: bool) -> list[dict]:
    """The KV cache of all G p rows sampled at once (in the sampler's dtype), and one decoding
    step's float32 logits.

    With a CUDA graph (``graph``) the cache is the captured step's static one: its length is
    rounded up to a multiple of :data:`labkit.sampling.GRAPH_LENGTH_BUCKET` and it is live in
    every phase (a graph replays at fixed addresses, so the cache is kept for the next round).
    Measured on one H100 (Qwen3-0.6B shape, 16 x 8 x 128 tokens, ``docs/measurements``): without
    this the plan fell 7.5% short of the measured peak. In overlapped mode the sampling thread
    samples while the trainer trains and steps, so both rows are live in every phase."""
    from labkit.sampling import GRAPH_LENGTH_BUCKET, graph_cache_length

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
    calls (:func:`_other_captured_shapes`), at most :data:`labkit.sampling.GRAPHS_PER_MODEL` per
    model, the largest counted (the least recently used are dropped, so which stay depends on
    the order; the plan takes the worst). One model samples everything unless a
    ``sampling_dtype`` or overlapped copy samples the training batches; then the policy keeps
    its own. None when nothing else is captured."""
    from labkit.sampling import GRAPHS_PER_MODEL, graph_cache_length

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
    every step, :func:`labkit.training.batches.synced_sampling_copy`) and, in overlapped mode,
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


def _largest_trainable(shape: _Shape, targets, lora_r: int) -> int:
    """Elements of the largest trainable tensor (AdamW's per-tensor temporaries on the CPU)."""
    if lora_r:
        return max(lora_r * max(i, o) for n, (i, o) in shape.linear_shapes().items()
                   if n in targets)
    return max([shape.V * shape.d, *(i * o for i, o in shape.linear_shapes().values())])
