"""Which producer a run samples with: the one place that knows every producer of
:mod:`labkit.offpolicy` (the staleness contract's :class:`~labkit.offpolicy.staleness.AheadSampler`
and :class:`~labkit.offpolicy.staleness.OverlappedSampler`, the admission clock's
:class:`~labkit.offpolicy.admission.AdmissionSampler`, the partial rollouts'
:class:`~labkit.offpolicy.partial.PartialRolloutSampler`). The last two build on
:mod:`labkit.offpolicy.staleness`, so the choice lives above all three, and imports run one way.
"""

from __future__ import annotations

from labkit.offpolicy.admission import AdmissionSampler
from labkit.offpolicy.partial import PartialRolloutSampler
from labkit.offpolicy.staleness import AheadSampler, OverlappedSampler


def make_producer(trainer):
    """The producer of ``trainer.config.async_mode`` with ``max_staleness``."""
    cfg = trainer.config
    if cfg.async_mode == "overlapped":
        return OverlappedSampler(trainer, cfg.max_staleness)
    if cfg.staleness_admission is not None:
        return AdmissionSampler(trainer)
    if cfg.partial_rollouts:
        return PartialRolloutSampler(trainer)
    return AheadSampler(cfg.max_staleness)


__all__ = ["make_producer"]
