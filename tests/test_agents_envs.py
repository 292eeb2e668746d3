"""Tests for labkit.agents: the tool-call format, the calculator and the guessing game.

The policy's text is untrusted, so every hostile input must come back as a short error reply,
quickly, and without any code of the policy's being run.
"""

import builtins
import inspect
import itertools
import json
import math
import random
import time
from fractions import Fraction

import pytest
from transformers import AutoTokenizer
from transformers.utils import get_json_schema

from labkit.agents import tool_calls as tool_calls_module
from labkit.agents.calculator import (
    MAX_DEPTH,
    MAX_EXPRESSION_CHARS,
    MAX_LITERAL_DIGITS,
    CalculatorEnv,
    calculate,
    calculator_demonstration,
    format_value,
)
from labkit.agents.guessing import (
    MAX_TURNS,
    GuessingEnv,
    expert_transcript,
    guessing_dataset,
    turns_needed,
)
from labkit.agents.tool_calls import (
    MAX_TOOL_CALL_CHARS,
    ToolCall,
    ToolCallError,
    environment_tools,
    format_tool_call,
    format_tool_response,
    last_tool_call,
    parse_tool_call,
    run_tool_call,
)
from labkit.models import TINY_MODEL_DIR
from labkit.rewards import extract_answer
from labkit.tasks import check_answer, generate_problems, to_row

TIME_LIMIT_S = 0.05
REPLY_CHARS = 80  # a reply the model reads stays one short line


def timed(fn, *args):
    start = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - start


def assert_short_line(text: str):
    assert "\n" not in text and len(text) <= REPLY_CHARS, text
    assert text.isascii(), text


# ---------------------------------------------------------------------------------------------
# tool calls


def test_format_tool_call_is_qwens_text():
    text = format_tool_call("calculator", {"expression": "425*13"})
    assert text == ('<tool_call>\n{"name": "calculator", "arguments": {"expression": "425*13"}}'
                    '\n</tool_call>')
    assert format_tool_response("5525") == "<tool_response>\n5525\n</tool_response>"
    # keys stay in the given order
    assert '{"b": 1, "a": 2}' in format_tool_call("f", {"b": 1, "a": 2})


@pytest.mark.parametrize("name, arguments", [
    ("calculator", {"expression": "425*13"}),
    ("guess", {"code": "007"}),
    ("lookup", {"query": "naïve \"quoted\" \\ text", "k": 3, "p": 0.5, "exact": True,
                "lang": None}),
    ("no_arguments", {}),
])
def test_format_then_parse_round_trip(name, arguments):
    text = "<think>x</think>" + format_tool_call(name, arguments)
    body = last_tool_call(text)
    for given in (body, format_tool_call(name, arguments)):  # the body, or the whole block
        call = parse_tool_call(given)
        assert call == ToolCall(name, arguments)
        assert list(call.arguments) == list(arguments)


@pytest.mark.parametrize("bad_name, bad_arguments", [
    ("two words", {}), ("", {}), (7, {}), ("f", ["x"]), ("f", None)])
def test_format_tool_call_refuses_bad_input(bad_name, bad_arguments):
    with pytest.raises((TypeError, ValueError), match="name|arguments"):
        format_tool_call(bad_name, bad_arguments)


HOSTILE_CALLS = [
    ("calculator(425*13)", "invalid JSON"),
    ('{"name": "calculator", "arguments": {"expression": "1"}', "invalid JSON"),
    ("[1, 2]", "must be a JSON object, got array"),
    ('"calculator"', "must be a JSON object, got string"),
    ("null", "must be a JSON object, got null"),
    ('{"arguments": {}}', "missing key 'name'"),
    ('{"name": "f"}', "missing key 'arguments'"),
    ('{"name": "f", "arguments": {}, "extra": 1}', "unknown key 'extra'"),
    ('{"name": 7, "arguments": {}}', "'name' must be a string, got number"),
    ('{"name": "os.system", "arguments": {}}', "no tool is named"),
    ('{"name": "f", "arguments": [1]}', "'arguments' must be an object, got array"),
    ('{"name": "f", "arguments": "x=1"}', "'arguments' must be an object, got string"),
    ('{"name": "f", "arguments": {"x": {"y": 1}}}', "argument 'x' must be a JSON scalar"),
    ('{"name": "f", "arguments": {"x": [1]}}', "argument 'x' must be a JSON scalar"),
    ('{"name": "f", "arguments": {"x": NaN}}', "NaN is not allowed"),
    ('{"name": "f", "arguments": {"x": -Infinity}}', "-Infinity is not allowed"),
    ('{"name": "f", "arguments": {"x": 1e999}}', "out of range"),
    ('{"name": "f", "name": "g", "arguments": {}}', "key 'name' is repeated"),
    ("[" * (MAX_TOOL_CALL_CHARS - 1), "nested too deeply"),
    ("x" * (MAX_TOOL_CALL_CHARS + 1), "the limit is 2000"),
    ("{" * 10**6, "the limit is 2000"),
    ("", "invalid JSON"),
    ("\x00", "invalid JSON"),
]


