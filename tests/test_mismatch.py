"""The sampler/trainer mismatch correction (labkit.tricks.mismatch): TRL 1.16's four
``vllm_importance_sampling_mode`` values, checked on hand-made tensors and against a
transcription of TRL's code, and a short trainer run whose sampler is a bfloat16 copy."""

import math

import pytest
import torch

from labkit.config import TrainConfig, preset
from labkit.models import TINY_MODEL_DIR, load_policy
from labkit.tasks import load_split
from labkit.trainer import Trainer
from labkit.training.batches import synced_sampling_copy
from labkit.tricks.mismatch import MODES, mismatch_metrics, mismatch_weights

MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)


def trl_importance_sampling_ratio(old, sampling, mask, mode, clip_min, clip_max):
    """A transcription of TRL 1.16's ``GRPOTrainer._generate_and_score_completions``
    (trl/trainer/grpo_trainer.py, "Compute the importance sampling ratio when using vLLM"),
    returning its ``vllm_importance_sampling_ratio``: (B, T) for token modes, (B, 1) for
    sequence modes (TRL then multiplies ``per_token_loss`` by it; padding is masked later)."""
    per_token_logps_diff = (old - sampling) * mask
    per_token_logps_diff = torch.nan_to_num(per_token_logps_diff, nan=0.0)
    sequence_level_is = mode in ["sequence_mask", "sequence_truncate"]
    if sequence_level_is:
        logps_diff = per_token_logps_diff.sum(dim=-1, keepdim=True)
    else:
        logps_diff = per_token_logps_diff
    ratio = torch.exp(logps_diff)
    if mode in ["sequence_truncate", "token_truncate"]:
        ratio = torch.clamp(ratio, min=clip_min, max=clip_max)
    else:
        min_val = clip_min if clip_min is not None else -math.inf
        max_val = clip_max if clip_max is not None else math.inf
        ratio = ratio.masked_fill((ratio < min_val) | (ratio > max_val), value=0.0)
    return ratio


@pytest.mark.parametrize("mode", MODES)
def test_weights_are_exactly_one_when_sampler_and_trainer_agree(mode):
    logps = torch.log(torch.rand(2, 4, generator=torch.Generator().manual_seed(0)))
    weights, corrected = mismatch_weights(logps, logps.clone(), MASK, mode, clip_max=3.0)
    assert torch.equal(weights, MASK.float())  # 1 on tokens, 0 on padding
    assert not corrected.any()


def test_token_truncate_caps_each_token_and_keeps_the_rest():
    trainer = torch.zeros(2, 4)
    sampler = torch.tensor([[0.0, -math.log(5.0), math.log(2.0), 9.0], [-0.5, 0.0, 0.0, 0.0]])
    weights, corrected = mismatch_weights(trainer, sampler, MASK, "token_truncate",
                                          clip_max=3.0)
    expected = torch.tensor([[1.0, 3.0, 0.5, 0.0], [math.exp(0.5), 1.0, 0.0, 0.0]])
    torch.testing.assert_close(weights, expected)
    assert corrected.tolist() == [[False, True, False, False], [False] * 4]  # padding ignored


def test_token_mask_zeroes_the_tokens_outside_the_bounds():
    trainer = torch.zeros(2, 4)
    sampler = torch.tensor([[0.0, -math.log(5.0), math.log(4.0), 0.0], [-0.5, 0.0, 0.0, 0.0]])
    weights, corrected = mismatch_weights(trainer, sampler, MASK, "token_mask", clip_max=3.0,
                                          clip_min=0.5)
    expected = torch.tensor([[1.0, 0.0, 0.0, 0.0], [math.exp(0.5), 1.0, 0.0, 0.0]])
    torch.testing.assert_close(weights, expected)  # 5 > C_max and 0.25 < C_min: both gone
    assert corrected[0].tolist() == [False, True, True, False]


def test_sequence_modes_use_the_product_of_the_token_ratios():
    # row 0: token ratios 2, 2, 2 -> sequence ratio 8 (> 3); row 1: 1.5 * (1/1.5) = 1
    trainer = torch.tensor([[math.log(2.0)] * 3 + [7.0], [math.log(1.5), 0.0, 5.0, 5.0]])
    sampler = torch.tensor([[0.0] * 4, [0.0, math.log(1.5), 0.0, 0.0]])
    truncated, corrected = mismatch_weights(trainer, sampler, MASK, "sequence_truncate",
                                            clip_max=3.0)
    torch.testing.assert_close(truncated, torch.tensor([[3.0, 3, 3, 0], [1, 1, 0, 0]]))
    assert corrected.shape == (2, 1) and corrected.squeeze(-1).tolist() == [True, False]
    masked, _ = mismatch_weights(trainer, sampler, MASK, "sequence_mask", clip_max=3.0)
    torch.testing.assert_close(masked, torch.tensor([[0.0, 0, 0, 0], [1, 1, 0, 0]]))
    # every token of a sequence carries the same weight, whatever its own ratio
    token, _ = mismatch_weights(trainer, sampler, MASK, "token_truncate", clip_max=3.0)
    assert not torch.equal(token[1], masked[1])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("clip_min", "clip_max"), [(None, 3.0), (0.5, 2.0), (None, None)])
