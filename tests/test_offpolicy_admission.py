"""Admission of groups that take different times (labkit.offpolicy.admission), and checkpoints of a
run whose sampler is ahead of the trainer: the simulated clock against hand-worked schedules, the
bias of discarding, the trainer with the clock, resumes bit for bit, and the config's refusals.

Trainer runs are a few steps of a randomly initialised tiny Qwen (4 prompts x 4 completions of at
most 16 tokens), as in tests/test_offpolicy.py.
"""

import copy
import random

import pandas as pd
import pytest

from labkit.config import TrainConfig, preset
from labkit.metrics import TIMING_COLUMNS
from labkit.offpolicy import simulate_admission
from labkit.trainer import Trainer

SMALL = {"prompts_per_step": 4, "num_generations": 4, "max_completion_length": 16,
         "max_steps": 2, "progress": False}
TIMING = [c for c in TIMING_COLUMNS if c not in ("queue_wait", "eval_time")]  # no eval here

pytestmark = pytest.mark.usefixtures("one_thread")


def length_reward(prompts, completions, **columns):
    return [len(c[0]["content"]) / 16 for c in completions]


def make_trainer(base, **overrides):
    model, tokenizer, data = base
    config = preset("grpo", **{**SMALL, **overrides})
    return Trainer(config, model=copy.deepcopy(model), tokenizer=tokenizer, train_dataset=data,
                   reward_funcs=[length_reward])


@pytest.fixture(scope="module")
def base(random_tiny):
    return random_tiny


