"""Evaluation: reproducible with a seed, its table adds up, rows sharing an id are refused, and
an environment's outcome is checked before it counts as accuracy."""

import math

import pytest

from labkit.agents.guessing import GuessingEnv, guessing_dataset
from labkit.evaluate import eval_metrics, evaluate, prompt_solve_rates, sample_answers, summarize
from labkit.models import load_policy
from labkit.rewards import RewardFunctionError
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


def test_eval_lengths_split_by_right_and_wrong_answers():
    """Right answers average their own lengths, wrong ones theirs; partial credit and unjudged
    answers count in neither, and a side with no answers is NaN, not 0."""
    import pandas as pd

    samples = pd.DataFrame({
        "id": ["a", "a", "b", "b", "c"], "family": ["add"] * 5, "difficulty": [1] * 5,
        "sample": [0, 1, 0, 1, 0], "correct": [1.0, 0.0, 0.0, 0.5, math.nan],
        "formatted": [1.0] * 5, "length": [10, 30, 50, 70, 90], "truncated": [False] * 5,
        "text": [""] * 5,
    })
    row = eval_metrics(summarize(samples), samples)
    assert row["eval_length_correct"] == 10 and row["eval_length_wrong"] == 40
    none_right = samples.assign(correct=0.0)
    assert math.isnan(eval_metrics(summarize(none_right), none_right)["eval_length_correct"])
    assert "eval_length_wrong" not in eval_metrics(summarize(samples))


# ---- what evaluation groups by, and what it reads as accuracy ---------------------------------
def with_column(dataset, name, values):
    return dataset.remove_columns(name).add_column(name, list(values))


def test_rows_that_share_an_id_are_refused_by_name(policy, small_eval):
    """Two questions under one id were merged into one prompt of the table (2k samples, one
    accuracy): refused, naming the id, before anything is sampled."""
    model, tok = policy
    data = with_column(small_eval.select(range(4)), "id", ["q", "other", "q", "last"])
    assert data[0]["prompt"] != data[2]["prompt"]
    for call in (evaluate, sample_answers):
        with pytest.raises(ValueError, match=r"share an id \('q'\)"):
            call(model, tok, data, k=1, max_completion_length=8)
    table = evaluate(model, tok, data.remove_columns("id"), k=1, max_completion_length=8)
    assert table[table.family == "all"].prompts.iloc[0] == 4  # without ids, rows are numbered


def test_a_dataset_the_rule_cannot_judge_is_refused(policy, small_eval):
    model, tok = policy
    data = with_column(small_eval.select(range(4)), "family", ["Add"] * 4)
    with pytest.raises(ValueError, match=r"column 'family' holds 'Add'.*'add'"):
        evaluate(model, tok, data, k=1, max_completion_length=8)


@pytest.fixture(scope="module")
def tools():
    return load_policy("tiny-tools", device="cpu")


def game_accuracy(tools, value):
    """Eval accuracy of two guessing-game episodes whose environment's get_reward() is
    ``value`` (the rule cannot judge the game: the environment's outcome is the accuracy)."""
    class Env(GuessingEnv):
        def get_reward(self):
            return value

    model, tok = tools
    table = evaluate(model, tok, guessing_dataset(2, seed=1), k=1, max_completion_length=16,
                     max_tool_calling_iterations=1, environment_factory=Env)
    return float(table[table.family == "all"].accuracy.iloc[0])


@pytest.mark.parametrize("value, message", [
    (5.0, r"returned 5.0: .*\[0, 1\]"), (-3.0, r"returned -3.0: .*\[0, 1\]"),
    (math.inf, "returned inf; rewards must be finite"), (math.nan, "returned nan"),
    ("0.5", r"returned '0.5' \(str\); rewards must be numbers"),
])
def test_get_reward_is_checked_as_an_accuracy(tools, value, message):
    """All of these became eval_accuracy unchecked."""
    with pytest.raises(RewardFunctionError, match=message):
        game_accuracy(tools, value)


def test_get_reward_within_zero_and_one_is_the_accuracy(tools):
    assert game_accuracy(tools, 0.25) == 0.25
    assert game_accuracy(tools, True) == 1.0
    assert math.isnan(game_accuracy(tools, None))  # not judged: NaN, never a fake 0
