"""Fixed-shape decoding for a GPU: a static KV cache, finished rows kept in place, no per-token
host sync, and the decode step replayed as a CUDA graph.

:func:`labkit.rollout.generate` has two decode loops after one shared prefill:

* the **dynamic** loop (:mod:`labkit.rollout`): the KV cache grows by one position per token and
  finished rows leave the batch, so every step has a new shape. On a CPU that is the fast loop:
  a step costs what its live rows cost, and most of the lab's completions end early;
* the **fixed** loop (:func:`decode_fixed`): the KV cache is allocated once for prompt +
  ``max_completion_length`` (transformers' ``StaticCache``), finished rows stay in the batch with
  pad as input and nothing recorded, the attention mask is a preallocated (B, T) boolean whose
  next column is switched on in place, and whether every row has finished is read every
  :data:`CHECK_EVERY` tokens, not after each one. Every decode step then has the same shapes and
  the same tensor addresses, which is what a CUDA graph needs: the step (mask column, forward,
  logits copy, counters) is captured the second time a shape is sampled and replayed from then
  on (:class:`_Workspace`); sampling itself stays eager, on the device, with no read back.
  Finished rows are not compacted: a GPU's decode step reads every weight whatever the number
  of rows, so dead rows cost little, and compacting would make a shape (and a capture) per size.

Why a GPU needs the second loop: on one H100 (torch 2.11+cu130, transformers 5.17, measured by
the project's GPU check, not here) a sampling round of the tiny Qwen (128 rows, 41 decode steps)
took 26.5 ms per decode step with the GPU 3-6% busy; 83% of the host time was cuDNN attention
planning an execution plan for every new (batch, key length) shape, and the rest launching
about 18,000 small kernels per round. Switching cuDNN's attention off alone gave 4.5 ms per step.
A fixed shape removes the re-planning, and a graph replays a step's kernels in one launch.

Which loop runs (:func:`plan_decoding`, ``TrainConfig.decode_path`` and ``cuda_graphs``):

=====================================================  ========================================
situation                                              loop
=====================================================  ========================================
CUDA, ``decode_path="auto"``                           fixed, replayed as a CUDA graph
CPU or MPS, ``"auto"``                                 dynamic (named fallback: the device)
``"fixed"`` on any device                              fixed (graph on CUDA only)
model without static-cache support, sliding-window or  dynamic, or a refusal when ``"fixed"``
hybrid cache layers, attention other than sdpa/eager   was asked for
``cuda_graphs=False``; peft (LoRA) adapters            fixed, not captured (eager steps): a
                                                       graph would replay whichever adapter
                                                       state it was captured in
a capture that fails                                   fixed, eager, with a warning saying why
=====================================================  ========================================

Randomness. Sampling draws ``multinomial(probs, 1)``, which torch computes as
``argmax(probs / q)`` with ``q ~ Exp(1)`` drawn from the generator, one number per vocabulary
entry of each row it samples. The dynamic loop samples the live rows only, so how many numbers a
step draws depends on how many rows are still alive. The fixed loop keeps these semantics
(:func:`_noise`):

* on the CPU (:func:`draws_live_rows_only`) it reads the number of live rows (free: there is no
  device to wait for), draws exactly that many rows of Exp(1) and hands them to the live rows in
  order. The CPU generator yields the same numbers for one draw of n as for the first n of a
  longer draw, so every step sees the dynamic loop's numbers: the same tokens, and the
  generator ends in the same state (``tests/test_rollout_fixed.py`` checks both, and that
  drawing for every row would diverge after the first row finishes);
* elsewhere (CUDA) every row draws every step, finished ones included, so no host read is
  needed. The numbers then come from another stretch of the stream (same distribution): a
  seeded GPU run is reproducible on this loop, not token for token equal to the dynamic loop's,
  which it could not be anyway (CUDA's generator hands out numbers in blocks whose size depends
  on the draw's).

Floating point: a static cache attends over T positions with the unwritten ones masked, the
dynamic cache over the written ones only, and a batch that keeps its finished rows runs matrix
products of another height. Both change the summation order, so the log-probs and entropies of
the two loops agree to float rounding, not bit for bit: within 1.2e-5 in float32 over 30 seeded
rounds of the tiny Qwen (6 seeds x greedy, plain, top-k, top-p and temperatures 0.3-1.3), whose
tokens were equal in all of them. The CPU default stays the dynamic loop, whose numbers every
notebook's committed outputs come from.
"""

