r"""The sampler/trainer mismatch, and its truncated or masked importance-sampling correction.

At scale the completions are sampled by an inference engine (vLLM, SGLang) and trained by
another program (the trainer's kernels, another precision). Even with identical weights the two
disagree about the probability of a token: the "on-policy" update is in fact off-policy, with
behaviour policy :math:`\pi_{\text{sampler}}` and target :math:`\pi_{\text{trainer}}`. Yao et al.
(2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training", Fengyao's blog,
no arXiv id; TRL's ``vllm_importance_sampling_*`` options implement it) reweight each token's
policy-gradient term by the importance ratio, bounded so that one rare token cannot dominate:

.. math::

    w_{i,t} = \exp\big(\log\pi_{\text{trainer}}(y_{i,t}) - \log\pi_{\text{sampler}}(y_{i,t})\big)
    \quad\text{(token level)},\qquad
    w_i = \exp\Big(\sum_t \log\pi_{\text{trainer}}(y_{i,t}) - \log\pi_{\text{sampler}}(y_{i,t})
    \Big)\quad\text{(sequence level)}

and then, with bounds ``[clip_min, clip_max]`` (TRL's C_min, C_max):

* **truncate** (truncated IS, TIS): :math:`\min(\max(w, C_{\min}), C_{\max})`;
* **mask** (masked IS, MIS): :math:`w` where :math:`C_{\min} \le w \le C_{\max}`, else 0 (the
  token, or the whole sequence, leaves the gradient).

The four combinations are TRL 1.16's ``vllm_importance_sampling_mode`` values (:data:`MODES`).
As in TRL's ``GRPOTrainer._generate_and_score_completions``: the trainer's log-probs are its
*old* log-probs (the no-grad forward of the weights that sampled), padding counts as a zero
difference, NaN sampler log-probs count as zero difference (ratio 1), and the weight multiplies
the per-token policy-gradient loss before the KL term is added
(``tests/test_mismatch.py`` compares with a transcription of that code).

===================  ==========  ===============================================================
name                 shape       meaning
===================  ==========  ===============================================================
``trainer_logps``    (B, T)      the trainer's log-probs of the sampled tokens (no gradient)
``sampler_logps``    (B, T)      the sampler's log-probs of the same tokens
``mask``             (B, T)      completion tokens (bool or 0/1); padding is ignored
returns ``weights``  (B, T)      the multiplier of each token's loss (sequence modes: the
                                 sequence's weight on each of its tokens; 0 on padding)
===================  ==========  ===============================================================
"""

from __future__ import annotations

import math

import torch

#: ``vllm_importance_sampling_mode`` values (TRL 1.16's names): granularity x constraint.
MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"vllm_importance_sampling_mode must be one of "
                         f"{', '.join(map(repr, MODES))}, got {mode!r}")


def log_ratios(trainer_logps: torch.Tensor, sampler_logps: torch.Tensor, mask: torch.Tensor,
               mode: str) -> torch.Tensor:
    """``log w``: (B, T) per token for ``token_*`` modes, (B, 1) per sequence (the sum over
    its tokens) for ``sequence_*`` modes; padding and NaN sampler log-probs add 0."""
    _check_mode(mode)
    diff = torch.nan_to_num((trainer_logps - sampler_logps) * mask.to(trainer_logps.dtype),
                            nan=0.0)
    return diff.sum(-1, keepdim=True) if mode.startswith("sequence") else diff


def mismatch_weights(trainer_logps: torch.Tensor, sampler_logps: torch.Tensor,
                     mask: torch.Tensor, mode: str = "sequence_mask",
                     clip_max: float | None = 3.0, clip_min: float | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Importance weights of the sampler/trainer mismatch (see the module docstring).

    Returns ``(weights, corrected)``: the (B, T) weights (0 on padding), and the bool map of
    what the bound changed, (B, T) for token modes and (B, 1) for sequence modes (truncated to a
    bound, or masked to 0). ``clip_max`` / ``clip_min`` None = no bound on that side.
    """
    _check_mode(mode)
    if clip_max is not None and clip_min is not None and clip_min > clip_max:
        raise ValueError(f"clip_min ({clip_min}) must not exceed clip_max ({clip_max})")
    ratio = torch.exp(log_ratios(trainer_logps, sampler_logps, mask, mode))
    low = -math.inf if clip_min is None else clip_min
    high = math.inf if clip_max is None else clip_max
    corrected = (ratio < low) | (ratio > high)
    if mode.endswith("truncate"):
        ratio = ratio.clamp(min=clip_min, max=clip_max) if corrected.any() else ratio
    else:
        ratio = ratio.masked_fill(corrected, 0.0)
    weights = ratio.expand_as(trainer_logps) * mask.to(ratio.dtype)
    return weights, corrected


def mismatch_metrics(trainer_logps: torch.Tensor, sampler_logps: torch.Tensor,
                     mask: torch.Tensor, weights: torch.Tensor, corrected: torch.Tensor,
                     mode: str) -> dict[str, float]:
    """The step's mismatch columns: ``sampling_logp_diff`` and ``sampling_logp_diff_max`` (mean
    and max of |trainer - sampler| over completion tokens, TRL's
    ``sampling/sampling_logp_difference/*``), ``is_ratio_mean`` (mean weight over tokens, or
    over sequences at sequence level: TRL's ``sampling/importance_sampling_ratio/mean``) and
    ``is_corrected_frac`` (share of tokens, or sequences, the bound truncated or masked)."""
    m = mask.bool()
    diff = (trainer_logps - sampler_logps).abs()[m]
    diff = diff[~torch.isnan(diff)]
    if mode.startswith("sequence"):
        rows = m.any(-1)
        ratio = weights.max(-1).values[rows]  # each row carries its one weight (0 when masked)
        changed = corrected.squeeze(-1)[rows]
    else:
        ratio, changed = weights[m], corrected[m]
    mean = (lambda x: float(x.float().mean()) if x.numel() else math.nan)
    return {"sampling_logp_diff": mean(diff),
            "sampling_logp_diff_max": float(diff.max()) if diff.numel() else math.nan,
            "is_ratio_mean": mean(ratio), "is_corrected_frac": mean(changed)}


__all__ = ["MODES", "log_ratios", "mismatch_metrics", "mismatch_weights"]
