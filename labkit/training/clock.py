"""Where a step's seconds go: a clock that splits the step into its phases without adding a
host sync.

On a GPU a phase's wall time cannot be read with the host's clock alone: the host only queues the
kernels and runs ahead, so ``perf_counter`` around a phase measures the launches, and a
``torch.cuda.synchronize()`` at each boundary would stall the pipeline that it measures. So on
CUDA each boundary records an event on the current stream, and the elapsed times between events
are read once, after the step, when writing the history row (which reads the step's metrics
from the GPU anyway). Elsewhere the boundaries read the host clock.

The trainer's phases (``labkit.trainer``, steps 1-5 of its docstring) become history columns:

==================  ===================================================================
column              phase
==================  ===================================================================
``sample_time``     1-2: sample and score the batch (or wait for the async producer);
                    ``generation_time`` is its decoding part
``score_time``      3: the no-grad forwards (old policy, reference, critic)
``advantage_time``  4: the off-policy correction and the advantages
``update_time``     5: the training forwards and backwards and the optimizer steps
==================  ===================================================================

``step_time`` is their sum; an evaluation is timed by a clock of its own (``eval_time``).
"""

from __future__ import annotations

import time

import torch

#: The trainer's phases, in order; each gives the column ``<phase>_time``.
PHASES = ("sample", "score", "advantage", "update")


class PhaseClock:
    """Marks the end of each phase; :meth:`seconds` gives ``{"<phase>_time": seconds}``."""

    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"
        self.marks = [("start", self._now())]

    def _now(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def mark(self, phase: str) -> None:
        """The phase ``phase`` ends now (it began at the previous mark)."""
        self.marks.append((phase, self._now()))

    def seconds(self) -> dict[str, float]:
        """Each phase's seconds (on CUDA, waiting for the last mark's event first)."""
        if self.cuda:
            self.marks[-1][1].synchronize()
            between = lambda a, b: a.elapsed_time(b) / 1000  # elapsed_time is in ms
        else:
            between = lambda a, b: b - a
        return {f"{phase}_time": between(before, now)
                for (_, before), (phase, now) in zip(self.marks, self.marks[1:])}


__all__ = ["PHASES", "PhaseClock"]
