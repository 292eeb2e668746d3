"""Asynchronous, off-policy training (labkit.offpolicy): the sampler k steps ahead, the stamps it
puts on each batch, the corrections against hand-computed values, and the config's refusals.

Runs are a few steps of a randomly initialised tiny Qwen (4 prompts x 4 completions of at most
16 tokens), as in tests/test_switches.py.
"""

import copy
import math

import pytest
import torch

from labkit.advantages import ESTIMATOR_REGISTRY
from labkit.config import TrainConfig, preset
from labkit.losses import LOSS_REGISTRY, policy_loss
from labkit.metrics import TIMING_COLUMNS
from labkit.offpolicy import correct_batch, offpolicy_metrics, offpolicy_terms
from labkit.trainer import Trainer
from labkit.tricks.mismatch import mismatch_weights

SMALL = {"prompts_per_step": 4, "num_generations": 4, "max_completion_length": 16,
         "max_steps": 2, "progress": False}

pytestmark = pytest.mark.usefixtures("one_thread")


def length_reward(prompts, completions, **columns):
    return [len(c[0]["content"]) / 16 for c in completions]


def make_trainer(base, name="grpo", **overrides):
    model, tokenizer, data = base
    config = preset(name, **{**SMALL, **overrides})
    return Trainer(config, model=copy.deepcopy(model), tokenizer=tokenizer, train_dataset=data,
                   reward_funcs=[length_reward])


@pytest.fixture(scope="module")
def base(random_tiny):
    return random_tiny


# ---- the producer ---------------------------------------------------------------------------------
def test_max_staleness_zero_is_todays_trainer_bit_for_bit(base):
    """k = 0 has no producer: the step samples its own batch. The same run through the
    deterministic producer at k = 0, and through a hand-written BatchSource (sample, then train),
    gives the identical history."""
    from labkit.offpolicy import AheadSource, StampedBatch

    class SampleThenTrain:  # a BatchSource by hand: the synchronous loop
        def __init__(self, sampling):
            self.sampling = sampling

        def next(self, step):
            temperature = self.sampling.temperature_at(step)
            batch, row = self.sampling.batch(temperature)
            return StampedBatch(batch, row, step, temperature)

        snapshot = restore = close = (lambda self, *a: None)

    timing = [c for c in TIMING_COLUMNS if c not in ("queue_wait", "eval_time")]
    histories = []
    for producer in (None, lambda s: AheadSource(s, 0), SampleThenTrain):
        trainer = make_trainer(base, max_steps=3)
        assert trainer.producer is None
        if producer is not None:
            trainer.producer = producer(trainer.sampling)
        histories.append(trainer.train().history.drop(columns=timing))
    ours, *others = histories
    for other in others:
        assert list(ours.columns) == list(other.columns)
        assert ours.equals(other)


def test_the_synchronous_step_builds_no_producer(base, monkeypatch):
    """max_staleness = 0 (deterministic, whole batches): the trainer samples each step's batch
    itself (Trainer.sample_and_score); no producer of labkit.offpolicy is built or called."""
    from labkit.offpolicy import AdmissionSource, AheadSource, OverlappedSource
    from labkit.offpolicy.partial import PartialRolloutSource

    def refuse(self, *args, **kwargs):
        raise AssertionError(f"the synchronous trainer built a {type(self).__name__}")

    for producer in (AheadSource, OverlappedSource, AdmissionSource, PartialRolloutSource):
        monkeypatch.setattr(producer, "__init__", refuse)
    trainer = make_trainer(base, max_steps=2)
    sampled = []
    sample = trainer.sample_and_score
    trainer.sample_and_score = lambda: sampled.append(trainer.step) or sample()
    history = trainer.train().history
    assert trainer.producer is None and sampled == [0, 1] and len(history) == 2
    assert "staleness" not in history


def test_offpolicy_reads_no_trainer_attribute():
    """labkit.offpolicy meets the trainer only through BatchSource: no module of it names a
    trainer (a parameter, a variable, an attribute read such as ``trainer.step``) or imports
    labkit.trainer; its producers sample through the Sampling they are built with."""
    import ast
    from pathlib import Path

    import labkit.offpolicy

    folder = Path(labkit.offpolicy.__file__).parent
    found = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.name}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Name) and "trainer" in node.id.lower():
                found.append(f"{where} name {node.id}")
            elif isinstance(node, ast.arg) and "trainer" in node.arg.lower():
                found.append(f"{where} parameter {node.arg}")
            elif isinstance(node, ast.Attribute) and "trainer" in node.attr.lower():
                found.append(f"{where} attribute {node.attr}")
            elif "labkit.trainer" in (
                    [node.module] if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names] if isinstance(node, ast.Import) else []):
                found.append(f"{where} imports labkit.trainer")
    assert not found, found


