"""Partial rollouts (labkit.offpolicy.partial): a completion started by one policy version and
continued by the next. The token versions against the schedule, the recorded sampling log-probs
against each version's own weights, the correction reading them per token, a seeded run twice,
a checkpoint, and the config's refusals.

Runs are a few steps of a randomly initialised tiny Qwen (4 prompts x 4 completions of at most
16 tokens, the first 6 by the starting version), as in tests/test_offpolicy.py.
"""

import copy

import pandas as pd
import pytest
import torch

from labkit.config import TrainConfig, preset
from labkit.metrics import TIMING_COLUMNS
from labkit.sampling import continue_rollout, generate
from labkit.trainer import Trainer
from labkit.training.forward import completion_logprobs_and_entropy

SMALL = {"prompts_per_step": 4, "num_generations": 4, "max_completion_length": 16,
         "max_steps": 2, "progress": False}
PARTIAL = {"partial_rollouts": True, "partial_rollout_chunk": 6, "learning_rate": 1e-3}
TIMING = [c for c in TIMING_COLUMNS if c not in ("queue_wait", "eval_time")]  # no eval here

pytestmark = pytest.mark.usefixtures("one_thread")


def length_reward(prompts, completions, **columns):
    return [len(c[0]["content"]) / 16 for c in completions]


def make_trainer(base, **overrides):
    model, tokenizer, data = base
    config = preset("grpo", **{**SMALL, **PARTIAL, **overrides})
    return Trainer(config, model=copy.deepcopy(model), tokenizer=tokenizer, train_dataset=data,
                   reward_funcs=[length_reward])


@pytest.fixture(scope="module")
def base(random_tiny):
    return random_tiny


def spy_batches(trainer):
    """Record (step, stamped batch, copy of the weights) as the producer hands each batch over."""
    seen = []
    producer_next = trainer.producer.next

    def spy(step):
        stamped = producer_next(step)
        seen.append((step, stamped, copy.deepcopy(trainer.model)))
        return stamped

    trainer.producer.next = spy
    return seen


# ---- the rollout ------------------------------------------------------------------------------------
def test_a_continued_rollout_is_the_uninterrupted_one_with_the_same_weights(base):
    """Same weights, same seed: the head plus its continuation samples the same tokens as one
    generate call (the continuation recomputes the head's cache), with log-probs to float error."""
    model, tokenizer, data = base
    prompts = data[:3]["prompt"]
    whole = generate(model, tokenizer, prompts, num_generations=2, max_completion_length=16,
                     generator=torch.Generator().manual_seed(5))
    generator = torch.Generator().manual_seed(5)
    head = generate(model, tokenizer, prompts, num_generations=2, max_completion_length=6,
                    generator=generator)
    assert head.truncated.any()  # something to continue
    joined = continue_rollout(model, tokenizer, head, max_completion_length=16,
                              generator=generator)
    assert torch.equal(joined.completion_ids, whole.completion_ids)
    assert torch.equal(joined.lengths, whole.lengths) and joined.texts == whole.texts
    torch.testing.assert_close(joined.logprobs, whole.logprobs, atol=1e-4, rtol=0)


# ---- the trainer --------------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 2])
def test_token_versions_follow_the_schedule(base, k):
    """Step t >= k trains heads of version t - k and tails of version t - k + 1; the first step's
    batches finish with their own version; padding is -1."""
    trainer = make_trainer(base, max_steps=4, max_staleness=k)
    seen = spy_batches(trainer)
    history = trainer.train().history
    for step, stamped, _ in seen:
        batch = stamped.batch
        head_version = max(0, step - k)
        tail_version = 0 if step == 0 else head_version + 1
        assert stamped.version == head_version
        sampled = batch.completion_mask.bool()
        expected = torch.full_like(batch.token_versions, -1)
        columns = torch.arange(batch.completion_ids.size(1))
        expected[sampled] = torch.where(columns < 6, head_version, tail_version).expand_as(
            expected)[sampled]
        assert torch.equal(batch.token_versions, expected), step
        newer = (expected > head_version)[sampled].float().mean().item()
        assert history["newer_version_frac"].iloc[step] == pytest.approx(newer)
    assert history["newer_version_frac"].iloc[k:].gt(0).all()  # long completions were switched
    assert history["staleness"].tolist() == [float(t - max(0, t - k)) for t in range(4)]


