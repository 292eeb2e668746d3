"""Reference solutions to the exercises of notebooks/02_grpo.ipynb.

Each function has the signature of the notebook's stub; the notebook checks it against labkit's
implementation with ``labkit.exercises.check_function``; ``EXPERIMENT_PREDICTION`` answers
the experiment exercise (checked with ``labkit.exercises.check_prediction``); exercise 4 builds
GRPO from ``group_advantages`` and ``clipped_token_loss`` (checked with
``labkit.exercises.check_grpo_gradient`` against the Trainer). Import with
``importlib.import_module("solutions.02_grpo")`` (the name starts with a digit).
"""

import torch


def group_advantages(rewards, num_generations):
    """GRPO: (r - group mean) / (group std + 1e-4), Bessel-corrected std; constant groups get 0."""
    grouped = rewards.view(-1, num_generations)
    centred = grouped - grouped.mean(-1, keepdim=True)
    std = grouped.std(-1, keepdim=True) if num_generations > 1 else torch.zeros_like(centred)
    # An all-equal group has centred == 0 exactly; keep it exactly 0 (and never NaN)
    advantages = torch.where(std > 0, centred / (std + 1e-4), torch.zeros_like(centred))
    return advantages.reshape(-1)


def k3(logp, ref_logp):
    """Schulman's k3 estimate of KL(pi || ref) per sampled token: e^d - d - 1, d = log ref - log pi."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def grpo_aggregate(per_token_loss, mask):
    """GRPO's sequence-mean-token-mean: mean over each response's valid tokens, then over responses."""
    m = mask.bool()
    per_sequence = torch.where(m, per_token_loss, 0).sum(-1) / m.sum(-1).clamp(min=1)
    return per_sequence.mean()


def clipped_token_loss(logp, old_logp, advantages, mask, epsilon):
    """PPO's clipped surrogate per token (arXiv 1707.06347, eq. 7), negated for the optimizer,
    aggregated GRPO's way (eq. 3): each completion's token mean, then the mean over completions."""
    ratio = torch.exp(logp - old_logp)
    a = advantages[:, None]  # one advantage per completion, shared by its tokens
    per_token = -torch.minimum(ratio * a, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * a)
    return grpo_aggregate(per_token, mask)  # exercise 3


# Exercise 5 (experiment): beta 0.04 -> 1.0, metric grad_norm.
# GRPO's KL term is in the loss, so it has a gradient of its own, on every sampled token (the
# all-equal groups' tokens included, which carry no policy gradient); at beta = 1 its coefficient is
# 25 times larger and its pull back towards the reference adds to each step's gradient, although the
# policy drifts less far (kl_ref falls).
EXPERIMENT_PREDICTION = "up"
