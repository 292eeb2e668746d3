"""Tests for labkit.rewards: answer extraction, format and accuracy rewards, weighted combination,
and rewards that would judge nothing (data the accuracy reward cannot judge, environment rewards
without an environment), refused where the data or the spec enters."""

import functools
import json
import math
import random
from pathlib import Path

import pytest

from labkit.agents.guessing import GuessingEnv, guessing_dataset
from labkit.commands.reference_runs import load_spec
from labkit.config import preset
from labkit.rewards import (
    RewardFunctionError,
    accuracy_reward,
    combine_rewards_by_weight,
    extract_answer,
    format_reward,
    per_completion,
)
from labkit.rewards.rule_based import can_judge
from labkit.tasks import FAMILIES, generate_problems, solution_text, to_row
from labkit.trainer import Trainer

PROBLEMS = generate_problems(20, seed=7)  # one per family x difficulty
ROWS = [to_row(p) for p in PROBLEMS]

MALFORMED = [
    "", " ", "\n\n", "42", "<answer>", "</answer>", "<answer></answer>", "<answer> </answer>",
    "<think>", "<think><answer>5</answer>", "<answer>5", "5</answer>",
    "</answer>5<answer>", "<answer><answer>5</answer></answer>",
    "<think><think>x</think></think><answer>5</answer>",
    "<think>x</think><answer>5</answer><answer>6</answer>",
    "<answer>-7</answer>", "<answer>+-7</answer>", "<answer>--7</answer>",
    "<answer>" + "9" * 5000 + "</answer>", "<answer>1" + "0" * 400 + "</answer>",
    "<answer>1e400</answer>", "<answer>inf</answer>", "<answer>nan</answer>",
    "<answer>NaN,1,2</answer>", "<answer>1,,2</answer>", "<answer>" + ",".join("9" * 3000) + "</answer>",
    "<answer>ü ß 中文 ٣ ５</answer>", "<answer>\x00\x7f</answer>", "<think>日本</think><answer>3</answer>",
    "<answer>((((5+3)</answer>", "<answer>(5+3))*2</answer>", "<answer>()</answer>",
    "<answer>8/2</answer>", "<answer>2**30</answer>", "<answer>2^3</answer>",
    "<answer>__import__('os').system('echo hi')</answer>", "<answer>lambda: 1</answer>",
    "<answer>" + "(" * 5000 + "1" + ")" * 5000 + "</answer>",
    "<answer>" + "+".join(["9"] * 10000) + "</answer>", "<answer>" + "*".join(["12"] * 20) + "</answer>",
    "<answer>-5+21</answer>", "<answer>5 3</answer>", "<answer>1_000</answer>",
]


def batch(texts, rows):
    """Columns as TRL passes them, one entry per completion, plus TRL's extra keyword arguments."""
    cols = {key: [row[key] for row in rows] for key in rows[0] if key != "prompt"}
    return {"prompts": [row["prompt"] for row in rows], "completions": texts,
            "completion_ids": [[0]] * len(texts), "trainer_state": None, **cols}


def test_extract_answer():
    assert extract_answer("<think>a</think><answer> 42 </answer>") == "42"
    assert extract_answer("<answer>1</answer> then <answer>2</answer>") == "2"
    assert extract_answer("<answer>1<answer>2</answer>") == "2"
    assert extract_answer("<answer>1</answer><answer>2") == "1"
    assert extract_answer("<answer></answer>") == ""
    for missing in ["42", "<answer>42", "42</answer>", "</answer>42<answer>", "", None, 7]:
        assert extract_answer(missing) is None, missing


@pytest.mark.parametrize(("text", "reward"), [
    ("<think>x</think><answer>1</answer>", 1.0),
    ("<think></think><answer></answer>", 1.0),
    ("<think>a\nb</think><answer>1</answer> \n", 1.0),
    (" <think>x</think><answer>1</answer>", 0.0),
    ("<think>x</think> <answer>1</answer>", 0.0),
    ("<think>x</think><answer>1</answer>tail", 0.0),
    ("<answer>1</answer>", 0.0),
    ("<think>x</think>", 0.0),
    ("<answer>1</answer><think>x</think>", 0.0),
    ("<think>x</think><answer>1</answer><answer>1</answer>", 0.0),
    ("<think><think>x</think></think><answer>1</answer>", 0.0),
    ("<think>x<answer>1</answer></think><answer>1</answer>", 0.0),
    ("</think><think>x<answer>1</answer>", 0.0),
    ("", 0.0),
])
def test_format_reward(text, reward):
    assert format_reward(None, [text]) == [reward]
    assert format_reward(None, [[{"role": "assistant", "content": text}]]) == [reward]