# ---- the simulated clock --------------------------------------------------------------------------
@pytest.mark.parametrize("admission", ["discard", "slow_down"])
def test_k_zero_is_the_synchronous_trainer_on_the_clock(admission):
    """k = 0: each step starts B groups and waits for all of them, whatever their lengths."""
    lengths = [random.Random(0).randint(1, 100) for _ in range(24)]
    run = simulate_admission(lengths, groups_per_step=4, max_staleness=0, admission=admission,
                             train_time=5)
    groups = run.groups
    assert groups["outcome"].eq("trained").all()
    assert groups["step"].tolist() == [g // 4 + 1 for g in range(24)]
    assert groups["staleness"].eq(0).all()
    # the trainer waits for the longest group of its batch, every step
    assert run.steps["wait"].tolist() == [max(lengths[i:i + 4]) for i in range(0, 24, 4)]


def test_a_hand_worked_schedule():
    """B = 1, k = 1, lengths [10, 1, 1, 1], no training time (worked by hand in the comments).

    discard: g0 (10 tokens) and g1 start at t=0 with version 0; g1 trains at step 1; g2, g3
    start with versions 1, 2 and train at steps 2, 3; g0 arrives at t=10, 3 versions old: dropped in step 4.
    slow_down: g1 trains first; at step 2, g0 would be 2 versions old at step 3, so the trainer
    waits for it (t=1 -> 10) and trains it, then g2 and g3, each one version old."""
    discard = simulate_admission([10, 1, 1, 1], 1, 1, "discard", train_time=0)
    d = discard.groups.set_index("group")
    assert d["outcome"].tolist() == ["discarded", "trained", "trained", "trained"]
    assert d["version"].tolist() == [0, 0, 1, 2]
    assert d.loc[0, "staleness"] == 3 and d["step"].tolist() == [4, 1, 2, 3]
    slow = simulate_admission([10, 1, 1, 1], 1, 1, "slow_down", train_time=0)
    s = slow.groups.set_index("group")
    assert s["outcome"].eq("trained").all()
    assert s["step"].tolist() == [2, 1, 3, 4]
    assert s["staleness"].tolist() == [1, 0, 1, 1]
    assert slow.steps["wait"].tolist() == [1, 9, 0, 1]
    assert slow.steps["groups_discarded"].sum() == 0 and discard.groups["kept"].sum() == 3


def test_discard_drops_the_long_groups_and_slow_down_keeps_the_sampled_lengths():
    """Half the groups are long (60 tokens), half short (5). Discarding drops long groups only
    and trains fewer long groups than were sampled; slowing down drops none, keeps every trained
    group within the bound and pays in waiting."""
    rng = random.Random(1)
    lengths = [rng.choice([5, 60]) for _ in range(400)]
    runs = {a: simulate_admission(lengths, groups_per_step=4, max_staleness=1, admission=a,
                                  train_time=4, steps=60) for a in ("discard", "slow_down")}
    discard = runs["discard"].groups
    dropped = discard[discard["outcome"] == "discarded"]
    assert len(dropped) >= 10 and dropped["length"].eq(60).all()
    trained = discard[discard["kept"]]
    done = discard[discard["outcome"] != "pending"]
    assert trained["length"].eq(60).mean() < done["length"].eq(60).mean() - 0.1
    assert trained["staleness"].le(1).all()
    slow = runs["slow_down"].groups
    assert not slow["outcome"].eq("discarded").any()
    assert slow.loc[slow["kept"], "staleness"].le(1).all()
    # every group but the last ones in flight was trained, long or short
    assert slow["kept"].sum() == 60 * 4
    assert runs["slow_down"].steps["wait"].sum() > runs["discard"].steps["wait"].sum()


@pytest.mark.parametrize(("arguments", "fragments"), [
    ({"admission": "drop"}, ("staleness_admission", "'drop'", "'slow_down'")),
    ({"max_staleness": -1}, ("max_staleness", "-1", ">= 0")),
    ({"groups_per_step": 0}, ("groups_per_step", "0", ">= 1")),
    ({"train_time": float("nan")}, ("admission_train_time", "nan", ">= 0")),
    ({"lengths": [3, -1]}, ("length", "-1", ">= 0")),
    ({"steps": 2.5}, ("steps", "2.5", "integer")),
])
def test_the_clock_refuses_bad_arguments_by_name(arguments, fragments):
    call = {"lengths": [3, 4], "groups_per_step": 1, "max_staleness": 1, **arguments}
    with pytest.raises(ValueError) as error:
        simulate_admission(**call)
    for fragment in fragments:
        assert fragment in str(error.value)


# ---- the trainer with the clock -------------------------------------------------------------------
def test_admission_at_k_zero_trains_todays_batches(base):
    """staleness_admission with k = 0 samples each step's prompts in one call with the current
    weights: the same history as the trainer without the clock."""
    plain = make_trainer(base, max_steps=3).train().history
    clocked = make_trainer(base, max_steps=3, staleness_admission="slow_down").train().history
    extra = ["groups_discarded", "admission_wait", "staleness_mean"]
    pd.testing.assert_frame_equal(clocked.drop(columns=TIMING + extra),
                                  plain.drop(columns=TIMING))


@pytest.mark.parametrize("admission", ["discard", "slow_down"])
def test_the_trainer_logs_every_group_and_keeps_the_bound(base, admission):
    trainer = make_trainer(base, max_steps=4, max_staleness=1, staleness_admission=admission,
                           offpolicy_correction="decoupled", admission_train_time=1.0)
    history = trainer.train().history
    log = trainer.admission_log
    assert set(log["outcome"]) <= {"trained", "discarded", "pending"}
    assert log["kept"].sum() == 4 * 4  # 4 steps x 4 groups
    assert log.loc[log["kept"], "staleness"].le(1).all()
    assert history["staleness"].le(1).all()
    assert history["groups_discarded"].sum() == (log["outcome"] == "discarded").sum()
    assert {"family", "difficulty", "prompt_index", "mean_length"} <= set(log.columns)
    assert log["family"].notna().all()
    if admission == "slow_down":
        assert history["groups_discarded"].sum() == 0


def test_admission_with_episodes_is_refused_by_name(base):
    from labkit.agents import named_environment

    model, tokenizer, data = base
    config = preset("grpo", **SMALL, max_staleness=1, staleness_admission="discard")
    with pytest.raises(ValueError, match=r"staleness_admission='discard'.*environment_factory"):
        Trainer(config, model=copy.deepcopy(model), tokenizer=tokenizer, train_dataset=data,
                reward_funcs=[length_reward], environment_factory=named_environment("calculator"))


# ---- checkpoints of a sampler ahead of the trainer -------------------------------------------------
@pytest.mark.parametrize("overrides", [
    {"max_staleness": 2},
    {"max_staleness": 2, "staleness_admission": "discard", "admission_train_time": 1.0},
], ids=["ahead", "admission"])
def test_an_interrupted_stale_run_resumes_bit_for_bit(base, tmp_path, overrides):
    """k = 2: the checkpoint of step 2 holds the two batches sampled ahead (and the clock's
    groups in flight); the resumed run trains them, as the uninterrupted run did."""
    straight = make_trainer(base, max_steps=4, **overrides)
    straight.train()
    first = make_trainer(base, max_steps=2, **overrides)
    first.train()
    folder = first.save_checkpoint(tmp_path / "ckpt")
    resumed = make_trainer(base, max_steps=4, **overrides)
    resumed.train(resume_from=folder)
    pd.testing.assert_frame_equal(resumed.history.drop(columns=TIMING),
                                  straight.history.drop(columns=TIMING))
    if "staleness_admission" in overrides:
        pd.testing.assert_frame_equal(resumed.admission_log, straight.admission_log)


# ---- the config -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("overrides", "fragments"), [
    ({"staleness_admission": "drop"}, ("staleness_admission", "'drop'", "'slow_down'")),
    ({"admission_train_time": -1.0}, ("admission_train_time", "-1.0")),
    ({"staleness_admission": "discard", "max_staleness": 1, "async_mode": "overlapped"},
     ("staleness_admission='discard'", "async_mode='deterministic'")),
    ({"staleness_admission": "slow_down", "dynamic_sampling": True},
     ("staleness_admission='slow_down'", "dynamic_sampling=False")),
    ({"staleness_admission": "discard", "temperature_schedule": "cosine",
      "temperature_final": 0.5}, ("temperature_schedule='cosine'", "'constant'")),
])
def test_bad_admission_settings_are_refused_by_name(overrides, fragments):
    with pytest.raises(ValueError) as error:
        TrainConfig(**overrides)
    for fragment in fragments:
        assert fragment in str(error.value)
