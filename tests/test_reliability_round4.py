"""Round four of the hostile tests (issue 42): the overlapped sampler stops cleanly and trains what
it says, LoRA resumes bit for bit, and the counts are true (the off-policy bounds, the commands'
counts, the curriculum's steps, the memory plan of an overlapped run).

The runs are a few steps of a randomly initialised tiny Qwen (4 prompts x 4 completions of at most
16 tokens). Every wait on the sampling thread is bounded (:func:`deadline`, ``Event.wait`` and
``join`` with timeouts), so a regression fails the test instead of hanging it.
"""

from __future__ import annotations

import _thread
import contextlib
import copy
import functools
import math
import os
import signal
import threading

import pandas as pd
import pytest
import torch
from small_trainer import small_trainer
from text_rewards import length_reward

from labkit.config import TrainConfig
from labkit.offpolicy import offpolicy_terms
from labkit.rewards import RewardFunctionError
from labkit.scale.memory import memory_plan, phase_totals
from labkit.trainer import TIMING_COLUMNS
from labkit.tricks.prompt_sampling import UniformOrder

SMALL = {"prompts_per_step": 4, "num_generations": 4, "max_completion_length": 16,
         "max_steps": 3, "progress": False}
OVERLAPPED = {"async_mode": "overlapped", "max_staleness": 1}

pytestmark = pytest.mark.usefixtures("one_thread")

make_trainer = functools.partial(small_trainer, settings=SMALL, reward_funcs=(length_reward,))


@pytest.fixture(scope="module")
def base(random_tiny):
    return random_tiny


@contextlib.contextmanager
def deadline(seconds: float = 60.0):
    """Ctrl-C the main thread if the block is still running after ``seconds``: a train() that
    would wait for a batch forever returns interrupted instead, and the test fails, not hangs."""
    timer = threading.Timer(seconds, _thread.interrupt_main)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def record_trained_prompts(trainer) -> list[list[int]]:
    """The prompt indices of every batch the trainer updates on, in order (one list per step)."""
    trained, update = [], trainer.update

    def recording_update(batch):
        trained.append(batch.prompt_index[::trainer.config.num_generations].tolist())
        return update(batch)

    trainer.update = recording_update
    return trained


def prompt_order(trainer, steps: int) -> list[list[int]]:
    """The prompts of ``steps`` batches in the order the run's uniform prompt order draws them:
    what an uninterrupted run trains."""
    sampler = UniformOrder(len(trainer.train_dataset), trainer.config.seed)
    return [sampler.take(trainer.config.prompts_per_step) for _ in range(steps)]


def without_timings(history):
    return history.drop(columns=[c for c in TIMING_COLUMNS if c in history])


# ---- 1. Ctrl-C before an overlapped step's update -------------------------------------------------
def test_ctrl_c_before_an_overlapped_update_trains_every_batch_once_in_order(base):
    """The interrupted step's batch goes back first in line and the sampling thread's prompt
    stream is not rewound under it: the next train() trains that batch, then the following ones,
    each once, in the order the prompt order drew them."""
    trainer = make_trainer(base, max_steps=4, **OVERLAPPED)
    trained = record_trained_prompts(trainer)
    next_batch, fired = trainer.producer.next, []

    def ctrl_c_at_step_1(step):
        batch = next_batch(step)  # handed over to the training thread
        if trainer.step == 1 and not fired:
            fired.append(True)
            raise KeyboardInterrupt  # Ctrl-C in the training thread, before the update
        return batch

    trainer.producer.next = ctrl_c_at_step_1
    with deadline():
        assert trainer.train().interrupted
        assert trainer.step == 1
        result = trainer.train()
    assert not result.interrupted
    assert trained == prompt_order(trainer, 4)
    assert result.history["step"].tolist() == [1, 2, 3, 4]


