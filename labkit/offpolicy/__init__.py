"""Asynchronous, off-policy RL on one machine (notebook 11).

A sampler that runs ahead of the trainer (:mod:`labkit.offpolicy.staleness`: the producer, the
consumer and their queue, deterministic or overlapped in a thread), the correction of the stale
samples it produces (:mod:`labkit.offpolicy.correction`: TIS, IcePop, decoupled PPO), and the
admission choices of a sampler whose groups take different times (:mod:`labkit.offpolicy.
admission`: discard stale groups or slow the sampler down), and partial rollouts continued by
newer weights (:mod:`labkit.offpolicy.partial`). The trainer meets them through one small
protocol, :class:`~labkit.offpolicy.producers.BatchSource`; a producer samples through the run's
:class:`~labkit.training.batches.Sampling` and never reads the trainer.
"""

from labkit.offpolicy.admission import (
    ADMISSIONS,
    OUTCOMES,
    AdmissionClock,
    AdmissionRun,
    AdmissionSource,
    simulate_admission,
)
from labkit.offpolicy.correction import (
    CORRECTIONS,
    RATIO_QUANTILES,
    OffPolicyTerms,
    correct_batch,
    offpolicy_metrics,
    offpolicy_terms,
)
from labkit.offpolicy.partial import PartialBatch, PartialRolloutSource
from labkit.offpolicy.producers import BatchSource, make_producer
from labkit.offpolicy.staleness import (
    ASYNC_MODES,
    AheadSource,
    OverlappedSource,
    StampedBatch,
    version_stamp,
)

__all__ = ["ADMISSIONS", "ASYNC_MODES", "CORRECTIONS", "OUTCOMES", "RATIO_QUANTILES",
           "AdmissionClock", "AdmissionRun", "AdmissionSource", "AheadSource", "BatchSource",
           "OffPolicyTerms",
           "OverlappedSource", "PartialBatch", "PartialRolloutSource", "StampedBatch",
           "correct_batch", "make_producer", "offpolicy_metrics", "offpolicy_terms",
           "simulate_admission", "version_stamp"]
