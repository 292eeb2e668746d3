"""The fixed-shape decode loop, a GPU's: a static KV cache, finished rows kept in place, no
per-token host sync, and the decode step replayed as a CUDA graph.

The KV cache is allocated once for prompt + ``max_completion_length`` (transformers'
``StaticCache``), finished rows stay in the batch with pad as input and nothing recorded, the
attention mask is a preallocated (B, T) boolean whose next column is switched on in place, and
whether every row has finished is read every :data:`CHECK_EVERY` tokens, not after each one.
Every decode step then has the same shapes and the same tensor addresses, which is what a CUDA
graph needs: the step (mask column, forward, logits copy, counters) is captured the second time a
shape is sampled and replayed from then on (:class:`Workspace`, kept by :class:`CapturedSteps`);
sampling itself stays eager, on the device, with no read back (:mod:`labkit.sampling.draw`).
Finished rows are not compacted: a GPU's decode step reads every weight whatever the number of
rows, so dead rows cost little, and compacting would make a shape (and a capture) per size.

Why a GPU needs this loop: on one H100 (torch 2.11+cu130, transformers 5.17, measured by the
project's GPU check, not here) a sampling round of the tiny Qwen (128 rows, 41 decode steps) took
26.5 ms per decode step with the dynamic loop, the GPU 3-6% busy; 83% of the host time was cuDNN
attention planning an execution plan for every new (batch, key length) shape, and the rest
launching about 18,000 small kernels per round. Switching cuDNN's attention off alone gave
4.5 ms per step. A fixed shape removes the re-planning, and a graph replays a step's kernels in
one launch.

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

import torch

from labkit.runtime.compat import cache_kwargs
from labkit.sampling.draw import draws_live_rows_only, exponential_noise, sample_next

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


#: Captured steps a :class:`CapturedSteps` keeps per model, the least recently used dropped first (a run's training and
#: evaluation batches, an episode's first turn...). Each keeps its static KV cache allocated
#: between calls (a graph replays at fixed addresses), so on a GPU the cache that
#: :func:`labkit.scale.memory.memory_plan` counts in the sampling phase stays allocated while the
#: step trains.
GRAPHS_PER_MODEL = 4


class Workspace:
    """The fixed loop's buffers for one (model, rows, cache length): a static KV cache, the next
    input ids and positions, the key mask, the write column and the logits, all at fixed
    addresses, and (on CUDA) the captured decode step."""

    def __init__(self, model, rows: int, length: int, vocab: int, dtype: torch.dtype, device):
        from transformers import StaticCache

        config = model.config.get_text_config(decoder=True) if hasattr(
            model.config, "get_text_config") else model.config
        # no reference to the model: CapturedSteps holds it weakly
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


class CapturedSteps:
    """The fixed loop's workspaces kept between calls, per model (held weakly: they go with the
    model), and the shapes each model has sampled. A shape is captured as a CUDA graph the second
    time it is sampled: a run's training and evaluation batches come back every step, while an
    episode's later turns (fewer rows each time) mostly do not, and a capture costs a few eager
    steps. A model whose capture failed is remembered with the reason, so it decodes with eager
    steps without trying again at every call. One belongs to a
    :class:`~labkit.sampling.Decoder`, and lives as long as it does."""

    def __init__(self):
        self._workspaces: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._shapes_seen: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._failures: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def failure(self, model) -> str | None:
        """Why ``model``'s decode step could not be captured, or None when no capture failed."""
        return self._failures.get(model)

    def failed(self, model, reason: str) -> None:
        """Remember that ``model``'s capture failed, and drop its kept workspaces."""
        self._failures[model] = reason
        self._workspaces.pop(model, None)

    def kept(self, model) -> list[Workspace]:
        """``model``'s kept workspaces, least recently used first."""
        return list(self._workspaces.get(model, {}).values())

    def workspace(self, model, rows: int, length: int, vocab: int, graph: bool) -> Workspace:
        """A workspace for this shape: a new one without a graph, or the model's kept one for
        the shape (captured at its second use). A graph reads the weights at their addresses, so
        the key includes every parameter's address: weights updated in place (an optimizer step)
        are seen by the next replay; weights moved or replaced get a new capture. At most
        :data:`GRAPHS_PER_MODEL` are kept per model, the least recently used dropped first."""
        param = next(model.parameters())
        key = (rows, length, vocab, param.dtype, tuple(p.data_ptr() for p in model.parameters()))
        seen = self._shapes_seen.setdefault(model, set())
        if graph and key not in seen and len(seen) < 1024:  # past 1024 shapes, none is captured
            seen.add(key)
            graph = False
        if not graph:
            return Workspace(model, rows, length, vocab, param.dtype, param.device)
        cached = self._workspaces.setdefault(model, {})
        if key in cached:
            cached[key] = cached.pop(key)  # most recently used last
            return cached[key]
        while len(cached) >= GRAPHS_PER_MODEL:
            cached.pop(next(iter(cached)))
        workspace = Workspace(model, rows, length, vocab, param.dtype, param.device)
        workspace.kept = True
        cached[key] = workspace
        return workspace


def decode_fixed(model, prefill_cache, logits, prompt_mask, next_positions, *, repeats: int,
                 max_completion_length: int, temperature: float, top_p: float, top_k: int,
                 greedy: bool, generator, eos_id: int, pad_id: int, cuda_graph: bool,
                 captured: CapturedSteps, check_every: int | None = None):
    """The fixed loop after the prefill. ``prefill_cache`` holds the N prompts' keys and values;
    ``logits`` (B, V), ``prompt_mask`` (B, P) and ``next_positions`` (B,) are already repeated
    ``repeats`` times (B = N x repeats). Returns ``(tokens, logprobs, entropies, finished_at)``
    as the dynamic loop does: (B, L) tokens (pad after the end), their log-probs and entropies
    (0 after the end), and the step each row finished at (-1: truncated). ``captured``: the
    caller's kept workspaces and graphs (its :class:`~labkit.sampling.Decoder`'s). ``check_every``:
    tokens between two reads of the finished rows where the live rows are not counted every
    step (None: :data:`CHECK_EVERY`)."""
    check_every = CHECK_EVERY if check_every is None else check_every
    rows, width = prompt_mask.shape
    device = prompt_mask.device
    match_stream = draws_live_rows_only(device)
    length = width + max_completion_length
    cuda_graph = cuda_graph and captured.failure(model) is None
    if cuda_graph:
        length = graph_cache_length(length)
    workspace = captured.workspace(model, rows, length, logits.size(-1), cuda_graph)
    if workspace.kept and workspace.graph is None:
        workspace.load(prefill_cache, repeats, prompt_mask, next_positions)
        try:
            workspace.capture(model)
        except RuntimeError as error:  # e.g. a forward that reads a value back to the host
            captured.failed(model, str(error))
            warnings.warn(f"decode loop: the decode step of {type(model).__name__} could not be "
                          f"captured as a CUDA graph ({error}); it decodes with eager steps "
                          f"from now on. Set cuda_graphs=False to skip the attempt.",
                          stacklevel=3)
            workspace = captured.workspace(model, rows, length, logits.size(-1), False)
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
        noise = None if greedy else exponential_noise(workspace.logits, alive, live_rows, generator)
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


__all__ = ["CHECK_EVERY", "GRAPHS_PER_MODEL", "GRAPH_LENGTH_BUCKET", "CapturedSteps",
           "Workspace", "decode_fixed", "graph_cache_length"]