# ---- 2. a second Ctrl-C while the sampling thread stops -------------------------------------------
def test_a_second_ctrl_c_while_the_sampling_thread_stops_is_held_and_the_next_train_runs(base):
    trainer = make_trainer(base, max_steps=3, **OVERLAPPED)

    def second_ctrl_c_in_shutdown(trainer, row):
        if row["step"] == 1:
            thread = trainer.producer._thread
            join = thread.join

            def impatient_join(timeout=None):
                os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C, while stopping
                return join(timeout)

            thread.join = impatient_join
            raise KeyboardInterrupt  # the first Ctrl-C

    trainer.callbacks.append(second_ctrl_c_in_shutdown)
    with deadline():
        try:
            first = trainer.train()
        except KeyboardInterrupt:
            pytest.fail("a second Ctrl-C during the sampling thread's shutdown escaped train()")
        trainer.callbacks.clear()
        second = trainer.train()
    assert first.interrupted and not second.interrupted
    assert second.history["step"].tolist() == [1, 2, 3]


# ---- 3. a sampling thread inside a slow reward call at shutdown -----------------------------------
def test_a_sampling_thread_still_in_a_reward_call_after_shutdown_calls_no_reward_again(base):
    """k = 2: the thread samples batches 0-2 ahead; the reward of batch 2 blocks until released.
    train() is interrupted after its second step and its wait for the thread runs out (its join
    is cut short here) while the thread is in that call. Released afterwards, the thread
    finishes its batch and ends: no reward call after train() returned."""
    calls, entered, release = [], threading.Event(), threading.Event()

    def slow_third_reward(prompts, completions, **columns):
        calls.append(len(calls) + 1)
        if len(calls) == 3:
            entered.set()
            release.wait(timeout=10)
        return length_reward(prompts, completions, **columns)

    trainer = make_trainer(base, max_steps=6, async_mode="overlapped", max_staleness=2,
                           reward_funcs=[slow_third_reward])
    threads = []

    def stop_in_the_slow_call(trainer, row):
        if row["step"] == 2:
            assert entered.wait(timeout=10)
            thread = trainer.producer._thread
            join = thread.join
            thread.join = lambda timeout=None: join(0.2)  # the shutdown's wait runs out
            threads.append((thread, join))
            raise KeyboardInterrupt

    trainer.callbacks.append(stop_in_the_slow_call)
    try:
        with deadline():
            assert trainer.train().interrupted
        assert calls == [1, 2, 3]
        release.set()
        thread, join = threads[0]
        join(5)
        assert calls == [1, 2, 3], "the stopped thread called the reward again"
        assert not thread.is_alive()
    finally:
        release.set()
        trainer.producer.close()


# ---- 4. an error in the sampling thread ------------------------------------------------------------
def test_a_sampling_thread_error_is_raised_once_and_the_retry_samples_the_same_prompts(base):
    calls = []

    def flaky(prompts, completions, **columns):
        calls.append(1)
        if len(calls) == 2:
            raise ConnectionError("judge server timed out")
        return length_reward(prompts, completions, **columns)

    flaky.__name__ = "length_reward"
    trainer = make_trainer(base, max_steps=3, reward_funcs=[flaky], **OVERLAPPED)
    trained = record_trained_prompts(trainer)
    with deadline():
        with pytest.raises(RuntimeError, match="the sampling thread failed") as raised:
            trainer.train()
        assert isinstance(raised.value.__cause__, RewardFunctionError)
        result = trainer.train()  # the judge is back
    assert result.history["step"].tolist() == [1, 2, 3]
    assert trained == prompt_order(trainer, 3)


# ---- 5. weights loaded before train() ---------------------------------------------------------------
def test_weights_loaded_before_train_are_the_ones_the_sampling_thread_samples_with(base):
    """The first batch is stamped with staleness 0, so the weights that sampled it must be the
    trainer's at its update: the behaviour log-probs recorded while sampling and the trainer's
    own (``offpolicy_kl``) agree up to float rounding."""
    model = base[0]
    other = copy.deepcopy(model)
    noise = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn(p.shape, generator=noise) * 0.05)
    trainer = make_trainer(base, max_steps=1, **OVERLAPPED)
    trainer.model.load_state_dict(other.state_dict())
    with deadline():
        history = trainer.train().history
    assert history["staleness"].tolist() == [0.0]
    assert history["offpolicy_kl"].iloc[0] < 1e-6


