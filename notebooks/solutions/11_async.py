"""Reference solutions to the exercises of notebooks/11_async.ipynb.

Each function has the signature of the notebook's stub; the notebook checks it against labkit's
implementation (``labkit.offpolicy.offpolicy_terms``, ``labkit.losses.clipped_surrogate``) with
``labkit.exercises.check_function`` on random stale batches. Import with
``importlib.import_module("solutions.11_async")`` (the name starts with a digit).
"""

import torch


def behaviour_weights(prox_logp, behav_logp, mask, correction, cap, floor):
    """The weight of each token's loss: w = pi_prox / pi_behav, truncated into [floor, cap] (TIS),
    zeroed outside it (IcePop) or zeroed above cap (decoupled PPO, no floor); 0 on padding."""
    m = mask.to(prox_logp.dtype)
    w = torch.exp((prox_logp - behav_logp) * m)  # padding: log-ratio 0, weight 1, then masked
    low = 0.0 if floor is None else floor
    if correction == "tis":
        w = w.clamp(min=low, max=cap)
    else:  # icepop and decoupled mask instead of truncating
        w = torch.where((w >= low) & (w <= cap), w, torch.zeros_like(w))
    return w * m


def decoupled_loss(logp, prox_logp, behav_logp, advantages, mask):
    """Decoupled PPO per token: -w 1[w <= 5] min(r A, clip(r, 0.8, 1.2) A), r = pi_theta / pi_prox.
    The weight is a constant of the update: computed from detached log-probs, so no gradient flows
    through it to prox_logp or behav_logp (only through r)."""
    m = mask.to(logp.dtype)
    w = torch.exp((prox_logp - behav_logp).detach() * m)
    w = torch.where(w <= 5.0, w, torch.zeros_like(w)) * m
    ratio = torch.exp(logp - prox_logp)
    surrogate = torch.minimum(ratio * advantages, ratio.clamp(0.8, 1.2) * advantages)
    return -w * surrogate


COUPLED_PREDICTION = "up"
COUPLED_WHY = (
    "With offpolicy_correction='coupled' the loss's ratio is pi_theta / pi_behav, and at k = 8 the "
    "behaviour policy is up to eight updates old: many tokens start the update outside the clip "
    "band on the side where it binds, so the share the loss clips rises, from the update's own "
    "movement alone (none: ratio against pi_prox, which starts at 1) to that plus the staleness. "
    "Those tokens carry no gradient: the coupled choice trades the proximal forward pass for "
    "silenced tokens.")
