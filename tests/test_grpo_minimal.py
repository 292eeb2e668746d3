"""labkit.grpo_minimal, GRPO on one screen, computes the trainer's gradient: the trainer's savings
(shared prompt forwards, skipped zero-advantage rows, length packing) change no gradient. The same
comparison, labkit.exercises.check_grpo_gradient, checks the learner's GRPO in notebook 02."""

import copy

import pytest
import torch

from labkit import grpo_minimal
from labkit.exercises import LearnerError, check_function, check_grpo_gradient, random_policy_batch
from labkit.models import load_policy
from labkit.tasks import medium_cells


@pytest.fixture(scope="module")
def shipped():
    model, tokenizer = load_policy("tiny", device="cpu", dtype="float32")
    return model, tokenizer, medium_cells("train").select(range(32))


def test_minimal_gradient_equals_the_trainers(shipped, capsys):
    """labkit.exercises.check_grpo_gradient, notebook 02's exercise 4 check: the Trainer's batch
    and gradient, then grpo_minimal's advantages and loss on the same batch and weights."""
    model, tokenizer, data = shipped
    assert check_grpo_gradient(grpo_minimal.group_advantages, grpo_minimal.clipped_token_loss,
                               model=model, tokenizer=tokenizer, dataset=data, seed=3)
    assert capsys.readouterr().out.startswith("Correct! One step of GRPO with these two functions")


def population_std(rewards, num_generations):
    groups = rewards.view(-1, num_generations)
    centred = groups - groups.mean(-1, keepdim=True)
    return (centred / (groups.std(-1, keepdim=True, unbiased=False) + 1e-4)).view(-1)


def token_mean(logp, old_logp, advantages, mask, epsilon):  # DAPO's aggregation, not GRPO's
    ratio, a, m = torch.exp(logp - old_logp), advantages[:, None], mask.float()
    per_token = -torch.minimum(ratio * a, ratio.clamp(1 - epsilon, 1 + epsilon) * a)
    return (per_token * m).sum() / m.sum()


def ascent(logp, old_logp, advantages, mask, epsilon):  # the sign lost
    return -grpo_minimal.clipped_token_loss(logp, old_logp, advantages, mask, epsilon)


def unmasked(logp, old_logp, advantages, mask, epsilon):  # padding counted
    return grpo_minimal.clipped_token_loss(logp, old_logp, advantages, torch.ones_like(mask),
                                           epsilon)


def detached(logp, old_logp, advantages, mask, epsilon):
    return grpo_minimal.clipped_token_loss(logp.detach(), old_logp, advantages, mask, epsilon)


def stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("advantage_fn, loss_fn, says", [
    (population_std, grpo_minimal.clipped_token_loss, "your advantages differ"),
    (grpo_minimal.group_advantages, token_mean, "the gradient of"),
    (grpo_minimal.group_advantages, ascent, "the gradient of"),
    (grpo_minimal.group_advantages, unmasked, "the gradient of"),
    (grpo_minimal.group_advantages, detached, "with a gradient"),
    (stub, grpo_minimal.clipped_token_loss, "Not implemented yet"),
    (grpo_minimal.group_advantages, stub, "Not implemented yet"),
])
def test_the_gradient_check_rejects_a_wrong_piece(shipped, capsys, advantage_fn, loss_fn, says):
    model, tokenizer, data = shipped
    assert not check_grpo_gradient(advantage_fn, loss_fn, model=model, tokenizer=tokenizer,
                                   dataset=data)
    out = capsys.readouterr().out
    assert says in out and "Correct" not in out


def test_the_gradient_check_names_a_learner_error(shipped):
    model, tokenizer, data = shipped
    with pytest.raises(LearnerError, match="`<lambda>` raised"):
        check_grpo_gradient(lambda r, g: r.view(g, -1, 3), grpo_minimal.clipped_token_loss,
                            model=model, tokenizer=tokenizer, dataset=data)


def test_train_runs_the_pieces_it_is_given(shipped):
    model, tokenizer, data = shipped
    calls = []

    def advantage_fn(rewards, num_generations):
        calls.append("advantage")
        return grpo_minimal.group_advantages(rewards, num_generations)

    def loss_fn(*args):
        calls.append("loss")
        return grpo_minimal.clipped_token_loss(*args)

    cfg = grpo_minimal.MinimalConfig(prompts_per_step=2, num_generations=2, max_new_tokens=8,
                                     steps=2)
    log = grpo_minimal.train(copy.deepcopy(model), tokenizer, data, cfg,
                             advantage_fn=advantage_fn, loss_fn=loss_fn)
    assert calls == ["advantage", "loss"] * 2
    assert [row["step"] for row in log] == [1, 2]
    assert all(0 <= row["accuracy"] <= min(1, row["reward"]) for row in log)


def test_minimal_sampling_and_scoring_follow_the_lab(shipped):
    model, tokenizer, data = shipped
    cfg = grpo_minimal.MinimalConfig(num_generations=3, max_new_tokens=40)
    rows = data[:2]
    torch.manual_seed(0)
    prompt_ids, _, completion_ids, completion_mask, texts = grpo_minimal.sample(
        model, tokenizer, rows["prompt"], cfg)
    assert prompt_ids.shape[0] == completion_ids.shape[0] == len(texts) == 6
    lengths = completion_mask.sum(-1)
    for i, text in enumerate(texts):  # the mask stops at end-of-turn, which it includes
        ended = (completion_ids[i] == tokenizer.eos_token_id).any()
        if ended:
            assert completion_ids[i, lengths[i] - 1] == tokenizer.eos_token_id
        assert "<|im_end|>" not in text
    rewards, accuracy = grpo_minimal.score(rows, texts, 3)
    assert rewards.shape == accuracy.shape == (6,) and ((rewards >= 0) & (rewards <= 2)).all()
    assert set(accuracy.tolist()) <= {0.0, 1.0} and (rewards - accuracy <= 1).all()
    # the format tags survive decoding, so a well-formed answer earns its format reward
    assert any(t.startswith("<think>") for t in texts)


def notebook_loss_inputs(generator):  # notebook 02, exercise 4's input maker
    batch = random_policy_batch(generator, keys=("logp", "old_logp", "advantages", "mask"))
    return {**batch, "advantages": batch["advantages"].squeeze(1), "epsilon": 0.2}


def unclipped(logp, old_logp, advantages, mask, epsilon):
    per_token = -torch.exp(logp - old_logp) * advantages[:, None]
    m = mask.float()
    return ((per_token * m).sum(-1) / m.sum(-1)).mean()


def test_the_loss_exercise_sees_the_clip_the_gradient_check_cannot(capsys):
    """On-policy the ratio is 1, so the Trainer comparison passes a loss without its clip; the
    exercise's off-policy inputs catch it, and pass the reference solution."""
    import importlib
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "notebooks"))
    solutions = importlib.import_module("solutions.02_grpo")
    assert check_function(solutions.clipped_token_loss, grpo_minimal.clipped_token_loss,
                          notebook_loss_inputs)
    assert not check_function(unclipped, grpo_minimal.clipped_token_loss, notebook_loss_inputs)
    assert "Not quite" in capsys.readouterr().out
