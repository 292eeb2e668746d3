"""Rewards: rule-checked rewards with TRL's signature, and the families of rewards around them.

=====================  ==========================================================================
module                 what
=====================  ==========================================================================
``rule_based.py``      ``accuracy_reward`` and ``format_reward`` (RLVR: checked by rule, Tulu 3,
                       arXiv 2411.15124), their weighted combination, TRL's reward signature
``verifiers.py``       lax verifiers a policy learns to exploit, and partial credit
``ttrl.py``            TTRL's majority-vote pseudo-labels (arXiv 2504.16084)
``judge.py``           a generative judge model as the reward (arXiv 2408.15240)
``shaping.py``         DAPO's soft overlong penalty (arXiv 2503.14476, eq. 13)
``length.py``          length rewards: Kimi, LASER, budget control, DLER truncation
``diversity.py``       DRA-GRPO's diversity-adjusted rewards (arXiv 2505.09655)
``environment.py``     an episode's outcome and per-turn rewards, kept by its environment
``registry.py``        :func:`register_reward`, :data:`REWARD_REGISTRY`: the rewards a data file
                       may name, each registered by the file that implements it
=====================  ==========================================================================

A data file names a reward by its key (:data:`REWARD_REGISTRY`, read by :func:`named_reward`),
never by an import path: a reference-run spec must not decide what code runs. A reward function of
your own is passed in Python (``train(..., reward_funcs=[fn])``), where you can read it. Adding a
named reward is a new file here that registers it (``@register_reward("key", summary=...)``) plus
its import line below.
"""

# The named rewards, one file each: importing a file registers its rewards.
from labkit.rewards import environment, judge, ttrl, verifiers  # noqa: F401
from labkit.rewards.registry import REWARD_REGISTRY, get_reward, register_reward, reward_names
from labkit.rewards.rule_based import (
    RewardFunctionError,
    accuracy_reward,
    combine_rewards_by_weight,
    completion_content,
    extract_answer,
    format_reward,
    per_completion,
    reward_function_names,
)


def named_reward(name):
    """The reward function a data file calls ``name`` (a key of :data:`REWARD_REGISTRY`).

    Anything else is refused with the list of keys: no name in a file is ever imported.
    """
    if not isinstance(name, str) or name not in REWARD_REGISTRY:
        raise ValueError(
            f"reward function {name!r} is not one of the lab's named rewards "
            f"({', '.join(REWARD_REGISTRY)}); a data file names rewards by these keys only, and a "
            f"reward function of your own is passed in Python: "
            f"train(..., reward_funcs=[my_reward])")
    return REWARD_REGISTRY[name].function()


__all__ = ["REWARD_REGISTRY", "RewardFunctionError", "accuracy_reward", "combine_rewards_by_weight",
           "completion_content", "extract_answer", "format_reward", "get_reward", "named_reward",
           "per_completion", "register_reward", "reward_function_names", "reward_names"]
