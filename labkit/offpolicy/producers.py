"""Which producer a run samples with: the one place that knows every producer of
:mod:`labkit.offpolicy` (the staleness contract's :class:`~labkit.offpolicy.staleness.AheadSource`
and :class:`~labkit.offpolicy.staleness.OverlappedSource`, the admission clock's
:class:`~labkit.offpolicy.admission.AdmissionSource`, the partial rollouts'
:class:`~labkit.offpolicy.partial.PartialRolloutSource`), and the protocol they share with the
trainer, :class:`BatchSource`. The admission and partial producers build on
:mod:`labkit.offpolicy.staleness`, so the choice lives above all three, and imports run one way.
"""

from __future__ import annotations

from typing import Protocol

from labkit.offpolicy.admission import AdmissionSource
from labkit.offpolicy.partial import PartialRolloutSource, chunk_length
from labkit.offpolicy.staleness import AheadSource, OverlappedSource, StampedBatch


class BatchSource(Protocol):
    """Where an asynchronous trainer's batches come from: the whole contract between the
    trainer and a producer, in one place.

    The trainer calls ``next(step)`` once per step for the batch that step trains (a
    :class:`~labkit.offpolicy.staleness.StampedBatch`: the batch, its sampling metrics, the
    version of the weights that sampled it and its temperature), ``snapshot()`` before the step
    and ``restore(snapshot)`` when the step fails before its update (the retry trains the same
    batch: :func:`labkit.training.run_control.step_rewind`), and ``close()`` when training stops.
    ``samples_in_thread`` says whether the producer draws from the prompt order and the random
    stream in a thread of its own (then a failed step does not rewind them under it; a producer
    without the attribute samples in the training thread). One that a checkpoint can save has
    ``state_dict()`` / ``load_state_dict(state)`` too.

    Why the step is all it is given: a producer samples through the run's
    :class:`~labkit.training.batches.Sampling`, handed to it when it is built, and reads nothing of
    the trainer. Sampling and the trainer's update then meet only here, and the calls run one way
    (trainer -> producer -> sampling), as in the systems the lab stands in for, where the sampler
    is another process that only ever sees published weights. With ``max_staleness = 0`` there is
    no producer: the synchronous step samples its own batch
    (:meth:`labkit.trainer.Trainer.sample_and_score`), then trains on it.
    """

    def next(self, step: int) -> StampedBatch: ...

    def snapshot(self) -> object: ...

    def restore(self, state: object) -> None: ...

    def close(self) -> None: ...


def make_producer(config, sampling) -> BatchSource | None:
    """The producer of ``config.async_mode`` with ``max_staleness``, sampling through
    ``sampling`` (the run's :class:`~labkit.training.batches.Sampling`); None for the synchronous
    trainer (``max_staleness = 0``, deterministic, whole batches), whose step samples its batch
    itself."""
    if config.async_mode == "overlapped":
        return OverlappedSource(sampling, config.max_staleness)
    if config.staleness_admission is not None:
        return AdmissionSource(sampling, config.max_staleness, config.staleness_admission,
                                config.admission_train_time)
    if config.partial_rollouts:
        return PartialRolloutSource(sampling, config.max_staleness, chunk_length(config))
    if config.max_staleness == 0:
        return None
    return AheadSource(sampling, config.max_staleness)


__all__ = ["BatchSource", "make_producer"]