from __future__ import annotations

import warnings
import weakref
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch

from labkit.runtime.compat import cache_kwargs

#: ``decode_path`` values: ``auto`` = the fixed loop on CUDA, the dynamic loop elsewhere.
DECODE_PATHS = ("auto", "dynamic", "fixed")
#: Tokens between two reads of "has every row finished?" in the fixed loop on a GPU. Each read
#: waits for the GPU to drain its queue; after the last row finishes, at most this many steps
#: of padding are computed. (On the CPU the loop reads the count every step: it costs nothing.)
CHECK_EVERY = 8
#: Static-cache lengths under a CUDA graph are rounded up to a multiple of this, so rounds whose
#: prompts differ by a few tokens replay the same captured step instead of capturing another.
GRAPH_LENGTH_BUCKET = 64


def graph_cache_length(length: int) -> int:
    """The static KV cache length a captured decode step allocates for ``length`` tokens (prompt
    plus completion): rounded up to a multiple of :data:`GRAPH_LENGTH_BUCKET`. The memory planner
    counts the same length (:mod:`labkit.scale.memory`)."""
    return -(-length // GRAPH_LENGTH_BUCKET) * GRAPH_LENGTH_BUCKET


#: Captured steps kept per model, the least recently used dropped first (a run's training and
#: evaluation batches, an episode's first turn...). Each keeps its static KV cache allocated
#: between calls (a graph replays at fixed addresses), so on a GPU the cache that
#: :func:`labkit.scale.memory.memory_plan` counts in the sampling phase stays allocated while the
#: step trains.
GRAPHS_PER_MODEL = 4


@dataclass(frozen=True)
class DecodeSettings:
    """What the caller asked for: ``path`` (one of :data:`DECODE_PATHS`) and ``cuda_graphs``."""

    path: str = "auto"
    cuda_graphs: bool = True

    def __post_init__(self):
        if self.path not in DECODE_PATHS:
            raise ValueError(f"decode_path must be one of {DECODE_PATHS}, got {self.path!r}")
        if not isinstance(self.cuda_graphs, bool):
            raise TypeError(f"cuda_graphs must be True or False, got {self.cuda_graphs!r}")


#: The enclosing :func:`decode_settings` (None: the defaults).
_SETTINGS: ContextVar[DecodeSettings | None] = ContextVar("labkit_decode_settings", default=None)


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Set logits outside the top-k / nucleus top-p set to -inf. ``logits``: (B, V)."""
    if top_k and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        # drop a token when the mass before it already reaches top_p (the first always stays)
        drop_sorted = (cum - sorted_logits.softmax(-1)) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


@contextmanager
def decode_settings(path: str | None = None, cuda_graphs: bool | None = None):
    """Within the block, :func:`labkit.rollout.generate` (and everything that calls it:
    evaluation, rejection sampling, episodes) decodes with these settings unless a call names its
    own. The trainer wraps its sampling and evaluation in its config's ``decode_path`` and
    ``cuda_graphs``."""
    current = _SETTINGS.get() or DecodeSettings()
    token = _SETTINGS.set(DecodeSettings(current.path if path is None else path,
                                         current.cuda_graphs if cuda_graphs is None
                                         else cuda_graphs))
    try:
        yield
    finally:
        _SETTINGS.reset(token)


def current_settings(path: str | None = None, cuda_graphs: bool | None = None) -> DecodeSettings:
    """The settings a call decodes with: its own arguments, else the enclosing
    :func:`decode_settings`, else the defaults (``auto``, graphs on)."""
    current = _SETTINGS.get() or DecodeSettings()
    return DecodeSettings(current.path if path is None else path,
                          current.cuda_graphs if cuda_graphs is None else cuda_graphs)


@dataclass(frozen=True)
class DecodePlan:
    """Which decode loop runs for a model, and why (printed by the trainer on a GPU)."""

    path: str
    """``"dynamic"`` or ``"fixed"``"""
    cuda_graph: bool
    """the fixed loop's step is captured and replayed"""
    reason: str
    """why this loop, or which fallback was taken"""

    def __str__(self) -> str:
        if self.path == "dynamic":
            what = "dynamic loop (growing KV cache, finished rows dropped every step)"
        elif self.cuda_graph:
            what = "fixed-shape loop (static KV cache), decode step replayed as a CUDA graph"
        else:
            what = "fixed-shape loop (static KV cache), eager decode steps"
        return f"sampler: {what}; {self.reason}"


def static_cache_problem(model) -> str | None:
    """Why the fixed loop cannot drive ``model`` (None when it can): it needs transformers'
    static-cache support, full-attention cache layers only, and an attention implementation that
    takes a prepared (B, 1, 1, T) mask (sdpa or eager)."""
    name = type(model).__name__
    if not getattr(model, "_can_compile_fullgraph", False):
        return f"{name} does not declare static-cache support (_can_compile_fullgraph)"
    config = model.config.get_text_config(decoder=True) if hasattr(
        model.config, "get_text_config") else model.config
    attention = getattr(config, "_attn_implementation", None)
    if attention not in ("sdpa", "eager"):
        return (f"{name} runs attention implementation {attention!r}; the fixed loop passes a "
                f"prepared mask, which sdpa and eager take")
    kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
    if kinds != {"full_attention"}:
        return (f"{name} has {sorted(kinds)} layers; the fixed loop drives full-attention cache "
                f"layers only")
    try:
        from transformers.cache_utils import StaticLayer

        counted = hasattr(StaticLayer(max_cache_len=1), "cumulative_length")
    except (ImportError, TypeError):
        counted = False
    if not counted:
        return ("this transformers' static cache layer is not the one labkit drives (a "
                "StaticLayer(max_cache_len) with a cumulative_length counter, transformers "
                "5.17 to 5.24)")
    return None


def _has_switchable_adapters(model) -> bool:
    """peft adapters (labkit.engine.lora): they can be disabled for one call and enabled for the
    next."""
    return getattr(model, "peft_config", None) is not None


def plan_decoding(model, path: str = "auto", cuda_graphs: bool = True) -> DecodePlan:
    """The decode loop :func:`labkit.rollout.generate` runs for ``model`` under these settings.

    ``path="fixed"`` on a model the fixed loop cannot drive is refused (ValueError naming why);
    ``"auto"`` falls back to the dynamic loop and says why.
    """
    settings = DecodeSettings(path, cuda_graphs)
    device = next(model.parameters()).device
    if settings.path == "dynamic":
        return DecodePlan("dynamic", False, "decode_path='dynamic' was asked for")
    problem = static_cache_problem(model)
    if problem is not None:
        if settings.path == "fixed":
            raise ValueError(f"decode_path='fixed' needs a static KV cache, and {problem}; use "
                             f"decode_path='auto' or 'dynamic'")
        return DecodePlan("dynamic", False, f"fallback: {problem}")
    if settings.path == "auto" and device.type != "cuda":
        return DecodePlan("dynamic", False,
                          f"fallback: {device.type} (the fixed loop is for CUDA; on a CPU the "
                          f"dynamic loop computes live rows only; see labkit.decode)")
    if device.type != "cuda":
        return DecodePlan("fixed", False, f"decode_path='fixed' was asked for; no CUDA graph "
                                          f"on {device.type}")
    if not settings.cuda_graphs:
        return DecodePlan("fixed", False, "cuda_graphs=False")
    if _has_switchable_adapters(model):
        return DecodePlan("fixed", False,
                          "not captured: peft (LoRA) adapters can be switched on and off between "
                          "calls, and a graph replays the state it was captured in")
    return DecodePlan("fixed", True, "on CUDA with cuda_graphs=True")


class _Workspace:
    """The fixed loop's buffers for one (model, rows, cache length): a static KV cache, the next
    input ids and positions, the key mask, the write column and the logits, all at fixed
    addresses, and (on CUDA) the captured decode step."""

    def __init__(self, model, rows: int, length: int, vocab: int, dtype: torch.dtype, device):
        from transformers import StaticCache

        config = model.config.get_text_config(decoder=True) if hasattr(
            model.config, "get_text_config") else model.config
        # no reference to the model: the per-model cache of workspaces holds it weakly
        self.rows, self.length = rows, length
        self.cache = StaticCache(config=config, max_cache_len=length)
        self.ids = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.positions = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.key_mask = torch.zeros((rows, length), dtype=torch.bool, device=device)
        self.column = torch.zeros(1, dtype=torch.long, device=device)
        self.logits = torch.zeros((rows, vocab), dtype=torch.float32, device=device)
        self.eager_mask = config._attn_implementation == "eager"
        self.min_value = torch.finfo(dtype).min
        self.dtype = dtype
        self.graph = None
        self.kept = False  # True: kept for the next call of this shape, and captured

    def load(self, prefill_cache, repeats: int, prompt_mask, next_positions) -> None:
        """Copy the prefill's keys and values (each prompt's repeated ``repeats`` times) into the
        static cache's first P positions, and reset the mask, positions and counters."""
        width = prompt_mask.size(1)
        for static, prefill in zip(self.cache.layers, prefill_cache.layers, strict=True):
            keys = prefill.keys.repeat_interleave(repeats, dim=0)
            values = prefill.values.repeat_interleave(repeats, dim=0)
            if not static.is_initialized:
                static.update(keys, values)  # allocates (rows, heads, length, dim), writes [0, P)
            else:
                static.keys[:, :, :width].copy_(keys)
                static.values[:, :, :width].copy_(values)
            static.cumulative_length.fill_(width)
        self.key_mask.zero_()
        self.key_mask[:, :width] = prompt_mask.bool()
        self.column.fill_(width)
        self.positions.copy_(next_positions[:, None])

    def step(self, model) -> None:
        """One decode step of ``model`` on the buffers: switch on the column being written, run
        the model on ``ids`` at ``positions``, keep the last logits, advance the counters. Every
        shape and address is the same at every step, so this can be captured."""
        self.key_mask.index_fill_(1, self.column, True)
        mask = self.key_mask[:, None, None, :]
        if self.eager_mask:  # eager attention adds its mask: 0 where allowed, the minimum elsewhere
            mask = torch.zeros(mask.shape, dtype=self.dtype, device=mask.device).masked_fill(
                ~mask, self.min_value)
        out = model(input_ids=self.ids, attention_mask=mask, position_ids=self.positions,
                         **cache_kwargs(self.cache))
        self.logits.copy_(out.logits[:, -1])
        self.column.add_(1)
        self.positions.add_(1)

    def capture(self, model) -> None:
        """Capture :meth:`step` as a CUDA graph (after warm-up steps on a side stream, as CUDA
        graphs require). The warm-up writes into the buffers; :meth:`load` resets them."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self.step(model)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.step(model)
        self.graph = graph

    def run(self, model) -> None:
        """One decode step: the captured one replayed, else :meth:`step`."""
        if self.graph is not None:
            self.graph.replay()
        else:
            self.step(model)


_WORKSPACES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: The shapes each model has sampled (captured from their second use).
_SHAPES_SEEN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: Models whose decode step failed to capture, and why (they decode with eager steps, without
#: trying again at every call).
_CAPTURE_FAILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def capture_failure(model) -> str | None:
    """Why ``model``'s decode step could not be captured (it decodes with eager steps), or None
    when no capture failed."""
    return _CAPTURE_FAILED.get(model)


def _workspace(model, rows: int, length: int, vocab: int, graph: bool) -> _Workspace:
    """A workspace for this shape: a new one without a graph, or the model's captured one for
    the shape. A shape is captured the second time it is sampled: a run's training and
    evaluation batches come back every step, while an episode's later turns (fewer rows each
    time) mostly do not, and a capture costs a few eager steps. A graph reads the weights at
    their addresses, so the key includes every parameter's address: weights updated in place (an
    optimizer step) are seen by the next replay; weights moved or replaced get a new capture."""
    param = next(model.parameters())
    key = (rows, length, vocab, param.dtype, tuple(p.data_ptr() for p in model.parameters()))
    seen = _SHAPES_SEEN.setdefault(model, set())
    if graph and key not in seen and len(seen) < 1024:  # past 1024 shapes, none is captured
        seen.add(key)
        graph = False
    if not graph:
        return _Workspace(model, rows, length, vocab, param.dtype, param.device)
    cached = _WORKSPACES.setdefault(model, {})
    if key in cached:
        cached[key] = cached.pop(key)  # most recently used last
        return cached[key]
    while len(cached) >= GRAPHS_PER_MODEL:
        cached.pop(next(iter(cached)))
    workspace = _Workspace(model, rows, length, vocab, param.dtype, param.device)
    workspace.kept = True
    cached[key] = workspace
    return workspace


def draws_live_rows_only(device) -> bool:
    """Whether the fixed loop draws random numbers for the live rows only, as the dynamic loop
    does (see the module docstring): on the CPU, where counting the live rows needs no device
    sync; elsewhere every row draws."""
    return torch.device(device).type == "cpu"


def _noise(probs: torch.Tensor, alive: torch.Tensor, live_rows: int | None, generator):
    """Exp(1) noise for ``argmax(probs / noise)`` (what ``torch.multinomial(probs, 1)`` computes).
    ``live_rows`` given: draw that many rows and hand them to the live rows in order, as the
    dynamic loop's draw over its live rows does; None: every row draws (no host read)."""
    if live_rows is None:
        return torch.empty_like(probs).exponential_(generator=generator)
    noise = torch.ones_like(probs)
    noise[alive] = torch.empty((live_rows, probs.size(1)), dtype=probs.dtype,
                               device=probs.device).exponential_(generator=generator)
    return noise


