"""SAPO (Qwen, arXiv 2511.20347): a soft sigmoid gate in the ratio instead of a hard clip."""

from __future__ import annotations

import math

import torch

from labkit.losses.registry import SurrogateInputs, register_policy_loss
from labkit.losses.validation import exp_ratio
from labkit.plugins import Setting, between

#: SAPO's own settings, declared once: the config fields, their ranges and TRL's names.
SETTINGS = {
    "sapo_temperature_pos": Setting(
        1.0, between(0, math.inf, low_open=True),
        'SAPO soft-gate temperature for A > 0 (TRL; loss_type="sapo")',
        trl="sapo_temperature_pos"),
    "sapo_temperature_neg": Setting(
        1.05, between(0, math.inf, low_open=True),
        'SAPO soft-gate temperature for A <= 0 (TRL; loss_type="sapo")',
        trl="sapo_temperature_neg"),
}


def sapo_surrogate(
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    temperature_pos: float = SETTINGS["sapo_temperature_pos"].default,
    temperature_neg: float = SETTINGS["sapo_temperature_neg"].default,
) -> torch.Tensor:
    r"""SAPO soft gate (Qwen): a sigmoid in the ratio instead of a hard clip.

    .. math::
        \ell = -\frac{4}{\tau}\,\sigma\big(\tau (r-1)\big)\,A,\qquad
        \tau = \tau_{pos}\ \text{if } A>0 \text{ else } \tau_{neg}

    =====================  =========  ============================================
    name                   shape      meaning
    =====================  =========  ============================================
    ``log_ratio``          (B, T)/    token log-ratio (the paper's setting)
                           (B, 1)
    ``advantages``         broadcast  (B, 1) or (B, T)
    ``temperature_pos``    float      > 0, TRL ``sapo_temperature_pos`` (1.0)
    ``temperature_neg``    float      > 0, TRL ``sapo_temperature_neg`` (1.05)
    returns                broadcast  per-token loss
    =====================  =========  ============================================

    Gradient w.r.t. log pi is :math:`-A\,r\,4\sigma(1-\sigma)`: exactly -A at r = 1 (REINFORCE),
    smooth decay far from 1, never exactly zero. The loss value at r = 1 is -2A/tau, not -A.
    """
    if not (temperature_pos > 0 and temperature_neg > 0):
        raise ValueError(
            f"temperature_pos and temperature_neg must be > 0, got {temperature_pos}, {temperature_neg}"
        )
    ratio = exp_ratio(log_ratio)
    # Temperatures built in the ratio's dtype so float64 tests are exact (TRL rounds them to float32).
    tau = torch.where(
        advantages > 0, ratio.new_tensor(temperature_pos), ratio.new_tensor(temperature_neg)
    )
    return -(4 / tau) * torch.sigmoid(tau * (ratio - 1)) * advantages


@register_policy_loss("sapo", aggregation="sequence_mean", trl_name="sapo",
                      options=SETTINGS,
                      paper=("Soft Adaptive Policy Optimization", "2511.20347"),
                      summary="sigmoid gate of the ratio; mean per sequence, then over sequences")
def _sapo(x: SurrogateInputs, sapo_temperature_pos: float,
          sapo_temperature_neg: float) -> torch.Tensor:
    return sapo_surrogate(x.log_w, x.advantages, sapo_temperature_pos, sapo_temperature_neg)
