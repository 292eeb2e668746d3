"""VESPO (arXiv 2602.10693): REINFORCE scaled by a Gamma-shaped kernel of the sequence weight."""

from __future__ import annotations

import math

import torch

from labkit.losses.registry import SurrogateInputs, register_policy_loss
from labkit.losses.validation import LOG_RATIO_LIMIT
from labkit.plugins import Setting, between

#: VESPO's own settings, declared once: the config fields, their ranges and TRL's names.
SETTINGS = {
    "vespo_k_pos": Setting(2.0, between(0, math.inf),
                           'VESPO Gamma-kernel shape k for A >= 0 (TRL; loss_type="vespo")',
                           trl="vespo_k_pos"),
    "vespo_lambda_pos": Setting(3.0, between(0, math.inf, low_open=True),
                                "VESPO Gamma-kernel rate lambda for A >= 0 (TRL)",
                                trl="vespo_lambda_pos"),
    "vespo_k_neg": Setting(3.0, between(0, math.inf),
                           "VESPO Gamma-kernel shape k for A < 0 (TRL)", trl="vespo_k_neg"),
    "vespo_lambda_neg": Setting(2.0, between(0, math.inf, low_open=True),
                                "VESPO Gamma-kernel rate lambda for A < 0 (TRL)",
                                trl="vespo_lambda_neg"),
}


def vespo_surrogate(
    logp: torch.Tensor,
    token_log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    k_pos: float = SETTINGS["vespo_k_pos"].default,
    lambda_pos: float = SETTINGS["vespo_lambda_pos"].default,
    k_neg: float = SETTINGS["vespo_k_neg"].default,
    lambda_neg: float = SETTINGS["vespo_lambda_neg"].default,
) -> torch.Tensor:
    r"""VESPO (arXiv 2602.10693): REINFORCE scaled by a Gamma-shaped kernel of the sequence weight.

    .. math::
        w_i = \prod_t r_{i,t}\ \ (\text{not length-normalised}),\qquad
        \phi(w) = e^{\lambda}\,w^{k}\,e^{-\lambda w}\ \ (\phi(1) = 1),\qquad
        \ell_{i,t} = -\,\mathrm{sg}[\phi(w_i)]\,A_i\,\log\pi_\theta(o_{i,t})

    with :math:`(k, \lambda) = (k_+, \lambda_+)` if :math:`A_i \ge 0`, else :math:`(k_-,
    \lambda_-)`.

    ===================  =========  ===========================================================
    name                 shape      meaning
    ===================  =========  ===========================================================
    ``logp``             (B, T)     current log-probs (the gradient flows only through these)
    ``token_log_ratio``  (B, T)     per-token log-ratios (0 on padding)
    ``advantages``       (B, 1)     one per sequence
    ``mask``             (B, T)     response mask
    ``k_pos`` ...        float      TRL ``vespo_k_pos`` 2.0, ``vespo_lambda_pos`` 3.0,
                                    ``vespo_k_neg`` 3.0, ``vespo_lambda_neg`` 2.0
    returns              (B, T)     per-token loss
    ===================  =========  ===========================================================

    The kernel peaks at :math:`w = k/\lambda` and falls smoothly to 0 for stale sequences on both
    sides, so no token is hard-clipped; on-policy (w = 1) it is plain REINFORCE. As in TRL the
    log-weight is clamped to [log 1e-8, 20] and a non-finite kernel counts as 0.
    """
    m = mask.bool()
    log_w = torch.where(m, token_log_ratio.clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT), 0)
    log_w = log_w.sum(-1, keepdim=True).clamp(math.log(1e-8), LOG_RATIO_LIMIT).detach()
    positive = advantages >= 0
    k = torch.where(positive, log_w.new_tensor(k_pos), log_w.new_tensor(k_neg))
    lam = torch.where(positive, log_w.new_tensor(lambda_pos), log_w.new_tensor(lambda_neg))
    lam = lam.clamp(min=1e-4)
    phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(0.0, 0.0, 0.0)
    return -phi * advantages * logp


def _check_vespo_config(config) -> None:
    if config.advantage_estimator == "gae":
        raise ValueError("loss_type='vespo' weighs whole sequences by one advantage each, but GAE "
                         "gives one per token: use another loss_type with "
                         "advantage_estimator='gae'")
    if config.vllm_importance_sampling_correction:
        raise ValueError("vllm_importance_sampling_correction with loss_type='vespo': TRL folds "
                         "the ratio into VESPO's kernel and the lab does not; use another "
                         "loss_type")


@register_policy_loss("vespo", aggregation="token_mean", trl_name="vespo",
                      options=SETTINGS,
                      config_check=_check_vespo_config,
                      paper=(("VESPO: Variational Sequence-Level Soft Policy Optimization for "
                              "Stable Off-Policy LLM Training"), "2602.10693"),
                      summary="Gamma kernel of the sequence weight times log pi; token mean")
def _vespo(x: SurrogateInputs, vespo_k_pos: float, vespo_lambda_pos: float,
           vespo_k_neg: float, vespo_lambda_neg: float) -> torch.Tensor:
    if x.advantages.shape[1] != 1:
        raise ValueError("loss_type='vespo' weighs whole sequences: give one advantage per "
                         "sequence, shape (B,) or (B, 1)")
    return vespo_surrogate(x.logp, x.token_log_ratio, x.advantages, x.mask, vespo_k_pos,
                           vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg)