@pytest.mark.parametrize("text, reason", HOSTILE_CALLS, ids=[r for _, r in HOSTILE_CALLS])
def test_parse_tool_call_refuses_with_a_short_specific_message(text, reason):
    start = time.perf_counter()
    with pytest.raises(ToolCallError) as caught:
        parse_tool_call(text)
    assert time.perf_counter() - start < TIME_LIMIT_S
    assert reason in str(caught.value)
    assert_short_line(str(caught.value))


def test_parse_tool_call_refuses_non_text():
    for value in (None, 5, b'{"name": "f", "arguments": {}}', {"name": "f", "arguments": {}}):
        with pytest.raises(ToolCallError, match="must be text"):
            parse_tool_call(value)


def test_oversized_calls_are_refused_before_parsing(monkeypatch):
    def no_parsing(*args, **kwargs):
        raise AssertionError("json.loads was called")

    monkeypatch.setattr(tool_calls_module.json, "loads", no_parsing)
    with pytest.raises(ToolCallError, match="limit"):
        parse_tool_call(" " * (MAX_TOOL_CALL_CHARS + 1))
    with pytest.raises(AssertionError):  # the patch is live: a short call does reach json.loads
        parse_tool_call("{}")


@pytest.mark.parametrize("text, body", [
    ("<tool_call>A</tool_call>", "A"),
    ("think<tool_call>\nA\n</tool_call>", "\nA\n"),
    ("<tool_call>A</tool_call> and <tool_call>B</tool_call>", "B"),
    ("<tool_call>A</tool_call><tool_call>B", "A"),  # the final complete call
    ("<tool_call><tool_call>A</tool_call>", "A"),
    ("<tool_call>A</tool_call></tool_call>", "A"),
    ("<tool_call>A</tool_call></tool_call><tool_call>B", "A"),
    ("<tool_call></tool_call>", ""),
    ("no call here", None),
    ("<tool_call>A", None),
    ("A</tool_call>", None),
    ("</tool_call><tool_call>A", None),
    ("", None),
    (None, None),
])
def test_last_tool_call_rule(text, body):
    assert last_tool_call(text) == body


def test_last_tool_call_on_a_million_characters():
    text = "<tool_call>" * 100_000 + "x" * 10**6 + "</tool_call>"
    body, seconds = timed(last_tool_call, text)
    assert body == "x" * 10**6 and seconds < TIME_LIMIT_S


def test_run_tool_call_dispatches_and_explains():
    env = CalculatorEnv()
    env.reset(answer="5525")
    assert run_tool_call(env, last_tool_call(format_tool_call(
        "calculator", {"expression": "425*13"}))) == "5525"
    replies = {
        '{"name": "calc", "arguments": {"expression": "1"}}':
            "error: no tool is named 'calc'; tools: calculator",
        '{"name": "reset", "arguments": {}}': "error: no tool is named 'reset'; tools: calculator",
        '{"name": "calculator", "arguments": {"expr": "1"}}':
            "error: unknown argument 'expr'; calculator takes expression",
        '{"name": "calculator", "arguments": {}}':
            "error: missing argument 'expression'; calculator takes expression",
        '{"name": "calculator", "arguments": {"expression": 12}}':
            "error: expression must be a string, got int",
        "oops": "error: invalid JSON at 0: expecting value",
    }
    for body, reply in replies.items():
        assert run_tool_call(env, body) == reply
    # calls that reached the tool are counted (the first and the non-string one), errors too
    assert (env.tool_calls, env.tool_errors) == (2, 1)


