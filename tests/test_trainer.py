"""The training loop on a randomly initialised tiny Qwen: plumbing, robustness, checkpoints.

Each run is a few steps of 4 prompts x 4 completions of at most 16 tokens, so the whole file takes
well under a minute on two CPU cores. The reward is a toy one that varies within groups (a random
model never answers correctly), except on addition prompts, whose groups get equal rewards (what
dynamic sampling drops).
"""

import copy
import functools
import math
import os
import signal

import pandas as pd
import pytest
import torch
from small_trainer import small_trainer

from labkit.config import preset
from labkit.metrics import describe
from labkit.rewards import RewardFunctionError
from labkit.tasks import load_split
from labkit.trainer import TIMING_COLUMNS, Trainer, train

SMALL = {"prompts_per_step": 4, "num_generations": 4, "max_completion_length": 16,
         "max_steps": 3, "progress": False}

pytestmark = pytest.mark.usefixtures("one_thread")


def length_reward(prompts, completions, **columns):
    """Longer completions score higher, except for addition prompts, whose groups all get 1."""
    return [1.0 if family == "add" else len(c[0]["content"]) / 16
            for c, family in zip(completions, columns["family"])]


@pytest.fixture(scope="module")
def base(random_tiny):
    return random_tiny


make_trainer = functools.partial(small_trainer, settings=SMALL, reward_funcs=(length_reward,))


def without_timings(history: pd.DataFrame) -> pd.DataFrame:
    return history.drop(columns=[c for c in TIMING_COLUMNS if c in history])


