"""A caller's decoding: which loop it asks for and the captured decode steps it keeps.

The trainer builds one :class:`Decoder` per run from its config (``decode_path``,
``cuda_graphs``) and passes it to every call that samples (the steps, ReMax's greedy baseline,
episodes, evaluation), so the run's captured CUDA graphs are reused from call to call and freed
with the run. A call given no decoder gets a fresh :class:`Decoder` with the defaults: it
samples correctly, but keeps nothing, so on a GPU its steps are never captured (a shape is
captured at its second use).
"""

from __future__ import annotations

from labkit.sampling.fixed import CapturedSteps
from labkit.sampling.plan import DecodePlan, check_settings, plan_decoding


class Decoder:
    """``path``: one of :data:`labkit.sampling.DECODE_PATHS` (``"auto"``: the fixed loop on
    CUDA, the dynamic loop elsewhere); ``cuda_graphs``: capture the fixed loop's step on CUDA.
    ``captured`` keeps the fixed loop's workspaces and graphs, per model, as long as the decoder
    lives."""

    def __init__(self, path: str = "auto", cuda_graphs: bool = True):
        check_settings(path, cuda_graphs)
        self.path, self.cuda_graphs = path, cuda_graphs
        self.captured = CapturedSteps()

    def plan(self, model) -> DecodePlan:
        """Which loop samples for ``model`` (:func:`labkit.sampling.plan_decoding`)."""
        return plan_decoding(model, self.path, self.cuda_graphs)

    def capture_failure(self, model) -> str | None:
        """Why ``model``'s decode step could not be captured (it decodes with eager steps), or
        None when no capture failed."""
        return self.captured.failure(model)

    def __repr__(self) -> str:
        return f"Decoder(path={self.path!r}, cuda_graphs={self.cuda_graphs})"


__all__ = ["Decoder"]
