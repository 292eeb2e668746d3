"""A step's batch: prompts in, a scored batch out (the trainer's steps 1-2).

:func:`sample_round` samples and scores one round of prompts; :class:`Sampling` is one run's
sampling (its policy, prompt order, random stream, rewards and data, nothing else of the run):
:meth:`Sampling.batch` repeats :func:`sample_round` while DAPO's dynamic sampling still needs
groups, and :meth:`Sampling.assemble` makes the step's batch and its metrics. The synchronous
trainer calls :meth:`Sampling.batch` itself (:meth:`labkit.trainer.Trainer.sample_and_score`);
an asynchronous producer (:mod:`labkit.offpolicy`) is handed the same :class:`Sampling` when it
is built, so it samples with the run's state without reading the trainer. The model that samples
is the policy itself, or its copy in ``sampling_dtype`` with this step's weights (as a trainer
pushes weights to vLLM).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from labkit.agents.episodes import environments, run_episodes
from labkit.experience import Experience
from labkit.sampling import (
    ContextLengthError,
    Decoder,
    Rollout,
    check_context,
    continue_rollout,
    encode_prompts,
    generate,
    generate_from_ids,
    with_demonstrations,
)
from labkit.training.scoring import (
    SampledRound,
    completion_embeddings,
    demonstration_texts,
    sampling_metrics,
    score_completions,
)
from labkit.tricks.filters import dynamic_sampling_mask
from labkit.tricks.temperature import temperature_at
from labkit.tricks.token_filters import top_entropy_mask


@dataclass(frozen=True)
class SamplingInputs:
    """What sampling and scoring a round read from a run, at one temperature
    (:meth:`Sampling.inputs` builds one per sampling call)."""

    config: object
    """the run's :class:`~labkit.config.TrainConfig`"""
    policy: torch.nn.Module
    """the policy: its embeddings score diversity (``diversity_adjustment``), and ReMax's greedy
    completion is its own"""
    tokenizer: object
    reward_funcs: list
    """TRL's signature, weighted by ``config.reward_weights``"""
    train_dataset: object
    """the prompt dataset the round's indices point into"""
    environment_factory: Callable | None
    """multi-turn episodes with tools (:mod:`labkit.agents.episodes`); None: single-turn"""
    temperature: float
    """this step's (``temperature_schedule``)"""
    device: torch.device
    """the policy's"""
    decoder: Decoder
    """the run's decode loop and the captured steps it keeps (:mod:`labkit.sampling`)"""


def synced_sampling_copy(policy: torch.nn.Module, sampling_copy: torch.nn.Module | None):
    """The model that samples: ``policy``, or (``sampling_dtype``) ``sampling_copy``, its copy
    in another dtype, with this step's weights copied in (cast)."""
    if sampling_copy is None:
        return policy
    with torch.no_grad():
        for copy_, weight in zip(sampling_copy.parameters(), policy.parameters(), strict=True):
            copy_.copy_(weight)
    return sampling_copy


def score(inputs: SamplingInputs, rows: dict, rollout):
    """:func:`labkit.training.scoring.score_completions` with the run's reward functions:
    ``(per-function rewards (N, K), totals (N,), strict accuracy (N,))``."""
    return score_completions(inputs.config, inputs.reward_funcs, rows, rollout,
                             embed=lambda r: completion_embeddings(
                                 inputs.policy, r, inputs.config.diversity_adjustment))


def sample_round(inputs: SamplingInputs, indices: list[int], sampling_copy, prompt_order,
                 generator: torch.Generator) -> tuple[Experience, SampledRound, float]:
    """Sample G completions of each prompt ``indices`` of the train split with
    ``sampling_copy`` (drawing from ``generator``), score them, and feed the solve rates back
    to the ``prompt_order``. Returns the batch, what the round produced (for the metrics) and
    the seconds spent generating."""
    rollout, seconds = sampled_rollout(inputs, indices, sampling_copy, generator)
    return scored_round(inputs, indices, rollout, prompt_order, seconds)