def weights(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same_weights(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


COMMON = {"step", "reward", "reward_std", "reward_length", "accuracy", "completion_length",
          "completion_length_max", "truncation_rate", "frac_reward_zero_std", "groups_dropped",
          "resample_rounds", "sampled_tokens", "completions_trained", "loss", "clip_low", "clip_high",
          "clip_region", "kl_old", "entropy", "grad_norm", "skipped_nonfinite", "learning_rate",
          *(c for c in TIMING_COLUMNS if c not in ("queue_wait", "eval_time"))}  # overlapped, eval only


@pytest.mark.parametrize("name", ["ppo", "grpo", "dapo", "dr_grpo", "gspo", "gfpo"])
def test_every_preset_trains_with_finite_metrics(base, name):
    overrides = {"num_generations": 6, "num_remains_in_group": 3} if name == "gfpo" else {}
    if name == "dapo":
        # the random model rarely stops; without the length penalty addition groups are constant
        overrides = {"mask_truncated_completions": False, "overlong_buffer_len": 0}
    trainer = make_trainer(base, name, **overrides)
    before = weights(trainer.model)
    history = trainer.train().history
    assert len(history) == 3 and list(history["step"]) == [1, 2, 3]
    expected = COMMON | ({"value_loss", "value_clipfrac", "value_grad_norm", "explained_variance"}
                         if name == "ppo" else set())
    assert expected <= set(history.columns)
    for column in history.columns:  # every column is in the glossary (KeyError otherwise)
        describe(column)
    # accuracy columns are NaN or 0: the toy reward is not accuracy and the data is tiny
    numeric = history.drop(columns=[c for c in history if c.startswith("accuracy")])
    assert torch.isfinite(torch.tensor(numeric.to_numpy(dtype=float))).all(), history.T
    assert not same_weights(before, weights(trainer.model))
    if name in ("ppo", "gspo"):  # off-policy: the ratio moves and clipping shows
        assert history["kl_old"].max() > 0 and history["clip_region"].max() > 0
    if name == "dapo":
        assert history["groups_dropped"].sum() > 0  # the addition prompts' constant groups
    if name == "gfpo":
        assert (history["completions_trained"] <= 4 * 3).all()



@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", ["ppo", "grpo", "dapo", "gspo", "gfpo"])
def test_every_preset_trains_on_a_gpu_in_bfloat16(base, name):
    """The same presets on CUDA: mini-batches, dynamic sampling and GFPO's filter index the
    batch with GPU tensors while the per-function reward table stays on the CPU (a bug the
    first GPU run found)."""
    model, tokenizer, data = base
    overrides = {"num_generations": 6, "num_remains_in_group": 3} if name == "gfpo" else {}
    if name == "dapo":
        overrides = {"mask_truncated_completions": False, "overlong_buffer_len": 0,
                     "num_mini_batches": 2}
    config = preset(name, **{**SMALL, **overrides, "device": "cuda", "dtype": "bfloat16"})
    gpu_model = copy.deepcopy(model).to("cuda", torch.bfloat16)
    before = weights(gpu_model)
    trainer = Trainer(config, model=gpu_model, tokenizer=tokenizer, train_dataset=data,
                      reward_funcs=[length_reward])
    history = trainer.train().history
    assert len(history) == 3 and (history["skipped_nonfinite"] == 0).all()
    assert history["peak_memory_mb"].max() > 0  # torch.cuda's peak, not the process RSS
    numeric = history.drop(columns=[c for c in history if c.startswith("accuracy")])
    assert torch.isfinite(torch.tensor(numeric.to_numpy(dtype=float))).all(), history.T
    assert not same_weights(before, weights(trainer.model))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", ["grpo", "ppo"])
def test_gradient_checkpointing_trains_on_a_gpu(base, name):
    """The recomputed forward runs in the backward: it must run under the forward's attention
    kernels, or SDPA picks cuDNN's there and torch refuses the mismatched recomputation
    (CheckpointError; found by the GPU check at the Qwen2.5-0.5B shape)."""
    model, tokenizer, data = base
    config = preset(name, **{**SMALL, "device": "cuda", "dtype": "bfloat16",
                             "gradient_checkpointing": True})
    gpu_model = copy.deepcopy(model).to("cuda", torch.bfloat16)
    trainer = Trainer(config, model=gpu_model, tokenizer=tokenizer, train_dataset=data,
                      reward_funcs=[length_reward])
    history = trainer.train().history
    assert (history["skipped_nonfinite"] == 0).all() and history["grad_norm"].gt(0).all()

def test_dynamic_sampling_refills_the_batch(base):
    trainer = make_trainer(base, "dapo", max_steps=1, mask_truncated_completions=False,
                           overlong_buffer_len=0, max_resample_rounds=5, prompts_per_step=8)
    exp, row = trainer.sample_and_score()
    groups = exp.rewards.view(-1, 4)
    assert len(exp) == 32 and (groups.amax(1) > groups.amin(1)).all()
    assert row["groups_dropped"] > 0 and row["resample_rounds"] >= 1


def test_other_estimators_and_kl_run(base):
    for overrides in ({"advantage_estimator": "rloo"}, {"advantage_estimator": "opo"},
                      {"advantage_estimator": "remax"}, {"beta": 0.04},
                      {"beta": 0.04, "kl_in_reward": True, "kl_estimator": "k1"},
                      {"scale_rewards": "batch", "loss_type": "bnpo", "micro_batch_size": 5}):
        history = make_trainer(base, max_steps=1, **overrides).train().history
        assert math.isfinite(history["loss"].iloc[0]), overrides
        if overrides.get("beta"):
            assert history["kl_ref"].notna().all()
    ppo = make_trainer(base, "ppo", max_steps=1, beta=0.05, kl_in_reward=True, kl_estimator="k1")
    assert ppo.train().history["kl_ref"].notna().all()
    checkpointed = make_trainer(base, max_steps=1, gradient_checkpointing=True).train().history
    assert math.isfinite(checkpointed["grad_norm"].iloc[0])


def test_learning_rate_schedule_is_logged(base):
    history = make_trainer(base, max_steps=4, lr_scheduler_type="cosine",
                           warmup_ratio=0.25).train().history
    rates = history["learning_rate"].tolist()  # transformers' warm-up starts from 0
    assert rates[0] == 0.0 and rates[1] == pytest.approx(3e-4) and rates[3] < rates[2] < rates[1]


def test_reference_model_only_when_beta_is_not_zero(base):
    assert make_trainer(base, beta=0.0).ref_model is None
    trainer = make_trainer(base, beta=0.04)
    assert trainer.ref_model is not None
    assert not any(p.requires_grad for p in trainer.ref_model.parameters())
    assert make_trainer(base, "ppo").value_model is not None
    assert make_trainer(base, "grpo").value_model is None


def test_no_old_logprob_forward_on_policy(base):
    trainer = make_trainer(base, max_steps=1)
    exp, _ = trainer.sample_and_score()
    trainer.score_forwards(exp)
    assert exp.old_logp is None and exp.ref_logp is None and exp.values is None
    off = make_trainer(base, "gspo", max_steps=1)
    exp, _ = off.sample_and_score()
    off.score_forwards(exp)
    assert exp.old_logp is not None
    # the recomputed behaviour log-probs match the sampler's
    mask = exp.completion_mask.bool()
    assert torch.allclose(exp.old_logp[mask], exp.sample_logp[mask], atol=1e-4)


def first_gradient(trainer) -> dict:
    """Run one step and return the gradient its optimizer step received (before clipping)."""
    grads = {}
    apply = trainer._apply_gradients

    def capture(*args):
        if not grads:
            grads.update({n: p.grad.clone() for n, p in trainer.model.named_parameters()
                          if p.grad is not None})
        return apply(*args)

    trainer._apply_gradients = capture
    trainer.train()
    return grads


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_micro_batching_does_not_change_the_gradient(base, loss_type):
    whole = first_gradient(make_trainer(base, max_steps=1, loss_type=loss_type))
    micro = first_gradient(make_trainer(base, max_steps=1, loss_type=loss_type,
                                        micro_batch_size=3))
    assert whole.keys() == micro.keys()
    for name in whole:
        torch.testing.assert_close(micro[name], whole[name], rtol=1e-4, atol=1e-7)


def test_same_seed_same_history(base):
    first = without_timings(make_trainer(base, "ppo", max_steps=2).train().history)
    second = without_timings(make_trainer(base, "ppo", max_steps=2).train().history)
    pd.testing.assert_frame_equal(first, second)
    other = without_timings(make_trainer(base, "ppo", max_steps=2, seed=1).train().history)
    assert not first.equals(other)


@pytest.mark.parametrize("name", ["grpo", "ppo"])
def test_resume_reproduces_the_uninterrupted_run(base, tmp_path, name):
    extra = {"beta": 0.04, "num_mini_batches": 2} if name == "grpo" else {}
    straight = make_trainer(base, name, max_steps=4, **extra)
    straight.train()
    first = make_trainer(base, name, max_steps=2, **extra)
    first.train()
    folder = first.save_checkpoint(tmp_path / "ckpt")
    assert (folder / "model" / "config.json").exists()
    resumed = make_trainer(base, name, max_steps=4, **extra)
    result = resumed.train(resume_from=folder)
    pd.testing.assert_frame_equal(without_timings(result.history),
                                  without_timings(straight.history))
    assert same_weights(weights(resumed.model), weights(straight.model))


def test_reward_errors_name_the_function(base):
    def broken_reward(prompts, completions, **columns):
        raise KeyError("answer")

    def short_reward(prompts, completions, **columns):
        return [1.0]

    with pytest.raises(RewardFunctionError, match="broken_reward"):
        make_trainer(base, reward_funcs=[length_reward, broken_reward],
                     reward_weights=(1.0, 1.0)).train()
    with pytest.raises(RewardFunctionError, match="short_reward.*1 rewards for 16"):
        make_trainer(base, reward_funcs=[short_reward]).train()
    with pytest.raises(ValueError, match="reward_weights has 1 weights for 2 reward functions"):
        make_trainer(base, reward_funcs=[length_reward, short_reward], reward_weights=(1.0,))


def test_nonfinite_steps_are_skipped_then_stop_training(base):
    trainer = make_trainer(base, max_steps=5, max_nonfinite_steps=2)
    before = weights(trainer.model)
    poison = trainer.model.lm_head.register_forward_hook(
        lambda module, args, out: out * float("nan") if module.training else out)
    with pytest.raises(FloatingPointError, match="2 consecutive steps"):
        trainer.train()
    assert list(trainer.history["skipped_nonfinite"]) == [1, 1]
    assert same_weights(before, weights(trainer.model))  # never poisoned
    poison.remove()
    trainer.config.max_steps = 3
    trainer.train()  # recovers: a finite step resets the streak
    assert trainer.history["skipped_nonfinite"].tolist() == [1, 1, 0]
    assert all(torch.isfinite(v).all() for v in weights(trainer.model).values())


def test_interrupt_from_a_callback_keeps_history_and_weights(base, capsys):
    def stop_at_two(trainer, row):
        if row["step"] == 2:
            raise KeyboardInterrupt

    reference = make_trainer(base, max_steps=2)
    reference.train()
    trainer = make_trainer(base, max_steps=4, callbacks=[stop_at_two])
    result = trainer.train()
    assert result.interrupted and len(result.history) == 2
    assert "interrupted at step 2" in capsys.readouterr().out
    assert same_weights(weights(result.model), weights(reference.model))


def test_interrupt_while_sampling_rolls_back_and_training_can_continue(base):
    calls = {"n": 0}

    def flaky_reward(prompts, completions, **columns):
        calls["n"] += 1
        if calls["n"] == 3:  # during step 3
            raise KeyboardInterrupt
        return length_reward(prompts, completions, **columns)

    flaky_reward.__name__ = "length_reward"
    straight = make_trainer(base, max_steps=4)
    straight.train()
    trainer = make_trainer(base, max_steps=4, reward_funcs=[flaky_reward])
    result = trainer.train()
    assert result.interrupted and len(result.history) == 2
    assert not any(p.grad is not None for p in trainer.model.parameters())
    trainer.train()  # continue: same as never interrupted
    pd.testing.assert_frame_equal(without_timings(trainer.history),
                                  without_timings(straight.history))


def test_ctrl_c_during_the_update_finishes_the_step_then_stops(base, tmp_path):
    trainer = make_trainer(base, max_steps=4, output_dir=str(tmp_path))
    apply = trainer._apply_gradients

    def interrupted_apply(*args):
        if trainer.step == 1:
            os.kill(os.getpid(), signal.SIGINT)  # arrives mid-update
        return apply(*args)

    trainer._apply_gradients = interrupted_apply
    result = trainer.train()
    assert result.interrupted and list(result.history["step"]) == [1, 2]
    assert (tmp_path / "checkpoint-2" / "trainer_state.pt").exists()  # save_on_interrupt


def test_eval_columns_every_eval_every_steps(base):
    model, tokenizer, data = base
    config = preset("grpo", **{**SMALL, "eval_every": 2, "eval_k": 1})
    result = train(config, model=copy.deepcopy(model), tokenizer=tokenizer, train_dataset=data,
                   eval_dataset=load_split("eval").select(range(0, 200, 25)),
                   reward_funcs=[length_reward])
    assert list(result.eval_history["step"]) == [0, 2, 3]
    evaluated = result.history.dropna(subset=["eval_accuracy"])
    assert list(evaluated["step"]) == [2, 3]
    assert {"eval_accuracy", "eval_pass@k", "eval_length", "eval_format_rate",
            "eval_truncation"} <= set(result.history.columns)
    # one column per (family, difficulty) cell of the eval set, each with a glossary entry
    eval_set = load_split("eval").select(range(0, 200, 25))
    cells = {f"eval_accuracy_{f}_d{d}" for f, d in zip(eval_set["family"], eval_set["difficulty"])}
    assert len(cells) > 1 and cells <= set(result.eval_history.columns)
    assert all(describe(c) for c in cells)


@pytest.mark.parametrize("static", ["1", None])
def test_a_static_copy_shows_no_progress_bar(base, monkeypatch, capsys, static):
    """Under LABKIT_STATIC=1 (how CI and section_times execute the committed copies) the bar
    would be stored frozen at 0%, so there is none; by hand, progress=True shows it."""
    if static is None:
        monkeypatch.delenv("LABKIT_STATIC", raising=False)
    else:
        monkeypatch.setenv("LABKIT_STATIC", static)
    small_trainer(base, settings={**SMALL, "max_steps": 1, "progress": True},
                  reward_funcs=[length_reward]).train()
    bar = "1/1 [" in capsys.readouterr().err
    assert bar == (static is None)