# ---------------------------------------------------------------------------------------------
# calculator: exact values


EXACT_VALUES = [
    ("425*13", "5525"),
    ("2+3*4", "14"),
    ("(2+3)*4", "20"),
    ("2*3+4*5", "26"),
    ("10-4-3", "3"),  # left to right
    ("100/10/5", "2"),
    ("2*3/4", "3/2"),
    ("2/4*3", "3/2"),
    ("-5", "-5"),
    ("--5", "5"),
    ("-(2-7)", "5"),
    ("3*-2", "-6"),
    ("-3*-3", "9"),
    ("2--3", "5"),
    ("-2*3+1", "-5"),
    ("1/3+1/6", "1/2"),
    ("-7/2", "-7/2"),
    ("7/-2", "-7/2"),
    ("6/4", "3/2"),
    ("0/5", "0"),
    ("1/3*3", "1"),
    ("007", "7"),
    ("  1 + 2 ", "3"),
    ("((((1))))", "1"),
    ("9" * 30 + "*" + "9" * 30, str((10**30 - 1) ** 2)),
    ("123456789012345678901234567890+1", "123456789012345678901234567891"),
    ("-" + "9" * 30 + "*1" + "0" * 29, str(-(10**30 - 1) * 10**29)),
    ("1/" + "9" * 30 + "/" + "9" * 29, f"1/{(10**30 - 1) * (10**29 - 1)}"),
    ("(" * MAX_DEPTH + "1" + ")" * MAX_DEPTH, "1"),
    ("1" + "+1" * ((MAX_EXPRESSION_CHARS - 1) // 2), str(1 + (MAX_EXPRESSION_CHARS - 1) // 2)),
    ("-" * 150 + "7", "7"),
]


@pytest.mark.parametrize("expression, value", EXACT_VALUES, ids=[e[:20] for e, _ in EXACT_VALUES])
def test_calculator_exact_values(expression, value):
    assert calculate(expression) == value


def _random_expression(rng: random.Random, depth: int) -> tuple[str, Fraction]:
    """A random expression and its value, computed here on Fractions (fully parenthesised)."""
    if depth == 0 or rng.random() < 0.3:
        number = rng.randrange(0, 1000)
        return str(number), Fraction(number)
    if rng.random() < 0.15:
        text, value = _random_expression(rng, depth - 1)
        return f"-({text})", -value
    (left, a), (right, b) = _random_expression(rng, depth - 1), _random_expression(rng, depth - 1)
    operator = rng.choice("+-*/")
    if operator == "/" and b == 0:
        operator = "+"
    value = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else None}[operator]
    return f"({left}){operator}({right})", value


def test_calculator_agrees_with_fraction_arithmetic_on_random_expressions():
    rng = random.Random(0)
    checked = 0
    while checked < 300:
        text, value = _random_expression(rng, 4)
        if len(text) > MAX_EXPRESSION_CHARS or text.count("(") > MAX_DEPTH:
            continue
        assert calculate(text) == format_value(value), text
        checked += 1


# ---------------------------------------------------------------------------------------------
# calculator: hostile input

HOSTILE_EXPRESSIONS = [
    ("", "empty"),
    ("   ", "empty"),
    ("x" * 10**6, "1000000 characters"),
    ("(" * 10**5, "100000 characters"),
    ("1+" * 10**5 + "1", "characters; the limit is 200"),
    ("1" * (MAX_EXPRESSION_CHARS + 1), "the limit is 200"),
    ("(" * (MAX_DEPTH + 1) + "1" + ")" * (MAX_DEPTH + 1), "nest over 32"),
    ("9" * (MAX_LITERAL_DIGITS + 1), "31 digits"),
    ("__import__('os').system('echo hi')", "'_' at 0 is not allowed"),
    ("().__class__", "'.' at 2 is not allowed"),
    ("1e309", "'e' at 1 is not allowed"),
    ("1.5", "'.' at 1"),
    ("\x00", "'\\x00' at 0"),
    ("1+\x002", "'\\x00' at 2"),
    ("٣+1", "digit '\\u0663' at 0 is not ASCII"),
    ("１+1", "digit '\\uff11' at 0 is not ASCII"),
    ("9**9**9", "unexpected '*' at 2"),
    ("2^3", "'^' at 1"),
    ("1/0", "division by zero at 1"),
    ("1/(2-2)", "division by zero at 1"),
    ("(1", "'(' at 0 is not closed"),
    ("1)", "unmatched ')' at 1"),
    ("()", "unexpected ')' at 1"),
    ("1 2", "unexpected '2' at 2"),
    ("1+", "ends early"),
    ("-", "ends early"),
    ("+1", "unexpected '+' at 0"),
    ("*", "unexpected '*' at 0"),
    ("lambda: 1", "'l' at 0"),
    ("1\n+1", "'\\n' at 1"),
    ("9" * 30 + "*" + "9" * 30 + "*10", "too large"),
    ("9" * 30 + "*" + "9" * 30 + "+" + "9" * 30 + "*" + "9" * 30, "too large"),
    ("1/" + "9" * 30 + "/" + "9" * 30 + "/9", "too many digits"),
    ("-" + "9" * 30 + "*" + "9" * 30 + "*10", "too large"),
]


@pytest.mark.parametrize("expression, reason", HOSTILE_EXPRESSIONS,
                         ids=[r for _, r in HOSTILE_EXPRESSIONS])
def test_hostile_expressions_return_a_quick_error(expression, reason):
    reply, seconds = timed(calculate, expression)
    assert seconds < TIME_LIMIT_S
    assert reply.startswith("error: ") and reason in reply, reply
    assert_short_line(reply)


@pytest.mark.parametrize("value", [None, 5, 1.5, b"1+1", ["1+1"], {"expression": "1"}, True])
def test_non_string_arguments_return_an_error(value):
    reply, seconds = timed(calculate, value)
    assert seconds < TIME_LIMIT_S
    assert reply == f"error: expression must be a string, got {type(value).__name__}"


def test_calculator_never_raises_on_random_text():
    rng = random.Random(1)
    alphabet = "0123456789+-*/() ()---//**9x.\x00٣"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        reply = calculate(text)
        assert isinstance(reply, str) and reply


def test_calculator_runs_no_python_code(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("the calculator must not evaluate Python")

    for name in ("eval", "exec", "compile", "__import__"):
        monkeypatch.setattr(builtins, name, forbidden)
    results = [calculate(text) for text in ("425*13", "-(1/3)+2", "__import__('os')", "7/0")]
    monkeypatch.undo()
    assert results == ["5525", "5/3",
                       "error: character '_' at 0 is not allowed; use 0-9 + - * / ( )",
                       "error: division by zero at 1"]


# ---------------------------------------------------------------------------------------------
# the calculator environment and its demonstrations


def test_calculator_env_counts_calls_and_errors_per_episode():
    env = CalculatorEnv()
    assert env.reset(prompt=[{"role": "user", "content": "425*13=?"}], answer="5525",
                     family="mul") is None
    assert env.answer == "5525" and env.row["family"] == "mul"
    assert [env.calculator(e) for e in ("425*13", "425*", "1/0", "2+2")] == [
        "5525", "error: expression ends early; expected a number or '('",
        "error: division by zero at 1", "4"]
    assert (env.tool_calls, env.tool_errors) == (4, 2)
    other = CalculatorEnv()
    other.reset(answer="1")
    assert (other.tool_calls, other.tool_errors, env.tool_calls) == (0, 0, 4)
    env.reset(answer="7")
    assert (env.tool_calls, env.tool_errors, env.answer) == (0, 0, "7")


def test_calculator_demonstrations_solve_the_task_suite():
    rows = [to_row(p) for p in generate_problems(200, seed=3)
            if p.family in ("add", "sub", "mul", "countdown")]
    assert len(rows) >= 100
    for row in rows:
        (call_text, reply), (answer_text, last_reply) = calculator_demonstration(row, True)
        call = parse_tool_call(last_tool_call(call_text))
        assert call.name == "calculator" and last_reply is None
        assert reply == CalculatorEnv().calculator(**call.arguments)
        assert check_answer(row["family"], extract_answer(answer_text), row)
        assert call_text.startswith("<think></think><tool_call>") and len(call_text) < 120
        [(direct, none)] = calculator_demonstration(row, False)
        assert none is None and check_answer(row["family"], extract_answer(direct), row)
    with pytest.raises(ValueError, match="row\\['family'\\] is 'sort'"):
        calculator_demonstration({"family": "sort", "answer": "1,2"}, True)


# ---------------------------------------------------------------------------------------------
# the guessing game


def test_guessing_replies_on_hand_checked_games():
    env = GuessingEnv()
    env.reset(code="347")
    assert env.guess("363") == "=<> 3 0-5 4-9"  # 4 < 6 so 0-5; 7 > 3 so 4-9
    assert env.guess("352") == "=<> 3 0-4 4-9"  # 2 is below the range: 4-9 stays
    assert env.guess("348") == "==< 3 4 4-7"
    assert env.guess("347") == "=== 3 4 7 solved"
    assert (env.turns, env.solved, env.get_reward()) == (4, True, 1.0)
    assert env.guess("347") == "the code is solved; give your answer" and env.turns == 4

    env.reset(code="09")
    assert (env.turns, env.solved, env.turn_rewards) == (0, False, [])
    assert env.guess("90") == "<> 0-8 1-9"
    assert env.guess("00") == "=> 0 1-9"
    assert env.guess("05") == "=> 0 6-9"
    assert env.guess("08") == "=> 0 9"
    assert env.guess("09") == "== 0 9 solved"


def _consistent_digits(hints: list[tuple[str, str]], position: int) -> list[int]:
    """The digits one position can hold given every (guess, hint) so far, by brute force."""
    def allowed(digit: int, guess: str, hint: str) -> bool:
        guessed = int(guess[position])
        return {"=": digit == guessed, "<": digit < guessed, ">": digit > guessed}[hint[position]]

    return [d for d in range(10) if all(allowed(d, g, h) for g, h in hints)]


def test_ranges_are_the_intersection_of_all_constraints():
    rng = random.Random(2)
    for game in range(300):
        length = 2 + game % 3
        env = GuessingEnv()
        env.reset(code="".join(rng.choice("0123456789") for _ in range(length)), max_turns=8)
        history = []
        codes_left = 10**length
        for _ in range(8):
            guess = "".join(rng.choice("0123456789") for _ in range(length))
            reply = env.guess(guess)
            hints, *shown = reply.removesuffix(" solved").split(" ")
            history.append((guess, hints))
            digit_sets = [_consistent_digits(history, i) for i in range(length)]
            expected = [str(s[0]) if len(s) == 1 else f"{s[0]}-{s[-1]}" for s in digit_sets]
            assert shown == expected, (env.secret, history)
            assert all(s == list(range(s[0], s[-1] + 1)) for s in digit_sets)  # contiguous
            codes_now = math.prod(len(s) for s in digit_sets)
            reward = env.turn_rewards[-1]
            assert reward == pytest.approx(math.log(codes_left / codes_now)
                                           / math.log(10**length))
            assert 0.0 <= reward <= 1.0
            codes_left = codes_now
            if env.solved:
                break
        assert env.solved == (hints == "=" * length)
        if codes_left == 1:  # the code is pinned down: the turn rewards share exactly 1
            assert sum(env.turn_rewards) == pytest.approx(1.0)


MALFORMED_GUESSES = [
    ("34", "3 digits, got 2 characters"),
    ("3477", "3 digits, got 4 characters"),
    ("", "3 digits, got 0 characters"),
    ("3a7", "digits 0-9, got '3a7'"),
    ("٣٤٧", "digits 0-9, got '\\u0663\\u0664\\u0667'"),
    (" 47", "digits 0-9, got ' 47'"),
    ("-47", "digits 0-9"),
    ("7" * 10**6, "got 1000000 characters"),
    (347, "string of 3 digits, got int"),
    (None, "string of 3 digits, got NoneType"),
    (["3", "4", "7"], "got list"),
]


@pytest.mark.parametrize("guess, reason", MALFORMED_GUESSES, ids=[r for _, r in MALFORMED_GUESSES])
def test_malformed_guesses_get_an_error_and_cost_a_turn(guess, reason):
    env = GuessingEnv()
    env.reset(code="347")
    reply, seconds = timed(env.guess, guess)
    assert seconds < TIME_LIMIT_S
    assert reply.startswith("error: code must be") and reason in reply, reply
    assert_short_line(reply)
    assert (env.turns, env.turn_rewards, env.solved) == (1, [0.0], False)
    assert env.ranges == [(0, 9)] * 3
    assert env.guess("347").endswith("solved")


def test_guesses_past_max_turns_are_refused():
    env = GuessingEnv()
    env.reset(code="55", max_turns=3)
    for _ in range(3):
        assert not env.guess("00").endswith("solved")
    assert env.guess("55") == "no guesses left (the limit is 3)"
    assert (env.turns, env.solved, env.get_reward(), len(env.turn_rewards)) == (3, False, 0.0, 3)


def test_reset_validates_the_row_and_isolates_instances():
    env = GuessingEnv()
    with pytest.raises(RuntimeError, match="reset"):
        env.guess("12")
    for row, field in [({}, "code"), ({"code": "1"}, "code"), ({"code": "12345"}, "code"),
                       ({"code": 12}, "code"), ({"code": "1a"}, "code"),
                       ({"code": "12", "max_turns": 0}, "max_turns"),
                       ({"code": "12", "max_turns": "6"}, "max_turns"),
                       ({"code": "12", "difficulty": 3}, "difficulty")]:
        with pytest.raises(ValueError, match=f"row\\['{field}'\\]"):
            env.reset(**row)
    first, second = GuessingEnv(), GuessingEnv()
    first.reset(code="12", prompt=[{"role": "user", "content": "Guess 2 digits"}], id="a")
    second.reset(code="98")
    first.guess("55")
    assert (second.turns, second.turn_rewards, second.ranges) == (0, [], [(0, 9), (0, 9)])
    assert first.ranges == [(0, 4), (0, 4)] and first.turn_rewards is not second.turn_rewards
    first.reset(code="7777")
    assert (first.turns, first.turn_rewards, first.solved, first.max_turns) == (0, [], False,
                                                                               MAX_TURNS)
    assert first.ranges == [(0, 9)] * 4 and first.get_reward() == 0.0


def test_turns_needed_is_the_binary_search_worst_case():
    assert turns_needed([(0, 9)]) == 4
    assert turns_needed([(3, 3), (0, 9), (5, 6)]) == 4
    assert [turns_needed([(0, size - 1)]) for size in range(1, 11)] == [1, 2, 2, 3, 3, 3, 3, 4,
                                                                         4, 4]


def test_the_expert_solves_every_code_within_max_turns():
    rng = random.Random(0)
    longest = 0
    for length in (2, 3, 4):
        for digits in itertools.product("0123456789", repeat=length):
            code = "".join(digits)
            turns = expert_transcript({"code": code}, rng)
            *guesses, (answer_text, last_reply) = turns
            assert len(guesses) <= turns_needed([(0, 9)]) <= MAX_TURNS
            assert guesses[-1][1].endswith(" solved") and last_reply is None
            assert answer_text == f"<think></think><answer>{code}</answer>"
            longest = max(longest, *(len(text) for text, _ in turns))
    assert longest < 120


def test_expert_turns_replay_through_the_tool_call_protocol():
    row = {"code": "2803", "max_turns": MAX_TURNS}
    assert expert_transcript(row, random.Random(0))[0][0] == (
        '<think>0-9:4 0-9:4 0-9:4 0-9:4</think><tool_call>\n{"name": "guess", "arguments": '
        '{"code": "4444"}}\n</tool_call>')
    turns = expert_transcript(row, random.Random(5), mistakes=0.5)
    env = GuessingEnv()
    env.reset(**row)
    for text, reply in turns[:-1]:
        assert text.startswith("<think>") and "</think><tool_call>\n" in text
        assert run_tool_call(env, last_tool_call(text)) == reply
    assert env.solved and env.turns == len(turns) - 1
    quiet = expert_transcript(row, random.Random(0), think=False)
    assert all(text.startswith("<think></think><tool_call>") for text, _ in quiet[:-1])
    assert [reply for _, reply in quiet] == [reply for _, reply in expert_transcript(
        row, random.Random(0))]


def test_expert_refuses_a_turn_budget_binary_search_cannot_meet():
    with pytest.raises(ValueError, match="max_turns=2"):
        expert_transcript({"code": "00", "max_turns": 2, "id": "x"}, random.Random(0))


def _episode_tokens(tokenizer, length: int, think: bool) -> tuple[list[int], list[int]]:
    """Token counts of every mistake-free episode of ``length`` digits in the tiny chat template,
    as tokenized and as they would be were the four tool tags single tokens."""
    tags = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
    texts = []
    for digits in itertools.product("0123456789", repeat=length):
        messages = [{"role": "user", "content": f"Guess {length} digits"}]
        for text, reply in expert_transcript({"code": "".join(digits)}, random.Random(0),
                                              think=think):
            messages.append({"role": "assistant", "content": text})
            if reply is not None:
                messages.append({"role": "user", "content": format_tool_response(reply)})
        texts.append(tokenizer.apply_chat_template(messages, tokenize=False))
    counts = [len(ids) for ids in tokenizer(texts)["input_ids"]]
    single = [n - sum((len(tag) - 1) * text.count(tag) for tag in tags)
              for n, text in zip(counts, texts)]
    return counts, single


def test_episode_token_counts_in_the_docstring():
    tokenizer = AutoTokenizer.from_pretrained(TINY_MODEL_DIR)

    def mean_and_max(counts):
        return round(sum(counts) / len(counts)), max(counts)

    counts, single = _episode_tokens(tokenizer, 2, think=True)
    assert (mean_and_max(counts), max(single)) == ((538, 624), 424)
    assert max(_episode_tokens(tokenizer, 2, think=False)[1]) == 388
    counts, single = _episode_tokens(tokenizer, 3, think=True)
    assert (mean_and_max(counts), max(single)) == ((603, 665), 465)


def test_expert_mistakes_cost_turns_but_never_the_game():
    rng = random.Random(3)
    codes = ["".join(rng.choice("0123456789") for _ in range(4)) for _ in range(300)]
    clean = sum(len(expert_transcript({"code": c}, random.Random(0))) for c in codes)
    sloppy = [expert_transcript({"code": c}, random.Random(i), mistakes=0.7)
              for i, c in enumerate(codes)]
    assert sum(len(t) for t in sloppy) > clean + 100  # the mistakes happened
    for code, turns in zip(codes, sloppy):
        assert len(turns) - 1 <= MAX_TURNS and turns[-2][1].endswith(" solved")
        assert extract_answer(turns[-1][0]) == code
    with pytest.raises(ValueError, match="mistakes"):
        expert_transcript({"code": "12"}, random.Random(0), mistakes=1.5)


def test_guessing_dataset_is_seeded_and_well_formed():
    first, again = guessing_dataset(60, seed=4), guessing_dataset(60, seed=4)
    assert first.to_list() == again.to_list() and first.data.table.equals(again.data.table)
    assert guessing_dataset(60, seed=5)["code"] != first["code"]
    rows = guessing_dataset(300, seed=4, difficulties=(2, 3, 4)).to_list()
    assert [r["difficulty"] for r in rows[:6]] == [2, 3, 4, 2, 3, 4]
    for row in rows:
        assert len(row["code"]) == row["difficulty"] and row["code"].isdigit()
        assert row["answer"] == row["code"] and row["family"] == "guess"
        assert row["prompt"] == [{"role": "user", "content": f"Guess {row['difficulty']} digits"}]
        assert row["max_turns"] == MAX_TURNS
    assert len({r["id"] for r in rows}) == len(rows)
    assert any(r["code"].startswith("0") for r in rows)  # leading zeros survive the Dataset
    env = GuessingEnv()
    env.reset(**rows[0])  # TRL passes every column, the prompt included
    assert env.secret == rows[0]["code"]
    for bad, field in [({"n": 0}, "n must"), ({"difficulties": (5,)}, "difficulties"),
                       ({"difficulties": ()}, "difficulties")]:
        with pytest.raises(ValueError, match=field):
            guessing_dataset(**{"n": 3, "seed": 0, **bad})


# ---------------------------------------------------------------------------------------------
# TRL's environment_factory contract (trl 1.16, GRPOTrainer.__init__ and the tool-calling loop)


@pytest.mark.parametrize("env_class, tools, has_reward", [
    (CalculatorEnv, ["calculator"], False), (GuessingEnv, ["guess"], True)])
def test_environments_pass_trls_probe(env_class, tools, has_reward):
    env = env_class()
    # TRL lists the class's functions, keeps reset/get_reward apart and exposes every other
    # public one as a tool; the tool schema is get_json_schema of the bound method, which
    # apply_chat_template(tools=...) calls
    members = [name for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)]
    public = [name for name in members if not name.startswith("_")]
    assert sorted(public) == sorted(["reset", *tools, *(["get_reward"] if has_reward else [])])
    assert sorted(environment_tools(env)) == tools
    for name in tools:
        schema = get_json_schema(getattr(env, name))
        function = schema["function"]
        assert function["name"] == name and function["description"]
        [parameter] = function["parameters"]["required"]
        assert function["parameters"]["properties"][parameter]["type"] == "string"
        assert json.dumps(schema)  # the chat template serialises it


def test_trl_style_calls_with_keyword_arguments():
    env = GuessingEnv()
    env.reset(**guessing_dataset(1, seed=0)[0])
    assert env.guess(code="00").startswith(("=", "<", ">"))  # TRL calls tool(**arguments)
    calculator = CalculatorEnv()
    calculator.reset()
    assert calculator.calculator(expression="1/3+1/3") == "2/3"
    assert isinstance(env.get_reward(), float)



# ---------------------------------------------------------------------------------------------
# a tool that raises: the policy gets the error as its reply (TRL answers a failing tool with
# {"error": str(e)}), the training step goes on


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text")


def _env_with(tool):
    """An environment whose one tool is ``probe``."""
    return type("Env", (), {"reset": lambda self, **row: None, "probe": tool})()


def _raises(error):
    def probe(self, code: str):
        raise error
    return probe


@pytest.mark.parametrize("tool, arguments, reply", [
    (_raises(KeyError("code")), {"code": "1"}, "error: probe raised KeyError: 'code'"),
    (_raises(ZeroDivisionError("division by zero")), {"code": "1"},
     "error: probe raised ZeroDivisionError: division by zero"),
    (_raises(RuntimeError("no state")), {"code": "1"}, "error: probe raised RuntimeError: no state"),
    (_raises(AssertionError()), {"code": "1"}, "error: probe raised AssertionError"),
    (_raises(_Unprintable()), {"code": "1"}, "error: probe raised _Unprintable"),
    (_raises(ValueError("one\ntwo  three \u00e9")), {"code": "1"},
     "error: probe raised ValueError: one two three \\xe9"),
    (lambda self, code, /: code, {"code": "1"},
     ("error: probe raised TypeError: <lambda>() got some positional-only arguments passed as "
      "keyword arguments: 'code'")),
    (lambda self, code: {}[code], {"code": "1"}, "error: probe raised KeyError: '1'"),
])
def test_a_tool_that_raises_is_answered_with_its_error(tool, arguments, reply):
    body = last_tool_call(format_tool_call("probe", arguments))
    assert run_tool_call(_env_with(tool), body) == reply
    assert reply.isascii()


def test_a_long_error_message_is_cut_to_one_line():
    body = last_tool_call(format_tool_call("probe", {"code": "1"}))
    reply = run_tool_call(_env_with(_raises(ValueError("x\n" * 5000))), body)
    assert reply.startswith("error: probe raised ValueError: x x x") and reply.endswith("...")
    assert "\n" not in reply and len(reply) <= len("error: probe raised ") + 160


def test_keyword_catch_all_and_star_args_tools_are_called_as_trl_calls_them():
    catch_all = _env_with(lambda self, **kw: ",".join(sorted(kw)))
    assert run_tool_call(catch_all, '{"name": "probe", "arguments": {"b": 1, "a": 2}}') == "a,b"
    star = _env_with(lambda self, *args: len(args))
    assert run_tool_call(star, '{"name": "probe", "arguments": {}}') == "0"


def test_an_interrupt_inside_a_tool_is_not_a_reply():
    body = last_tool_call(format_tool_call("probe", {"code": "1"}))
    with pytest.raises(KeyboardInterrupt):
        run_tool_call(_env_with(_raises(KeyboardInterrupt())), body)
