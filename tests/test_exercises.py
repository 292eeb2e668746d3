"""The exercise checker: accepts the reference, names what is wrong, never raises for a mistake."""

from functools import partial

import pytest
import torch

from labkit.advantages import group_advantages
from labkit.exercises import (
    LearnerError,
    check_function,
    random_group_rewards,
    random_policy_batch,
)
from labkit.losses import clipped_surrogate, sequence_log_ratio

SURROGATE_INPUTS = partial(random_policy_batch, keys=("log_ratio", "advantages"))


def check(learner, reference=clipped_surrogate, make_inputs=SURROGATE_INPUTS, **kwargs):
    return check_function(learner, reference, make_inputs, **kwargs)


def test_accepts_the_reference_itself(capsys):
    assert check(clipped_surrogate)
    assert capsys.readouterr().out.startswith(
        "Correct! `clipped_surrogate` matches the reference on 5 random inputs (values and "
        "gradients).")


def test_accepts_an_independent_correct_implementation(capsys):
    def my_surrogate(log_ratio, advantages):
        ratio = torch.exp(log_ratio)
        return -torch.min(ratio * advantages, ratio.clamp(0.8, 1.2) * advantages)

    assert check(my_surrogate)
    assert "Correct!" in capsys.readouterr().out


def test_rejects_a_wrong_clip_with_the_worst_value(capsys):
    def clip_only(log_ratio, advantages):  # forgets the min with the unclipped term
        return -torch.exp(log_ratio).clamp(0.8, 1.2) * advantages

    assert not check(clip_only)
    out = capsys.readouterr().out
    assert "values differ: max abs error" in out and "at index (" in out
    assert "inputs: log_ratio=" in out and "advantages=" in out


def test_rejects_a_wrong_shape(capsys):
    def token_mean(log_ratio, advantages):
        return clipped_surrogate(log_ratio, advantages).mean(-1)

    assert not check(token_mean)
    assert "`token_mean` returned shape (4,) but expected (4, 7)" in capsys.readouterr().out


def test_rejects_a_function_that_detaches(capsys):
    def detached(log_ratio, advantages):
        return clipped_surrogate(log_ratio.detach(), advantages)

    assert not check(detached)
    out = capsys.readouterr().out
    assert ("values match but the gradient w.r.t. `log_ratio` differs: check where you "
            "detach/clip") in out


def test_rejects_a_half_detached_clip_branch(capsys):
    def detached_branch(log_ratio, advantages):
        ratio = torch.exp(log_ratio)
        return -torch.minimum(ratio * advantages, ratio.clamp(0.8, 1.2).detach() * advantages)

    assert not check(detached_branch)
    assert "gradient w.r.t. `log_ratio` differs" in capsys.readouterr().out


def test_not_implemented_stub_returns_false(capsys):
    def stub(log_ratio, advantages):
        raise NotImplementedError

    assert check(stub) is False
    assert "Not implemented yet: replace the `raise NotImplementedError` in `stub`" in (
        capsys.readouterr().out)


def test_a_learner_that_crashes_is_reraised_with_a_hint():
    def crashes(log_ratio, advantages):
        return log_ratio @ advantages

    with pytest.raises(LearnerError, match="`crashes` raised RuntimeError") as info:
        check(crashes)
    assert "log_ratio: shape (4, 7)" in str(info.value)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_masked_sequence_ratio_and_the_forgotten_mask(capsys):
    inputs = partial(random_policy_batch, keys=("logp", "old_logp", "mask"))

    def my_ratio(logp, old_logp, mask):
        return ((logp - old_logp) * mask).sum(-1) / mask.sum(-1)

    def no_mask(logp, old_logp, mask):
        return (logp - old_logp).mean(-1)

    assert check(my_ratio, sequence_log_ratio, inputs)
    assert not check(no_mask, sequence_log_ratio, inputs)
    assert "values differ" in capsys.readouterr().out


def test_group_rewards_without_gradients_and_std_mistake(capsys):
    def population_std(rewards, num_generations):
        g = rewards.view(-1, num_generations)
        return ((g - g.mean(-1, keepdim=True)) / (g.std(-1, unbiased=False, keepdim=True)
                                                   + 1e-4)).reshape(-1)

    inputs = partial(random_group_rewards, kind="normal")
    assert check(group_advantages, group_advantages, inputs, check_grad=False)
    assert "(values)." in capsys.readouterr().out
    assert not check(population_std, group_advantages, inputs, check_grad=False)
    assert "values differ" in capsys.readouterr().out


