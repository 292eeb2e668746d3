"""Scoring a step's completions: the reward each one gets, and the step's sampling metrics.

The trainer's step 2 (:meth:`labkit.trainer.Trainer.sample_and_score`) in plain functions:

* :func:`score_completions`: the weighted reward functions (TRL's signature), then the shaping
  the configuration asks for, in this order: DRA-GRPO's diversity weights (arXiv 2505.09655,
  eq. 5), DAPO's soft overlong penalty (arXiv 2503.14476, eq. 13), a length reward
  (:mod:`labkit.rewards.length`). Correctness is kept apart from the total: the history's
  ``accuracy`` is always the strict rule's, whatever the reward;
* :func:`completion_embeddings`: DRA's embedding of each completion;
* :func:`sampling_metrics`: reward, accuracy and length statistics over everything sampled in
  the step (dynamic sampling's dropped groups included);
* :func:`demonstration_texts`: RL-PLUS's external demonstration of each prompt.

A prompt that leaves no room for its completion is refused before sampling, by the sampler
(:func:`labkit.sampling.check_context`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from labkit.models import FORMAT_TAGS
from labkit.rewards import accuracy_reward, combine_rewards_by_weight, per_completion
from labkit.rewards.diversity import dra_weights, ngram_embeddings
from labkit.rewards.length import length_shaped_rewards
from labkit.rewards.shaping import overlong_penalty
from labkit.tasks import worked_solution
from labkit.tricks.filters import dynamic_sampling_mask


def score_completions(config, reward_funcs, rows: dict, rollout, embed=None):
    """Rewards of ``rollout``'s completions of ``rows`` (dataset columns), G consecutive
    completions per prompt.

    ``config`` is the run's :class:`~labkit.config.TrainConfig`; ``embed(rollout)`` gives DRA's
    (N, D) embeddings when ``config.diversity_adjustment`` is on.

    ==================  ========  =====================================================
    returned            shape     meaning
    ==================  ========  =====================================================
    ``per_function``    (N, K)    each reward function's value (NaN where it gave None)
    ``totals``          (N,)      weighted sum, then DRA, overlong and length shaping
    ``correct``         (N,)      the strict accuracy rule (NaN where it cannot judge)
    ==================  ========  =====================================================
    """
    cfg = config
    num_generations = len(rollout.texts) // len(rows["prompt"])
    prompts, columns = per_completion(rows, num_generations)
    if getattr(rollout, "environments", None) is not None:
        columns["environments"] = rollout.environments  # TRL passes them to env rewards too
    completions = rollout.texts
    if prompts and not isinstance(prompts[0], str):  # conversational, as TRL passes them
        completions = [[{"role": "assistant", "content": text}] for text in completions]
    per_function, totals = combine_rewards_by_weight(
        reward_funcs, cfg.reward_weights, prompts, completions, **columns)
    if accuracy_reward in reward_funcs:
        correct = per_function[reward_funcs.index(accuracy_reward)]
    else:
        correct = [math.nan if r is None else r
                   for r in accuracy_reward(prompts, completions, **columns)]
    device = rollout.completion_ids.device
    totals = torch.tensor(totals, dtype=torch.float32, device=device)
    correct = torch.tensor(correct, dtype=torch.float32)
    if cfg.diversity_adjustment is not None and num_generations > 1:
        totals = totals * dra_weights(embed(rollout), num_generations).to(device)
    lengths = rollout.lengths.to(device)
    if cfg.overlong_buffer_len:
        totals = totals + overlong_penalty(lengths.clone(), cfg.max_completion_length,
                                           cfg.overlong_buffer_len,
                                           cfg.overlong_penalty_factor).to(device)
    if cfg.length_reward is not None:
        totals = length_shaped_rewards(
            cfg.length_reward, totals, lengths, correct.to(device), num_generations,
            weight=cfg.length_reward_weight, target=cfg.length_target,
            target_easy=cfg.length_target_easy)
    # on the batch's device, like every other field of the Experience that stores it
    per_function = torch.tensor(per_function, dtype=torch.float32, device=device).T
    return per_function, totals, correct


def completion_embeddings(model, rollout, kind: str) -> torch.Tensor:
    """DRA's (N, D) completion embeddings: ``"ngram"`` hashes character 3-grams (format tags
    left out); ``"hidden"`` is the policy's mean last hidden state over each completion."""
    if kind == "ngram":
        return ngram_embeddings(rollout.texts, ignore=FORMAT_TAGS)
    with torch.inference_mode():
        hidden = model.get_decoder()(input_ids=rollout.completion_ids,
                                     attention_mask=rollout.completion_mask).last_hidden_state
    mask = rollout.completion_mask[..., None].to(hidden.dtype)
    return ((hidden * mask).sum(1) / mask.sum(1).clamp(min=1)).float()