# ---- 6. LoRA resumes with dropout off ----------------------------------------------------------------
def test_a_lora_run_resumed_from_a_checkpoint_is_the_uninterrupted_run(base, tmp_path):
    """LoRA's dropout is on only in the update: the first step after a resume computes its old
    log-probs (two iterations per batch) with it off, as the uninterrupted run does."""
    lora = {"use_peft": True, "lora_target_modules": "all-linear", "lora_dropout": 0.3,
            "learning_rate": 1e-3, "num_iterations": 2}
    straight = make_trainer(base, max_steps=2, **lora)
    straight.train()
    first = make_trainer(base, max_steps=1, **lora)
    first.train()
    folder = first.save_checkpoint(tmp_path / "ckpt")
    resumed = make_trainer(base, max_steps=2, **lora)
    result = resumed.train(resume_from=folder)
    pd.testing.assert_frame_equal(without_timings(result.history),
                                  without_timings(straight.history))
    for (name, a), (_, b) in zip(straight.model.named_parameters(),
                                 resumed.model.named_parameters(), strict=True):
        assert torch.equal(a, b), name


# ---- 7. the behaviour weight's bounds ------------------------------------------------------------------
@pytest.mark.parametrize(("bounds", "fragment"), [
    ({"cap": math.nan}, "offpolicy_weight_cap must be a finite number in (0, inf), got nan"),
    ({"cap": -1.0}, "offpolicy_weight_cap must be in (0, inf), got -1.0"),
    ({"cap": 0.0}, "offpolicy_weight_cap must be in (0, inf), got 0.0"),
    ({"floor": math.nan, "correction": "tis"},
     "offpolicy_weight_floor must be a finite number in [0, inf), got nan"),
    ({"floor": -0.5, "correction": "tis"}, "offpolicy_weight_floor must be in [0, inf), got -0.5"),
])
def test_offpolicy_terms_refuse_the_bounds_the_config_refuses(bounds, fragment):
    field = "offpolicy_weight_" + next(iter(k for k in bounds if k != "correction"))
    with pytest.raises(ValueError) as config_error:
        TrainConfig(max_staleness=1, offpolicy_correction=bounds.get("correction", "decoupled"),
                    **{field: bounds[field.removeprefix("offpolicy_weight_")]})
    logp = torch.zeros(1, 2)
    with pytest.raises(ValueError) as error:
        offpolicy_terms(logp, logp, torch.ones(1, 2), **bounds)
    assert fragment in str(error.value)
    assert field in str(config_error.value)