def test_total_rewards_refuse_the_binary_only_rules(capsys):
    """Notebook 02's exercise 1 and notebook 04's exercise 3 check on the lab's total reward
    (accuracy + format, 0 to 2): the rules that hold only for 0/1 rewards pass on binary groups
    and are refused on these, on every checker seed tried (today's binary inputs passed both)."""
    from labkit.tricks.filters import dynamic_sampling_mask

    def binary_std(rewards, num_generations):   # std = sqrt(p (1 - p) G / (G - 1)): 0/1 only
        g = rewards.view(-1, num_generations)
        p = g.mean(-1, keepdim=True)
        std = (p * (1 - p) * num_generations / (num_generations - 1)).sqrt()
        return ((g - p) / (std + 1e-4)).reshape(-1)

    def count_rule(rewards, num_generations):   # "some but not all right": 0 < sum(r) < G
        total = rewards.view(-1, num_generations).sum(-1)
        return (total > 0) & (total < num_generations)

    cases = ((binary_std, group_advantages, ("rewards", "num_generations"), False),
             (count_rule, dynamic_sampling_mask, ("rewards", "num_generations"), True))
    for wrong, reference, keys, grad in cases:
        for kind, accepted in (("binary", True), ("total", False)):
            inputs = partial(random_group_rewards, kind=kind, keys=keys)
            for seed in range(10):
                assert check_function(wrong, reference, inputs, check_grad=grad,
                                      seed=seed) is accepted, (wrong.__name__, kind, seed)
                assert check_function(reference, reference, inputs, check_grad=grad, seed=seed)
    capsys.readouterr()
    groups = random_group_rewards(torch.Generator().manual_seed(0), num_prompts=50,
                                  kind="total")["rewards"].view(50, 4)
    assert set(groups.flatten().tolist()) == {0.0, 1.0, 2.0}
    assert (groups.amax(-1) == groups.amin(-1)).any(), "the all-equal edge case is there"
    with pytest.raises(ValueError, match=r"kind must be one of \('binary', 'total', 'normal'\), "
                                         r"got 'ternary'"):
        random_group_rewards(torch.Generator(), kind="ternary")


def test_tuple_outputs_are_compared_element_by_element(capsys):
    def reference(log_ratio, advantages):
        return log_ratio.exp(), advantages * 2

    def one_missing(log_ratio, advantages):
        return (log_ratio.exp(),)

    def second_wrong(log_ratio, advantages):
        return log_ratio.exp(), advantages * 3

    assert check(reference, reference)
    assert not check(one_missing, reference)
    assert "returned 1 value(s) but the reference returns 2" in capsys.readouterr().out
    assert not check(second_wrong, reference)
    assert "values differ (output[1])" in capsys.readouterr().out


def test_input_makers_are_seeded_and_shaped():
    a = random_policy_batch(torch.Generator().manual_seed(3),
                            keys=("logp", "old_logp", "log_ratio", "advantages", "mask"))
    b = random_policy_batch(torch.Generator().manual_seed(3), keys=("log_ratio",))
    assert torch.equal(a["log_ratio"], b["log_ratio"])
    assert a["advantages"].shape == (4, 1) and a["mask"].dtype == torch.bool
    assert a["mask"][0].all() and (a["mask"].sum(-1) >= 1).all()
    torch.testing.assert_close(a["logp"] - a["old_logp"], a["log_ratio"])
    ratio = a["log_ratio"].exp()
    assert ((ratio < 0.8) | (ratio > 1.2)).any(), "off-policy: some ratios leave the band"
    groups = random_group_rewards(torch.Generator().manual_seed(0),
                                  keys=("rewards", "num_generations", "lengths"))
    assert groups["rewards"].shape == (12,) and set(groups["rewards"].tolist()) <= {0.0, 1.0}
    assert groups["num_generations"] == 4 and groups["lengths"].min() >= 1
    with pytest.raises(ValueError, match="unknown keys"):
        random_policy_batch(torch.Generator(), keys=("ratio",))


