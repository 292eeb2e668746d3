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
=====================  ==========================================================================

A data file names a reward by key (:data:`NAMED_REWARDS`, read by :func:`named_reward`), never by
an import path: a reference-run spec must not decide what code runs. A reward function of your
own is passed in Python (``train(..., reward_funcs=[fn])``), where you can read it.
"""

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

#: Keys a data file may use for a reward function, and what each builds.
NAMED_REWARDS = {
    "accuracy": "labkit.rewards.accuracy_reward: 1 for a right answer (strict)",
    "format": "labkit.rewards.format_reward: the think/answer format",
    "lenient_length": "labkit.rewards.verifiers.lenient_length_reward (a lax verifier)",
    "answer_anywhere": "labkit.rewards.verifiers.answer_anywhere_reward (a lax verifier)",
    "format_only": "labkit.rewards.verifiers.format_only_reward (a lax verifier)",
    "digit_credit": "labkit.rewards.verifiers.digit_credit_reward (partial credit)",
    "ttrl_vote": "labkit.rewards.ttrl.ttrl_reward (majority-vote pseudo-labels, no answers)",
    "judge": "labkit.rewards.judge.JudgeReward on the shipped tiny judge",
    "environment": "labkit.rewards.environment.environment_reward (an episode's outcome)",
    "turns": "labkit.rewards.environment.turn_reward (the sum of an episode's per-turn rewards)",
}

#: The named rewards that read an episode's environment (what each reads:
#: :data:`labkit.rewards.environment.READS`); a spec naming one needs an environment that keeps it.
ENVIRONMENT_REWARDS = ("environment", "turns")


def named_reward(name):
    """The reward function a data file calls ``name`` (a key of :data:`NAMED_REWARDS`).

    Anything else is refused with the list of keys: no name in a file is ever imported.
    """
    if not isinstance(name, str) or name not in NAMED_REWARDS:
        raise ValueError(
            f"reward function {name!r} is not one of the lab's named rewards "
            f"({', '.join(NAMED_REWARDS)}); a data file names rewards by these keys only, and a "
            f"reward function of your own is passed in Python: "
            f"train(..., reward_funcs=[my_reward])")
    from labkit.rewards import environment, judge, ttrl, verifiers  # on demand: a judge loads

    if name == "judge":
        return judge.JudgeReward(*judge.load_judge())
    return {"accuracy": accuracy_reward, "format": format_reward,
            "lenient_length": verifiers.lenient_length_reward,
            "answer_anywhere": verifiers.answer_anywhere_reward,
            "format_only": verifiers.format_only_reward,
            "digit_credit": verifiers.digit_credit_reward, "ttrl_vote": ttrl.ttrl_reward,
            "environment": environment.environment_reward,
            "turns": environment.turn_reward}[name]


__all__ = ["ENVIRONMENT_REWARDS", "NAMED_REWARDS", "RewardFunctionError", "accuracy_reward", "combine_rewards_by_weight",
           "completion_content", "extract_answer", "format_reward", "named_reward",
           "per_completion", "reward_function_names"]