def sample_next(logits, *, temperature: float, top_p: float, top_k: int, greedy: bool,
                noise=None):
    """One sampling step over (B, V) float32 logits: ``(token, log-prob, entropy)`` per row.

    The log-prob and entropy are those of the temperature-scaled full softmax (see
    :mod:`labkit.rollout`); ``noise`` is the Exp(1) draw for sampling (unused when greedy).
    """

    scaled = logits if greedy else logits / temperature
    logp_all = torch.log_softmax(scaled, dim=-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1).nan_to_num(0.0)
    if greedy:
        token = scaled.argmax(-1)
    else:
        token = (filter_logits(scaled, top_k, top_p).softmax(-1) / noise).argmax(-1)
    return token, logp_all.gather(-1, token[:, None]).squeeze(-1), entropy


def decode_fixed(model, prefill_cache, logits, prompt_mask, next_positions, *, repeats: int,
                 max_completion_length: int, temperature: float, top_p: float, top_k: int,
                 greedy: bool, generator, eos_id: int, pad_id: int, cuda_graph: bool,
                 check_every: int = CHECK_EVERY):
    """The fixed loop after the prefill. ``prefill_cache`` holds the N prompts' keys and values;
    ``logits`` (B, V), ``prompt_mask`` (B, P) and ``next_positions`` (B,) are already repeated
    ``repeats`` times (B = N x repeats). Returns ``(tokens, logprobs, entropies, finished_at)``
    as the dynamic loop does: (B, L) tokens (pad after the end), their log-probs and entropies
    (0 after the end), and the step each row finished at (-1: truncated). ``check_every``: tokens
    between two reads of the finished rows where the live rows are not counted every step."""
    rows, width = prompt_mask.shape
    device = prompt_mask.device
    match_stream = draws_live_rows_only(device)
    length = width + max_completion_length
    cuda_graph = cuda_graph and model not in _CAPTURE_FAILED
    if cuda_graph:
        length = graph_cache_length(length)
    workspace = _workspace(model, rows, length, logits.size(-1), cuda_graph)
    if workspace.kept and workspace.graph is None:
        workspace.load(prefill_cache, repeats, prompt_mask, next_positions)
        try:
            workspace.capture(model)
        except RuntimeError as error:  # e.g. a forward that reads a value back to the host
            _CAPTURE_FAILED[model] = str(error)
            _WORKSPACES.pop(model, None)
            warnings.warn(f"sampler: the decode step of {type(model).__name__} could not be "
                          f"captured as a CUDA graph ({error}); it decodes with eager steps "
                          f"from now on. Set cuda_graphs=False to skip the attempt.",
                          stacklevel=3)
            workspace = _workspace(model, rows, length, logits.size(-1), False)
    workspace.load(prefill_cache, repeats, prompt_mask, next_positions)
    workspace.logits.copy_(logits)

    tokens = torch.full((rows, max_completion_length), pad_id, dtype=torch.long, device=device)
    logps = torch.zeros((rows, max_completion_length), dtype=torch.float32, device=device)
    entropies = torch.zeros_like(logps)
    finished_at = torch.full((rows,), -1, dtype=torch.long, device=device)
    alive = torch.ones(rows, dtype=torch.bool, device=device)
    not_finite = torch.zeros(rows, dtype=torch.bool, device=device)
    live_rows = rows if match_stream else None
    for step in range(max_completion_length):
        noise = None if greedy else _noise(workspace.logits, alive, live_rows, generator)
        token, logp, entropy = sample_next(workspace.logits, temperature=temperature, top_p=top_p,
                                           top_k=top_k, greedy=greedy, noise=noise)
        tokens[:, step] = torch.where(alive, token, pad_id)
        logps[:, step] = torch.where(alive, logp, 0.0)
        entropies[:, step] = torch.where(alive, entropy, 0.0)
        not_finite |= alive & torch.isnan(logp)
        done = alive & (token == eos_id)
        finished_at = torch.where(done, step, finished_at)
        alive = alive & ~done
        if match_stream or (step + 1) % check_every == 0 or step + 1 == max_completion_length:
            live, bad = torch.stack([alive.sum(), not_finite.sum()]).tolist()
            if bad:
                row = int(not_finite.nonzero()[0])
                raise FloatingPointError(
                    f"sampling: row {row}'s next-token distribution is NaN by decode step "
                    f"{step}: the model's logits are not finite (its weights or inputs hold "
                    f"NaN/inf)")
            if match_stream:
                live_rows = live
            if live == 0:
                break
        if step + 1 == max_completion_length:
            break
        workspace.ids.copy_(torch.where(alive, token, pad_id)[:, None])
        workspace.run(model)
    return tokens, logps, entropies, finished_at


__all__ = ["CHECK_EVERY", "DECODE_PATHS", "DecodePlan", "DecodeSettings", "capture_failure",
           "current_settings", "decode_fixed", "decode_settings", "draws_live_rows_only",
           "graph_cache_length", "plan_decoding", "sample_next",
           "static_cache_problem"]