def test_accuracy_reward_on_strings_and_messages():
    right = [solution_text(p, "worked") for p in PROBLEMS]
    wrong = [f"<think></think><answer>{p.answer}9</answer>" for p in PROBLEMS]
    assert accuracy_reward(**batch(right, ROWS)) == [1.0] * 20
    assert accuracy_reward(**batch(wrong, ROWS)) == [0.0] * 20
    messages = [[{"role": "assistant", "content": t}] for t in right]
    assert accuracy_reward(**batch(messages, ROWS)) == [1.0] * 20
    parts = [[{"role": "assistant", "content": [{"type": "text", "text": t}]}] for t in right]
    assert accuracy_reward(**batch(parts, ROWS)) == [1.0] * 20
    # the last answer counts, the format does not
    assert accuracy_reward(**batch([f"<answer>0</answer><answer>{p.answer}</answer>"
                                    for p in PROBLEMS], ROWS)) == [1.0] * 20


def test_accuracy_reward_returns_none_when_it_cannot_judge():
    text = ["<think></think><answer>3</answer>"] * 3
    assert accuracy_reward(None, text, answer=["3"] * 3, family=["add", "chess", None]) == [
        1.0, None, None]
    assert accuracy_reward(None, text, answer=["3"] * 3) == [None] * 3
    assert accuracy_reward(None, text, answer=[None, "3", "3"], family=["add"] * 3) == [
        None, 1.0, 1.0]


