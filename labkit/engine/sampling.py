"""One sampling round of a step: prompts in, a scored batch out (the trainer's steps 1-2).

The trainer's :meth:`~labkit.trainer.Trainer.sample_and_score` repeats :func:`sample_round` while
DAPO's dynamic sampling still needs groups; the sampler here is the policy itself, or its copy in
``sampling_dtype`` with this step's weights (as a trainer pushes weights to vLLM).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from labkit.agents.episodes import environments, run_episodes
from labkit.engine.scoring import (
    SampledRound,
    completion_embeddings,
    demonstration_texts,
    score_completions,
)
from labkit.experience import Experience
from labkit.rollout import ContextLengthError, generate, with_demonstrations


@dataclass(frozen=True)
class SamplingInputs:
    """What sampling and scoring a round read from a run; the trainer builds one per step
    (:meth:`labkit.trainer.Trainer.sampling_inputs`)."""

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


def synced_sampling_model(policy: torch.nn.Module, sampling_model: torch.nn.Module | None):
    """The model that samples: ``policy``, or (``sampling_dtype``) ``sampling_model``, its copy
    in another dtype, with this step's weights copied in (cast)."""
    if sampling_model is None:
        return policy
    with torch.no_grad():
        for copy_, weight in zip(sampling_model.parameters(), policy.parameters(), strict=True):
            copy_.copy_(weight)
    return sampling_model


def score(inputs: SamplingInputs, rows: dict, rollout):
    """:func:`labkit.engine.scoring.score_completions` with the run's reward functions:
    ``(per-function rewards (N, K), totals (N,), strict accuracy (N,))``."""
    return score_completions(inputs.config, inputs.reward_funcs, rows, rollout,
                             embed=lambda r: completion_embeddings(
                                 inputs.policy, r, inputs.config.diversity_adjustment))


def sample_round(inputs: SamplingInputs, indices: list[int], sampling_model, sampler,
                 generator: torch.Generator) -> tuple[Experience, SampledRound, float]:
    """Sample G completions of each prompt ``indices`` of the train split with
    ``sampling_model`` (drawing from ``generator``), score them, and feed the solve rates back
    to the prompt ``sampler``. Returns the batch, what the round produced (for the metrics) and
    the seconds spent generating."""
    cfg, num_generations = inputs.config, inputs.config.num_generations
    episodes = inputs.environment_factory is not None
    rows = inputs.train_dataset[indices]
    tic = time.perf_counter()
    try:
        rollout = rollout_of(inputs, sampling_model, rows, num_generations,
                             temperature=inputs.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
                             generator=generator)
    except ContextLengthError as error:  # name the dataset's row (episodes repeat each prompt)
        row = indices[error.row // (num_generations if episodes else 1)]
        raise ContextLengthError(f"train_dataset row {row}: {error}", row) from None
    return scored_round(inputs, indices, rollout, sampler, time.perf_counter() - tic)


def scored_round(inputs: SamplingInputs, indices: list[int], rollout, sampler,
                 generation_time: float) -> tuple[Experience, SampledRound, float]:
    """The second half of :func:`sample_round`: score the sampled ``rollout`` of the prompts
    ``indices`` and feed the solve rates back to the prompt ``sampler``. Partial rollouts
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
    sampler.observe(indices, correct.view(-1, num_generations).nanmean(-1).tolist())
    families = rows.get("family", [None] * len(indices))
    produced = SampledRound(batch.reward_components, batch.rewards, correct, batch.lengths,
                            batch.truncated, [f for f in families for _ in range(num_generations)],
                            rollout if episodes else None)
    return batch, produced, generation_time


def rollout_of(inputs: SamplingInputs, model, rows: dict, num_generations: int, **sampling):
    """``num_generations`` completions by ``model`` of each prompt of ``rows`` (dataset
    columns): multi-turn episodes when the run has an environment (a fresh one per episode,
    reset on its row: :mod:`labkit.agents.episodes`), else single-turn completions.
    ``sampling``: the sampler's keywords (temperature, top_p, top_k, greedy, generator)."""
    cfg = inputs.config
    if inputs.environment_factory is not None:
        return run_episodes(model, inputs.tokenizer, rows["prompt"],
                            environments(inputs.environment_factory, rows, num_generations),
                            num_generations=num_generations,
                            max_completion_length=cfg.max_completion_length,
                            max_tool_calling_iterations=cfg.max_tool_calling_iterations,
                            **sampling)
    return generate(model, inputs.tokenizer, rows["prompt"], num_generations=num_generations,
                    max_completion_length=cfg.max_completion_length, **sampling)


def greedy_rewards(inputs: SamplingInputs, batch: Experience) -> torch.Tensor:
    """ReMax's baseline: the reward of one greedy completion by the policy per prompt of
    ``batch``. With an environment the greedy completion is an episode of the same loop as the
    samples (its tool calls answered, its environment handed to the reward functions), so a
    reward the environment keeps scores it as it scores them."""
    rows = inputs.train_dataset[batch.prompt_index[::inputs.config.num_generations].tolist()]
    rollout = rollout_of(inputs, inputs.policy, rows, 1, temperature=inputs.temperature,
                         greedy=True)
    return score(inputs, rows, rollout)[1]