def sampled_rollout(inputs: SamplingInputs, indices: list[int], sampling_copy,
                    generator: torch.Generator, head: int | None = None) -> tuple[Rollout, float]:
    """The first half of :func:`sample_round`: G completions of each prompt ``indices`` by
    ``sampling_copy`` and the seconds spent generating; a prompt too long for the context is
    refused naming its dataset row. ``head``: only the first ``head`` tokens of each completion,
    the head of a partial rollout (:mod:`labkit.offpolicy.partial`), whose prompts must still
    leave room for all ``max_completion_length`` tokens."""
    cfg, num_generations = inputs.config, inputs.config.num_generations
    episodes = inputs.environment_factory is not None
    rows = inputs.train_dataset[indices]
    tic = time.perf_counter()
    try:
        rollout = rollout_of(inputs, sampling_copy, rows, num_generations,
                             temperature=inputs.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
                             generator=generator, head=head)
    except ContextLengthError as error:  # name the dataset's row (episodes repeat each prompt)
        row = indices[error.row // (num_generations if episodes else 1)]
        raise ContextLengthError(f"train_dataset row {row}: {error}", row) from None
    return rollout, time.perf_counter() - tic


def scored_round(inputs: SamplingInputs, indices: list[int], rollout, prompt_order,
                 generation_time: float) -> tuple[Experience, SampledRound, float]:
    """The second half of :func:`sample_round`: score the sampled ``rollout`` of the prompts
    ``indices`` and feed the solve rates back to the ``prompt_order``. Partial rollouts
    (:mod:`labkit.offpolicy.partial`) sample in two pieces and score here once."""
    cfg, num_generations = inputs.config, inputs.config.num_generations
    episodes = inputs.environment_factory is not None
    rows = inputs.train_dataset[indices]
    if cfg.rlplus_demonstrations:
        rollout = with_demonstrations(rollout, inputs.tokenizer, demonstration_texts(rows),
                                      num_generations)
    batch = Experience.from_rollout(rollout, inputs.tokenizer.pad_token_id,
                                    cfg.train_on_environment_tokens)
    batch.prompt_index = torch.tensor(indices, device=inputs.device).repeat_interleave(
        num_generations)
    is_demo = torch.zeros(len(batch), dtype=torch.bool, device=inputs.device)
    if cfg.rlplus_demonstrations:
        is_demo[num_generations - 1::num_generations] = True
    batch.demonstrations = is_demo
    batch.reward_components, batch.rewards, correct = score(inputs, rows, rollout)
    prompt_order.observe(indices, correct.view(-1, num_generations).nanmean(-1).tolist())
    families = rows.get("family", [None] * len(indices))
    produced = SampledRound(batch.reward_components, batch.rewards, correct, batch.lengths,
                            batch.truncated, [f for f in families for _ in range(num_generations)],
                            rollout if episodes else None)
    return batch, produced, generation_time


def rollout_of(inputs: SamplingInputs, model, rows: dict, num_generations: int,
               head: int | None = None, **sampling):
    """``num_generations`` completions by ``model`` of each prompt of ``rows`` (dataset
    columns): multi-turn episodes when the run has an environment (a fresh one per episode,
    reset on its row: :mod:`labkit.agents.episodes`), else single-turn completions.
    ``sampling``: the sampling keywords (temperature, top_p, top_k, greedy, generator); every
    call decodes with the run's decoder.
    ``head`` (single-turn only): stop after ``head`` tokens, with the context checked for the
    whole ``max_completion_length`` (:func:`sampled_rollout`)."""
    cfg = inputs.config
    if head is not None:  # a partial rollout's head: the tail comes later, it must fit too
        prompt_ids, prompt_mask = encode_prompts(inputs.tokenizer, rows["prompt"], inputs.device)
        check_context(model, prompt_mask, cfg.max_completion_length)
        return generate_from_ids(model, inputs.tokenizer, prompt_ids, prompt_mask,
                                 num_generations=num_generations, max_completion_length=head,
                                 check_context_length=False, decoder=inputs.decoder,
                                 **sampling)
    if inputs.environment_factory is not None:
        return run_episodes(model, inputs.tokenizer, rows["prompt"],
                            environments(inputs.environment_factory, rows, num_generations),
                            num_generations=num_generations,
                            max_completion_length=cfg.max_completion_length,
                            max_tool_calling_iterations=cfg.max_tool_calling_iterations,
                            decoder=inputs.decoder, **sampling)
    return generate(model, inputs.tokenizer, rows["prompt"], num_generations=num_generations,
                    max_completion_length=cfg.max_completion_length, decoder=inputs.decoder,
                    **sampling)


def greedy_rewards(inputs: SamplingInputs, batch: Experience) -> torch.Tensor:
    """ReMax's baseline: the reward of one greedy completion by the policy per prompt of
    ``batch``. With an environment the greedy completion is an episode of the same loop as the
    samples (its tool calls answered, its environment handed to the reward functions), so a
    reward the environment keeps scores it as it scores them."""
    rows = inputs.train_dataset[batch.prompt_index[::inputs.config.num_generations].tolist()]
    rollout = rollout_of(inputs, inputs.policy, rows, 1, temperature=inputs.temperature,
                         greedy=True)
    return score(inputs, rows, rollout)[1]


@dataclass(frozen=True)
class Sampling:
    """One run's sampling: what a step's batch is sampled and scored with, and nothing else of
    the run (no optimizer, no step counter, no history).

    The trainer builds one (``Trainer.sampling``) and samples its synchronous step with
    :meth:`batch`. An asynchronous producer (:mod:`labkit.offpolicy`) is handed the same object
    when it is built, in place of the trainer, and samples through these methods at the moments
    its schedule chooses; the calls only go down, never back into the trainer. The fields are
    references, shared with the trainer: the policy the optimizer updates in place, the prompt
    order and the generator a checkpoint restores in place. So there is one prompt order and
    one random stream per run, drawn in the order batches are sampled, whoever samples them.
    """

    config: object
    """the run's :class:`~labkit.config.TrainConfig`"""
    policy: torch.nn.Module
    """the policy being trained"""
    sampling_copy: torch.nn.Module | None
    """its copy in ``sampling_dtype`` (synced before each sampling), or None"""
    tokenizer: object
    reward_funcs: list
    """TRL's signature, weighted by ``config.reward_weights``"""
    reward_names: list
    """one name per reward function (the history's ``reward_<name>`` columns)"""
    train_dataset: object
    environment_factory: Callable | None
    device: torch.device
    prompt_order: object
    """the prompt order (:mod:`labkit.tricks.prompt_sampling`): ``take``, ``observe``,
    ``end_batch``, ``state_dict``"""
    generator: torch.Generator
    """the sampling random stream"""
    decoder: Decoder
    """the decode loop every sampling call runs, and the captured steps it keeps"""

    def temperature_at(self, step: int) -> float:
        """The sampling temperature of ``step`` (``temperature_schedule``)."""
        cfg = self.config
        return temperature_at(step, cfg.max_steps, cfg.temperature, cfg.temperature_final,
                              cfg.temperature_schedule)

    def inputs(self, temperature: float, policy: torch.nn.Module | None = None) -> SamplingInputs:
        """What a round reads, at ``temperature``; ``policy``: another copy of the weights (the
        overlapped producer's thread) in place of the trained one."""
        return SamplingInputs(self.config, self.policy if policy is None else policy,
                              self.tokenizer, self.reward_funcs, self.train_dataset,
                              self.environment_factory, temperature, self.device,
                              self.decoder)

    def synced_model(self) -> torch.nn.Module:
        """The model that samples now (:func:`synced_sampling_copy`)."""
        return synced_sampling_copy(self.policy, self.sampling_copy)

    def batch(self, temperature: float, model: torch.nn.Module | None = None
              ) -> tuple[Experience, dict]:
        """A step's batch: ``prompts_per_step`` prompts x G completions, sampled by the current
        weights (or by ``model``, a copy of them, as is) and scored (:func:`sample_round`). With
        DAPO's dynamic sampling, groups whose rewards are all equal are dropped and new prompts
        sampled until the batch is full, for at most ``max_resample_rounds`` extra rounds.
        Returns the batch and its sampling metrics (:meth:`assemble`)."""
        cfg, num_generations = self.config, self.config.num_generations
        kept, produced = [], []
        needed, rounds, dropped, generation_time = cfg.prompts_per_step, 0, 0, 0.0
        inputs = self.inputs(temperature, model)
        sampling_copy = self.synced_model() if model is None else model
        while True:
            batch, round_, seconds = sample_round(inputs, self.prompt_order.take(needed),
                                                  sampling_copy, self.prompt_order, self.generator)
            produced.append(round_)
            generation_time += seconds
            if not cfg.dynamic_sampling:
                kept.append(batch)
                break
            informative = dynamic_sampling_mask(batch.rewards, num_generations)
            kept.append(batch.select(informative.repeat_interleave(num_generations)))
            dropped += int((~informative).sum())
            needed -= int(informative.sum())
            if needed <= 0 or rounds == cfg.max_resample_rounds:
                break
            rounds += 1
        return self.assemble(kept, produced, temperature, generation_time, dropped, rounds)

    def groups(self, n: int, temperature: float
               ) -> tuple[list[int], Experience, SampledRound, float]:
        """``n`` new prompts' groups, sampled now by the current weights and scored: their
        prompt indices, the batch, the round and its seconds (the admission clock's groups)."""
        indices = self.prompt_order.take(n)
        batch, round_, seconds = sample_round(self.inputs(temperature), indices,
                                              self.synced_model(), self.prompt_order, self.generator)
        return indices, batch, round_, seconds

    def heads(self, n: int, temperature: float, length: int) -> tuple[list[int], Rollout, float]:
        """``n`` new prompts and the first ``length`` tokens of their G completions by the
        current weights, not scored (a partial rollout's head: :func:`sampled_rollout`)."""
        indices = self.prompt_order.take(n)
        head, seconds = sampled_rollout(self.inputs(temperature), indices, self.synced_model(),
                                        self.generator, head=length)
        return indices, head, seconds

    def finish(self, indices: list[int], head: Rollout, temperature: float, seconds: float
               ) -> tuple[Experience, SampledRound, float]:
        """Continue ``head``'s unfinished completions with the current weights
        (:func:`labkit.sampling.continue_rollout`) and score them (:func:`scored_round`);
        ``seconds``: the head's decoding time, to which the tail's is added."""
        cfg = self.config
        tic = time.perf_counter()
        rollout = continue_rollout(self.synced_model(), self.tokenizer, head,
                                   max_completion_length=cfg.max_completion_length,
                                   temperature=temperature, top_p=cfg.top_p, top_k=cfg.top_k,
                                   generator=self.generator, decoder=self.decoder)
        seconds += time.perf_counter() - tic
        return scored_round(self.inputs(temperature), indices, rollout, self.prompt_order, seconds)

    def assemble(self, kept: list[Experience], produced: list[SampledRound], temperature: float,
                 generation_time: float, dropped: int = 0, rounds: int = 0
                 ) -> tuple[Experience, dict]:
        """The step's batch from sampled parts (``kept``: the groups it trains; ``produced``: the
        rounds its sampling columns describe) and its sampling metrics at ``temperature``;
        :meth:`batch` and the asynchronous producers all end here, and the prompt order hears
        that one more training step's batch is complete (the curriculum's schedule)."""
        cfg, num_generations = self.config, self.config.num_generations
        self.prompt_order.end_batch()  # one training step's batch, whatever its sampling rounds
        batch = Experience.cat(kept).select(slice(0, cfg.prompts_per_step * num_generations))
        if cfg.mask_truncated_completions:
            batch.loss_mask = batch.loss_mask * ~batch.truncated[:, None]
        if cfg.top_entropy_quantile < 1:
            batch.token_weights = top_entropy_mask(batch.sample_entropy, batch.loss_mask,
                                                   cfg.top_entropy_quantile).float()
        row = sampling_metrics(produced, self.reward_names, num_generations, temperature)
        real = batch.loss_mask.bool() & ~batch.demonstrations[:, None]
        row["entropy_high_frac"] = float(
            (batch.sample_entropy[real] > cfg.entropy_threshold).float().mean()) \
            if real.any() else math.nan
        row.update(groups_dropped=dropped, resample_rounds=rounds,
                   generation_time=generation_time)
        return batch, row

    def streams(self) -> tuple:
        """The random stream's and the prompt order's states (:meth:`rewind` puts them back)."""
        return self.generator.get_state(), self.prompt_order.state_dict()

    def rewind(self, streams: tuple) -> None:
        self.generator.set_state(streams[0])
        self.prompt_order.load_state_dict(streams[1])