def test_countdown_accepts_any_valid_expression():
    row = {"answer": "(5+3)*2", "family": "countdown", "numbers": [5, 3, 2], "target": 16,
           "question": "Make 16 from 5,3,2", "prompt": []}
    texts = [f"<answer>{e}</answer>" for e in ["2*(5+3)", "(3+5)*2", "5*3+2-1", "16", "5*3+3-2"]]
    assert accuracy_reward(**batch(texts, [row] * 5)) == [1.0, 1.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("family", FAMILIES)
def test_rewards_never_raise_on_malformed_completions(family):
    rows = [next(r for r in ROWS if r["family"] == family)] * len(MALFORMED)
    for fn in (accuracy_reward, format_reward):
        rewards = fn(**batch(MALFORMED, rows))
        assert len(rewards) == len(MALFORMED)
        assert set(rewards) <= {0.0, 1.0}, fn.__name__
    weird = [None, 42, [{"content": None}], [{"role": "assistant"}], ["text"], {"a": 1}]
    for fn in (accuracy_reward, format_reward):
        assert fn(**batch(weird, rows[:len(weird)])) == [0.0] * len(weird)


def test_random_garbage_never_raises():
    rng = random.Random(0)
    alphabet = "0123456789+-*/()., <>answerthink\n"
    texts = ["<answer>" + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
             + "</answer>" for _ in range(300)]
    rows = [ROWS[i % 20] for i in range(300)]
    assert set(accuracy_reward(**batch(texts, rows))) <= {0.0, 1.0}


def test_per_completion_repeats_each_prompt_row_for_its_completions():
    rows = {"prompt": ["p0", "p1"], "answer": ["1", "2"], "difficulty": [1, 3]}
    prompts, columns = per_completion(rows, 3)
    assert prompts == ["p0"] * 3 + ["p1"] * 3
    assert columns == {"answer": ["1"] * 3 + ["2"] * 3, "difficulty": [1] * 3 + [3] * 3}


def test_combine_rewards_by_weight_sums_like_trl():
    def half(prompts, completions, **columns):
        return [0.5, None, None]

    texts = ["<think></think><answer>3</answer>", "<answer>3</answer>", "3"]
    cols = {"answer": ["3", "3", "3"], "family": ["add", "add", "chess"]}
    per_function, totals = combine_rewards_by_weight(
        [accuracy_reward, format_reward, half], [2.0, 1.0, 4.0], texts, texts, **cols)
    assert per_function[0][:2] == [1.0, 1.0] and math.isnan(per_function[0][2])
    assert per_function[1] == [1.0, 0.0, 0.0]
    assert per_function[2][0] == 0.5 and math.isnan(per_function[2][1])
    assert totals == [2.0 + 1.0 + 2.0, 2.0, 0.0]
    _, totals = combine_rewards_by_weight([half], None, texts, texts)
    assert totals[0] == 0.5 and math.isnan(totals[1]) and math.isnan(totals[2])


def test_combine_rewards_names_the_faulty_function():
    texts = ["a", "b"]

    def exploding(prompts, completions, **columns):
        raise KeyError("answer")

    def too_short(prompts, completions, **columns):
        return [1.0]

    def wordy(prompts, completions, **columns):
        return [1.0, "good"]

    def scalar(prompts, completions, **columns):
        return 1.0

    for fn, pattern in [(exploding, "'exploding' raised KeyError"),
                        (too_short, "'too_short' returned 1 rewards for 2"),
                        (wordy, "'wordy' returned 'good'"),
                        (scalar, "'scalar' returned float")]:
        with pytest.raises(RewardFunctionError, match=pattern):
            combine_rewards_by_weight([format_reward, fn], [1.0, 1.0], texts, texts)
    partial = functools.partial(exploding)
    with pytest.raises(RewardFunctionError, match="'exploding' raised"):  # the wrapped name
        combine_rewards_by_weight([partial], None, texts, texts)
    with pytest.raises(ValueError, match="2 reward weights for 1 reward functions"):
        combine_rewards_by_weight([format_reward], [1.0, 2.0], texts, texts)


def test_format_reward_judges_the_answering_turn_of_a_conversation():
    """TRL passes a tool-calling episode as messages (assistant, tool, assistant): the last
    assistant message answers, and a tool call before it costs no format reward."""
    final = "<think>2+3=5</think><answer>5</answer>"
    episode = [{"role": "assistant", "content": "<think>use the tool</think>",
                "tool_calls": [{"type": "function",
                                "function": {"name": "calculate", "arguments": {"expr": "2+3"}}}]},
               {"role": "tool", "name": "calculate", "content": "5"},
               {"role": "assistant", "content": final}]
    assert format_reward(None, [episode]) == [1.0]
    assert format_reward(None, [episode[:2]]) == [0.0]  # never answered
    episode[-1]["content"] = final + " and more"
    assert format_reward(None, [episode]) == [0.0]


def test_format_reward_judges_the_answering_turn_of_an_episode_passed_as_one_message():
    """The lab's trainer passes a whole episode (call, the tool's turn, the answer) as the content
    of one assistant message: the turn after the last assistant header answers. Judging the whole
    text instead once scored every calling episode 0 on format, tying it with a wrong direct
    answer and stopping notebook 10's calculator run from learning."""
    episode = ('<think>use it</think><tool_call>\n{"name": "calculator", "arguments": '
               '{"expression": "2+3"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n'
               '5\n</tool_response><|im_end|>\n<|im_start|>assistant\n'
               '<think>it said 5</think><answer>5</answer>')
    assert format_reward(None, [episode]) == [1.0]
    assert format_reward(None, [[{"role": "assistant", "content": episode}]]) == [1.0]


# ---- rewards that judge nothing ----------------------------------------------------------------
RUNS = Path(__file__).resolve().parent.parent / "data" / "runs"


def test_can_judge_is_what_accuracy_reward_returns_none_for():
    assert can_judge("add", "3") and can_judge("gsm8k", "1,200")
    assert not can_judge("Add", "3") and not can_judge("add", None) and not can_judge(None, "3")


def trainer_on(random_tiny, data, **kwargs):
    model, tokenizer, _ = random_tiny
    config = preset("grpo", max_steps=1, prompts_per_step=2, num_generations=2,
                    max_completion_length=4, progress=False)
    return Trainer(config, model=model, tokenizer=tokenizer, train_dataset=data, **kwargs)


def with_column(data, name, values):
    return data.remove_columns(name).add_column(name, list(values))


@pytest.mark.parametrize("column, values, message", [
    ("family", ["Add"] * 8, (r"column 'family' holds 'Add', not a family the checker knows "
                             r"\('add', 'sub'")),
    ("family", ["Add", "SUB"] * 4, r"column 'family' holds 'Add', 'SUB', not"),
    ("answer", [None] * 8, r"column 'answer' is None in the 8 row\(s\) of a known family"),
])
def test_training_data_the_accuracy_reward_cannot_judge_is_refused(random_tiny, column, values,
                                                                   message):
    """The accuracy reward returned None for every row, its accuracy was NaN everywhere and the
    run trained on the format reward alone, without a word."""
    data = with_column(random_tiny[2].select(range(8)), column, values)
    with pytest.raises(ValueError, match=rf"^train_dataset: the accuracy reward can judge none of "
                                         rf"its 8 rows: {message}"):
        trainer_on(random_tiny, data)


def test_data_the_accuracy_reward_judges_in_part_or_does_not_use_is_accepted(random_tiny):
    from labkit.rewards.environment import environment_reward

    data = with_column(random_tiny[2].select(range(8)), "family", ["Add"] + ["add"] * 7)
    assert len(trainer_on(random_tiny, data).train_dataset) == 8  # None where it cannot judge
    game = guessing_dataset(4, seed=0)
    with pytest.raises(ValueError, match="holds 'guess'"):  # the default rewards on the game
        trainer_on(random_tiny, game, environment_factory=GuessingEnv)
    # the game judged by its environment, in training and in evaluation
    trainer = trainer_on(random_tiny, game, eval_dataset=guessing_dataset(2, seed=1),
                         reward_funcs=[environment_reward], environment_factory=GuessingEnv)
    assert len(trainer.eval_dataset) == 2


def test_environment_rewards_without_an_environment_are_refused(random_tiny):
    from labkit.rewards.environment import environment_reward, turn_reward

    for fn, reads in ((environment_reward, "get_reward"), (turn_reward, "turn_rewards")):
        with pytest.raises(ValueError, match=rf"'{fn.__name__}' reads each episode's "
                                             rf"environment.{reads}, and there is no "
                                             rf"environment \(environment_factory is None\)"):
            trainer_on(random_tiny, random_tiny[2], reward_funcs=[format_reward, fn])


def test_an_environment_reward_is_checked_like_any_reward():
    """environment_reward turned get_reward() into float(): the text "0.5" trained as 0.5."""
    from labkit.rewards.environment import environment_reward

    class Env(GuessingEnv):
        def get_reward(self):
            return "0.5"

    with pytest.raises(RewardFunctionError, match=r"'environment_reward' returned '0.5' \(str\)"):
        combine_rewards_by_weight([environment_reward], None, ["p"], ["c"],
                                  environments=[Env()])


def write_spec(tmp_path, **spec):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"preset": "grpo", **spec}), encoding="utf-8")
    return path


