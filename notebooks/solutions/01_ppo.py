"""Reference solutions to the exercises of notebooks/01_ppo.ipynb.

Each function has the signature of the notebook's stub; the notebook checks it against labkit's
implementation with ``labkit.exercises.check_function``; ``EXPERIMENT_PREDICTION`` answers
the experiment exercise (checked with ``labkit.exercises.check_prediction``). Import with
``importlib.import_module("solutions.01_ppo")`` (the name starts with a digit).
"""

import torch


def clip_higher_surrogate(log_ratio, advantages, epsilon_low=0.2, epsilon_high=0.28):
    """Per-token PPO loss to minimise with an asymmetric clip band [1 - eps_low, 1 + eps_high]:
    max(-r A, -clip(r, 1 - eps_low, 1 + eps_high) A)."""
    ratio = torch.exp(log_ratio)
    clipped = ratio.clamp(1 - epsilon_low, 1 + epsilon_high)
    return torch.maximum(-ratio * advantages, -clipped * advantages)


def dual_clip_surrogate(log_ratio, advantages, epsilon=0.2, c=3.0):
    """Dual-clip PPO: the PPO loss, capped at -c A where A < 0 (so zero gradient beyond r = c)."""
    ppo = clip_higher_surrogate(log_ratio, advantages, epsilon, epsilon)
    return torch.where(advantages < 0, torch.minimum(ppo, -c * advantages), ppo)


def gae(token_rewards, values, mask, gamma, lam):
    """GAE over right-padded responses: A_t = delta_t + gamma * lam * A_{t+1}, returns R = A + V.

    Positions outside the mask get 0; V = 0 and A = 0 after each response's last token.
    """
    m = mask.bool()
    rewards, values = token_rewards.detach(), values.detach()
    advantages = torch.zeros_like(rewards)
    next_value = torch.zeros_like(rewards[:, 0])
    next_adv = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv = delta + gamma * lam * next_adv
        advantages[:, t] = torch.where(m[:, t], adv, 0)
        # past a response's end (padding) nothing flows back: reset to 0
        next_adv = torch.where(m[:, t], adv, 0)
        next_value = torch.where(m[:, t], values[:, t], 0)
    returns = torch.where(m, advantages + values, 0)
    return advantages, returns


# Exercise 4 (experiment): four updates per batch, as 4 passes over the whole batch (baseline) or
# as 1 pass in 4 mini-batches (changed); metric clip_region. The later passes of the baseline train
# on the completions the earlier steps just pushed, so their ratios left the band; a mini-batch's
# completions moved only through steps on other completions, so fewer of them clip.
EXPERIMENT_PREDICTION = "down"
