"""Reference solutions to the exercises of notebooks/03_baselines.ipynb.

Each function has the signature of the notebook's stub; the notebook checks it against labkit's
implementation with ``labkit.exercises.check_function``; ``EXPERIMENT_PREDICTION`` answers
the experiment exercise (checked with ``labkit.exercises.check_prediction``). Import with
``importlib.import_module("solutions.03_baselines")`` (the name starts with a digit).
"""

import torch

from labkit.advantages import batch_normalize, group_advantages


def rloo_advantages(rewards, num_generations):
    """RLOO: each completion's baseline is the mean reward of the other G - 1 of its group."""
    grouped = rewards.view(-1, num_generations)
    others = (grouped.sum(-1, keepdim=True) - grouped) / (num_generations - 1)
    return (grouped - others).reshape(-1)


def opo_advantages(rewards, lengths, num_generations):
    """OPO: baseline = length-weighted mean reward of the group, no std division."""
    grouped = rewards.view(-1, num_generations)
    weights = lengths.view(-1, num_generations).to(grouped.dtype).clamp(min=1)
    baseline = (weights * grouped).sum(-1, keepdim=True) / weights.sum(-1, keepdim=True)
    return (grouped - baseline).reshape(-1)


def gdpo_advantages(rewards_per_func, weights, num_generations):
    """GDPO: normalise each reward inside its group, take the weighted sum, normalise over the batch."""
    per_func = torch.stack(
        [group_advantages(rewards_per_func[:, k], num_generations)
         for k in range(rewards_per_func.shape[1])], dim=1)
    return batch_normalize(per_func @ weights.to(per_func.dtype))


# Exercise 4 (experiment): scale_rewards "group" -> "none", metric grad_norm.
# Rewards in a group are essentially 0/1, whose std is below 1 (at most 0.53 for G = 8): dividing by
# it enlarges the advantages, and the gradient is linear in them. Without it the gradient is smaller.
EXPERIMENT_PREDICTION = "down"
