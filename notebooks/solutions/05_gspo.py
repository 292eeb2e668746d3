"""Reference solutions to the exercises of notebooks/05_gspo.ipynb.

Each function has the signature of the notebook's stub; the notebook checks it against labkit's
implementation with ``labkit.exercises.check_function``; ``EXPERIMENT_PREDICTION`` answers
the experiment exercise (checked with ``labkit.exercises.check_prediction``). Import with
``importlib.import_module("solutions.05_gspo")`` (the name starts with a digit).
"""

import torch


def sequence_log_ratio(logp, old_logp, mask):
    """GSPO's log s_i: the mean token log-ratio over each response's valid tokens, shape (B,)."""
    m = mask.bool()
    log_ratio = torch.where(m, logp - old_logp, 0)
    return log_ratio.sum(-1) / m.sum(-1).clamp(min=1)


def gspo_token_log_ratio(logp, old_logp, mask):
    """GSPO-token: value log s_i on every valid token, gradient of log pi(y_it) alone; 0 on padding."""
    m = mask.bool()
    seq = sequence_log_ratio(logp, old_logp, m).detach()
    return torch.where(m, logp - logp.detach() + seq[:, None], 0)


def gspo_loss(logp, old_logp, advantages, mask, epsilon_low=3e-4, epsilon_high=4e-4):
    """GSPO's loss to minimise: -mean_i min(s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i)."""
    s = sequence_log_ratio(logp, old_logp, mask).exp()[:, None]  # (B, 1)
    unclipped = s * advantages
    clipped = s.clamp(1 - epsilon_low, 1 + epsilon_high) * advantages
    return -torch.minimum(unclipped, clipped).mean()


# Exercise 4 (experiment): importance_sampling_level "token" -> "sequence" under GSPO's band, metric
# clip_region. Per token only the tokens that moved past 3e-4 clip, and many barely move; the sequence
# ratio averages the response's log-ratios, leaves the band on the few that moved, and clips all tokens.
EXPERIMENT_PREDICTION = "up"