@pytest.mark.parametrize("k", [1, 2])
def test_step_t_trains_the_batch_sampled_at_step_t_minus_k(base, k):
    trainer = make_trainer(base, max_steps=5, max_staleness=k)
    stamps = []
    producer_next = trainer.producer.next

    def spy(step):
        stamped = producer_next(step)
        stamps.append((step, stamped.version))
        return stamped

    trainer.producer.next = spy
    history = trainer.train().history
    assert stamps == [(t, max(0, t - k)) for t in range(5)]
    assert history["staleness"].tolist() == [float(t - max(0, t - k)) for t in range(5)]


def test_the_sampler_runs_k_batches_ahead_in_one_random_stream(base):
    """With k = 2 the first step samples three batches with the initial weights: the same
    prompts, in the same order, as three synchronous steps would draw (one sampling stream)."""
    ahead = make_trainer(base, max_steps=1, max_staleness=2)
    ahead.train()
    queued = [s.batch.prompt_index[::4].tolist() for s in ahead.producer.queue]
    sync = make_trainer(base, max_steps=3)
    drawn = []
    for _ in range(3):
        batch, _row = sync.sample_and_score()
        drawn.append(batch.prompt_index[::4].tolist())
    assert queued == drawn[1:]
    assert len(ahead.producer.queue) == 2


def test_a_failed_step_puts_the_queue_back(base):
    trainer = make_trainer(base, max_steps=3, max_staleness=1)
    trainer.train()
    trainer.config.max_steps = 4
    queue = trainer.producer.snapshot()

    def fail(batch):
        raise RuntimeError("advantages failed")

    trainer.compute_advantages = fail  # fails before the update: the step is forgotten
    with pytest.raises(RuntimeError):
        trainer._run_step()
    after = trainer.producer.snapshot()
    assert len(after) == len(queue) and all(a is b for a, b in zip(after, queue, strict=True))


