"""Run control: what keeps a run safe to stop and to resume, kept out of the algorithm's way.

* :class:`InterruptGuard`: Ctrl-C (the notebook's stop button) never leaves an update, a history
  row, an evaluation or a checkpoint half written. Inside a guarded block the signal is recorded,
  not raised; the trainer stops at the next safe point. A second Ctrl-C in the block is recorded
  too (a checkpoint being written is never torn apart), and dropped where the run is stopping
  anyway (:meth:`InterruptGuard.absorbing`: the interrupt's checkpoint, the sampling thread's
  stop). SIGTERM (``kill``, a job scheduler's preemption, a container stopping) is held the same
  way.
* :func:`terminate_as_interrupt`: outside a guarded block, SIGTERM would end the process at once,
  with no checkpoint; within this block it raises KeyboardInterrupt, so a run stops as on Ctrl-C.
* :func:`capture_rng` / :func:`restore_rng`: the random state a step draws from, so a step that
  failed before its update (an interrupt or an error while sampling or scoring) can be retried
  with the same prompts and samples; :func:`step_rewind` puts that state, the prompt position
  and the producer's batch back.
* :func:`check_nonfinite_streak`: stop a run whose steps keep skipping their update for a NaN/inf.
* :func:`guarded_optimizer_step`: clip and step, unless a loss or gradient was NaN/inf; if the
  step itself makes a weight non-finite, the weights go back to what they were, so NaNs never
  silently poison a run.
* :func:`peak_memory_mb`: peak CUDA memory, else the process's peak resident memory, on Linux,
  macOS and Windows alike.
"""

from __future__ import annotations

import math
import random
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import contextmanager

import torch

#: The signals a guarded block holds: Ctrl-C, and the polite request to stop (every platform
#: Python runs on defines both).
HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class InterruptGuard:
    """Hold SIGINT and SIGTERM while a block runs; ``requested`` says whether one arrived.

    Re-entrant (nested blocks keep the outermost handlers) and a no-op outside the main thread,
    where Python cannot install signal handlers.
    """

    def __init__(self):
        self.requested = False
        self._depth = 0
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            if self._depth == 0:
                self._previous = {s: signal.signal(s, self._record) for s in HELD_SIGNALS}
            self._depth += 1
        return self

    def __exit__(self, *exc):
        if self._depth:
            self._depth -= 1
            if self._depth == 0:
                for signum, handler in self._previous.items():
                    signal.signal(signum, handler)
        return False

    def _record(self, signum, frame):
        self.requested = True

    def raise_if_requested(self) -> None:
        """Raise the held KeyboardInterrupt now that it is safe (clears the request)."""
        if self.requested:
            self.requested = False
            raise KeyboardInterrupt

    @contextmanager
    def absorbing(self):
        """Hold SIGINT and SIGTERM through the block and drop those that came: for the work of a
        run that is stopping already (the interrupt's checkpoint, stopping the sampling
        thread), which a second Ctrl-C must not cut short."""
        try:
            with self:
                yield self
        finally:
            self.requested = False