def test_integer_and_boolean_functions_do_not_claim_gradients(capsys):
    """Integer lengths in, or a boolean mask out: no gradient flows, so the message says values
    only (it used to say "values and gradients" for DAPO's overlong penalty and the dynamic-
    sampling mask of notebook 04)."""
    from labkit.rewards.shaping import overlong_penalty
    from labkit.tricks.filters import dynamic_sampling_mask

    def lengths(generator):
        return {"lengths": torch.randint(0, 40, (16,), generator=generator),
                "max_completion_length": 32, "overlong_buffer_len": 8}

    assert check_function(overlong_penalty, overlong_penalty, lengths)
    out = capsys.readouterr().out
    assert "gradients" not in out.replace("no gradient", "") and "no gradient flows" in out
    assert check_function(dynamic_sampling_mask, dynamic_sampling_mask, random_group_rewards)
    out = capsys.readouterr().out
    assert "values and gradients" not in out and "no gradient flows" in out


def test_a_detached_reference_is_named_as_such(capsys):
    """RL-PLUS's focal weight (notebook 07, exercise 1) takes and returns floating tensors but is
    detached on purpose: the message says so (it used to say the tensors were not floating), and
    a weight that forgot to detach is refused on its gradient."""
    from labkit.losses.rlplus import focal_weight

    def logp(generator):
        return {"logp": torch.rand(4, 7, generator=generator, dtype=torch.float64)
                .clamp(1e-3, 1).log()}

    def not_detached(logp, gamma=0.5):
        return (1 - logp.exp()).clamp(min=0) ** gamma

    assert check_function(focal_weight, focal_weight, logp)
    out = capsys.readouterr().out
    assert "detached from its inputs" in out and "not floating" not in out
    assert not check_function(not_detached, focal_weight, logp)
    assert "the gradient w.r.t. `logp` differs" in capsys.readouterr().out


def test_pass_counts_reach_the_float_overflow(capsys):
    """Notebook 08's exercise 3 warns that pass@k's binomials overflow a float for large n: its
    inputs now reach it (they drew n < 200, where a float version passed), so the float version
    is stopped while exact integers and the product form pass."""
    import math

    from labkit.evaluate import pass_at_k
    from labkit.exercises import random_pass_counts

    def float_binomials(num_samples, num_correct, k):
        return 1 - (float(math.comb(num_samples - num_correct, k))
                    / float(math.comb(num_samples, k)))

    def exact_integers(num_samples, num_correct, k):
        return 1 - math.comb(num_samples - num_correct, k) / math.comb(num_samples, k)

    small = partial(random_pass_counts, max_samples=199)
    assert check_function(float_binomials, pass_at_k, small, n_trials=20, check_grad=False)
    assert check_function(exact_integers, pass_at_k, random_pass_counts, n_trials=20,
                          check_grad=False)
    with pytest.raises(LearnerError, match="OverflowError"):
        check_function(float_binomials, pass_at_k, random_pass_counts, n_trials=20,
                       check_grad=False)
    capsys.readouterr()


def test_pass_counts_reject_the_biased_estimators(capsys):
    """Notebook 00's exercise 1 asks for the unbiased pass@k: its inputs (the notebook's exact
    call, 20 trials) reject the plug-in 1 - (1 - c/n)^k, its k - 1 slip and "1 if any answer is
    right" (they drew n up to 2000 with c and k up to n, where pass@k is almost always exactly
    0 or 1, and all three passed), while labkit's reference passes; the seeds hold both small
    draws (pass@k strictly between 0 and 1) and a large n whose binomials overflow a float."""
    import math

    import torch

    from labkit.evaluate import pass_at_k
    from labkit.exercises import random_pass_counts

    def plug_in(num_samples, num_correct, k):
        return 1 - (1 - num_correct / num_samples) ** k

    def plug_in_k_minus_1(num_samples, num_correct, k):
        return 1 - (1 - num_correct / num_samples) ** (k - 1)

    def any_right(num_samples, num_correct, k):
        return 1.0 if num_correct > 0 else 0.0

    draws = [random_pass_counts(torch.Generator().manual_seed(seed)) for seed in range(20)]
    small = [d for d in draws if d["num_samples"] <= 64]
    assert len(small) >= 12
    assert all(d["k"] <= min(d["num_samples"], 8) for d in small)
    assert all(0 < pass_at_k(**d) < 1 and d["k"] >= 2 for d in small)  # k = 1: all agree
    assert draws[0]["num_samples"] <= 64   # so the plug-in's first miss reads as a bias
    large = [d for d in draws if d["num_samples"] > 1030]
    assert large
    for d in large:
        with pytest.raises(OverflowError):
            float(math.comb(d["num_samples"], d["k"]))
    for wrong in (plug_in, plug_in_k_minus_1, any_right):
        assert not check_function(wrong, pass_at_k, random_pass_counts, n_trials=20,
                                  check_grad=False)
        assert "Not quite (trial 1 of 20)" in capsys.readouterr().out
    assert check_function(pass_at_k, pass_at_k, random_pass_counts, n_trials=20,
                          check_grad=False)
    capsys.readouterr()