def test_weights_match_trl_on_random_log_probs(mode, clip_min, clip_max):
    gen = torch.Generator().manual_seed(7)
    old = -torch.rand(6, 9, generator=gen) * 3
    sampling = old + torch.randn(6, 9, generator=gen) * 0.6
    sampling[2, 3] = math.nan  # a token the engine could not score: ratio 1 in both
    mask = torch.rand(6, 9, generator=gen) > 0.2
    weights, _ = mismatch_weights(old, sampling, mask, mode, clip_max=clip_max,
                                  clip_min=clip_min)
    if clip_min is None and clip_max is None and mode.endswith("truncate"):
        # TRL's torch.clamp(min=None, max=None) raises; unbounded truncation is the plain ratio
        with pytest.raises(RuntimeError, match="clamp"):
            trl_importance_sampling_ratio(old, sampling, mask, mode, clip_min, clip_max)
        trl = trl_importance_sampling_ratio(old, sampling, mask, mode.replace("truncate",
                                                                              "mask"), None, None)
    else:
        trl = trl_importance_sampling_ratio(old, sampling, mask, mode, clip_min, clip_max)
    torch.testing.assert_close(weights, (trl * mask).expand_as(weights), rtol=0, atol=0)


def test_metrics_report_the_gap_and_what_the_bound_changed():
    trainer = torch.zeros(2, 4)
    sampler = torch.tensor([[0.0, -math.log(5.0), 0.1, 3.0], [-0.5, 0.0, 0.0, 0.0]])
    weights, corrected = mismatch_weights(trainer, sampler, MASK, "token_mask", clip_max=3.0)
    metrics = mismatch_metrics(trainer, sampler, MASK, weights, corrected, "token_mask")
    diffs = torch.tensor([0.0, math.log(5.0), 0.1, 0.5, 0.0])  # padding's 3.0 left out
    assert metrics["sampling_logp_diff"] == pytest.approx(float(diffs.mean()))
    assert metrics["sampling_logp_diff_max"] == pytest.approx(math.log(5.0))
    assert metrics["is_corrected_frac"] == pytest.approx(1 / 5)


def test_unknown_mode_and_crossed_bounds_are_refused():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="vllm_importance_sampling_mode"):
        mismatch_weights(x, x, x.bool(), "token_clip")
    with pytest.raises(ValueError, match="vllm_importance_sampling_clip_min"):
        TrainConfig(vllm_importance_sampling_clip_min=4.0)
    with pytest.raises(ValueError, match="sampling_dtype"):
        TrainConfig(sampling_dtype="float16")


def alternating_reward(prompts, completions, **columns):
    return [float(i % 2 == 0) for i in range(len(completions))]


@pytest.mark.skipif(not TINY_MODEL_DIR.exists(), reason="the shipped tiny model is missing")
@pytest.mark.parametrize("mode", ["token_truncate", "sequence_mask"])
def test_a_bfloat16_sampler_shows_a_gap_that_the_correction_weighs(mode):
    """Two steps of the shipped tiny Qwen (float32 trainer) sampled by its bfloat16 copy.

    Measured (seed 0, 4 prompts x 4 completions of 16 tokens, cap 1.01): |trainer - sampler|
    log-prob gap 0.0044 then 0.0032 nats on average, 0.049 and 0.043 at most; token_truncate
    truncated 5.6% and 7.7% of the tokens, sequence_mask masked 31% and 44% of the sequences (a
    sequence's ratio is the product over its tokens, so it leaves [0, 1.01] far more often).
    """
    torch.set_num_threads(1)
    model, tokenizer = load_policy("tiny", device="cpu", dtype="float32")
    config = preset("grpo", prompts_per_step=4, num_generations=4, max_completion_length=16,
                    max_steps=2, progress=False, device="cpu", dtype="float32",
                    sampling_dtype="bfloat16", vllm_importance_sampling_correction=True,
                    vllm_importance_sampling_mode=mode, vllm_importance_sampling_clip_max=1.01)
    trainer = Trainer(config, model=model, tokenizer=tokenizer,
                      train_dataset=load_split("train").select(range(32)),
                      reward_funcs=[alternating_reward])
    assert next(trainer.sampling_copy.parameters()).dtype == torch.bfloat16
    history = trainer.train().history
    assert (history["sampling_logp_diff"] > 1e-3).all()  # bf16 rounding is a real gap
    assert (history["sampling_logp_diff_max"] >= history["sampling_logp_diff"]).all()
    assert history["loss"].map(math.isfinite).all()
    assert history["skipped_nonfinite"].sum() == 0
    # a cap of 1.01 bites on some of the tokens/sequences, not all
    assert (history["is_corrected_frac"] > 0).any()
    assert (history["is_corrected_frac"] < 1).all()
    # the sampler follows the trainer: after the run, its weights are the policy's (cast)
    synced_sampling_copy(trainer.model, trainer.sampling_copy)
    for a, b in zip(trainer.sampling_copy.parameters(), trainer.model.parameters(), strict=True):
        assert torch.equal(a, b.to(torch.bfloat16))
