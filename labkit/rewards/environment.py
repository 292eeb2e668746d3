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

from labkit.rewards.registry import REWARD_REGISTRY, register_reward


@register_reward("environment", summary="an episode's outcome", reads="get_reward")
def environment_reward(prompts, completions, environments=None, **columns) -> list:
    """Each episode's outcome, ``environment.get_reward()`` as the environment returns it (the
    trainer's check, :func:`labkit.rewards.rule_based.check_rewards`, refuses a value that is not
    a finite number: ``float()`` here would have read the text ``"0.5"`` as a reward); None where
    there is no environment or it keeps no reward."""
    if environments is None:
        return [None] * len(completions)
    return [env.get_reward() if hasattr(env, "get_reward") else None for env in environments]


@register_reward("turns", summary="the sum of an episode's per-turn rewards",
                 reads="turn_rewards")
def turn_reward(prompts, completions, environments=None, **columns) -> list[float | None]:
    """The sum of each episode's per-turn rewards (``environment.turn_rewards``); None where the
    environment keeps none."""
    if environments is None:
        return [None] * len(completions)
    return [float(sum(env.turn_rewards)) if hasattr(env, "turn_rewards") else None
            for env in environments]


def check_environment_rewards(funcs, environment, where: str) -> None:
    """Refuse a reward in ``funcs`` that reads the environment (a named reward registered with
    ``reads``) and would return None for every completion: there is no environment
    (``environment`` None), or it lacks what the reward reads. Such a run has no reward at all, or
    only the other functions', and nothing says so. ``environment`` is one instance of the run's
    environment; ``where`` names it (or says how to give one) in the message."""
    for fn in funcs:
        attribute = next((reward.reads for reward in REWARD_REGISTRY.values()
                          if reward.code is fn), None)
        if attribute is None or (environment is not None and hasattr(environment, attribute)):
            continue
        problem = ("there is no environment" if environment is None
                   else f"{type(environment).__name__} has no {attribute}")
        raise ValueError(f"reward function {fn.__name__!r} reads each episode's "
                         f"environment.{attribute}, and {problem} ({where}): it would return "
                         f"None for every completion. Give it an environment that keeps "
                         f"{attribute} (the guessing game does), or another reward")