def test_sampling_logprobs_are_each_tokens_own_version(base):
    """k = 1: the batch of step 2 was started by the weights of step 1 and continued by those of
    step 2. Each recorded sampling log-prob equals the log-prob under the weights that sampled
    that token, not under the other version."""
    trainer = make_trainer(base, max_steps=3, max_staleness=1)
    seen = spy_batches(trainer)
    trainer.train()
    weights = {step: model for step, _, model in seen}  # the weights at the start of each step
    _, stamped, _ = seen[2]
    batch = stamped.batch
    mask = batch.completion_mask.bool()
    versions = batch.token_versions
    assert set(versions[mask].tolist()) == {1, 2}
    by_version = {}
    for version in (1, 2):
        logp, _ = completion_logprobs_and_entropy(weights[version], batch, 1.0, False)
        by_version[version] = logp.detach()
    for version, other in ((1, 2), (2, 1)):
        tokens = mask & (versions == version)
        own = (by_version[version][tokens] - batch.sample_logp[tokens]).abs().max()
        wrong = (by_version[other][tokens] - batch.sample_logp[tokens]).abs().max()
        assert own < 1e-4, version
        assert wrong > 100 * own, version  # the versions differ: the check can tell them apart


def test_the_correction_weighs_each_token_against_its_own_version(base):
    """k = 1, decoupled PPO: the tails of step t's batch were sampled by the weights the update
    starts from, so their behaviour ratio is 1; the heads, one version older, are not."""
    trainer = make_trainer(base, max_steps=3, max_staleness=1, offpolicy_correction="decoupled")
    seen = spy_batches(trainer)
    trainer.train()
    _, stamped, _ = seen[2]
    batch, mask = stamped.batch, stamped.batch.loss_mask.bool()
    ratio = torch.exp(batch.old_logp - batch.sample_logp)
    tail = mask & (batch.token_versions == 2)
    head = mask & (batch.token_versions == 1)
    assert tail.any() and head.any()
    torch.testing.assert_close(ratio[tail], torch.ones_like(ratio[tail]), atol=1e-4, rtol=0)
    assert (ratio[head] - 1).abs().max() > 1e-2
    torch.testing.assert_close(batch.is_weights[tail], torch.ones_like(ratio[tail]), atol=1e-4,
                               rtol=0)


def test_a_seeded_run_gives_the_same_history_twice(base):
    first = make_trainer(base, max_steps=3, max_staleness=2).train().history
    second = make_trainer(base, max_steps=3, max_staleness=2).train().history
    pd.testing.assert_frame_equal(first.drop(columns=TIMING), second.drop(columns=TIMING))


def test_an_interrupted_run_resumes_with_its_heads(base, tmp_path):
    """The checkpoint of step 2 holds batches started and not continued; the resumed run
    continues them with the weights of step 3, as the uninterrupted run did."""
    straight = make_trainer(base, max_steps=4, max_staleness=2)
    straight.train()
    first = make_trainer(base, max_steps=2, max_staleness=2)
    first.train()
    folder = first.save_checkpoint(tmp_path / "ckpt")
    resumed = make_trainer(base, max_steps=4, max_staleness=2)
    resumed.train(resume_from=folder)
    pd.testing.assert_frame_equal(resumed.history.drop(columns=TIMING),
                                  straight.history.drop(columns=TIMING))


def test_partial_rollouts_with_episodes_are_refused_by_name(base):
    from labkit.agents import named_environment

    model, tokenizer, data = base
    config = preset("grpo", **SMALL, **PARTIAL, max_staleness=1)
    with pytest.raises(ValueError, match=r"partial_rollouts=True.*environment_factory"):
        Trainer(config, model=copy.deepcopy(model), tokenizer=tokenizer, train_dataset=data,
                reward_funcs=[length_reward], environment_factory=named_environment("calculator"))


# ---- the config -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("overrides", "fragments"), [
    ({"partial_rollouts": True}, ("partial_rollouts=True", "max_staleness=0",
                                  "max_staleness >= 1")),
    ({"partial_rollouts": "yes"}, ("partial_rollouts", "'yes'")),
    ({"partial_rollouts": True, "max_staleness": 1, "partial_rollout_chunk": 0},
     ("partial_rollout_chunk", "0", ">= 1")),
    ({"partial_rollouts": True, "max_staleness": 1, "max_completion_length": 16,
      "partial_rollout_chunk": 16}, ("partial_rollout_chunk (16)", "max_completion_length (16)")),
    ({"partial_rollout_chunk": 8}, ("partial_rollout_chunk=8", "partial_rollouts=True")),
    ({"partial_rollouts": True, "max_staleness": 1, "async_mode": "overlapped"},
     ("partial_rollouts=True", "async_mode='deterministic'", "async_mode='overlapped'")),
    ({"partial_rollouts": True, "max_staleness": 1, "staleness_admission": "discard"},
     ("staleness_admission=None", "'discard'")),
    ({"partial_rollouts": True, "max_staleness": 1, "dynamic_sampling": True},
     ("dynamic_sampling=False",)),
    ({"partial_rollouts": True, "max_staleness": 1, "temperature_schedule": "cosine",
      "temperature_final": 0.5}, ("temperature_schedule='constant'", "'cosine'")),
])
def test_bad_partial_settings_are_refused_by_name(overrides, fragments):
    with pytest.raises(ValueError) as error:
        TrainConfig(**overrides)
    for fragment in fragments:
        assert fragment in str(error.value)
