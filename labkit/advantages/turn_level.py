r"""Turn-level credit for multi-turn episodes: each policy turn's tokens are pushed by their own
turn's advantage, the episode's outcome advantage plus a turn term that compares the turn's
reward with the other episodes' rewards at the same turn.

GRPO on an episode gives every token of every turn one number, the episode's normalised reward,
so a wasted guess and the guess that found the code share the credit. Summing per-turn rewards
into that one number does not change this: it is a shaped episode reward. Credit reaches a turn
only when the advantage itself varies by turn. ``advantage_estimator="turn_grpo"``:

.. math::
    \hat A_{i,k} = \hat A^E_i + \hat A^T_{i,k},\qquad
    \hat A^E_i = \frac{R_i - \operatorname{mean}_{j\in g(i)} R_j}{\operatorname{std}_{j\in g(i)} R_j
                 + \varepsilon},\qquad
    \hat A^T_{i,k} = \frac{G_{i,k} - \operatorname{mean}_{j\in g_k(i)} G_{j,k}}
                          {\operatorname{std}_{j\in g_k(i)} G_{j,k} + \varepsilon},\qquad
    G_{i,k} = \sum_{k'=k}^{K_i-2}\gamma^{k'-k}\, r_{i,k'}

for episode ``i`` of group ``g(i)`` with ``K_i`` policy turns and reward ``R_i`` (the run's reward
functions: the outcome). ``r_{i,k}`` is the environment's reward for turn ``k``'s tool call (the
guessing game: the share of the code its reply revealed); the turns that get one are those the
environment answered, every turn but an episode's last (the answer, a call past the turn limit, or
a turn cut by the length budget), so the last turn's tokens get :math:`\hat A^E_i` alone and
``g_k(i)`` is the group's episodes whose turn ``k`` was answered. Every token the policy wrote in
turn ``k`` gets :math:`\hat A_{i,k}`; the environment's tokens get 0.

Where it comes from, and where it departs:

* it is GiGPO's two-level advantage (arXiv 2505.10978: the episode advantage plus omega times a
  step advantage over a step-level group, omega = 1 here; the step return is its eq. 5, the
  discounted sum of the step rewards, as the authors' verl-agent code names it). GiGPO's step
  groups are *anchor states*, identical observations across the group's episodes; the guessing
  game's states rarely repeat once the first guesses differ, so the groups here are *turn
  indices*, the baseline MT-GRPO uses (arXiv 2505.11821, figure 1: for two-turn episodes, a
  turn advantage from the group-normalised turn reward added to the outcome advantage on the
  first turn's tokens, the outcome advantage alone on the last turn's). With two turns and
  gamma = 0 this is MT-GRPO's estimator with its weight on the turn term set to 1;
* gamma. StarPO's MDP objective is the expected discounted sum of per-turn rewards (RAGEN, arXiv
  2504.20073, section 3); StarPO itself optimises it per trajectory, one normalised return per
  episode, which is what summing the per-turn rewards into the episode's reward does. With
  gamma = 1 the guessing game's information rewards telescope: ``G_{i,k}`` is the share of the
  code still unknown before turn k minus what stays unknown at the end, a function of where the
  episode stood before turn k rather than of what turn k did; an episode that was ahead gets the
  lower turn advantage. gamma = 0 credits each turn with its own reply's information;
* GRPO's rules carry over to both terms: Bessel-corrected std plus ``eps = 1e-4``; a turn index
  only one episode of the group reached with an answered call, or whose returns are all equal,
  gives a turn term of exactly 0; ``scale_rewards`` ``"none"`` (Dr. GRPO) and ``"batch"`` (the
  std over the batch: of the rewards for the episode term, of every answered turn's return for
  the turn term) as for GRPO.

A single-turn completion, or an episode whose environment keeps no per-turn rewards, has no turn
term: the estimator is then GRPO exactly (tested).
"""

from __future__ import annotations

import torch

from labkit.advantages.groups import as_float, centre, check_mask, group_std
from labkit.advantages.grpo import as_scale, group_advantages
from labkit.advantages.registry import AdvantageInputs, Advantages, register_advantage_estimator

__all__ = ["policy_turn_ids", "turn_level_advantages", "turn_returns"]


def policy_turn_ids(action_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) long: which policy turn (0, 1, ...) each token the policy wrote belongs to, -1 on
    the environment's tokens and padding. A turn is a run of policy tokens: in an episode the
    policy's turns are always separated by an environment turn (:mod:`labkit.agents.episodes`)."""
    acted = action_mask.bool()
    starts = acted & ~torch.nn.functional.pad(acted[:, :-1], (1, 0), value=False)
    return torch.where(acted, starts.long().cumsum(-1) - 1, -1)


