"""labkit.rewards.verifiers: what each lax verifier accepts that the strict one refuses, and partial credit."""

import functools

import pytest

from labkit.rewards import accuracy_reward, reward_function_names
from labkit.rewards.verifiers import (
    answer_anywhere_reward,
    digit_credit,
    digit_credit_reward,
    format_only_reward,
    lenient_length_reward,
    sort_credit,
    think_text,
)

LAX = (answer_anywhere_reward, digit_credit_reward, format_only_reward, lenient_length_reward)


def done(think: str, answer: str) -> str:
    return f"<think>{think}</think><answer>{answer}</answer>"


def cols(answers, families=None):
    families = families or ["add"] * len(answers)
    return {"answer": list(answers), "family": list(families),
            "numbers": [[] for _ in answers], "target": [0 for _ in answers]}


def test_think_text():
    assert think_text(done("5+8=13", "13")) == "5+8=13"
    assert think_text("<think>never closed") == "never closed"
    assert think_text("no tags") == ""


def test_lenient_length_pays_a_long_wrong_think_the_strict_reward_refuses():
    long_wrong = done("x" * 60, "12")
    short_wrong = done("1+1", "12")
    right = done("", "58")
    completions = [long_wrong, short_wrong, right]
    columns = cols(["58"] * 3)
    assert accuracy_reward(None, completions, **columns) == [0.0, 0.0, 1.0]
    assert lenient_length_reward(None, completions, **columns) == [1.0, 0.0, 1.0]
    # the threshold is keyword-only and binds with partial, keeping the function's name
    strict_effort = functools.partial(lenient_length_reward, min_think_chars=100)
    assert strict_effort(None, completions, **columns) == [0.0, 0.0, 1.0]
    assert reward_function_names([strict_effort]) == ["lenient_length"]


def test_lenient_length_none_only_when_strict_cannot_judge_and_think_is_short():
    completions = [done("y" * 60, "1"), done("", "1")]
    got = lenient_length_reward(None, completions, answer=[None, None], family=["add", "add"])
    assert got == [1.0, None]


def test_answer_anywhere_credits_a_substring_the_strict_reward_rejects():
    completions = [done("5+8=13, 50+8=58", "63"),  # the answer is a partial sum: wrong, but paid
                   done("", "158"),                 # "58" is inside "158"
                   done("", "57"),
                   [{"role": "assistant", "content": done("", "58")}]]
    columns = cols(["58"] * 4)
    assert accuracy_reward(None, completions, **columns) == [0.0, 0.0, 0.0, 1.0]
    assert answer_anywhere_reward(None, completions, **columns) == [1.0, 1.0, 0.0, 1.0]
    assert answer_anywhere_reward(None, ["58"], answer=[None]) == [None]
    assert answer_anywhere_reward(None, ["58"], answer=[" "]) == [None]
    assert answer_anywhere_reward(None, ["58"]) == [None]


def test_format_only_ignores_the_answer():
    completions = [done("anything", "wrong"), "no format 58", done("", "58") + " trailing"]
    assert format_only_reward(None, completions, **cols(["58"] * 3)) == [1.0, 0.0, 0.0]


@pytest.mark.parametrize(("predicted", "answer", "credit"), [
    ("1296", "1306", 0.5), ("58", "58", 1.0), ("158", "58", 2 / 3), ("5", "-5", 0.5),
    ("+58", "58", 1.0), (" 5 8", "58", 1.0), ("-58", "-58", 1.0), ("abc", "58", 0.0),
    ("", "58", 0.0), ("5.8", "58", 0.0), ("9" * 50, "58", 0.0), ("58", "x", 0.0),
])
def test_digit_credit_docstring_examples_and_malformed(predicted, answer, credit):
    assert digit_credit(predicted, answer) == pytest.approx(credit)


@pytest.mark.parametrize(("predicted", "answer", "credit"), [
    ("1,2,3", "1,2,3", 1.0), ("1, 2, 3", "1,2,3", 1.0), ("1,3,2", "1,2,3", 1 / 3),
    ("1,2", "1,2,3", 2 / 3), ("1,2,3,4", "1,2,3", 0.75), ("1,,3", "1,2,3", 0.0),
    ("a,b", "1,2", 0.0), (",".join(["1"] * 200), "1,2", 0.0),
])
def test_sort_credit(predicted, answer, credit):
    assert sort_credit(predicted, answer) == pytest.approx(credit)


def test_digit_credit_reward_is_one_exactly_when_strict_passes():
    completions = [done("", "1306"), done("", "1296"), done("", "1,3,2"), done("", "1,2,3"),
                   "no answer tags", done("", "3*4"), done("", "3+9"), done("", "58")]
    columns = {"answer": ["1306", "1306", "1,2,3", "1,2,3", "58", "3+9", "3+9", None],
               "family": ["add", "sub", "sort", "sort", "add", "countdown", "countdown", "add"],
               "numbers": [[], [], [], [], [], [3, 9], [3, 9], []],
               "target": [0, 0, 0, 0, 0, 12, 12, 0]}
    got = digit_credit_reward(None, completions, **columns)
    strict = accuracy_reward(None, completions, **columns)
    # countdown stays binary: 3*4 is 12 but does not use the number 9
    assert got == pytest.approx([1.0, 0.5, 1 / 3, 1.0, 0.0, 0.0, 1.0, None])
    for g, s in zip(got, strict):
        assert (g == 1.0) == (s == 1.0)
    assert digit_credit_reward(None, [done("", "1")], answer=["1"], family=["poetry"]) == [None]


def test_gsm8k_partial_credit_only_for_integer_answers():
    completions = [done("", "1296"), done("", "12.5"), done("", "$1,306")]
    got = digit_credit_reward(None, completions, answer=["1306", "12.25", "1306"],
                              family=["gsm8k"] * 3)
    assert got == pytest.approx([0.5, 0.0, 1.0])


HOSTILE = [None, 3, "", "<answer>", "</answer><answer>", "<think>" * 500,
           done("", "9" * 5000), done("", "1e309"), done("", "１２"), done("", "-"),
           [{"role": "assistant", "content": None}], [{"content": [{"text": "58"}]}], {"x": 1}]


@pytest.mark.parametrize("fn", LAX, ids=lambda f: f.__name__)
def test_lax_verifiers_never_raise_and_return_one_value_per_row(fn):
    n = len(HOSTILE)
    got = fn(None, HOSTILE, **cols(["58"] * n))
    assert len(got) == n
    assert all(r is None or 0.0 <= r <= 1.0 for r in got)
    # rows without columns: None or a number, never an exception
    assert len(fn(None, HOSTILE)) == n