def test_check_prediction_says_what_the_runs_showed(capsys):
    """The experiment checker compares the last-window means of two histories (synthetic
    frames: the helper reads metrics only) and names what they showed."""
    import pandas as pd

    from labkit.exercises import check_prediction

    base = pd.DataFrame({"step": range(1, 11), "completion_length": [20.0] * 10})
    longer = base.assign(completion_length=[20.0] * 5 + [30.0] * 5)
    assert check_prediction("up", base, longer, "completion_length")
    assert "baseline 20, changed 30, difference +10" in capsys.readouterr().out
    assert not check_prediction("down", base, longer, "completion_length")
    assert "you predicted down, they show up" in capsys.readouterr().out
    assert check_prediction("same", base, longer, "completion_length", tolerance=10.0)
    # only the last `window` rows count: the change happened after step 5
    assert check_prediction("same", base, longer.iloc[:5], "completion_length")
    # a TrainResult-like object is read through its .history
    result = type("Result", (), {"history": longer})()
    assert check_prediction("up", base, result, "completion_length", window=3)
    capsys.readouterr()
    # without a tolerance "same" means within 5% of the larger end, and the message says so
    nearly = base.assign(completion_length=[20.0] * 5 + [20.9] * 5)
    assert check_prediction("same", base, nearly, "completion_length")
    assert '"same" would need at most 1.04, 5% of the larger end' in capsys.readouterr().out
    assert not check_prediction("same", base, longer, "completion_length")


def test_check_prediction_names_bad_input():
    import pandas as pd

    from labkit.exercises import check_prediction

    frame = pd.DataFrame({"step": [1, 2], "reward": [1.0, 1.5]})
    with pytest.raises(ValueError, match="prediction must be one of"):
        check_prediction("higher", frame, frame, "reward")
    with pytest.raises(ValueError, match="metric 'entropy' is not a column"):
        check_prediction("up", frame, frame, "entropy")
    with pytest.raises(ValueError, match="window must be an integer >= 1"):
        check_prediction("up", frame, frame, "reward", window=0)
    with pytest.raises(ValueError, match="tolerance must be a finite number"):
        check_prediction("up", frame, frame, "reward", tolerance=float("inf"))
    with pytest.raises(TypeError, match="changed must be a TrainResult"):
        check_prediction("up", frame, [1, 2], "reward")


# ---- reading an evaluation: which cells can RL lift? (notebook 00, exercise 2) ----------------


def _evaluation(counts: dict, samples_per_prompt: int = 8):
    """A per-sample frame like ``evaluate(..., return_samples=True)``'s: ``counts`` maps a cell
    (family, difficulty) to each of its prompts' number of right answers."""
    import pandas as pd

    rows = []
    for (family, difficulty), rights in counts.items():
        for p, right in enumerate(rights):
            for s in range(samples_per_prompt):
                rows.append({"id": f"{family}-{difficulty}-{p}", "family": family,
                             "difficulty": difficulty, "correct": float(s < right)})
    return pd.DataFrame(rows)


# add d1: 8 of 10 prompts mixed (liftable); add d2: 5 of 10 (either way); mul d3: 2 of 10 mixed,
# 8 never solved (dead); sort d1: 2 mixed, 8 always solved (dead: no headroom)
CELLS = {("add", 1): [1] * 8 + [0, 8], ("add", 2): [4] * 5 + [0] * 5,
         ("mul", 3): [1, 7] + [0] * 8, ("sort", 1): [3, 5] + [8] * 8}


