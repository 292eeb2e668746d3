"""labkit.rewards.ttrl: TTRL's majority vote, its reward (blind to the true answer) and label accuracy."""

import pytest

from labkit.rewards import accuracy_reward
from labkit.rewards.ttrl import answer_key, label_accuracy_reward, majority_vote, ttrl_reward


def done(answer: str) -> str:
    return f"<think>...</think><answer>{answer}</answer>"


def test_majority_vote_paper_example_ties_and_no_votes():
    # the reference check: [3, 3, 5, 3, None] -> label 3, majority_ratio 3/5
    assert majority_vote([3, 3, 5, 3, None]) == (3, pytest.approx(0.6))
    assert majority_vote([5, 3, 3, 5]) == (5, 0.5)  # a tie goes to the answer seen first
    assert majority_vote([3, 5, 5, 3]) == (3, 0.5)
    assert majority_vote([None, None]) == (None, 0.0)
    assert majority_vote([]) == (None, 0.0)


def test_answer_key_uses_check_answers_normalisation():
    assert answer_key("add", "+58") == answer_key("add", " 5 8") == 58
    assert answer_key("sort", "1, 2,3") == (1, 2, 3)
    assert answer_key("gsm8k", "$1,200.") == answer_key("gsm8k", "1200.0")
    assert answer_key("countdown", "(3 + 9)") == answer_key("countdown", "3+9")
    assert answer_key("add", "5 8 x") is None and answer_key("add", "") is None
    assert answer_key("sort", "1,,2") is None and answer_key("countdown", "3+") is None


def test_rewards_per_group_with_the_paper_example():
    completions = [done("3"), done("3"), done("5"), done("+3"), "no answer",  # group p
                   done("7"), done("8"), done("8"), done("7")]               # group q: a tie
    prompts = ["p"] * 5 + ["q"] * 4
    got = ttrl_reward(prompts, completions, family=["add"] * 9)
    assert got == [1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0]


def test_a_group_without_parsable_answers_gets_zero_rewards():
    got = ttrl_reward(["p"] * 3, ["none", done("x"), done("")], family=["add"] * 3)
    assert got == [0.0, 0.0, 0.0]


def test_conversational_prompts_and_messages_group_by_content():
    p = [{"role": "user", "content": "2+2?"}]
    q = [{"role": "user", "content": "3+3?"}]
    completions = [[{"role": "assistant", "content": done(a)}] for a in ("4", "4", "5", "6")]
    # q ties 5 against 6: the first seen wins
    assert ttrl_reward([p, p, q, list(q)], completions, family=["add"] * 4) == [1, 1, 1, 0]


def test_reward_ignores_the_true_answer():
    completions = [done(a) for a in ("12", "12", "13", "12", "40", "41", "41", "41")]
    prompts = ["a"] * 4 + ["b"] * 4
    base = {"family": ["add"] * 8, "numbers": [[]] * 8, "target": [0] * 8}
    right = ttrl_reward(prompts, completions, answer=["12"] * 4 + ["41"] * 4, **base)
    wrong = ttrl_reward(prompts, completions, answer=["99"] * 8, **base)
    assert right == wrong == ttrl_reward(prompts, completions, **base)


def test_reward_equals_accuracy_where_the_majority_is_right_and_lucky_hits_where_not():
    """When the majority answer is the true one, the pseudo-reward of every completion equals its
    strict accuracy; when it is wrong, the true answer's completions get 0 and the majority's
    wrong ones 1, while other wrong answers still get the right 0 (TTRL's "lucky hit")."""
    completions = [done(a) for a in ("12", "12", "13", "12", "40", "40", "41", "39")]
    prompts = ["a"] * 4 + ["b"] * 4
    columns = {"answer": ["12"] * 4 + ["41"] * 4, "family": ["add"] * 8,
               "numbers": [[]] * 8, "target": [0] * 8}
    pseudo = ttrl_reward(prompts, completions, **columns)
    strict = accuracy_reward(prompts, completions, **columns)
    labels_right = label_accuracy_reward(prompts, completions, **columns)
    assert labels_right == [1.0] * 4 + [0.0] * 4
    assert pseudo[:4] == strict[:4]
    assert pseudo[4:] == [1.0, 1.0, 0.0, 0.0] and strict[4:] == [0.0, 0.0, 1.0, 0.0]
    assert pseudo[7] == strict[7] == 0.0  # lucky hit: a wrong answer correctly gets 0


def test_label_accuracy_uses_the_strict_check_and_none_without_answers():
    completions = [done("3+9"), done("(3+9)"), done("12")]
    got = label_accuracy_reward(["p"] * 3, completions, family=["countdown"] * 3,
                                answer=["9+3"] * 3, numbers=[[3, 9]] * 3, target=[12] * 3)
    assert got == [1.0, 1.0, 1.0]
    assert label_accuracy_reward(["p"], [done("1")], family=["add"], answer=[None]) == [None]
    assert label_accuracy_reward(["p"], [done("1")], family=["poem"], answer=["1"]) == [None]


@pytest.mark.parametrize("completion", [None, 3, "", "<answer>", done("9" * 5000), {"x": 1},
                                        [{"role": "assistant", "content": None}]])
def test_malformed_completions_never_raise(completion):
    assert ttrl_reward(["p", "p"], [completion, done("1")], family=["add", "add"]) in (
        [0.0, 1.0], [1.0, 1.0])
    assert ttrl_reward(None, [completion]) in ([0.0], [1.0])
