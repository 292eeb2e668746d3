"""The producer and the consumer of an asynchronous trainer, in one process.

Every async trainer is a sampler (the producer) that stamps each batch with the *policy version*
that sampled it (the number of optimizer steps behind its weights: the trainer's ``step`` when it
sampled) and a trainer (the consumer) that takes batches from a bounded queue. The staleness of a
batch trained at step ``t`` is ``t - version``. ``max_staleness`` (k) bounds it; two modes
(``async_mode``) run the same contract:

* ``"deterministic"`` (:class:`AheadSource`): the sampler runs k batches ahead, one process, one
  thread: at step ``t`` the trainer consumes the batch sampled by the weights of step
  ``max(0, t - k)`` (prime-rl's contract, its docs' ``async_level``: rollouts of step n come from
  policy max(0, n - k)). The first step samples k + 1 batches with the initial weights, each
  later step one. The sampling random stream is drawn in consumption order, so a seed gives the
  same run every time; k = 0 is today's synchronous trainer, number for number.
* ``"overlapped"`` (:class:`OverlappedSource`): a real sampling thread beside the training
  thread, with its own copy of the weights, refreshed from the weights the trainer publishes
  after each update. The thread starts the batch of step ``s`` only once the published version
  ``v`` satisfies ``s - v <= k`` (AReaL's admission rule with one batch per step:
  ``(k + v + 1) * batch_size`` samples may exist), so no consumed batch is more than k steps old,
  and it blocks when it is k batches ahead (the bounded queue). On a CPU each thread runs torch
  ops on one core (set ``torch.set_num_threads(1)``: ops release the GIL, so two Python threads
  use two cores). The thread's timing decides which version samples which batch, so an
  overlapped run is **not** bit-reproducible; ``queue_wait`` logs the seconds the trainer waited
  for the sampler. k = 0 makes it synchronous (the sampler waits for every update).

Both are :class:`~labkit.offpolicy.producers.BatchSource` s: the trainer asks
:func:`labkit.offpolicy.producers.make_producer` for the mode's producer (none when
``max_staleness = 0``: the synchronous step samples its batch itself), takes each step's batch
with ``producer.next(step)`` (a :class:`StampedBatch`) and closes it at the end of training. A
producer samples through the run's :class:`~labkit.training.batches.Sampling`, handed to it when
it is built; it never sees the trainer.
"""

from __future__ import annotations

import copy
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, fields, replace

import torch

from labkit.plugins import config_rule

#: ``async_mode`` values.
ASYNC_MODES = ("deterministic", "overlapped")


@dataclass
class StampedBatch:
    """A scored batch with the stamp of the policy that sampled it."""

    batch: object
    """the :class:`labkit.experience.Experience` of the step"""
    row: dict
    """its sampling metrics (:meth:`labkit.training.batches.Sampling.assemble`)"""
    version: int
    """the trainer step whose weights sampled it (0 = the initial weights)"""
    temperature: float
    """the sampling temperature (the update recomputes log-probs at the same one)"""
    wait: float = 0.0
    """seconds the trainer waited for it (overlapped mode)"""


class AheadSource:
    """Deterministic mode: sample k batches ahead of the trainer (module docstring)."""

    #: Sampling runs in the training thread: a step that fails before its update rewinds the
    #: prompt order and the random streams, and :meth:`restore` puts the queue back.
    samples_in_thread = False

    def __init__(self, sampling, max_staleness: int):
        self.sampling = sampling  # the run's labkit.training.batches.Sampling
        self.max_staleness = max_staleness
        self.queue: deque[StampedBatch] = deque()

    def next(self, step: int) -> StampedBatch:
        """The batch of ``step``: fill the queue to k + 1 with the current weights (version
        ``step``, at its temperature), pop the oldest."""
        while len(self.queue) <= self.max_staleness:
            temperature = self.sampling.temperature_at(step)
            batch, row = self.sampling.batch(temperature)
            batch.token_versions = version_stamp(batch, step)
            self.queue.append(StampedBatch(batch, row, step, temperature))
        stamped = self.queue.popleft()
        return replace(stamped, row=dict(stamped.row))  # a retried step starts from a clean row

    def snapshot(self):
        """The queue as it is (a step that fails before its update puts it back)."""
        return tuple(self.queue)

    def restore(self, state) -> None:
        self.queue = deque(state)

    def state_dict(self) -> dict:
        """The queue (the batches sampled ahead, their rows, versions and temperatures) as
        tensors and plain containers, for a checkpoint (loaded with ``weights_only=True``)."""
        return {"queue": [self.item_state(s) for s in self.queue]}

    def load_state_dict(self, state: dict) -> None:
        self.queue = deque(self.item_from_state(s) for s in state["queue"])

    def item_state(self, stamped: StampedBatch) -> dict:
        """One queued batch for :meth:`state_dict`."""
        return {"batch": experience_state(stamped.batch), "row": dict(stamped.row),
                "version": stamped.version, "temperature": stamped.temperature}

    def item_from_state(self, state: dict) -> StampedBatch:
        return StampedBatch(experience_from_state(state["batch"]), dict(state["row"]),
                            state["version"], state["temperature"])

    def close(self) -> None:
        pass  # the queue stays: another train() call goes on with it


