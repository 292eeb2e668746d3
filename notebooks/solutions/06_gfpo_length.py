"""Reference solutions to the exercises of notebooks/06_gfpo_length.ipynb.

Each function has the signature of the notebook's stub; the notebook checks it against labkit's
implementation with ``labkit.exercises.check_function``; ``EXPERIMENT_PREDICTION`` answers
the experiment exercise (checked with ``labkit.exercises.check_prediction``). Import with
``importlib.import_module("solutions.06_gfpo_length")`` (the name starts with a digit).
"""

import torch


def shortest_k(rewards, lengths, num_generations, k=2):
    """GFPO's length filter: True for the k shortest completions of each group (ties: earlier wins)."""
    lens = lengths.view(-1, num_generations)
    order = torch.sort(lens, dim=-1, stable=True).indices
    rank = order.argsort(-1)  # rank of each completion in its group, 0 = shortest
    return (rank < k).reshape(-1)


def gfpo_advantages(rewards, keep_mask, num_generations, eps=1e-4):
    """GFPO's advantage: kept-set mean and population std per group, exactly 0 for the rejected."""
    r = rewards.view(-1, num_generations)
    keep = keep_mask.view(-1, num_generations)
    count = keep.sum(-1, keepdim=True)
    mean = torch.where(keep, r, 0).sum(-1, keepdim=True) / count
    centred = torch.where(keep, r - mean, 0)
    std = (centred.pow(2).sum(-1, keepdim=True) / count).sqrt()
    # all-equal kept rewards: centred is exactly 0 there, so the advantage is 0
    return (centred / (std + eps)).reshape(-1)


def laser_reward(rewards, lengths, target_length=32, alpha=0.5):
    """LASER: R + alpha * 1[R = 1] * 1[length <= L_T]."""
    bonus = (rewards == 1) & (lengths <= target_length)
    return rewards + alpha * bonus.to(rewards.dtype)


# Exercise 4 (experiment): 8 completions kept per prompt, drawn (G = 8, no filter) or the 8 shortest
# of G = 16; metric completions_trained. Only kept sets whose rewards differ carry a gradient, and the
# 8 shortest of a group share one reward more often than 8 drawn at random.
EXPERIMENT_PREDICTION = "down"