@pytest.mark.parametrize("spec, message", [
    ({"reward_funcs": ["environment"]},
     (r"'reward_funcs' names 'environment': .*environment.get_reward, and there is no "
      r"environment \(the spec names no 'environment'\)")),
    ({"reward_funcs": ["format", "turns"], "environment": "calculator"},
     (r"'reward_funcs' names 'turns': .*CalculatorEnv has no turn_rewards \('environment' is "
      r"'calculator'\)")),
    ({"reward_funcs": ["environment"], "environment": "no_tools"},
     r"NoTools has no get_reward \('environment' is 'no_tools'\)"),
    ({"reward_funcs": ["environment"], "environment": "guessing", "data": {"families": ["add"]}},
     r"'environment' 'guessing' brings its own rows .* would replace the spec's 'data'"),
    ({"reward_funcs": ["turns"], "environment": "guessing", "eval_data": {}},
     r"would replace the spec's 'eval_data'"),
    ({"environment": "guessing"},
     r"'guessing' with the accuracy reward \(the default rewards hold it\): .* family 'guess'"),
])
def test_a_spec_whose_rewards_judge_nothing_is_refused_when_read(tmp_path, spec, message):
    """Such a spec ran steps that did nothing (reward and loss NaN, grad_norm 0), or trained the
    game on other rows than its 'data' said, without a word."""
    with pytest.raises(ValueError, match=message):
        load_spec(write_spec(tmp_path, **spec))


def test_the_shipped_specs_and_the_game_with_its_rewards_load(tmp_path):
    for spec in sorted(RUNS.glob("*/*.json")):
        load_spec(spec)
    assert load_spec(write_spec(tmp_path, environment="guessing",
                                reward_funcs=["format", "turns"]))["environment"] == "guessing"
