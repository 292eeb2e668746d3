"""KL estimators k1/k2/k3 (Schulman 2020; placement per arXiv 2512.21852): values, and the exact expected gradient of every
placement (in the loss / in the reward) on a categorical policy, by enumeration, in float64."""

import pytest
import torch

from labkit.advantages import gae, kl_penalized_rewards
from labkit.losses import kl_estimate, policy_loss

D = torch.float64


@pytest.fixture
def categorical():
    g = torch.Generator().manual_seed(0)
    theta = torch.randn(5, dtype=D, generator=g).requires_grad_()
    log_ref = torch.log_softmax(torch.randn(5, dtype=D, generator=g) * 1.5, 0)
    return theta, log_ref


def exact_kl_gradients(theta, log_ref):
    logq = torch.log_softmax(theta, 0)
    reverse = (logq.exp() * (logq - log_ref)).sum()  # KL(q || ref), the regulariser we want
    forward = (log_ref.exp() * (log_ref - logq)).sum()  # KL(ref || q)
    return (
        torch.autograd.grad(reverse, theta, retain_graph=True)[0],
        torch.autograd.grad(forward, theta)[0],
    )


def expected_grad(theta, log_ref, per_sample):
    """E_{x~q}[grad of per_sample(logq_x, log_ref_x)], samples held fixed: sum_x sg(q_x) * grad."""
    logq = torch.log_softmax(theta, 0)
    (grad,) = torch.autograd.grad((logq.exp().detach() * per_sample(logq, log_ref)).sum(), theta)
    return grad


def test_values_k3_and_k2_never_negative_k1_sometimes():
    g = torch.Generator().manual_seed(1)
    logp, ref = (
        torch.randn(10_000, dtype=D, generator=g) * 5,
        torch.randn(10_000, dtype=D, generator=g) * 5,
    )
    assert (kl_estimate(logp, ref, "k3") >= 0).all()
    assert (kl_estimate(logp, ref, "k2") >= 0).all()
    assert (kl_estimate(logp, ref, "k1") < 0).any()
    torch.testing.assert_close(kl_estimate(logp, ref, "k1"), logp - ref)
    torch.testing.assert_close(kl_estimate(logp, ref, "k2"), 0.5 * (logp - ref) ** 2)


def test_k3_does_not_overflow_for_extreme_log_ratios():
    k3 = kl_estimate(torch.tensor([-1000.0, 0.0]), torch.tensor([0.0, -1000.0]), "k3")
    assert torch.isfinite(k3).all() and (k3 >= 0).all()
    with pytest.raises(ValueError, match="kind"):
        kl_estimate(torch.zeros(2), torch.zeros(2), "k4")


@pytest.mark.parametrize("kind, grad_at_equality", [("k1", 1.0), ("k2", 0.0), ("k3", 0.0)])
def test_value_and_gradient_when_policy_equals_reference(kind, grad_at_equality):
    """k2, k3: value and gradient vanish; k1's per-sample gradient is 1 (only its mean is 0)."""
    logp = torch.tensor([-0.3, -2.0], dtype=D, requires_grad=True)
    k = kl_estimate(logp, logp.detach(), kind)
    assert k.eq(0).all()
    (grad,) = torch.autograd.grad(k.sum(), logp)
    assert grad.eq(grad_at_equality).all()


def test_k1_and_k3_are_unbiased_values_k2_is_not(categorical):
    theta, log_ref = categorical
    logq = torch.log_softmax(theta, 0).detach()
    true_kl = (logq.exp() * (logq - log_ref)).sum()
    expect = {
        kind: (logq.exp() * kl_estimate(logq, log_ref, kind)).sum() for kind in ("k1", "k2", "k3")
    }
    torch.testing.assert_close(expect["k1"], true_kl)
    torch.testing.assert_close(expect["k3"], true_kl)
    assert not torch.isclose(expect["k2"], true_kl)


def test_expected_gradient_of_each_placement(categorical):
    theta, log_ref = categorical
    reverse, forward = exact_kl_gradients(theta, log_ref)
    assert not torch.allclose(reverse, forward)

    def as_loss(kind):
        return expected_grad(theta, log_ref, lambda lq, lr: kl_estimate(lq, lr, kind))

    def in_reward(kind):  # detached estimate times the score function
        return expected_grad(theta, log_ref, lambda lq, lr: kl_estimate(lq, lr, kind).detach() * lq)

    torch.testing.assert_close(
        as_loss("k1"), torch.zeros(5, dtype=D), rtol=0, atol=1e-15
    )  # no regularisation
    torch.testing.assert_close(as_loss("k2"), reverse)  # unbiased per step
    torch.testing.assert_close(
        as_loss("k3"), forward
    )  # GRPO's choice: gradient of the *forward* KL
    torch.testing.assert_close(in_reward("k1"), reverse)  # the recommended placement
    torch.testing.assert_close(in_reward("k3"), reverse - forward)


