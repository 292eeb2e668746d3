"""Reference solutions to the exercises of notebooks/04_dapo.ipynb.

Each function has the signature of the notebook's stub; the notebook checks it against labkit's
implementation with ``labkit.exercises.check_function``; ``EXPERIMENT_PREDICTION`` answers
the experiment exercise (checked with ``labkit.exercises.check_prediction``). Import with
``importlib.import_module("solutions.04_dapo")`` (the name starts with a digit).
"""

import torch


def token_level_loss(per_token_loss, mask):
    """DAPO's token-level aggregation: the mean over every response token of the batch."""
    m = mask.bool()
    return torch.where(m, per_token_loss, 0).sum() / m.sum().clamp(min=1)


def overlong_penalty(lengths, max_completion_length, overlong_buffer_len):
    """DAPO's soft overlong punishment (penalty factor 1): 0, then a ramp to -1, then -1."""
    start = max_completion_length - overlong_buffer_len
    return -((lengths.double() - start) / overlong_buffer_len).clamp(0, 1)


def dynamic_sampling_mask(rewards, num_generations):
    """DAPO's dynamic sampling: keep a group (True) when its rewards are not all equal."""
    grouped = rewards.view(-1, num_generations)
    return grouped.amax(-1) > grouped.amin(-1)


# Exercise 4 (experiment): dynamic_sampling False -> True, metric sampled_tokens.
# Dynamic sampling drops the groups whose rewards are all equal and samples new prompts to refill
# the batch, so a step generates more completion tokens than the baseline's one round.
EXPERIMENT_PREDICTION = "up"