@contextmanager
def terminate_as_interrupt():
    """Within the block, SIGTERM raises KeyboardInterrupt (as Ctrl-C does), so the trainer's
    interrupt handling saves the last whole step instead of the process dying mid-run; the
    previous handler comes back after. A no-op outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def check_nonfinite_streak(streak: int, limit: int, step: int) -> None:
    """FloatingPointError once ``streak`` consecutive steps (up to ``step``) skipped their
    optimizer step for a NaN/inf (``max_nonfinite_steps`` = ``limit``)."""
    if streak >= limit:
        raise FloatingPointError(
            f"the loss, the gradients or the updated weights were NaN/inf in {streak} "
            f"consecutive steps (up to step {step}); those optimizer steps were skipped and the "
            f"weights are still finite. Try a lower learning_rate, a max_grad_norm, "
            f"dtype='float32', or check the reward functions and the data.")


def capture_rng(generator: torch.Generator) -> dict:
    """The state of every random number generator a step draws from."""
    state = {"python": random.getstate(), "torch": torch.get_rng_state(),
             "generator": generator.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict, generator: torch.Generator) -> None:
    """Put back the states saved by :func:`capture_rng`."""
    random.setstate(_as_python_state(state["python"]))
    torch.set_rng_state(state["torch"])
    generator.set_state(state["generator"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def step_rewind(generator: torch.Generator, prompt_order, producer=None) -> Callable[[], None]:
    """What a step that fails before its update gives back, captured at its start; returns the
    function that gives it back. The random states (:func:`capture_rng`) and the prompt
    ``prompt_order``'s position, unless the ``producer`` samples in a thread of its own, which draws
    from them (``producer.samples_in_thread``: rewinding them under it would make it draw the
    same prompts twice); and the producer's batch (``producer.snapshot()`` /
    ``producer.restore()``), so the retry trains it. ``producer=None``: the synchronous step,
    whose retry samples its batch again from the rewound streams."""
    # a producer says so when it samples in a thread of its own; one that does not (a
    # hand-written loop, notebook 11) samples in the training thread
    in_thread = getattr(producer, "samples_in_thread", False)
    streams = None if in_thread else (capture_rng(generator), prompt_order.state_dict())
    queue = producer.snapshot() if producer is not None else None

    def rewind() -> None:
        if streams is not None:
            restore_rng(streams[0], generator)
            prompt_order.load_state_dict(streams[1])
        if producer is not None:
            producer.restore(queue)
    return rewind


def _as_python_state(state):
    """``random.setstate`` wants tuples; a state read back from a checkpoint may hold lists."""
    version, internal, gauss = state
    return version, tuple(internal), gauss


def peak_memory_mb(device: torch.device) -> float:
    """Peak CUDA memory allocated on ``device`` (since the last reset), else the process's peak
    resident set size, in MiB; NaN where the platform does not say."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        import resource  # POSIX only: imported here so that Windows can import the trainer
    except ImportError:
        try:
            import psutil

            info = psutil.Process().memory_info()
            return getattr(info, "peak_wset", info.rss) / 2**20
        except ImportError:
            return float("nan")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def guarded_optimizer_step(optimizer, scheduler, named_params, max_grad_norm: float | None,
                           finite: bool, rollback: bool, stats) -> bool:
    """One optimizer step that cannot leave a non-finite weight behind; returns whether it ran.

    ``named_params`` is ``[(metric name, params), ...]``: each group's gradient is clipped to
    ``max_grad_norm`` (None: not clipped) and its norm logged under that name in ``stats``
    (:class:`labkit.metrics.StepStats`). ``finite=False`` (a loss was not finite) or a
    non-finite norm drops the gradients; with ``rollback`` the weights are copied first and put
    back if the step made any of them non-finite. A skipped step does not advance the learning
    rate schedule (transformers' rule). A parameter without a gradient gets a zero one, so a
    mini-batch with nothing to learn still steps Adam, as TRL does. Logs ``skipped_nonfinite``.
    """
    max_norm = max_grad_norm or math.inf
    for name, params in named_params:
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        finite = finite and bool(torch.isfinite(norm))
        stats.add(name, norm, weight=1)
    if finite:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        backup = [p.detach().clone() for p in params] if rollback else None
        optimizer.step()
        # one device sync for all tensors, not one per tensor
        if backup is not None and not bool(torch.stack([torch.isfinite(p).all()
                                                        for p in params]).all()):
            with torch.no_grad():
                for p, saved in zip(params, backup, strict=True):
                    p.copy_(saved)
            finite = False
        else:
            scheduler.step()
    stats.count("skipped_nonfinite", int(not finite))
    stats.optimizer_steps += 1
    optimizer.zero_grad(set_to_none=True)
    return finite


__all__ = ["HELD_SIGNALS", "InterruptGuard", "capture_rng", "check_nonfinite_streak",
           "guarded_optimizer_step", "peak_memory_mb", "restore_rng", "step_rewind",
           "terminate_as_interrupt"]


def finite_where(mask, *tensors) -> bool:
    """True when every given tensor is finite at the mask's valid positions (one device sync)."""
    m = mask.bool()
    return bool(torch.stack([torch.isfinite(torch.where(m, t, 0)).all()
                             for t in tensors if t is not None]).all())