def turn_returns(turn_rewards: torch.Tensor, answered: torch.Tensor,
                 gamma: float = 0.0) -> torch.Tensor:
    r"""Discounted return of each answered turn, :math:`G_{i,k}` of the module docstring; NaN on
    the turns the environment did not answer.

    ==================  ======  =======================================================
    name                shape   meaning
    ==================  ======  =======================================================
    ``turn_rewards``    (B, K)  the environment's reward for turn k's call
    ``answered``        (B,)    turns the environment answered: turns 0 .. answered - 1
    returns             (B, K)  G; NaN where k >= answered
    ==================  ======  =======================================================
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must lie in [0, 1] (a discount per turn), got gamma={gamma}")
    rewards = as_float(turn_rewards).detach()
    kept = torch.arange(rewards.size(1), device=rewards.device)[None, :] < answered[:, None]
    rewards = torch.where(kept, rewards, 0)
    running = rewards.new_zeros(len(rewards))
    out = torch.full_like(rewards, torch.nan)
    for k in reversed(range(rewards.size(1))):
        running = rewards[:, k] + gamma * running
        out[:, k] = torch.where(kept[:, k], running, torch.nan)
    return out


def turn_level_advantages(rewards: torch.Tensor, turn_rewards: torch.Tensor | None,
                          action_mask: torch.Tensor | None, mask: torch.Tensor,
                          num_generations: int, gamma: float = 0.0,
                          scale_rewards: str = "group", eps: float = 1e-4) -> torch.Tensor:
    """Each policy token's advantage: the episode's outcome advantage plus its turn's term
    (module docstring).

    =====================  ======  ====================================================
    name                   shape   meaning
    =====================  ======  ====================================================
    ``rewards``            (B,)    each episode's reward R (its outcome), B = P * G
    ``turn_rewards``       (B, T)  each answered turn's reward on the turn's last policy
                                   token (0 elsewhere); None = no per-turn rewards
    ``action_mask``        (B, T)  1 on the policy's tokens; None = single-turn
                                   completions (every masked token is turn 0)
    ``mask``               (B, T)  loss mask: tokens outside it get 0
    ``num_generations``    int     G, episodes per prompt, consecutive rows
    returns                (B, T)  advantages, 0 off the policy's masked tokens
    =====================  ======  ====================================================
    """
    scale = as_scale(scale_rewards)
    episode = group_advantages(rewards, num_generations, scale, eps)  # checks layout, eps
    m = check_mask(mask, mask if action_mask is None else action_mask)
    ids = policy_turn_ids(m if action_mask is None else action_mask)
    advantages = episode[:, None].expand_as(ids)
    if turn_rewards is not None:
        if turn_rewards.shape != ids.shape:
            raise ValueError(f"turn_rewards must have shape {tuple(ids.shape)} (one entry per "
                             f"completion token), got {tuple(turn_rewards.shape)}")
        gains = as_float(turn_rewards).detach()
        if not torch.isfinite(gains).all():
            rows = (~torch.isfinite(gains)).any(-1).nonzero().flatten().tolist()[:8]
            raise ValueError(f"turn_rewards contains non-finite (NaN/inf) values at rows {rows}")
        width = max(int(ids.max()) + 1, 1) if ids.numel() else 1
        per_turn = torch.zeros(len(ids), width, dtype=episode.dtype, device=episode.device)
        per_turn.scatter_add_(1, ids.clamp(min=0),
                              torch.where(ids >= 0, gains, 0).to(per_turn.dtype))
        answered = (ids.max(-1).values).clamp(min=0)  # every turn but the last got a reply
        returns = turn_returns(per_turn, answered, gamma)
        by_group = returns.view(-1, num_generations, width)  # (P, G, K): NaN = no answered turn
        centred, count = centre(by_group, dim=1)
        if scale == "group":
            centred = centred / (group_std(centred, count, dim=1) + eps)
        elif scale == "batch":
            flat, total = centre(by_group, dim=None)
            centred = centred / (group_std(flat, total, dim=None) + eps)
        advantages = advantages + centred.reshape(len(ids), width).gather(1, ids.clamp(min=0))
    return torch.where((ids >= 0) & m, advantages, 0)


def _check_turn_config(config) -> None:
    if config.importance_sampling_level != "token":
        raise ValueError(f"importance_sampling_level={config.importance_sampling_level!r} (GSPO) "
                         f"needs one advantage per completion, but turn_grpo gives one per turn: "
                         f"use importance_sampling_level='token' with "
                         f"advantage_estimator='turn_grpo'")
    if config.kl_in_reward:
        raise ValueError("kl_in_reward=True with advantage_estimator='turn_grpo': the per-token "
                         "KL has no place in a per-turn return; put the KL in the loss "
                         "(kl_in_reward=False, beta > 0)")


@register_advantage_estimator(
    "turn_grpo", per_token=True, config_check=_check_turn_config,
    summary="GRPO's episode advantage plus a per-turn term: each answered turn's discounted "
            "return against the group's episodes at that turn",
    trl_refusal="turn-level advantages: GRPOTrainer gives one advantage per completion and "
                "keeps no per-turn rewards",
    paper=("Group-in-Group Policy Optimization for LLM Agent Training", "2505.10978"))
def _turn_grpo(x: AdvantageInputs) -> Advantages:
    cfg = x.config
    return Advantages(turn_level_advantages(x.rewards, x.turn_rewards, x.action_mask, x.mask,
                                            x.num_generations, cfg.gamma, cfg.scale_rewards))
