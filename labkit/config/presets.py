"""The method presets: :func:`preset` returns the configuration of a method (``ppo``, ``grpo``,
``dapo``, ``dr_grpo``, ``gspo``, ``gfpo``) with the paper's choices, scaled to the lab's tiny
model; each preset's docstring (:func:`preset_doc`) lists where and why it departs from the paper.
"""

from __future__ import annotations

from dataclasses import fields

from labkit.config.train_config import TrainConfig


def _grpo(**overrides) -> TrainConfig:
    """GRPO (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300): group mean/std advantage, token
    ratio clipped at 0.2, per-sequence mean then mean over sequences (``loss_type="grpo"``), one
    update per batch (mu = 1).

    Lab deviations from the paper (G = 64, beta = 0.04, lr 1e-6, batch 1024): G = 8 and 16 prompts
    per step, so a step takes about a second on a laptop CPU; beta = 0 (TRL's default), which also
    saves the reference model's memory and forward (set beta = 0.04 for the paper's KL-in-loss);
    learning rate 3e-4 with a 5% warm-up, because the tiny model has 0.8M parameters, not 7B.
    Chosen by a sweep on the shipped tiny Qwen (whole suite, 40 steps, seed 0, eval pass@1 on
    200 prompts x 2 samples; the logs are ``data/runs/02_grpo/lr_*.csv``): 1e-3 wrecks it
    (28.8% -> 8.5%); 5e-4 and 3e-4 are level within one seed's noise (27.8% and 29.8% at step 40;
    one evaluation of 400 samples has a standard error of about two points); 3e-4 was kept as the
    smaller. The warm-up tames Adam's first, full-size steps.
    """
    return TrainConfig(**overrides)


def _ppo(**overrides) -> TrainConfig:
    """PPO (Schulman et al. 2017, arXiv 1707.06347) for LLMs: a critic (``ValueModel``) and GAE
    over the completion tokens with the outcome reward on the last token, token ratio clipped at
    0.2, value loss with clipping (TRL's PPOConfig: vf_coef 0.1, cliprange_value 0.2), token-mean
    aggregation over the batch (``loss_type="dapo"``, verl's token-mean), advantages whitened over
    the batch's tokens, several epochs of mini-batches per rollout.

    Lab deviations: 2 epochs x 2 mini-batches (TRL: 4 epochs, verl: 1), enough to move the ratio
    off 1 and show clipping while keeping steps short; gamma = lam = 1 (verl's defaults; TRL uses
    lam = 0.95, which with a critic that starts at zero gives the early tokens of long completions
    below-average advantages and, measured, shortened and worsened the tiny model's answers); the
    critic learns at 1e-3 (verl also trains it 10x faster than the policy); one completion per
    prompt is PPO's usual, but the lab samples 8 per prompt, the GRPO preset's 128 completions per
    step, so PPO and GRPO runs see the same data; no KL penalty in the reward (verl's default;
    InstructGPT used beta = 0.02 with k1: set ``beta=0.02, kl_in_reward=True,
    kl_estimator="k1"``).
    """
    values = {"advantage_estimator": "gae", "loss_type": "dapo", "num_iterations": 2,
              "num_mini_batches": 2, "gamma": 1.0, "lam": 1.0, "vf_coef": 0.1,
              "clip_range_value": 0.2, "value_learning_rate": 1e-3}
    return TrainConfig(**{**values, **overrides})


def _dapo(**overrides) -> TrainConfig:
    """DAPO (Yu et al. 2025, arXiv 2503.14476): clip-higher (epsilon 0.2 / epsilon_high 0.28),
    dynamic sampling (refill the batch with groups whose rewards differ), token-level loss over
    the whole batch (``loss_type="dapo"``), overlong filtering (``mask_truncated_completions``)
    and soft overlong punishment, no KL (beta = 0), constant learning rate after warm-up.

    Lab deviations: G = 8 (paper 16), 16 prompts per step (paper 512) and one optimizer step per
    batch (paper: 16 mini-batches), so clip-higher is inert unless ``num_mini_batches > 1`` (the
    config warns, and the run doctor names it); the overlong buffer is a fifth of max_completion_length (25
    of 128 tokens; paper 4096 of 20480); at most 3 extra sampling rounds (verl: 10 generation
    batches in all); dynamic sampling filters on the total reward rather than on accuracy alone,
    since only a group with equal totals has zero advantage; learning rate as the GRPO preset.
    """
    length = overrides.get("max_completion_length", TrainConfig.max_completion_length)
    values = {"epsilon": 0.2, "epsilon_high": 0.28, "loss_type": "dapo", "dynamic_sampling": True,
              "max_resample_rounds": 3, "mask_truncated_completions": True,
              "overlong_buffer_len": length // 5, "overlong_penalty_factor": 1.0, "beta": 0.0,
              "lr_scheduler_type": "constant_with_warmup", "warmup_ratio": 0.05}
    return TrainConfig(**{**values, **overrides})


