"""pass@k: the unbiased estimator against brute-force enumeration, and the per-cell curve."""

import itertools
import math

import pandas as pd
import pytest

from labkit.evaluate import pass_at_k, pass_at_k_curve


def brute_force(n: int, c: int, k: int) -> float:
    """Share of the k-subsets of n samples (the first c right) that hold a right one."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 8))
def test_estimator_equals_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_force(n, c, k), abs=1e-12)


def test_k_equal_n_is_any_correct_and_k_one_is_the_mean():
    for n in (1, 5, 16):
        for c in range(n + 1):
            assert pass_at_k(n, c, n) == float(c > 0)
            assert pass_at_k(n, c, 1) == pytest.approx(c / n, abs=1e-12)


def test_stable_for_large_n():
    # the binomials would be ~1e299; the product form stays exact enough
    value = pass_at_k(1000, 3, 100)
    exact = 1 - math.comb(997, 100) / math.comb(1000, 100)
    assert value == pytest.approx(exact, rel=1e-12)
    assert pass_at_k(1000, 0, 500) == 0.0


@pytest.mark.parametrize("args", [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)])
def test_refuses_impossible_counts(args):
    with pytest.raises(ValueError):
        pass_at_k(*args)


def test_curve_per_cell_and_overall():
    rows = []
    # add-2: prompt a has 1 of 4 right, prompt b 0 of 4; sub-3: prompt c has 4 of 4 (one NaN
    # sample counts as not judged = not right: 3 of 4)
    for pid, family, difficulty, correct in (("a", "add", 2, [1, 0, 0, 0]),
                                             ("b", "add", 2, [0, 0, 0, 0]),
                                             ("c", "sub", 3, [1, 1, math.nan, 1])):
        rows += [{"id": pid, "family": family, "difficulty": difficulty, "sample": s,
                  "correct": float(v)} for s, v in enumerate(correct)]
    curve = pass_at_k_curve(pd.DataFrame(rows))
    assert curve.columns.tolist() == ["family", "difficulty", "prompts", "pass@1", "pass@2",
                                      "pass@3", "pass@4"]
    add, sub, overall = (curve.iloc[i] for i in range(3))
    assert (add["family"], add["prompts"], sub["prompts"], overall["family"]) == \
        ("add", 2, 1, "all")
    assert add["pass@1"] == pytest.approx((0.25 + 0) / 2)
    assert add["pass@2"] == pytest.approx((0.5 + 0) / 2)
    assert add["pass@4"] == pytest.approx(0.5)
    assert sub["pass@1"] == pytest.approx(0.75) and sub["pass@2"] == 1.0
    assert overall["pass@1"] == pytest.approx((0.25 + 0 + 0.75) / 3)
    assert overall["pass@4"] == pytest.approx(2 / 3)
    # pass@k never decreases with k
    values = curve.filter(like="pass@").to_numpy()
    assert (values[:, 1:] >= values[:, :-1] - 1e-12).all()
    assert pass_at_k_curve(pd.DataFrame(rows), ks=[2]).columns.tolist()[-1] == "pass@2"
    with pytest.raises(ValueError, match="1..4"):
        pass_at_k_curve(pd.DataFrame(rows), ks=[5])