def version_stamp(batch, version) -> torch.Tensor:
    """``Experience.token_versions`` of ``batch``: ``version`` (an int, or a tensor that
    broadcasts over the (B, L) completion columns) on the tokens a policy sampled, -1 on padding,
    on an episode's environment tokens and on demonstrations (RL-PLUS), which no version
    sampled."""
    sampled = batch.completion_mask.bool()
    if batch.action_mask is not None:
        sampled = sampled & batch.action_mask.bool()
    if batch.demonstrations is not None:
        sampled = sampled & ~batch.demonstrations[:, None]
    return torch.where(sampled, torch.as_tensor(version, device=sampled.device), -1)


def experience_state(batch) -> dict:
    """An :class:`~labkit.experience.Experience` as a dict of its fields (tensors, None, ints)."""
    return {f.name: getattr(batch, f.name) for f in fields(batch)}


def experience_from_state(state: dict):
    """The :class:`~labkit.experience.Experience` of :func:`experience_state`."""
    from labkit.experience import Experience

    return Experience(**state)


class OverlappedSource:
    """Overlapped mode: a sampling thread beside the training thread (module docstring).

    It stops and resumes as the deterministic mode does: a step that fails before its update
    gives its batch back, first in line (:meth:`restore`), and the thread's prompt and random
    streams are the thread's alone (the trainer does not rewind them under it:
    :attr:`samples_in_thread`); a batch whose sampling fails rewinds them, so the next thread
    samples the same prompts again, and its error is raised once. Each thread has its own stop
    flag: a thread that :meth:`close` could not wait for (a slow reward call) ends after its
    batch, and the next thread starts only once it has.
    """

    #: The trainer leaves the prompt order and the generator alone when a step fails: the
    #: sampling thread draws from them (:meth:`labkit.trainer.Trainer._run_step`).
    samples_in_thread = True
    #: Seconds :meth:`close` waits for the thread to finish the batch it is sampling.
    STOP_TIMEOUT_S = 60.0

    def __init__(self, sampling, max_staleness: int, step: int = 0):
        # step: the version of the policy's weights now (0: a trainer not yet stepped)
        self.max_staleness = max_staleness
        self._sampling = sampling  # the run's labkit.training.batches.Sampling
        source = sampling.sampling_copy if sampling.sampling_copy is not None \
            else sampling.policy
        self._published = copy.deepcopy(source).eval().requires_grad_(False)
        # the thread's own weights, copied from the published ones before each batch: the
        # trainer's may change (an update, a publish) while a batch is being sampled
        self._model = copy.deepcopy(self._published)
        self._ready: deque[StampedBatch] = deque()
        self._condition = threading.Condition()
        self._version = step
        self._started = step  # batches started so far (the next one is for this step)
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()  # the current thread's; a new thread gets a new one
        self._handed: StampedBatch | None = None  # the batch of the step in progress

    # ---- the training thread -----------------------------------------------------------------
    def publish(self, step: int, force: bool = False) -> None:
        """Copy the policy's current weights, those of ``step``, to where the sampler thread
        reads them (when they are a newer version, or ``force``: weights loaded into the model
        between runs)."""
        with self._condition:
            if step == self._version and not force:
                return
            with torch.no_grad():
                for published, weight in zip(self._published.parameters(),
                                             self._sampling.policy.parameters(), strict=True):
                    published.copy_(weight)
            self._version = step
            self._condition.notify_all()

    def next(self, step: int) -> StampedBatch:
        """Publish this step's weights, then wait for the oldest sampled batch."""
        self._ensure_thread(step)
        self.publish(step)
        tic = time.perf_counter()
        with self._condition:
            while not self._ready and self._error is None:
                self._condition.wait(timeout=1.0)
            if not self._ready:  # raised once: the next call starts a new thread
                error, self._error = self._error, None
                raise RuntimeError("the sampling thread failed") from error
            stamped = self._handed = self._ready[0]
            self._ready.popleft()
            self._condition.notify_all()
        wait = time.perf_counter() - tic
        # a copy: the step's row grows, and a retry (restore) starts from the clean one
        return replace(stamped, row={**stamped.row, "queue_wait": wait}, wait=wait)

    def snapshot(self):
        """Nothing to copy (the thread's draws cannot be taken back); the step starts with no
        batch handed over."""
        self._handed = None

    def restore(self, state) -> None:
        """The failed step's batch goes back first in line: the retry trains it."""
        with self._condition:
            handed, self._handed = self._handed, None
            if handed is not None and not (self._ready and self._ready[0] is handed):
                self._ready.appendleft(handed)  # (not when the interrupt beat the pop)
                self._condition.notify_all()

    def state_dict(self):
        return None  # never saved: the config refuses save_every with async_mode='overlapped'

    def close(self) -> None:
        """Stop the thread: it ends after the batch it is sampling (a reward call is never cut
        short), which this waits for up to :attr:`STOP_TIMEOUT_S`. A thread still running then
        keeps its stop flag and ends by itself; the next :meth:`next` waits for it."""
        with self._condition:
            self._stop.set()
            self._condition.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=self.STOP_TIMEOUT_S)
            if not self._thread.is_alive():
                self._thread = None

    def _ensure_thread(self, step: int) -> None:
        """Start a sampling thread unless one runs: once the stopped one has ended (one thread
        at a time draws prompts) and its error, if any, was raised (:meth:`next` raises it
        first), with the policy's weights as they are now (weights loaded into the model since
        the last thread included), stamped with ``step``."""
        if self._thread is not None and not self._stop.is_set():
            return
        while self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout=1.0)  # in a loop: Ctrl-C is seen between the waits
        if self._error is not None:
            return
        self.publish(step, force=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(self._stop,),
                                        daemon=True, name="labkit-sampler")
        self._thread.start()

    # ---- the sampling thread -----------------------------------------------------------------
    def _admitted(self) -> bool:
        """May the batch of step ``_started`` start now? Its staleness at consumption would be
        ``_started - version``, and at most k + 1 batches wait (k queued, one being trained)."""
        return (self._started - self._version <= self.max_staleness
                and len(self._ready) <= self.max_staleness)

    def _run(self, stop: threading.Event) -> None:
        """The thread's body: sample batches until ``stop``. An ``Exception`` (a reward
        function's, the model's) is handed to the training thread, which raises it at its next
        batch. A ``BaseException`` that is not one (``SystemExit`` from a reward function; a
        thread ends on it silently) is not caught: it ends the thread, and the ``finally`` hands
        it over on its way out, since the training thread would otherwise wait for a batch
        forever. Either way the thread's stop flag is set: it has ended."""
        error: BaseException | None = None
        try:
            self._sample_until(stop)
        # Not swallowed: the training thread raises it (next). Reward functions are the user's
        # code, so any Exception can come from them; naming a few would let the rest end the
        # thread on a traceback the notebook never sees.
        except Exception as failure:  # noqa: BLE001
            error = failure
        finally:
            with self._condition:
                if error is None and not stop.is_set():  # a BaseException on its way out
                    error = sys.exc_info()[1]
                if error is not None:
                    self._error = error
                stop.set()
                self._condition.notify_all()

    def _sample_until(self, stop: threading.Event) -> None:
        """Sample each admitted batch with the published weights, until ``stop``."""
        while True:
            with self._condition:
                while not stop.is_set() and not self._admitted():
                    self._condition.wait(timeout=1.0)
                if stop.is_set():
                    return
                with torch.no_grad():
                    for own, published in zip(self._model.parameters(),
                                              self._published.parameters(), strict=True):
                        own.copy_(published)
                version = self._version
            temperature = self._sampling.temperature_at(version)
            batch, row = self._sample_batch(temperature)
            batch.token_versions = version_stamp(batch, version)
            with self._condition:
                self._ready.append(StampedBatch(batch, row, version, temperature))
                self._started += 1
                self._condition.notify_all()

    def _sample_batch(self, temperature: float):
        """One batch by the thread's own weights; a failure puts the prompt order and the
        generator back where the batch began, so the next thread samples the same prompts."""
        streams = self._sampling.streams()
        try:
            return self._sampling.batch(temperature, model=self._model)
        except BaseException:
            self._sampling.rewind(streams)
            raise


@config_rule
def _check_overlapped(config):
    if config.async_mode == "overlapped" and (config.save_every or config.resume_from):
        raise ValueError("async_mode='overlapped' is not reproducible (the sampling thread's "
                         "timing decides which weights sample each batch) and its queue is not "
                         "saved: a checkpoint could not resume the same run. Use "
                         "async_mode='deterministic' with save_every/resume_from, or save_every=0 "
                         "and resume_from=None")


__all__ = ["ASYNC_MODES", "AheadSource", "OverlappedSource", "StampedBatch",
           "experience_from_state", "experience_state", "version_stamp"]
