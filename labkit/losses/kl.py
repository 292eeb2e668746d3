"""Schulman's estimators of the KL divergence from sampled tokens (k1, k2, k3)."""

from __future__ import annotations

import torch

from labkit.losses.validation import LOG_RATIO_LIMIT, check_same_shape
from labkit.plugins import config_rule

#: Schulman's KL estimators.
KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    r"""Schulman's per-token estimators of :math:`\mathrm{KL}(\pi\,\|\,\pi_{ref})` from tokens sampled by :math:`\pi`.

    Textbook form::

        d = ref_logp - logp
        return {"k1": -d, "k2": d**2 / 2, "k3": d.exp() - d - 1}[kind]

    With :math:`d = \log\pi_{ref}(y_t) - \log\pi(y_t)` (the log of :math:`r=\pi_{ref}/\pi`):

    .. math::
        k_1 = -d,\qquad k_2 = \tfrac12 d^2,\qquad k_3 = e^{d} - d - 1\ (\ge 0)

    ==============  =====  ==============================================================
    name            shape  meaning
    ==============  =====  ==============================================================
    ``logp``        any    log-probs of the *sampling* policy (differentiable if a loss)
    ``ref_logp``    same   log-probs of the other policy at the same tokens
    returns         same   per-token estimate; mask and aggregate it yourself
    ==============  =====  ==============================================================

    Values: k1 and k3 are unbiased, k2 biased; k1 is negative for about half the samples; k2, k3
    >= 0 (Schulman, "Approximating KL Divergence", 2020). Gradients as a *loss* (autograd through
    ``logp``, samples fixed; derived per state, as in Tang and Munos, arXiv 2506.09477, and the
    placement study of Shah et al., arXiv 2512.21852):
    E[grad k1] = 0 (no regularisation at all); E[grad k2] = grad KL(pi || ref);
    E[grad k3] = grad KL(ref || pi), the *forward* KL (GRPO's choice, TRL/verl default). Placed *in
    the reward* (detached; :func:`labkit.advantages.kl_penalized_rewards`) k1 gives the unbiased
    reverse-KL gradient. The log-ratio inside k3 is clamped to [-20, 20] so ``exp`` cannot overflow
    (verl also clamps the value to [-10, 10]; labkit does not).

    The metric "approximate KL to the old policy" is ``kl_estimate(old_logp, logp, kind)``: the
    samples come from the old policy.
    """
    check_same_shape(logp, "logp", ref_logp=ref_logp)
    d = ref_logp - logp
    if kind == "k1":
        return -d
    if kind == "k2":
        return 0.5 * d**2
    if kind == "k3":
        d = d.clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
        return torch.exp(d) - d - 1
    raise ValueError(f"kind must be one of {KL_ESTIMATORS}, got {kind!r}")


@config_rule
def _check_bias_correction(config) -> None:
    """The ratio-weighted KL-in-loss (DeepSeek-V3.2) needs a KL in the loss."""
    if config.use_bias_correction_kl and (config.beta == 0 or config.kl_in_reward):
        raise ValueError("use_bias_correction_kl multiplies the KL-in-loss by the ratio: it needs "
                         "beta > 0 and kl_in_reward=False")
