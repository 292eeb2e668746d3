r"""Turn-level credit for multi-turn episodes: each policy turn is pushed by its own turn's
advantage, a group-relative return-to-go compared with the other episodes at the same turn.

GRPO on an episode gives every token of every turn one number, the episode's normalised
reward, so a wasted guess and the guess that found the code share the credit. Summing per-turn
rewards into that one number does not change this: it is a shaped episode reward. Credit reaches
a turn only when the advantage itself varies by turn. This estimator, ``advantage_estimator=
"turn_grpo"``, is the critic-free form the multi-turn GRPO variants use:

.. math::
    G_{i,k} = \sum_{k'=k}^{K_i-1}\gamma^{k'-k} r_{i,k'} + \gamma^{K_i-1-k} R_i,\qquad
    \hat A_{i,k} = \frac{G_{i,k} - \operatorname{mean}_{j\in g(i),\,K_j>k} G_{j,k}}
                        {\operatorname{std}_{j\in g(i),\,K_j>k} G_{j,k} + \varepsilon}

for episode ``i`` of group ``g(i)`` with ``K_i`` policy turns, ``r_{i,k}`` the environment's reward
for turn ``k`` (the guessing game: the share of the code its guess revealed) and ``R_i`` the run's
reward for the episode (its reward functions: the outcome), received after the last turn. Every
token the policy wrote in turn ``k`` gets :math:`\hat A_{i,k}`; the environment's tokens get 0.

Where it comes from, and where it departs:

* the return is GiGPO's discounted step return (arXiv 2505.10978, section 4, eq. 5; the authors'
  verl-agent code names it so) with the outcome folded in at the last turn, and StarPO's objective
  (RAGEN, arXiv 2504.20073, section 3: the expected discounted sum of per-turn rewards);
* GiGPO groups the steps that share an *anchor state* (identical environment observations across
  the group's episodes) and adds that step advantage to GRPO's episode advantage. The guessing
  game's states rarely repeat exactly once the first guesses differ, so this estimator groups by
  *turn index* instead: the baseline of turn ``k`` is the group's episodes that reached turn ``k``
  (the brief form MT-GRPO, arXiv 2505.11821, figure 1, uses for its two-turn episodes, where the
  first turn's advantage adds a normalised turn reward to the outcome's). Group-normalised
  discounted returns as advantages are also GTPO's (arXiv 2511.14846); no episode-level term is
  added (GiGPO's omega = 0 with turn-index groups);
* GRPO's rules carry over per turn index: Bessel-corrected std plus ``eps = 1e-4``; a turn that
  only one episode of the group reached, or whose returns are all equal, gets exactly 0;
  ``scale_rewards`` ``"none"`` (Dr. GRPO) and ``"batch"`` (the std of every turn's return in the
  batch) as for GRPO.

A single-turn completion is an episode of one turn with no per-turn reward: ``G = R`` and the
estimator is GRPO exactly (tested). An environment that keeps no per-turn rewards gives
``r = 0``: the outcome's return with a baseline per turn index.
"""

from __future__ import annotations

import torch

from labkit.advantages.groups import as_float, centre, check_mask, group_rows, group_std
from labkit.advantages.grpo import as_scale
from labkit.advantages.registry import AdvantageInputs, Advantages, register_advantage_estimator

__all__ = ["policy_turn_ids", "turn_level_advantages", "turn_returns"]


def policy_turn_ids(action_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) long: which policy turn (0, 1, ...) each token the policy wrote belongs to, -1 on
    the environment's tokens and padding. A turn is a run of policy tokens: in an episode the
    policy's turns are always separated by an environment turn (:mod:`labkit.agents.episodes`)."""
    acted = action_mask.bool()
    starts = acted & ~torch.nn.functional.pad(acted[:, :-1], (1, 0), value=False)
    return torch.where(acted, starts.long().cumsum(-1) - 1, -1)


