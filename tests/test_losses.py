"""labkit.losses: surrogates, ratios, aggregation and value loss, checked through autograd.

Every gradient statement the docstrings make (the four sign cases, dual-clip, GSPO, CISPO, SAPO,
the aggregations) is checked on the gradient itself, in
float64. Boundary ratios (exactly 1 +- eps) are avoided: ties there are implementation-defined.
"""

import math

import pytest
import torch

from labkit.losses import (
    IMPORTANCE_SAMPLING_LEVELS,
    LOCAL_AGGREGATIONS,
    LOSS_REGISTRY,
    aggregate,
    cispo_surrogate,
    clipped_loss_types,
    clipped_surrogate,
    entropy_bonus,
    gspo_token_log_ratio,
    no_clip_surrogate,
    policy_loss,
    sapo_surrogate,
    sequence_log_ratio,
    token_log_ratio,
    value_loss,
)

D = torch.float64


def t(*values):
    return torch.tensor(values, dtype=D)


def surrogate_grad(fn, ratio, adv):
    """Per-token loss and its derivative w.r.t. log pi (= w.r.t. the log-ratio) for 1-token rows."""
    log_ratio = torch.log(t(*ratio)).requires_grad_()
    loss = fn(log_ratio, t(*adv))
    (grad,) = torch.autograd.grad(loss.sum(), log_ratio)
    return loss.detach(), grad


def policy_grad(logp, old_logp, adv, mask, **kwargs):
    logp = logp.clone().requires_grad_()
    loss, metrics = policy_loss(logp, old_logp, adv, mask, **kwargs)
    (grad,) = torch.autograd.grad(loss, logp)
    return loss.detach(), grad, metrics


@pytest.fixture
def batch():
    g = torch.Generator().manual_seed(0)
    mask = torch.tensor(
        [[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]]
    )
    logp = -torch.rand(4, 6, dtype=D, generator=g) * 3
    old = logp + torch.randn(4, 6, dtype=D, generator=g) * 0.3  # off-policy: ratios spread around 1
    ref = logp + torch.randn(4, 6, dtype=D, generator=g) * 0.3
    adv = t(1.0, -0.5, 0.7, -1.2)
    entropy = torch.rand(4, 6, dtype=D, generator=g) * 2
    return logp, old, ref, adv, mask, entropy


# ---------------------------------------------------------------- PPO clip: the four sign cases


def test_four_sign_cases_and_where_the_gradient_vanishes():
    ratios = (1.5, 0.5, 0.5, 1.5, 1.1, 0.9, 1.7, 0.3)
    advs = (1.0, 1.0, -1.0, -1.0, 1.0, -1.0, 0.0, 0.0)
    loss, grad = surrogate_grad(lambda lr, a: clipped_surrogate(lr, a, 0.2, 0.28), ratios, advs)
    expected = [0.0, -0.5, 0.0, 1.5, -1.1, 0.9, 0.0, 0.0]  # 0 where clipped, else -A r
    torch.testing.assert_close(grad, t(*expected))
    torch.testing.assert_close(loss[[0, 2]], t(-1.28, 0.8))  # the clipped constants


def test_the_composed_policy_loss_has_the_same_sign_cases():
    ratios = t(1.5, 0.5, 0.5, 1.5, 1.1, 0.9)
    advs = t(1.0, 1.0, -1.0, -1.0, 1.0, -1.0)
    logp = torch.full((6, 1), -1.0, dtype=D)
    old = logp - torch.log(ratios)[:, None]
    _, grad, _ = policy_grad(
        logp, old, advs, torch.ones(6, 1), loss_type="sequence_sum", epsilon=0.2, epsilon_high=0.28
    )
    torch.testing.assert_close(grad[:, 0] * 6, t(0.0, -0.5, 0.0, 1.5, -1.1, 0.9))


def test_clip_higher_moves_only_the_upper_edge():
    loss_fn = lambda lr, a: clipped_surrogate(lr, a, 0.2, 0.28)
    _, grad = surrogate_grad(loss_fn, (1.27, 1.29, 0.81, 0.79), (1.0, 1.0, -1.0, -1.0))
    assert grad[0] != 0 and grad[1] == 0 and grad[2] != 0 and grad[3] == 0