# ---- 8. the commands' counts ------------------------------------------------------------------------
@pytest.mark.parametrize(("module", "argv", "fragment"), [
    ("labkit.scale.bench_memory", ["--steps", "0"], "--steps must be an integer >= 1"),
    ("labkit.scale.bench_memory", ["--threads", "-1"], "--threads must be an integer >= 1"),
    ("labkit.scale.bench_memory", ["--prompts", "0"], "--prompts must be an integer >= 1"),
    ("labkit.scale.bench", ["--decode", "--rounds", "0"], "--rounds must be an integer >= 1"),
    ("labkit.scale.bench", ["--threads", "-1"], "--threads must be an integer >= 0"),
    ("labkit.scale.bench", ["--steps", "0"], "--steps must be an integer >= 1"),
    ("labkit.commands.async_overlap", ["--steps", "0"], "--steps must be an integer >= 1"),
    ("labkit.commands.async_overlap", ["--k", "-1"], "--k must be an integer >= 0"),
    ("labkit.commands.async_overlap", ["--prompts", "zero"], "--prompts must be an integer >= 1"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_command_counts_out_of_range_are_argparse_errors_naming_the_option(
        module, argv, fragment, monkeypatch, capsys):
    """Refused while the arguments are parsed (exit status 2, the usage line, the option, the
    value and what is allowed), before any model is built."""
    import importlib

    command = importlib.import_module(module)
    for name in ("measure", "decode_benchmark", "matmul_flops_per_second"):
        if hasattr(command, name):  # past the parser nothing may run
            monkeypatch.setattr(command, name, lambda *a, **k: pytest.fail("not refused"))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: pytest.fail("not refused"))
    with pytest.raises(SystemExit) as exited:
        command.main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and fragment in err and repr(argv[-1]) in err


# ---- 9. the curriculum counts training steps ------------------------------------------------------------
def test_the_curriculum_advances_once_per_training_step_with_dynamic_sampling(base):
    """A constant reward drops every group, so each step samples 1 + max_resample_rounds rounds;
    the curriculum's schedule still moves by one per step."""
    def constant(prompts, completions, **columns):
        return [1.0] * len(completions)

    trainer = make_trainer(base, max_steps=4, prompt_sampler="curriculum",
                           dynamic_sampling=True, max_resample_rounds=2, reward_funcs=[constant])
    history = trainer.train().history
    assert history["resample_rounds"].tolist() == [2, 2, 2, 2]
    assert trainer.prompt_order.step == 4


# ---- 10. the memory plan of an overlapped run ---------------------------------------------------------
def test_memory_plan_counts_the_overlapped_sampler_the_sampler_copy_and_every_kept_graph_cache():
    run = dict(SMALL, dtype="bfloat16")
    sync = memory_plan("tiny", TrainConfig(**run), prompt_length=30, device="cpu")
    weights = sync.loc["weights", "bytes"]
    sampling = sync.loc[["KV cache (sampling)", "sampling logits"], "bytes"].sum()
    # overlapped: two more copies of the weights (the published ones and the thread's), and the
    # sampling thread's buffers live while the trainer trains and steps
    overlapped = memory_plan("tiny", TrainConfig(**run, **OVERLAPPED), prompt_length=30,
                             device="cpu")
    extra = phase_totals(overlapped) - phase_totals(sync)
    assert extra["sampling"] == 2 * weights
    assert extra["train"] == extra["step"] == 2 * weights + sampling
    assert overlapped.loc["total", "bytes"] > sync.loc["total", "bytes"]
    # sampling_dtype: the sampler's copy of the weights, in its own dtype
    fp32 = memory_plan("tiny", TrainConfig(**dict(run, dtype="float32")), prompt_length=30,
                       device="cpu")
    mixed = memory_plan("tiny", TrainConfig(**dict(run, dtype="float32"),
                                            sampling_dtype="bfloat16"), prompt_length=30,
                        device="cpu")
    assert (phase_totals(mixed) - phase_totals(fp32))["train"] == fp32.loc["weights", "bytes"] // 2
    # a CUDA graph keeps a static cache per shape it replays: evaluation's batches (the suite's
    # 200 eval prompts: batches of 64 and a last one of 8) and the refill rounds of dynamic
    # sampling (3, 2 or 1 prompts still needed) add theirs to the training batch's
    per_row = 64 * 4 * 2 * 32 * 2 * 2  # T = 46 rounded up to 64, L, h_kv, hd, keys and values, s
    plain = phase_totals(memory_plan("tiny", TrainConfig(**run), prompt_length=30))
    for more, rows in (({"eval_every": 10, "eval_k": 4}, (64 + 8) * 4),
                       ({"dynamic_sampling": True}, (3 + 2 + 1) * 4)):
        plan = memory_plan("tiny", TrainConfig(**run, **more), prompt_length=30)
        assert plan.loc["KV caches (other graphs)", "bytes"] == rows * per_row, more
        assert phase_totals(plan)["train"] == plain["train"] + rows * per_row, more
