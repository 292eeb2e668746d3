"""Evaluation: reproducible with a seed, and its table adds up."""

import pytest

from labkit.evaluate import evaluate, prompt_solve_rates, summarize
from labkit.models import load_policy
from labkit.tasks import FAMILIES, load_split


@pytest.fixture(scope="module")
def policy():
    return load_policy("tiny", device="cpu")


@pytest.fixture(scope="module")
def small_eval():
    ds = load_split("eval")
    first = {}
    for i, cell in enumerate(zip(ds["family"], ds["difficulty"])):
        first.setdefault(cell, i)
    return ds.select(sorted(first.values()))  # one prompt per family x difficulty


def seeded(policy, dataset, seed):
    """The table and samples of a small k = 2 evaluation with ``seed``."""
    model, tok = policy
    return evaluate(model, tok, dataset, k=2, max_completion_length=48, seed=seed,
                    return_samples=True)


def test_same_seed_same_table_and_samples(policy, small_eval):
    (a, sa), (b, sb) = seeded(policy, small_eval, 3), seeded(policy, small_eval, 3)
    assert sa.text.tolist() == sb.text.tolist()
    assert a.equals(b)


def test_other_seed_other_samples(policy, small_eval):
    (_, sa), (_, sb) = seeded(policy, small_eval, 3), seeded(policy, small_eval, 4)
    assert sa.text.tolist() != sb.text.tolist()


def test_table_shape_and_consistency(policy, small_eval):
    model, tok = policy
    table, samples = evaluate(model, tok, small_eval, k=3, max_completion_length=48, seed=0,
                              return_samples=True)
    assert len(samples) == 3 * len(small_eval)
    cells = table[table.family != "all"]
    assert set(cells.family) == set(FAMILIES) and len(cells) == 20
    overall = table[table.family == "all"].iloc[0]
    assert overall.prompts == len(small_eval)
    assert overall.accuracy == pytest.approx(samples.correct.mean())
    assert overall.truncation == pytest.approx(samples.truncated.mean())
    # pass@k is at least pass@1 in every cell
    assert (table["pass@k"] >= table.accuracy - 1e-12).all()
    assert samples.length.le(48).all()
    assert samples.loc[samples.truncated, "length"].eq(48).all()


def test_summarize_and_solve_rates_by_hand():
    import pandas as pd

    samples = pd.DataFrame({
        "id": ["a", "a", "b", "b"], "family": ["add"] * 4, "difficulty": [1, 1, 2, 2],
        "sample": [0, 1, 0, 1], "correct": [1.0, 1.0, 0.0, 1.0], "formatted": [1.0] * 4,
        "length": [10, 20, 30, 40], "truncated": [False, False, False, True], "text": [""] * 4,
    })
    table = summarize(samples).set_index(["family", "difficulty"])
    assert table.loc[("add", 1), "accuracy"] == 1.0
    assert table.loc[("add", 2), "accuracy"] == 0.5
    assert table.loc[("add", 2), "pass@k"] == 1.0
    assert table.loc[("all", "all"), "accuracy"] == 0.75
    assert table.loc[("all", "all"), "length"] == 25
    rates = prompt_solve_rates(samples)
    assert rates["a"] == 1.0 and rates["b"] == 0.5