def test_ratio_one_is_reinforce_weighted_by_the_advantage(batch):
    logp, _, _, adv, mask, _ = batch
    _, grad, metrics = policy_grad(logp, None, adv, mask, loss_type="sequence_sum")
    torch.testing.assert_close(grad, -adv[:, None] * mask / 4)
    assert metrics["clip_region"] == 0 and metrics["ratio_max"] == 1


# ---------------------------------------------------------------- dual-clip and delta


def test_dual_clip_caps_the_loss_for_negative_advantages():
    ratios, advs = (4.0, 2.0, 4.0, 0.5), (-1.0, -1.0, 1.0, -1.0)
    loss, grad = surrogate_grad(
        lambda lr, a: clipped_surrogate(lr, a, 0.2, dual_clip=3.0), ratios, advs
    )
    torch.testing.assert_close(loss, t(3.0, 2.0, -1.2, 0.8))
    torch.testing.assert_close(
        grad, t(0.0, 2.0, 0.0, 0.0)
    )  # zero for A<0, r>c; active for 1+eps<r<c


def test_dual_clip_with_huge_c_is_vanilla_ppo_and_delta_equals_it_for_negative_advantages():
    g = torch.Generator().manual_seed(1)
    ratios = tuple(torch.exp(torch.randn(50, generator=g, dtype=D) * 1.5).tolist())
    advs = tuple(torch.randn(50, generator=g, dtype=D).tolist())
    vanilla = surrogate_grad(lambda lr, a: clipped_surrogate(lr, a, 0.2), ratios, advs)
    huge = surrogate_grad(lambda lr, a: clipped_surrogate(lr, a, 0.2, dual_clip=1e12), ratios, advs)
    torch.testing.assert_close(huge, vanilla)
    dual = surrogate_grad(lambda lr, a: clipped_surrogate(lr, a, 0.2, dual_clip=3.0), ratios, advs)
    delta = surrogate_grad(lambda lr, a: clipped_surrogate(lr, a, 0.2, delta=3.0), ratios, advs)
    torch.testing.assert_close(dual, delta)


def test_delta_caps_the_unclipped_ratio():
    loss, grad = surrogate_grad(
        lambda lr, a: clipped_surrogate(lr, a, 0.2, delta=2.0), (3.0, 1.5), (-1.0, -1.0)
    )
    torch.testing.assert_close(loss, t(2.0, 1.5))
    torch.testing.assert_close(grad, t(0.0, 1.5))


# ---------------------------------------------------------------- aggregation


@pytest.mark.parametrize(
    "loss_type, weight",
    [
        ("grpo", lambda lengths, b, lmax: 1 / (b * lengths)),
        ("sapo", lambda lengths, b, lmax: 1 / (b * lengths)),
        ("bnpo", lambda lengths, b, lmax: 1 / lengths.sum()),
        ("dapo", lambda lengths, b, lmax: 1 / lengths.sum()),
        ("cispo", lambda lengths, b, lmax: 1 / lengths.sum()),
        ("dr_grpo", lambda lengths, b, lmax: 1 / (b * lmax)),
        ("sequence_sum", lambda lengths, b, lmax: 1 / b),
    ],
)
def test_per_token_gradient_weights_of_each_aggregation(batch, loss_type, weight):
    logp, _, _, adv, mask, _ = batch
    lengths = mask.sum(-1).to(D)
    kwargs = {"loss_type": loss_type, "max_completion_length": 10}
    if loss_type == "cispo":
        kwargs["epsilon_high"] = 5.0
    _, grad, _ = policy_grad(logp, None, adv, mask, **kwargs)
    w = weight(lengths, 4, 10)
    w = w[:, None] if isinstance(w, torch.Tensor) and w.dim() == 1 else w
    torch.testing.assert_close(grad, -adv[:, None] * w * mask)


