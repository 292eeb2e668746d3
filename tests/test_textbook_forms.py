"""The "Textbook form" each hardened function shows first in its docstring is runnable code that
computes what the function computes, on clean inputs (no NaN, no padding tricks)."""

import inspect
import re
import textwrap

import pytest
import torch

from labkit import advantages, logprobs, losses
from labkit.tricks import filters

G = 4


def textbook(fn) -> str:
    """The indented code block that follows 'Textbook form ...::' in fn's docstring."""
    doc = inspect.getdoc(fn)
    match = re.search(r"Textbook form[^\n]*::\n\n((?:    .*\n|\n)+)", doc + "\n")
    assert match, f"{fn.__name__} has no textbook form"
    return textwrap.dedent(match.group(1))


def run(fn, result: str | None = None, **names):
    """Run fn's textbook block with ``names`` bound; its return value, or the variable
    ``result`` it defines."""
    body = textwrap.indent(textbook(fn), "    ")
    tail = f"    return {result}\n" if result else ""
    scope = {"torch": torch, **names}
    exec(f"def _block():\n{body}{tail}", scope)  # noqa: S102 - our own docstrings
    return scope["_block"]()


@pytest.fixture
def data():
    g = torch.Generator().manual_seed(0)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.2, 0.9, 0.0], dtype=torch.float64)
    lengths = torch.tensor([10, 20, 30, 40, 5, 15, 25, 35])
    logp = -torch.rand(3, 5, dtype=torch.float64, generator=g) * 2
    old = logp + 0.3 * torch.randn(3, 5, dtype=torch.float64, generator=g)
    ref = logp + 0.3 * torch.randn(3, 5, dtype=torch.float64, generator=g)
    return rewards, lengths, logp, old, ref, g


def test_group_rloo_opo_batch(data):
    rewards, lengths, *_ = data
    torch.testing.assert_close(run(advantages.group_advantages, rewards=rewards,
                                   num_generations=G, eps=1e-4),
                               advantages.group_advantages(rewards, G))
    torch.testing.assert_close(run(advantages.rloo_advantages, rewards=rewards, G=G),
                               advantages.rloo_advantages(rewards, G))
    torch.testing.assert_close(run(advantages.opo_advantages, rewards=rewards, lengths=lengths,
                                   G=G), advantages.opo_advantages(rewards, lengths, G))
    torch.testing.assert_close(run(advantages.batch_normalize, advantages=rewards, eps=1e-4),
                               advantages.batch_normalize(rewards))


def test_gae(data):
    *_, g = data
    rewards = torch.rand(6, dtype=torch.float64, generator=g)
    values = torch.rand(6, dtype=torch.float64, generator=g)
    expected, expected_returns = advantages.gae(rewards[None], values[None],
                                                torch.ones(1, 6), gamma=0.9, lam=0.8)
    got = run(advantages.gae, result="(A, returns)", rewards=rewards, values=values, T=6,
              gamma=0.9, lam=0.8)
    torch.testing.assert_close(got[0].to(torch.float64), expected[0])
    torch.testing.assert_close(got[1].to(torch.float64), expected_returns[0])


def test_surrogate_aggregate_kl_value(data):
    _, _, logp, old, ref, g = data
    a = torch.randn(3, 1, dtype=torch.float64, generator=g)
    log_ratio = logp - old
    torch.testing.assert_close(
        run(losses.clipped_surrogate, log_ratio=log_ratio, A=a, eps_low=0.2, eps_high=0.28),
        losses.clipped_surrogate(log_ratio, a, 0.2, 0.28))
    mask = torch.ones(3, 5, dtype=torch.bool)
    per_token = torch.randn(3, 5, dtype=torch.float64, generator=g)
    torch.testing.assert_close(run(losses.aggregate, per_token_loss=per_token, mask=mask),
                               losses.aggregate(per_token, mask, "sequence_mean"))
    for kind in ("k1", "k2", "k3"):
        torch.testing.assert_close(run(losses.kl_estimate, logp=logp, ref_logp=ref, kind=kind),
                                   losses.kl_estimate(logp, ref, kind))
    values, returns = torch.rand(3, 5, dtype=torch.float64, generator=g), torch.rand(3, 5)
    old_values = values + 0.3 * torch.randn(3, 5, dtype=torch.float64, generator=g)
    returns = returns.to(torch.float64)
    torch.testing.assert_close(
        run(losses.value_loss, values=values, old_values=old_values, returns=returns,
            mask=mask, eps_v=0.2),
        losses.value_loss(values, old_values, returns, mask, 0.2)[0])


def test_policy_loss(data):
    _, _, logp, old, ref, g = data
    a = torch.randn(3, dtype=torch.float64, generator=g)
    mask = torch.ones(3, 5, dtype=torch.float64)
    expected, _ = losses.policy_loss(logp, old, a, mask, loss_type="grpo", epsilon=0.2,
                                     epsilon_high=0.28, beta=0.04, ref_logp=ref)
    got = run(losses.policy_loss, result="loss", logp=logp, old_logp=old, advantages=a,
              mask=mask, epsilon=0.2, epsilon_high=0.28, beta=0.04, ref_logp=ref)
    torch.testing.assert_close(got, expected)


def test_logprobs_and_gfpo(data):
    *_, g = data
    logits = torch.randn(2, 3, 11, generator=g)
    tokens = torch.randint(0, 11, (2, 3), generator=g)
    logp, entropy = logprobs.logprobs_and_entropy(logits, tokens, temperature=0.7)
    got = run(logprobs.logprobs_and_entropy, result="(logp, entropy)", logits=logits,
              tokens=tokens, temperature=0.7)
    torch.testing.assert_close(got[0], logp)
    torch.testing.assert_close(got[1], entropy)
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.5], dtype=torch.float64)
    keep = torch.tensor([True, True, False, True])
    expected = filters.gfpo_advantages(rewards, keep, 4, eps=1e-4)
    got = run(filters.gfpo_advantages, result="A", rewards=rewards, keep=keep, eps=1e-4)
    torch.testing.assert_close(got, expected)