def test_cell_signal_counts_never_always_and_mixed_prompts():
    from labkit.exercises import cell_signal

    samples = _evaluation(CELLS)
    samples.loc[0, "correct"] = float("nan")  # unjudged counts as wrong: add d1's first prompt
    cells = cell_signal(samples).set_index("cell")
    assert list(cells.index) == ["add d1", "add d2", "mul d3", "sort d1"]
    assert cells.loc["add d1", ["prompts", "never", "always", "mixed"]].tolist() == [10, 2, 1, 7]
    assert cells.loc["sort d1", ["never", "always", "mixed"]].tolist() == [0, 8, 2]
    assert cells.loc["mul d3", "accuracy"] == pytest.approx(8 / 80)
    # the heat map's accuracy is the mean over the cell's answers
    assert cells.loc["add d2", "accuracy"] == pytest.approx(20 / 80)


def test_check_liftable_cells_needs_the_liftable_and_refuses_the_dead(capsys):
    from labkit.exercises import check_liftable_cells

    samples = _evaluation(CELLS)
    assert check_liftable_cells(["add d1"], samples)
    out = capsys.readouterr().out
    assert out.startswith("Right: you named all 1 liftable cells and no dead one.")
    assert "8/10 *" in out and "5/10" in out  # the grid of mixed prompts, the named cell starred
    assert check_liftable_cells([("add", 1), "add  d2"], samples)  # in between: either way
    capsys.readouterr()
    assert not check_liftable_cells(["add d2"], samples)
    assert "you left out add d1 (accuracy 20%): 8 of its 10 prompts are mixed" \
        in capsys.readouterr().out
    assert not check_liftable_cells(["add d1", "sort d1"], samples)
    out = capsys.readouterr().out
    assert "you named sort d1 (accuracy 90%): of its 10 prompts 0 were never solved and 8 always" \
        in out
    # the thresholds decide: at liftable=0.9 add d1 (0.8) may be left out
    assert check_liftable_cells([], samples, liftable=0.9)
    capsys.readouterr()


def test_check_liftable_cells_names_bad_input():
    from labkit.exercises import check_liftable_cells

    samples = _evaluation(CELLS)
    with pytest.raises(ValueError, match=r"'add d9' is not a cell of this evaluation.*'sort d1'"):
        check_liftable_cells(["add d9"], samples)
    with pytest.raises(TypeError, match="a list of cells"):
        check_liftable_cells("add d1", samples)
    with pytest.raises(ValueError, match="dead .* must be below liftable"):
        check_liftable_cells([], samples, liftable=0.3, dead=0.5)
    with pytest.raises(ValueError, match="samples needs the columns \\['correct'\\]"):
        check_liftable_cells([], samples.drop(columns="correct"))


def test_notebook_00_solutions_pass_their_checks(capsys):
    """The reference solutions of notebook 00: pass@k against labkit's on inputs that reach the
    float overflow, and the prediction, whose rule (accuracy between about 10% and 90%) holds
    on a synthetic evaluation with the same shape of cells."""
    import importlib
    import sys
    from pathlib import Path

    from labkit.evaluate import pass_at_k
    from labkit.exercises import random_pass_counts

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "notebooks"))
    try:
        solutions = importlib.import_module("solutions.00_tour")
    finally:
        sys.path.pop(0)
    assert check_function(solutions.pass_at_k, pass_at_k, random_pass_counts, n_trials=40,
                          check_grad=False)
    assert all(isinstance(c, str) and " d" in c for c in solutions.LIFTABLE_CELLS)
    capsys.readouterr()


def test_a_close_miss_shows_the_digits_that_differ_and_names_a_convention(capsys):
    """A learner off by a convention (Bessel's std against the population's) sees two numbers that
    differ, not "got -1.642, expected -1.642", and a hint to look for the convention."""
    from labkit.exercises import check_function

    def population_std(x):
        return x.std(unbiased=False)

    def inputs(generator):
        return {"x": torch.randn(4000, generator=generator, dtype=torch.float64)}

    assert not check_function(population_std, lambda x: x.std(), inputs, n_trials=1)
    out = capsys.readouterr().out
    got, expected = out.split("(got ")[1].split(";")[0].split(", expected ")
    assert got != expected.rstrip(")")
    assert "look for a convention" in out