def test_grpo_gives_a_3x_longer_wrong_answer_3x_less_penalty_per_token_dapo_does_not():
    mask = torch.tensor([[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
    logp, adv = torch.full((2, 6), -1.0, dtype=D), t(-1.0, -1.0)
    _, grpo, _ = policy_grad(logp, None, adv, mask, loss_type="grpo")
    _, dapo, _ = policy_grad(logp, None, adv, mask, loss_type="dapo")
    _, dr, _ = policy_grad(logp, None, adv, mask, loss_type="dr_grpo", max_completion_length=6)
    assert grpo[0, 0] == 3 * grpo[1, 0]
    assert dapo[0, 0] == dapo[1, 0] and dr[0, 0] == dr[1, 0]


#: Every registered loss type whose aggregation adds up over micro-batches (all but bnpo's local
#: token mean, tested on its own below): a new loss joins these tests by registering.
ADDITIVE_LOSSES = [name for name, loss in LOSS_REGISTRY.items()
                   if loss.aggregation not in LOCAL_AGGREGATIONS]


@pytest.mark.parametrize("loss_type", ADDITIVE_LOSSES)
def test_micro_batch_losses_add_up_to_the_full_batch_loss(batch, loss_type):
    logp, old, ref, adv, mask, _ = batch
    common = {
        "loss_type": loss_type,
        "max_completion_length": 8,
        "beta": 0.05,
        "epsilon_high": 0.28,  # clip-higher for the clipped family; CISPO's cap on the weight
    }
    full_loss, full_grad, _ = policy_grad(logp, old, adv, mask, ref_logp=ref, **common)
    parts = []
    for rows in (slice(0, 2), slice(2, 4)):
        parts.append(
            policy_grad(
                logp[rows],
                old[rows],
                adv[rows],
                mask[rows],
                ref_logp=ref[rows],
                num_items_in_batch=mask.sum(),
                num_sequences_in_batch=4,
                **common,
            )
        )
    torch.testing.assert_close(parts[0][0] + parts[1][0], full_loss)
    torch.testing.assert_close(torch.cat([parts[0][1], parts[1][1]]), full_grad)


def test_bnpo_averages_the_local_token_means(batch):
    logp, old, _, adv, mask, _ = batch
    locals_ = [
        policy_loss(logp[r], old[r], adv[r], mask[r], loss_type="bnpo")[0]
        for r in (slice(0, 2), slice(2, 4))
    ]
    parts = [
        policy_loss(logp[r], old[r], adv[r], mask[r], loss_type="bnpo", num_sequences_in_batch=4)[0]
        for r in (slice(0, 2), slice(2, 4))
    ]
    torch.testing.assert_close(parts[0] + parts[1], (locals_[0] + locals_[1]) / 2)


@pytest.mark.parametrize("loss_type", list(LOSS_REGISTRY))
@pytest.mark.parametrize("level", IMPORTANCE_SAMPLING_LEVELS)
def test_padding_with_garbage_changes_nothing(batch, loss_type, level):
    logp, old, ref, adv, mask, entropy = batch
    kwargs = {
        "loss_type": loss_type,
        "importance_sampling_level": level,
        "max_completion_length": 8,
        "beta": 0.04,
        "epsilon_high": 5.0,
        "entropy_coef": 0.01,
    }
    try:
        loss, grad, _ = policy_grad(logp, old, adv, mask, ref_logp=ref, entropy=entropy, **kwargs)
    except ValueError as refused:  # a loss that does not take this ratio level says so
        assert "importance_sampling_level" in str(refused)
        return

    def pad(x, value):
        return torch.cat([x, torch.full((4, 3), value, dtype=x.dtype)], 1)

    padded_mask = torch.cat([mask, torch.zeros(4, 3, dtype=mask.dtype)], 1)
    loss_p, grad_p, _ = policy_grad(
        pad(logp, float("nan")),
        pad(old, float("inf")),
        adv,
        padded_mask,
        ref_logp=pad(ref, -float("inf")),
        entropy=pad(entropy, float("nan")),
        **kwargs,
    )
    torch.testing.assert_close(loss_p, loss)
    torch.testing.assert_close(grad_p[:, :6], grad)
    assert grad_p[:, 6:].eq(0).all()


def test_empty_rows_and_an_empty_mask_give_finite_losses(batch):
    logp, old, ref, adv, mask, _ = batch
    mask = mask.clone()
    mask[1] = 0
    for loss_type in clipped_loss_types():
        loss, grad, metrics = policy_grad(
            logp,
            old,
            adv,
            mask,
            loss_type=loss_type,
            importance_sampling_level="sequence",
            max_completion_length=6,
        )
        assert torch.isfinite(loss) and grad[1].eq(0).all()
        assert all(torch.isfinite(v) for v in metrics.values())
        empty, grad0, metrics0 = policy_grad(
            logp,
            old,
            adv,
            torch.zeros_like(mask),
            loss_type=loss_type,
            beta=0.1,
            ref_logp=ref,
            max_completion_length=6,
        )
        assert (
            empty == 0 and grad0.eq(0).all() and all(torch.isfinite(v) for v in metrics0.values())
        )


def test_aggregate_validates_its_arguments():
    mask = torch.ones(2, 3)
    with pytest.raises(ValueError, match="aggregation must be one of .* got 'grpo'"):
        aggregate(torch.zeros(2, 3), mask, "grpo")  # a loss type, not an aggregation
    with pytest.raises(ValueError, match="max_completion_length"):
        aggregate(torch.zeros(2, 3), mask, "fixed_length")
    with pytest.raises(ValueError, match="per_token_loss"):
        aggregate(torch.zeros(2, 2), mask, "sequence_mean")
    with pytest.raises(ValueError, match="num_sequences_in_batch"):
        aggregate(torch.zeros(2, 3), mask, "sequence_mean", num_sequences_in_batch=1)


# ---------------------------------------------------------------- GSPO


def test_sequence_ratio_is_the_geometric_mean_of_token_ratios(batch):
    logp, old, _, _, mask, _ = batch
    s = torch.exp(sequence_log_ratio(logp, old, mask))
    ratios = torch.where(mask.bool(), torch.exp(logp - old), 1.0)
    torch.testing.assert_close(s, ratios.prod(-1) ** (1 / mask.sum(-1)))


def test_one_huge_token_ratio_moves_the_sequence_log_ratio_by_its_log_over_length(batch):
    logp, old, _, _, mask, _ = batch
    bumped = logp.clone()
    bumped[2, 3] += 5.0
    change = sequence_log_ratio(bumped, old, mask) - sequence_log_ratio(logp, old, mask)
    torch.testing.assert_close(change, t(0, 0, 5.0 / 6, 0))


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_gspo_token_equals_gspo_with_shared_advantages(batch, loss_type):
    logp, old, _, _, mask, _ = batch
    old = logp + (old - logp) * 0.05  # sequence ratios near 1, beyond GSPO's tiny clip range
    log_s = sequence_log_ratio(logp, old, mask)
    # rows 0, 1 moved the way their advantage wants (clipped), rows 2, 3 the other way (not clipped)
    adv = torch.sign(log_s) * t(1.0, 0.5, -0.7, -1.2).abs() * t(1, 1, -1, -1)
    kwargs = {"loss_type": loss_type, "epsilon": 3e-4, "epsilon_high": 4e-4}
    seq = policy_grad(logp, old, adv, mask, importance_sampling_level="sequence", **kwargs)
    tok = policy_grad(logp, old, adv, mask, importance_sampling_level="sequence_token", **kwargs)
    assert (log_s.abs() > 4e-4).all() and 0 < seq[2]["clip_region"] < 1
    torch.testing.assert_close(tok[0], seq[0])
    torch.testing.assert_close(tok[1], seq[1])
    torch.testing.assert_close(tok[2]["clip_region"], seq[2]["clip_region"])
    torch.testing.assert_close(gspo_token_log_ratio(logp, old, mask), log_s[:, None] * mask)


def test_gspo_per_token_gradient_is_s_times_a_over_length_and_a_clipped_sequence_is_silenced(batch):
    _, _, _, _, mask, _ = batch
    logp = torch.full((4, 6), -1.0, dtype=D)
    s, adv = t(1.5, 1.1, 0.5, 0.5), t(1.0, 1.0, -1.0, 1.0)  # rows 0 and 2 leave the band "usefully"
    old = logp - torch.log(s)[:, None]
    _, grad, metrics = policy_grad(
        logp, old, adv, mask, loss_type="grpo", importance_sampling_level="sequence"
    )
    lengths = mask.sum(-1).to(D)
    unclipped = t(0, 1, 0, 1)
    torch.testing.assert_close(grad, -(unclipped * s * adv / (4 * lengths))[:, None] * mask)
    clipped_tokens = (mask[0].sum() + mask[2].sum()) / mask.sum()
    torch.testing.assert_close(metrics["clip_region"], clipped_tokens.to(D))


# ---------------------------------------------------------------- CISPO, SAPO, no clip


def test_cispo_keeps_gradient_beyond_the_cap():
    log_ratio = torch.log(t(1.0, 3.0, 3.0, 0.2))
    adv = t(1.0, 1.0, 0.0, -1.0)
    logp = t(-1.0, -1.0, -1.0, -1.0).requires_grad_()
    (grad,) = torch.autograd.grad(
        cispo_surrogate(logp, log_ratio, adv, max_weight=1.28).sum(), logp
    )
    torch.testing.assert_close(grad, t(-1.0, -1.28, 0.0, 0.2))  # PPO would give 0 at r = 3
    _, ppo = surrogate_grad(lambda lr, a: clipped_surrogate(lr, a, 0.2, 0.28), (3.0,), (1.0,))
    assert ppo.eq(0).all()
    with pytest.raises(ValueError, match="epsilon_high"):
        policy_loss(logp[None], None, adv[:1], torch.ones(1, 4), loss_type="cispo")


def test_sapo_gate_value_and_gradient():
    loss, grad = surrogate_grad(sapo_surrogate, (1.0, 1.0, 8.0), (1.0, -1.0, 1.0))
    torch.testing.assert_close(grad[:2], t(-1.0, 1.0))  # REINFORCE at r = 1
    torch.testing.assert_close(loss[:2], t(-2.0, 2.0 / 1.05))  # gate 2 / tau at r = 1
    sig = torch.sigmoid(t(7.0))
    torch.testing.assert_close(grad[2], (-8.0 * 4 * sig * (1 - sig))[0])
    assert 0 < -grad[2] < 0.05


def test_no_clip_equals_infinite_epsilons(batch):
    logp, old, _, adv, mask, _ = batch
    lr = token_log_ratio(logp, old, mask)
    torch.testing.assert_close(
        no_clip_surrogate(lr, adv[:, None]), clipped_surrogate(lr, adv[:, None], math.inf, math.inf)
    )
    _, grad, metrics = policy_grad(logp, old, adv, mask, epsilon=math.inf)
    ratio = torch.exp(logp - old)
    torch.testing.assert_close(grad, -adv[:, None] * ratio * mask / mask.sum())
    assert metrics["clip_region"] == 0


# ---------------------------------------------------------------- value loss, entropy


@pytest.mark.parametrize(
    "value, expected_grad, clipped",
    [
        (0.6, 0.0, 1.0),  # left the band towards the target: clipped branch, no gradient
        (1.0, 0.5, 0.0),  # overshot past the band edge's distance: unclipped, gradient V - R
        (0.1, -0.4, 0.0),  # inside the band
        (-0.5, -1.0, 0.0),  # moved away from the target
    ],
)
def test_value_clipping_regimes(value, expected_grad, clipped):
    v = t(value).view(1, 1).requires_grad_()
    loss, metrics = value_loss(v, t(0.0).view(1, 1), t(0.5).view(1, 1), torch.ones(1, 1), 0.2)
    (grad,) = torch.autograd.grad(loss, v)
    torch.testing.assert_close(grad, t(expected_grad).view(1, 1))
    assert metrics["value_clipfrac"] == clipped


def test_value_loss_ignores_garbage_in_padding():
    v = t(0.3, 0.0).view(1, 2).requires_grad_()
    nan = float("nan")
    loss, metrics = value_loss(
        v, t(0.1, nan).view(1, 2), t(0.5, nan).view(1, 2), torch.tensor([[1, 0]])
    )
    (grad,) = torch.autograd.grad(loss, v)
    assert torch.isfinite(loss) and torch.isfinite(grad).all() and grad[0, 1] == 0
    assert torch.isfinite(metrics["value_clipfrac"])


def test_value_loss_without_clipping_is_half_mse_over_valid_tokens():
    v, r = t(1.0, 2.0, 3.0).view(1, 3), t(0.0, 0.0, 100.0).view(1, 3)
    loss, _ = value_loss(v, v, r, torch.tensor([[1, 1, 0]]), None)
    torch.testing.assert_close(loss, t(0.5 * (1 + 4) / 2)[0])


def test_entropy_bonus_is_minus_coef_times_mean_entropy():
    h = t(1.0, 2.0, 9.0).view(1, 3).requires_grad_()
    bonus = entropy_bonus(h, torch.tensor([[1, 1, 0]]), 0.1)
    torch.testing.assert_close(bonus, t(-0.15)[0])
    (grad,) = torch.autograd.grad(bonus, h)
    torch.testing.assert_close(grad, t(-0.05, -0.05, 0.0).view(1, 3))


# ---------------------------------------------------------------- metrics and bad inputs


def test_metrics_are_detached_and_match_hand_counts(batch):
    logp, old, ref, adv, mask, entropy = batch
    _, _, metrics = policy_grad(
        logp,
        old,
        adv,
        mask,
        beta=0.1,
        ref_logp=ref,
        entropy=entropy,
        epsilon=0.2,
        epsilon_high=0.28,
        dual_clip=2.0,
    )
    m = mask.bool()
    r = torch.exp(logp - old)[m]
    a = adv[:, None].expand(4, 6)[m]
    low, high = ((r < 0.8) & (a < 0)).to(D).mean(), ((r > 1.28) & (a > 0)).to(D).mean()
    assert all(not v.requires_grad and v.dim() == 0 for v in metrics.values())
    torch.testing.assert_close(metrics["clip_low"], low)
    torch.testing.assert_close(metrics["clip_high"], high)
    torch.testing.assert_close(metrics["clip_region"], low + high)
    torch.testing.assert_close(metrics["clip_dual"], ((r > 2) & (a < 0)).to(D).mean())
    torch.testing.assert_close(metrics["kl_old_k1"], (old - logp)[m].mean())
    torch.testing.assert_close(metrics["kl_old"], (r - 1 - torch.log(r)).mean())
    d = (ref - logp)[m]
    torch.testing.assert_close(metrics["kl_ref"], (torch.exp(d) - d - 1).mean())
    torch.testing.assert_close(metrics["entropy"], entropy[m].mean())
    for name, value in (
        ("mean", r.mean()),
        ("min", r.min()),
        ("max", r.max()),
        ("std", r.std(correction=0)),
    ):
        torch.testing.assert_close(metrics[f"ratio_{name}"], value)


def test_huge_log_ratios_are_clamped_not_overflowing(batch):
    logp, _, _, adv, mask, _ = batch
    loss, grad, metrics = policy_grad(logp, logp - 500.0, adv, mask, loss_type="grpo")
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    torch.testing.assert_close(metrics["ratio_max"], torch.exp(t(20.0))[0])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"loss_type": "ppo"}, "loss_type"),
        ({"importance_sampling_level": "seq"}, "importance_sampling_level"),
        ({"kl_estimator": "k4"}, "kl_estimator"),
        ({"epsilon": -0.1}, "epsilon"),
        ({"epsilon_high": -0.1}, "epsilon_high"),
        ({"beta": -1.0}, "beta"),
        ({"delta": 1.0}, "delta"),
        ({"dual_clip": 0.9}, "dual_clip"),
        ({"loss_type": "sapo", "delta": 2.0}, "only apply"),
        ({"beta": 0.1}, "ref_logp"),
        ({"entropy_coef": 0.1}, "entropy"),
        ({"old_logp": torch.zeros(2, 4)}, "old_logp"),
        ({"advantages": torch.zeros(3)}, "advantages"),
        ({"logp": torch.zeros(2, 3, 1)}, r"\(B, T\)"),
        (
            {"logp": torch.tensor([[0.0, float("nan"), 0.0], [0.0, 0.0, 0.0]])},
            "logp has non-finite",
        ),
        (
            {"old_logp": torch.tensor([[0.0, 0.0, -float("inf")], [0.0, 0.0, 0.0]])},
            "old_logp has non-finite",
        ),
        ({"advantages": torch.tensor([float("nan"), 0.0])}, "advantages has non-finite"),
    ],
)
def test_bad_inputs_raise_value_errors_naming_the_argument(kwargs, match):
    args = {
        "logp": torch.zeros(2, 3),
        "old_logp": None,
        "advantages": torch.zeros(2),
        "mask": torch.ones(2, 3),
    }
    args |= kwargs
    with pytest.raises(ValueError, match=match):
        policy_loss(
            args.pop("logp"), args.pop("old_logp"), args.pop("advantages"), args.pop("mask"), **args
        )


def test_nan_at_masked_positions_is_fine():
    logp = torch.tensor([[-1.0, float("nan")], [-2.0, -3.0]])
    loss, _ = policy_loss(logp, None, torch.ones(2), torch.tensor([[1, 0], [1, 1]]))
    assert torch.isfinite(loss)
