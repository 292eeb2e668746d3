"""Rewards that an environment keeps: the outcome of a multi-turn episode, or its per-turn rewards.

With ``Trainer(environment_factory=...)`` the reward functions receive the episodes'
environments as the ``environments`` column (TRL passes them to an environment's ``get_reward``
the same way). :func:`environment_reward` is the outcome reward, given once at the end (TRL's
``get_reward``); :func:`turn_reward` adds up the rewards the environment gave each turn
(``turn_rewards``): for the guessing game, how much of the code each guess revealed, so an episode
that ran out of turns still earns what it learned (dense, per-turn feedback as in RAGEN's StarPO,
arXiv 2504.20073, section 3, against the sparse outcome).
"""

from __future__ import annotations


def environment_reward(prompts, completions, environments=None, **columns) -> list[float | None]:
    """Each episode's outcome, ``environment.get_reward()``; None where there is no environment
    or it keeps no reward."""
    if environments is None:
        return [None] * len(completions)
    return [float(env.get_reward()) if hasattr(env, "get_reward") else None
            for env in environments]


def turn_reward(prompts, completions, environments=None, **columns) -> list[float | None]:
    """The sum of each episode's per-turn rewards (``environment.turn_rewards``); None where the
    environment keeps none."""
    if environments is None:
        return [None] * len(completions)
    return [float(sum(env.turn_rewards)) if hasattr(env, "turn_rewards") else None
            for env in environments]
