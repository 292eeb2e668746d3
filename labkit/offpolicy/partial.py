"""Partial rollouts: a completion interrupted by a weight sync goes on with the newer weights.

In an asynchronous system the weights change while the inference engine is still decoding.
AReaL (Fu et al., arXiv 2505.24298, section 4, interruptible rollouts) and verl's fully async
recipe (``partial_rollout``) neither throw the half-written completions away nor wait for them:
the engine stops, loads the new weights, recomputes the KV cache of what was written, and goes
on. One completion is then sampled by two policy versions, so the correction of
:mod:`labkit.offpolicy.correction` must weigh each token against the version that sampled *it*:
``Experience.sample_logp`` is recorded per token at sampling, and ``Experience.token_versions``
says which version each token came from.

Where the lab departs: a true mid-generation switch would need the decode loop to swap weights.
Here it is **chunked generation** in the deterministic sampler (:class:`PartialRolloutSource`,
``partial_rollouts=True``): a batch started with the weights of step ``v`` decodes the first
``partial_rollout_chunk`` tokens of every completion; at the next weight sync (the trainer's next
step, version ``v + 1``) the completions that have not ended are continued with the new weights
(:func:`labkit.sampling.continue_rollout`: a prefill over prompt and head, then decoding), and
the batch is scored. Each completion therefore switches at most once, always at the same token:
the batch consumed at step ``t >= k`` has its heads from version ``t - k`` and its tails from
``t - k + 1``. The batches of the first step have no newer weights to wait for and finish with
their own. ``max_staleness = 0`` is refused: no sync falls between a batch's sampling and its
training. The column ``newer_version_frac`` logs the share of a batch's sampled tokens that came
from a newer version than their completion's first token.

The batch's stamp (``staleness``, what the bound ``max_staleness`` holds) is that of its oldest
tokens, the heads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import torch

from labkit.offpolicy.staleness import AheadSource, StampedBatch, version_stamp
from labkit.plugins import config_rule
from labkit.sampling import Rollout


@dataclass
class PartialBatch:
    """A batch started and not yet finished: the head of each completion."""

    indices: list[int]
    """its prompts (rows of the train split)"""
    head: Rollout
    """the first ``partial_rollout_chunk`` tokens of every completion, by version ``version``"""
    version: int
    temperature: float
    seconds: float
    """decoding time so far"""


def chunk_length(config) -> int:
    """``partial_rollout_chunk``, or half of ``max_completion_length`` when it is None."""
    chunk = config.partial_rollout_chunk
    return max(1, config.max_completion_length // 2) if chunk is None else chunk


class PartialRolloutSource(AheadSource):
    """The deterministic sampler k batches ahead, with partial rollouts (module docstring). Its
    queue holds :class:`PartialBatch` es (started) and
    :class:`~labkit.offpolicy.staleness.StampedBatch` es (finished and scored)."""

    def __init__(self, sampling, max_staleness: int, chunk: int):
        if sampling.environment_factory is not None:
            raise ValueError(
                "partial_rollouts=True is not available with episodes (environment_factory): a "
                "chunk boundary would fall inside a turn, between the tool calls the episode "
                "loop answers; train episodes stale with max_staleness alone "
                "(partial_rollouts=False)")
        super().__init__(sampling, max_staleness)
        self.chunk = chunk

    def next(self, step: int) -> StampedBatch:
        """The weight sync (every batch started by older weights goes on with this step's),
        then :class:`AheadSource`'s queue; returns the oldest batch, finished."""
        self.queue = type(self.queue)(
            self._finish(item, step) if isinstance(item, PartialBatch)
            and item.version < step else item for item in self.queue)
        while len(self.queue) <= self.max_staleness:
            self.queue.append(self._start(step))
        item = self.queue.popleft()
        if isinstance(item, PartialBatch):  # before the first update: no newer weights exist
            item = self._finish(item, step)
        return replace(item, row=dict(item.row))

    def _start(self, step: int) -> PartialBatch:
        """Decode the heads of the next batch with the current weights (those of ``step``); the
        shared sampling code refuses prompts that leave no room for all
        ``max_completion_length`` tokens, not only the head's
        (:func:`labkit.training.batches.sampled_rollout`)."""
        temperature = self.sampling.temperature_at(step)
        indices, head, seconds = self.sampling.heads(self.sampling.config.prompts_per_step,
                                                     temperature, self.chunk)
        return PartialBatch(list(indices), head, step, temperature, seconds)

    def _finish(self, item: PartialBatch, step: int) -> StampedBatch:
        """Continue ``item``'s unfinished completions with the current weights (those of
        ``step``), score the batch and stamp each token with the version that sampled it."""
        batch, round_, seconds = self.sampling.finish(item.indices, item.head, item.temperature,
                                                      item.seconds)
        batch, row = self.sampling.assemble([batch], [round_], self.sampling.temperature_at(step),
                                            seconds)
        columns = torch.arange(batch.completion_ids.size(1), device=batch.completion_ids.device)
        batch.token_versions = version_stamp(
            batch, torch.where(columns < self.chunk, item.version, step))
        sampled = batch.token_versions >= 0
        row["newer_version_frac"] = (float((batch.token_versions > item.version)[sampled]
                                           .float().mean()) if sampled.any() else math.nan)
        return StampedBatch(batch, row, item.version, item.temperature)

    # ---- a checkpoint -----------------------------------------------------------------------
    def item_state(self, item) -> dict:
        if not isinstance(item, PartialBatch):
            return super().item_state(item)
        return {"partial": {"indices": list(item.indices), "version": item.version,
                            "temperature": item.temperature, "seconds": item.seconds,
                            "head": {f.name: getattr(item.head, f.name)
                                     for f in fields(item.head)}}}

    def item_from_state(self, state: dict):
        if "partial" not in state:
            return super().item_from_state(state)
        partial = state["partial"]
        return PartialBatch(list(partial["indices"]), Rollout(**partial["head"]),
                            partial["version"], partial["temperature"], partial["seconds"])


@config_rule
def _check_partial(config):
    chunk = config.partial_rollout_chunk
    if not config.partial_rollouts:
        if chunk is not None:
            raise ValueError(f"partial_rollout_chunk={chunk} is read only with "
                             f"partial_rollouts=True: set it, or partial_rollout_chunk=None")
        return
    if config.max_staleness == 0:
        raise ValueError("partial_rollouts=True continues a completion with the weights of a "
                         "later step, and max_staleness=0 trains each batch at the step that "
                         "sampled it (no weight sync falls inside a completion): set "
                         "max_staleness >= 1, or partial_rollouts=False")
    others = {"async_mode": (config.async_mode, "deterministic"),
              "staleness_admission": (config.staleness_admission, None),
              "dynamic_sampling": (config.dynamic_sampling, False),
              "temperature_schedule": (config.temperature_schedule, "constant")}
    reasons = {"async_mode": "the chunks are the deterministic sampler's",
               "staleness_admission": "the admission clock samples whole groups",
               "dynamic_sampling": "its resampling rounds would need chunks of their own",
               "temperature_schedule": "a completion's two pieces must share the temperature "
                                       "the update scores it at"}
    for name, (value, allowed) in others.items():
        if value != allowed:
            raise ValueError(f"partial_rollouts=True needs {name}={allowed!r} "
                             f"({reasons[name]}), got {name}={value!r}")
    if chunk is not None and chunk >= config.max_completion_length:
        raise ValueError(f"partial_rollout_chunk ({chunk}) must be below max_completion_length "
                         f"({config.max_completion_length}): the newer weights write the tokens "
                         f"after the chunk, and there would be none")


__all__ = ["PartialBatch", "PartialRolloutSource", "chunk_length"]
