"""Which decode loop samples for a model, and why.

:func:`labkit.sampling.generate` has two decode loops after one shared prefill: the **dynamic**
loop (:mod:`labkit.sampling.dynamic`: the KV cache grows by one position per token and finished
rows leave the batch, the fast loop on a CPU, where a step costs what its live rows cost) and the
**fixed-shape** loop (:mod:`labkit.sampling.fixed`: a static KV cache, finished rows kept in
place, the decode step replayed as a CUDA graph, the fast loop on a GPU). :func:`plan_decoding`
chooses from the model, its device and the caller's ``decode_path`` and ``cuda_graphs``
(``TrainConfig``'s fields of those names):

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
"""

from __future__ import annotations

from dataclasses import dataclass

#: ``decode_path`` values: ``auto`` = the fixed loop on CUDA, the dynamic loop elsewhere.
DECODE_PATHS = ("auto", "dynamic", "fixed")


def check_settings(path: str, cuda_graphs: bool) -> None:
    """Refuse a ``decode_path`` outside :data:`DECODE_PATHS` or a ``cuda_graphs`` that is not a
    bool, naming the value."""
    if path not in DECODE_PATHS:
        raise ValueError(f"decode_path must be one of {DECODE_PATHS}, got {path!r}")
    if not isinstance(cuda_graphs, bool):
        raise TypeError(f"cuda_graphs must be True or False, got {cuda_graphs!r}")


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
        return f"decode loop: {what}; {self.reason}"


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
    """peft adapters (labkit.training.lora): they can be disabled for one call and enabled for the
    next."""
    return getattr(model, "peft_config", None) is not None


def plan_decoding(model, path: str = "auto", cuda_graphs: bool = True) -> DecodePlan:
    """The decode loop :func:`labkit.sampling.generate` runs for ``model`` under these settings.

    ``path="fixed"`` on a model the fixed loop cannot drive is refused (ValueError naming why);
    ``"auto"`` falls back to the dynamic loop and says why.
    """
    check_settings(path, cuda_graphs)
    device = next(model.parameters()).device
    if path == "dynamic":
        return DecodePlan("dynamic", False, "decode_path='dynamic' was asked for")
    problem = static_cache_problem(model)
    if problem is not None:
        if path == "fixed":
            raise ValueError(f"decode_path='fixed' needs a static KV cache, and {problem}; use "
                             f"decode_path='auto' or 'dynamic'")
        return DecodePlan("dynamic", False, f"fallback: {problem}")
    if path == "auto" and device.type != "cuda":
        return DecodePlan("dynamic", False,
                          f"fallback: {device.type} (the fixed loop is for CUDA; on a CPU the "
                          f"dynamic loop computes live rows only; see labkit.sampling.fixed)")
    if device.type != "cuda":
        return DecodePlan("fixed", False, f"decode_path='fixed' was asked for; no CUDA graph "
                                          f"on {device.type}")
    if not cuda_graphs:
        return DecodePlan("fixed", False, "cuda_graphs=False")
    if _has_switchable_adapters(model):
        return DecodePlan("fixed", False,
                          "not captured: peft (LoRA) adapters can be switched on and off between "
                          "calls, and a graph replays the state it was captured in")
    return DecodePlan("fixed", True, "on CUDA with cuda_graphs=True")


__all__ = ["DECODE_PATHS", "DecodePlan", "check_settings", "plan_decoding", "static_cache_problem"]