def _dr_grpo(**overrides) -> TrainConfig:
    """Dr. GRPO (Liu et al. 2025, arXiv 2503.20783): advantage r - mean(r) without the std
    (``scale_rewards="none"``), loss summed over tokens and divided by a constant
    (``loss_type="dr_grpo"``: B x max_completion_length), beta = 0, epsilon 0.2.

    Lab deviations: G = 8 as in the paper, but 16 prompts per step (paper 128),
    max_completion_length 128 (paper 3000), which is also the constant normaliser, and the GRPO
    preset's learning rate and warm-up (paper: constant 1e-6). The constant shrinks the loss by
    about mean length / max_completion_length, but AdamW's steps do not depend on the loss scale,
    so the learning rate needs no correction.
    """
    values = {"scale_rewards": "none", "loss_type": "dr_grpo", "beta": 0.0}
    return TrainConfig(**{**values, **overrides})


def _gspo(**overrides) -> TrainConfig:
    """GSPO (Zheng et al. 2025, arXiv 2507.18071): the sequence-level, length-normalised ratio
    ``s_i = (pi/pi_old)(y_i) ** (1/|y_i|)`` clipped to [1 - 3e-4, 1 + 4e-4], per-sequence
    aggregation (``loss_type="grpo"``), no KL, each batch split into 4 mini-batches so the
    ratio moves off 1 (on-policy, GSPO equals GRPO).

    Lab deviations: G = 8 (paper 16), 16 prompts per step (paper 512 in 4 mini-batches of 128,
    kept here as 4 mini-batches of 32 completions, shuffled across the groups before the split
    as TRL does); the GRPO preset's learning rate.
    """
    values = {"importance_sampling_level": "sequence", "loss_type": "grpo", "epsilon": 3e-4,
              "epsilon_high": 4e-4, "beta": 0.0, "num_mini_batches": 4}
    return TrainConfig(**{**values, **overrides})


def _gfpo(**overrides) -> TrainConfig:
    """GFPO (Shrivastava et al. 2025, arXiv 2508.09726): sample more (G = 16), keep the k = 8
    shortest completions of each group (``gfpo_metric="length"``; ``"token_efficiency"`` is the
    paper's best variant), compute GRPO advantages inside the kept set only, token-level loss
    (``loss_type="dapo"``).

    Lab deviations: beta = 0 and no entropy bonus (paper: 0.001 each) to keep the tiny run
    cheap and the comparison with GRPO clean; 8 prompts per step so a step samples as many
    completions as the GRPO preset (128) and trains on half of them; the GRPO preset's learning
    rate (paper 1e-7 on 14B). The rejected completions keep advantage 0 and count in the token
    normaliser, as in the paper's eq. 2 (TRL's removed trainer dropped them); they skip the
    training forward, which changes nothing else.
    """
    values = {"num_generations": 16, "num_remains_in_group": 8, "prompts_per_step": 8,
              "gfpo_metric": "length", "loss_type": "dapo", "beta": 0.0}
    return TrainConfig(**{**values, **overrides})


PRESETS = {"ppo": _ppo, "grpo": _grpo, "dapo": _dapo, "dr_grpo": _dr_grpo, "gspo": _gspo,
           "gfpo": _gfpo}


def preset(name: str, **overrides) -> TrainConfig:
    """The :class:`TrainConfig` of method ``name`` (``ppo``, ``grpo``, ``dapo``, ``dr_grpo``,
    ``gspo``, ``gfpo``), with any field overridden by keyword; see :func:`preset_doc`."""
    if not isinstance(name, str) or name not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(map(repr, PRESETS))}, got {name!r}")
    unknown = set(overrides) - {f.name for f in fields(TrainConfig)}
    if unknown:
        raise ValueError(f"unknown TrainConfig field(s): {', '.join(sorted(unknown))}")
    return PRESETS[name](**overrides)


def preset_doc(name: str) -> str:
    """The docstring of preset ``name``: the method, its paper settings and the lab's deviations."""
    if not isinstance(name, str) or name not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(map(repr, PRESETS))}, got {name!r}")
    return PRESETS[name].__doc__