@pytest.mark.parametrize("bias_correction, target", [(False, "forward"), (True, "reverse")])
def test_policy_loss_kl_term_and_trl_bias_correction(categorical, bias_correction, target):
    """policy_loss's beta * k3 term: forward-KL gradient; times the IS ratio (use_bias_correction_kl),
    the exact reverse-KL gradient even on-policy (E_q[grad(k3 * q / sg q)] = grad E_q[k3])."""
    theta, log_ref = categorical
    reverse, forward = exact_kl_gradients(theta, log_ref)

    def per_sample(logq, ref):
        losses = [
            policy_loss(
                logq[x].view(1, 1),
                None,
                torch.zeros(1, dtype=D),
                torch.ones(1, 1),
                loss_type="sequence_sum",
                beta=1.0,
                ref_logp=ref[x].view(1, 1),
                use_bias_correction_kl=bias_correction,
            )[0]
            for x in range(5)
        ]
        return torch.stack(losses)

    expected = {"forward": forward, "reverse": reverse}[target]
    torch.testing.assert_close(expected_grad(theta, log_ref, per_sample), expected)


def test_grpo_kl_gradient_coefficient():
    logp = torch.tensor([-1.0, -2.5, -0.2], dtype=D, requires_grad=True)
    ref = torch.tensor([-1.5, -0.5, -0.2], dtype=D)
    (grad,) = torch.autograd.grad(0.04 * kl_estimate(logp, ref, "k3").sum(), logp)
    torch.testing.assert_close(
        -grad, 0.04 * (torch.exp(ref - logp.detach()) - 1)
    )  # beta (ref/pi - 1)


def test_sequence_kl_k1_in_reward_is_exact_tokenwise_k2_loss_is_not():
    """Two-token sequences over a 3-token vocabulary, second token conditioned on the first."""
    g = torch.Generator().manual_seed(2)
    theta1 = torch.randn(3, dtype=D, generator=g).requires_grad_()
    theta2 = torch.randn(3, 3, dtype=D, generator=g).requires_grad_()
    ref1 = torch.log_softmax(torch.randn(3, dtype=D, generator=g), 0)
    ref2 = torch.log_softmax(torch.randn(3, 3, dtype=D, generator=g), -1)
    seqs = torch.cartesian_prod(torch.arange(3), torch.arange(3))  # (9, 2)

    def token_logps():
        lq1, lq2 = torch.log_softmax(theta1, 0), torch.log_softmax(theta2, -1)
        logq = torch.stack([lq1[seqs[:, 0]], lq2[seqs[:, 0], seqs[:, 1]]], 1)  # (9, 2)
        log_ref = torch.stack([ref1[seqs[:, 0]], ref2[seqs[:, 0], seqs[:, 1]]], 1)
        return logq, log_ref

    logq, log_ref = token_logps()
    prob = logq.sum(1).exp()
    exact = torch.autograd.grad((prob * (logq - log_ref).sum(1)).sum(), (theta1, theta2))
    mask = torch.ones(9, 2)

    def grad_of(objective):
        return torch.autograd.grad(objective, (theta1, theta2))

    k1 = kl_estimate(logq.detach(), log_ref, "k1")
    # whole-sequence penalty R = -sum_t k1 (RLOO style); ascent direction of E[R] is -grad KL
    penalty = kl_penalized_rewards(torch.zeros(9, dtype=D), k1, 1.0, mask)
    logq, _ = token_logps()
    whole = grad_of((prob.detach() * penalty * logq.sum(1)).sum())
    # per-token rewards -k1_t with undiscounted reward-to-go (PPO/GAE with V = 0, gamma = lam = 1)
    to_go, _ = gae(-k1, torch.zeros(9, 2, dtype=D), mask)
    logq, _ = token_logps()
    per_token = grad_of((prob.detach()[:, None] * to_go * logq).sum())
    # k2 as a per-token loss only sees the KL of the current state
    logq, log_ref = token_logps()
    k2_loss = grad_of((prob.detach()[:, None] * kl_estimate(logq, log_ref, "k2")).sum())
    for got, want in zip(whole, exact):
        torch.testing.assert_close(-got, want)
    for got, want in zip(per_token, exact):
        torch.testing.assert_close(-got, want)
    assert not all(torch.allclose(a, b) for a, b in zip(k2_loss, exact))


@pytest.mark.parametrize(
    "mu, k1_std, k2_bias, k2_std, k3_std",
    [(0.1, 20.0, 0.002, 1.42, 1.42), (1.0, 2.0, 0.25, 1.73, 1.70)],
)
def test_schulman_bias_and_std_table(mu, k1_std, k2_bias, k2_std, k3_std):
    """q = N(0, 1), p = N(mu, 1): bias/true and std/true of each estimator (blog table)."""
    x = torch.randn(400_000, dtype=D, generator=torch.Generator().manual_seed(3))
    logq, logp = -0.5 * x**2, -0.5 * (x - mu) ** 2  # common constants cancel
    true = mu**2 / 2
    stats = {k: kl_estimate(logq, logp, k) for k in ("k1", "k2", "k3")}
    bias = {k: float(v.mean() / true - 1) for k, v in stats.items()}
    std = {k: float(v.std() / true) for k, v in stats.items()}
    # unbiased: within 4 standard errors of 0
    assert (
        abs(bias["k1"]) < 4 * k1_std / len(x) ** 0.5
        and abs(bias["k3"]) < 4 * k3_std / len(x) ** 0.5
    )
    assert bias["k2"] == pytest.approx(k2_bias, abs=0.01)
    assert std["k1"] == pytest.approx(k1_std, rel=0.03)
    assert std["k2"] == pytest.approx(k2_std, rel=0.03)
    assert std["k3"] == pytest.approx(k3_std, rel=0.03)