@pytest.mark.parametrize("overrides", [
    # every registered loss type (CISPO needs its absolute cap), off-policy within the step too
    *({"loss_type": name, "num_mini_batches": 2,
       **({"epsilon_high": 5.0} if name == "cispo" else {})} for name in LOSS_REGISTRY),
    *({"advantage_estimator": name} for name in ESTIMATOR_REGISTRY),
], ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_every_loss_and_estimator_trains_two_steps_stale(base, overrides):
    trainer = make_trainer(base, max_steps=3, max_staleness=2,
                           offpolicy_correction="decoupled", **overrides)
    history = trainer.train().history
    assert history["skipped_nonfinite"].sum() == 0
    assert history["staleness"].tolist() == [0.0, 1.0, 2.0]
    assert math.isfinite(history["loss"].iloc[-1])
    assert history["offpolicy_kl"].iloc[-1] > 0  # the weights moved since the batch was sampled


def test_overlapped_mode_trains_within_the_bound(base):
    trainer = make_trainer(base, max_steps=4, max_staleness=1, async_mode="overlapped")
    history = trainer.train().history
    assert len(history) == 4
    assert history["staleness"].between(0, 1).all()
    assert (history["queue_wait"] >= 0).all()
    assert trainer.producer._thread is None  # stopped at the end of train()


# ---- the corrections ------------------------------------------------------------------------------
PROX = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-0.1, -3.0, 0.0, 0.0]])
BEHAV = torch.tensor([[-1.0, -0.2, -2.5, 0.0], [-0.4, -1.0, 0.0, 0.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])


@pytest.mark.parametrize("error", [ValueError("reward failed"), SystemExit(3)],
                         ids=["Exception", "SystemExit"])
def test_a_failing_sampling_thread_stops_training(base, error):
    """What ends the sampling thread reaches the training thread, which raises it instead of
    waiting for a batch forever; a SystemExit too, which the thread does not catch."""
    def failing_reward(prompts, completions, **columns):
        raise error

    model, tokenizer, data = base
    config = preset("grpo", **{**SMALL, "max_staleness": 1, "async_mode": "overlapped"})
    trainer = Trainer(config, model=copy.deepcopy(model), tokenizer=tokenizer,
                      train_dataset=data, reward_funcs=[failing_reward])
    with pytest.raises(RuntimeError, match="the sampling thread failed") as raised:
        trainer.train()
    cause = raised.value.__cause__  # a reward's Exception comes wrapped with the function's name
    assert cause is error or ("failing_reward" in str(cause) and cause.__cause__ is error)


def test_corrections_equal_hand_computed_weights():
    ratio = [[1.0, math.exp(-1.8), math.exp(2.0)], [math.exp(0.3), math.exp(-2.0)]]
    flat = [r for row in ratio for r in row]
    real = MASK.bool()

    def weights(correction, **bounds):
        return offpolicy_terms(PROX, BEHAV, MASK, correction, **bounds).weights[real].tolist()

    assert weights("none") == [1.0] * 5
    assert weights("tis", cap=2.0) == pytest.approx([min(r, 2.0) for r in flat])
    assert weights("tis", cap=2.0, floor=0.5) == pytest.approx(
        [min(max(r, 0.5), 2.0) for r in flat])
    assert weights("icepop", cap=5.0, floor=0.5) == pytest.approx(
        [r if 0.5 <= r <= 5.0 else 0.0 for r in flat])
    assert weights("decoupled", cap=5.0) == pytest.approx([r if r <= 5.0 else 0.0 for r in flat])
    terms = offpolicy_terms(PROX, BEHAV, MASK, "decoupled", cap=5.0, epsilon=0.2)
    assert terms.ratio[real].tolist() == pytest.approx(flat)
    assert terms.clip_region[real].tolist() == [not 0.8 <= r <= 1.2 for r in flat]
    assert terms.corrected[real].tolist() == [r > 5.0 for r in flat]
    assert not terms.weights[~real].any() and not terms.clip_region[~real].any()
    # the same weights as the sampler-mismatch correction, which they reuse
    same, _ = mismatch_weights(PROX, BEHAV, MASK, "token_truncate", clip_max=2.0)
    assert torch.equal(offpolicy_terms(PROX, BEHAV, MASK, "tis", cap=2.0).weights, same)


def test_correction_metrics_are_the_hand_computed_ones():
    terms = offpolicy_terms(PROX, BEHAV, MASK, "decoupled", cap=5.0)
    row = offpolicy_metrics(terms, PROX, BEHAV, MASK)
    d = torch.tensor([0.0, -1.8, 2.0, 0.3, -2.0])
    assert row["offpolicy_kl"] == pytest.approx(float((d.exp() - d - 1).mean()))
    assert row["offpolicy_ratio_q50"] == pytest.approx(math.exp(0.0))
    assert row["offpolicy_ratio_mean"] == pytest.approx(float(d.exp().mean()))
    assert row["offpolicy_corrected_frac"] == pytest.approx(1 / 5)  # exp(2) > 5
    assert row["offpolicy_clip_frac"] == pytest.approx(4 / 5)


def test_decoupled_ppo_is_ppo_when_behaviour_is_proximal():
    """Behaviour == proximal: every weight is 1, and the decoupled loss is PPO's, value and
    gradient."""
    torch.manual_seed(0)
    old = torch.randn(3, 5) - 1
    mask = torch.ones(3, 5)
    terms = offpolicy_terms(old, old, mask, "decoupled", cap=5.0)
    assert torch.equal(terms.weights, mask)
    advantages = torch.tensor([1.0, -0.5, 2.0])
    losses, grads = [], []
    for weights in (None, terms.weights):
        logp = (old + 0.3 * torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
                ).requires_grad_()
        loss, _ = policy_loss(logp, old, advantages, mask, token_weights=weights)
        loss.backward()
        losses.append(loss.detach())
        grads.append(logp.grad)
    assert torch.equal(losses[0], losses[1]) and torch.equal(grads[0], grads[1])


def test_coupled_anchors_the_clip_on_the_behaviour_policy(base):
    trainer = make_trainer(base, max_steps=1, max_staleness=1, offpolicy_correction="coupled")
    trainer.train()
    batch, _row = trainer.sample_and_score()
    trainer.score_forwards(batch)
    prox = batch.old_logp.clone()
    correct_batch(batch, trainer.config, staleness=1)
    assert torch.equal(batch.old_logp, batch.sample_logp)
    assert batch.is_weights is None and not torch.equal(prox, batch.sample_logp)


# ---- the config -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("overrides", "fragments"), [
    ({"max_staleness": -1}, ("max_staleness", "-1", ">= 0")),
    ({"max_staleness": 1.5}, ("max_staleness", "1.5", "integer")),
    ({"async_mode": "threads"}, ("async_mode", "'threads'", "'overlapped'")),
    ({"offpolicy_correction": "is"}, ("offpolicy_correction", "'is'", "'decoupled'")),
    ({"offpolicy_correction": "tis"}, ("max_staleness=0", "max_staleness >= 1")),
    ({"max_staleness": 1, "offpolicy_weight_cap": 0}, ("offpolicy_weight_cap", "(0, inf")),
    ({"max_staleness": 1, "offpolicy_correction": "tis", "offpolicy_weight_floor": 3.0,
      "offpolicy_weight_cap": 2.0}, ("offpolicy_weight_floor (3.0)", "(2.0)")),
    ({"max_staleness": 1, "offpolicy_correction": "decoupled", "offpolicy_weight_floor": 0.5},
     ("offpolicy_weight_floor", "'decoupled'", "'tis' or 'icepop'")),
    ({"max_staleness": 1, "offpolicy_correction": "icepop"}, ("icepop", "offpolicy_weight_floor")),
    ({"max_staleness": 1, "offpolicy_correction": "tis",
      "vllm_importance_sampling_correction": True}, ("vllm_importance_sampling_correction",)),
    ({"async_mode": "overlapped", "save_every": 1, "output_dir": "x"},
     ("async_mode='overlapped'", "save_every")),
])
def test_bad_settings_are_refused_by_name(overrides, fragments):
    with pytest.raises(ValueError) as error:
        TrainConfig(**overrides)
    for fragment in fragments:
        assert fragment in str(error.value)