@dataclass(frozen=True)
class SampledRound:
    """What one sampling round of a step produced, before any group was dropped (the history's
    sampling metrics count every round). N completions, K reward functions."""

    per_function: torch.Tensor
    """(N, K) each reward function's reward (NaN where it returned None)"""
    totals: torch.Tensor
    """(N,) the weighted total reward"""
    correct: torch.Tensor
    """(N,) strict accuracy (NaN where it cannot judge)"""
    lengths: torch.Tensor
    """(N,) completion lengths in tokens"""
    truncated: torch.Tensor
    """(N,) bool: no end-of-turn within the budget"""
    families: list
    """[N] task family of each completion's prompt (None when the data has none)"""
    episodes: object | None = None
    """the round's :class:`labkit.agents.episodes.Episodes` (tool calls, turns), or None"""


def sampling_metrics(rounds: list[SampledRound], reward_names, num_generations: int,
                     temperature: float) -> dict:
    """The history's sampling columns over every round of a step."""
    per_function, totals, accuracy, lengths, truncated = (
        torch.cat([getattr(r, name).cpu() for r in rounds])
        for name in ("per_function", "totals", "correct", "lengths", "truncated"))
    families = [f for r in rounds for f in r.families]
    informative = torch.cat([dynamic_sampling_mask(r.totals.cpu(), num_generations)
                             for r in rounds])
    row = {"reward": nanmean(totals), "reward_std": nanstd(totals)}
    for k, name in enumerate(reward_names):
        row[f"reward_{name}"] = nanmean(per_function[:, k])
    lengths = lengths.float()
    row.update(accuracy=nanmean(accuracy), completion_length=lengths.mean().item(),
               completion_length_max=int(lengths.max()),
               truncation_rate=truncated.float().mean().item(),
               frac_reward_zero_std=((~informative).float().mean().item()
                                     if informative.numel() else 0.0),
               sampled_tokens=int(lengths.sum()), temperature=temperature)
    for family in sorted({f for f in families if f is not None}):
        chosen = torch.tensor([f == family for f in families])
        row[f"accuracy_{family}"] = nanmean(accuracy[chosen])
    episodes = [r.episodes for r in rounds if r.episodes is not None]
    if episodes:
        row.update(episode_metrics(episodes))
    return row


def episode_metrics(episodes) -> dict:
    """The history's episode columns (tool calls, errors, turns) over a step's episodes."""
    calls = torch.cat([e.tool_calls.cpu() for e in episodes]).float()
    errors = torch.cat([e.tool_errors.cpu() for e in episodes]).float()
    return {"tool_call_rate": (calls > 0).float().mean().item(),
            "tool_calls": calls.mean().item(),
            "tool_error_rate": (errors.sum() / calls.sum()).item() if calls.sum() else 0.0,
            "turns": torch.cat([e.turns.cpu() for e in episodes]).float().mean().item(),
            "turn_limit_rate": torch.cat([e.turn_limit.cpu()
                                          for e in episodes]).float().mean().item(),
            "policy_tokens": torch.cat([e.action_mask.sum(-1).cpu()
                                        for e in episodes]).float().mean().item()}


def demonstration_texts(rows: dict) -> list[str]:
    """RL-PLUS's external demonstration of each prompt: the dataset's ``solution`` column, else
    the task suite's worked solution."""
    if "solution" in rows:
        return list(rows["solution"])
    return [worked_solution({k: v[i] for k, v in rows.items()})
            for i in range(len(rows["prompt"]))]


def nanmean(x: torch.Tensor) -> float:
    """Mean over the non-NaN entries; NaN for an empty tensor."""
    return float(x.nanmean()) if x.numel() else math.nan


def nanstd(x: torch.Tensor) -> float:
    """Sample standard deviation over the non-NaN entries; 0 with fewer than two."""
    x = x[~torch.isnan(x)]
    return float(x.std()) if x.numel() > 1 else 0.0


__all__ = ["completion_embeddings", "demonstration_texts", "nanmean", "nanstd",
           "sampling_metrics", "score_completions"]