def turn_returns(turn_rewards: torch.Tensor, outcome: torch.Tensor, turns: torch.Tensor,
                 gamma: float = 1.0) -> torch.Tensor:
    r"""Return-to-go of each turn, :math:`G_{i,k}` of the module docstring; NaN past an episode's
    last turn.

    ==================  ======  =======================================================
    name                shape   meaning
    ==================  ======  =======================================================
    ``turn_rewards``    (B, K)  the environment's reward for turn k (entries past an
                                episode's turns are ignored)
    ``outcome``         (B,)    the episode's reward, received after its last turn
    ``turns``           (B,)    policy turns of each episode, K_i <= K
    returns             (B, K)  G; NaN where k >= K_i
    ==================  ======  =======================================================
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must lie in [0, 1] (a discount per turn), got gamma={gamma}")
    rewards = as_float(turn_rewards).detach()
    running = torch.zeros_like(rewards[:, 0]) if rewards.size(1) else rewards.new_zeros(len(rewards))
    out = torch.full_like(rewards, torch.nan)
    for k in reversed(range(rewards.size(1))):
        last = turns - 1 == k
        running = torch.where(last, rewards[:, k] + outcome, rewards[:, k] + gamma * running)
        out[:, k] = torch.where(k < turns, running, torch.nan)
    return out


def turn_level_advantages(rewards: torch.Tensor, turn_rewards: torch.Tensor | None,
                          action_mask: torch.Tensor | None, mask: torch.Tensor,
                          num_generations: int, gamma: float = 1.0,
                          scale_rewards: str = "group", eps: float = 1e-4) -> torch.Tensor:
    """Each policy token's advantage: its turn's group-relative return-to-go (module docstring).

    =====================  ======  ====================================================
    name                   shape   meaning
    =====================  ======  ====================================================
    ``rewards``            (B,)    each episode's reward R (its outcome), B = P * G
    ``turn_rewards``       (B, T)  each turn's reward on the turn's last policy token
                                   (0 elsewhere); None = no per-turn rewards
    ``action_mask``        (B, T)  1 on the policy's tokens; None = single-turn
                                   completions (every masked token is turn 0)
    ``mask``               (B, T)  loss mask: tokens outside it get 0
    ``num_generations``    int     G, episodes per prompt, consecutive rows
    returns                (B, T)  advantages, 0 off the policy's masked tokens
    =====================  ======  ====================================================
    """
    grouped = group_rows(rewards, num_generations)  # validates layout and finiteness
    m = check_mask(mask, mask if action_mask is None else action_mask)
    acted = m if action_mask is None else action_mask.bool()
    ids = policy_turn_ids(acted)
    turns = ids.max(-1).values + 1
    width = max(int(turns.max()), 1) if len(ids) else 1
    per_turn = torch.zeros(len(ids), width, dtype=grouped.dtype, device=grouped.device)
    if turn_rewards is not None:
        if turn_rewards.shape != ids.shape:
            raise ValueError(f"turn_rewards must have shape {tuple(ids.shape)} (one entry per "
                             f"completion token), got {tuple(turn_rewards.shape)}")
        gains = as_float(turn_rewards).detach()
        if not torch.isfinite(gains).all():
            rows = (~torch.isfinite(gains)).any(-1).nonzero().flatten().tolist()[:8]
            raise ValueError(f"turn_rewards contains non-finite (NaN/inf) values at rows {rows}")
        per_turn.scatter_add_(1, ids.clamp(min=0), torch.where(ids >= 0, gains, 0).to(per_turn.dtype))
    returns = turn_returns(per_turn, grouped.reshape(-1), turns, gamma)
    scale = as_scale(scale_rewards)
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    by_group = returns.view(-1, num_generations, width)  # (P, G, K): NaN = turn not reached
    centred, count = centre(by_group, dim=1)
    if scale == "group":
        centred = centred / (group_std(centred, count, dim=1) + eps)
    elif scale == "batch":
        flat, total = centre(by_group, dim=None)
        centred = centred / (group_std(flat, total, dim=None) + eps)
    per_token = centred.reshape(len(ids), width).gather(1, ids.clamp(min=0))
    return torch.where((ids >= 0) & m, per_token, 0)


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
    summary="per-turn return-to-go, group-normalised per turn index; each turn's tokens get "
            "their turn's advantage",
    trl_refusal="turn-level advantages: GRPOTrainer gives one advantage per completion and "
                "keeps no per-turn rewards",
    paper=("Group-in-Group Policy Optimization for LLM Agent Training", "2505.10978"))
def _turn_grpo(x: AdvantageInputs) -> Advantages:
    cfg = x.config
    return Advantages(turn_level_advantages(x.rewards, x.turn_rewards, x.action_mask, x.mask,
                                            x.num_generations, cfg.gamma, cfg.scale_rewards))
