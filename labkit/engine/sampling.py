"""One sampling round of a step: prompts in, a scored batch out (the trainer's steps 1-2).

The trainer's :meth:`~labkit.trainer.Trainer.sample_and_score` repeats :func:`sample_round` while
DAPO's dynamic sampling still needs groups; the sampler here is the policy itself, or its copy in
``sampling_dtype`` with this step's weights (as a trainer pushes weights to vLLM).
"""

from __future__ import annotations

import time

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


def synced_sampling_model(trainer):
    """The model that samples: the policy, or (``sampling_dtype``) its copy in another dtype with
    this step's weights copied in (cast)."""
    if trainer.sampling_model is None:
        return trainer.model
    with torch.no_grad():
        for copy_, weight in zip(trainer.sampling_model.parameters(),
                                 trainer.model.parameters(), strict=True):
            copy_.copy_(weight)
    return trainer.sampling_model


def score(trainer, rows: dict, rollout):
    """:func:`labkit.engine.scoring.score_completions` with the trainer's reward functions:
    ``(per-function rewards (N, K), totals (N,), strict accuracy (N,))``."""
    return score_completions(trainer.config, trainer.reward_funcs, rows, rollout,
                             embed=lambda r: completion_embeddings(
                                 trainer.model, r, trainer.config.diversity_adjustment))


def sample_round(trainer, indices: list[int], sampling_model) -> tuple[Experience, SampledRound,
                                                                        float]:
    """Sample G completions of each prompt ``indices`` of the train split, score them, and feed
    the solve rates back to the prompt sampler. Returns the batch, what the round produced (for
    the metrics) and the seconds spent generating."""
    cfg, num_generations = trainer.config, trainer.config.num_generations
    rows = trainer.train_dataset[indices]
    tic = time.perf_counter()
    try:
        rollout = rollout_of(trainer, sampling_model, rows, num_generations,
                             temperature=trainer.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
                             generator=trainer.generator)
    except ContextLengthError as error:  # name the dataset's row (episodes repeat each prompt)
        episodes = trainer.environment_factory is not None
        row = indices[error.row // (num_generations if episodes else 1)]
        raise ContextLengthError(f"train_dataset row {row}: {error}", row) from None
    generation_time = time.perf_counter() - tic
    if cfg.rlplus_demonstrations:
        rollout = with_demonstrations(rollout, trainer.tokenizer, demonstration_texts(rows),
                                      num_generations)
    batch = Experience.from_rollout(rollout, trainer.tokenizer.pad_token_id,
                                    cfg.train_on_environment_tokens)
    batch.prompt_index = torch.tensor(indices, device=trainer.device).repeat_interleave(
        num_generations)
    is_demo = torch.zeros(len(batch), dtype=torch.bool, device=trainer.device)
    if cfg.rlplus_demonstrations:
        is_demo[num_generations - 1::num_generations] = True
    batch.demonstrations = is_demo
    batch.reward_components, batch.rewards, correct = score(trainer, rows, rollout)
    trainer.sampler.observe(indices, correct.view(-1, num_generations).nanmean(-1).tolist())
    families = rows.get("family", [None] * len(indices))
    produced = SampledRound(batch.reward_components, batch.rewards, correct, batch.lengths,
                            batch.truncated, [f for f in families for _ in range(num_generations)],
                            rollout if trainer.environment_factory is not None else None)
    return batch, produced, generation_time


def rollout_of(trainer, model, rows: dict, num_generations: int, **sampling):
    """``num_generations`` completions by ``model`` of each prompt of ``rows`` (dataset
    columns): multi-turn episodes when the trainer has an environment (a fresh one per episode,
    reset on its row: :mod:`labkit.agents.episodes`), else single-turn completions.
    ``sampling``: the sampler's keywords (temperature, top_p, top_k, greedy, generator)."""
    cfg = trainer.config
    if trainer.environment_factory is not None:
        return run_episodes(model, trainer.tokenizer, rows["prompt"],
                            environments(trainer.environment_factory, rows, num_generations),
                            num_generations=num_generations,
                            max_completion_length=cfg.max_completion_length,
                            max_tool_calling_iterations=cfg.max_tool_calling_iterations,
                            **sampling)
    return generate(model, trainer.tokenizer, rows["prompt"], num_generations=num_generations,
                    max_completion_length=cfg.max_completion_length, **sampling)


def greedy_rewards(trainer, batch: Experience) -> torch.Tensor:
    """ReMax's baseline: the reward of one greedy completion per prompt of ``batch``. With an
    environment the greedy completion is an episode of the same loop as the samples (its tool
    calls answered, its environment handed to the reward functions), so a reward the
    environment keeps scores it as it scores them."""
    cfg = trainer.config
    rows = trainer.train_dataset[batch.prompt_index[::cfg.num_generations].tolist()]
    rollout = rollout_of(trainer, trainer.model, rows, 1, temperature=trainer.temperature,
                         greedy=True)
    return score(trainer, rows, rollout)[1]
