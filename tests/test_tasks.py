"""Tests for labkit.tasks: generation, reference solutions, checking, splits and SFT data."""

import json
import random
import re
from collections import Counter
from statistics import mean

import pytest

from labkit import tasks
from labkit.rewards import accuracy_reward, extract_answer, format_reward
from labkit.tasks import (
    DIFFICULTIES,
    FAMILIES,
    STYLES,
    Problem,
    build,
    check_answer,
    check_countdown,
    format_expression,
    generate_problems,
    make_problem,
    parse_expression,
    solution_text,
    to_row,
)

TAGS = ("<think>", "</think>", "<answer>", "</answer>")
MANY = generate_problems(20 * 40, seed=123)  # 40 problems per family x difficulty


def tokens(text):
    """Length in tokens of the lab's character tokenizer (each tag is one token)."""
    return len(text) - sum(text.count(tag) * (len(tag) - 1) for tag in TAGS)


def columns(problems):
    rows = [to_row(p) for p in problems]
    return {key: [row[key] for row in rows] for key in rows[0] if key != "prompt"}


def test_generation_is_deterministic_and_seeded():
    assert generate_problems(60, seed=5) == generate_problems(60, seed=5)
    assert generate_problems(60, seed=5) != generate_problems(60, seed=6)
    a, b = random.Random(9), random.Random(9)
    assert make_problem("countdown", 4, a) == make_problem("countdown", 4, b)


def test_generation_is_balanced_and_labelled():
    cells = Counter((p.family, p.difficulty) for p in MANY)
    assert set(cells) == {(f, d) for f in FAMILIES for d in DIFFICULTIES}
    assert set(cells.values()) == {40}
    for p in MANY:
        assert p.id.startswith(f"{p.family}-{p.difficulty}-")
    only = generate_problems(8, seed=1, families=("sort",), difficulties=(2, 3))
    assert [(p.family, p.difficulty) for p in only] == [("sort", 2), ("sort", 3)] * 4


def test_bad_family_or_difficulty_is_a_clear_error():
    with pytest.raises(ValueError, match="family"):
        make_problem("div", 1, random.Random(0))
    with pytest.raises(ValueError, match="difficulty"):
        make_problem("add", 5, random.Random(0))
    with pytest.raises(ValueError, match="too few distinct"):
        generate_problems(200, seed=0, families=("sub",), difficulties=(1,), unique=True)


def test_sizes_grow_with_difficulty():
    for p in MANY:
        d, q = p.difficulty, p.question
        if p.family in ("add", "sub", "mul"):
            a, b = map(int, re.fullmatch(r"(\d+)[-+*](\d+)=\?", q).groups())
            digits = (len(str(a)), len(str(b)))
            if p.family == "mul":
                assert digits == {1: (1, 1), 2: (2, 1), 3: (2, 2), 4: (3, 2)}[d]
            else:
                assert digits == (d, d)
            if p.family == "sub" and d < 4:
                assert a >= b
        elif p.family == "sort":
            assert len(p.answer.split(",")) == d + 2
        else:
            assert len(p.numbers) == {1: 2, 2: 3, 3: 3, 4: 4}[d]
    assert any(int(p.answer) < 0 for p in MANY if p.family == "sub" and p.difficulty == 4)


def test_every_countdown_is_solvable_by_its_answer():
    for p in (p for p in MANY if p.family == "countdown"):
        assert p.question == f"Make {p.target} from {','.join(map(str, p.numbers))}"
        assert p.target not in p.numbers and p.target > 0
        assert check_countdown(p.answer, p.numbers, p.target)
        assert check_answer("countdown", p.answer, p)
        # without numbers/target columns the checker recovers them from the canonical answer
        assert check_answer("countdown", p.answer, {"answer": p.answer})


@pytest.mark.parametrize("style", STYLES)
def test_every_solution_is_correct_and_well_formed(style):
    texts = [solution_text(p, style) for p in MANY]
    cols = columns(MANY)
    assert format_reward(None, texts) == [1.0] * len(texts)
    assert accuracy_reward(None, texts, **cols) == [1.0] * len(texts)
    for p, text in zip(MANY, texts):
        assert extract_answer(text) == p.answer
        assert text.endswith(f"<answer>{p.answer}</answer>")
        plain = text
        for tag in TAGS:
            plain = plain.replace(tag, "")
        assert re.fullmatch(r"[\x20-\x7e\n]*", plain), text
        assert re.fullmatch(r"[\x20-\x7e\n]*", p.question)


def test_styles_rise_in_length_and_worked_fits_the_budget():
    for p in MANY:
        direct, worked, verbose = (tokens(solution_text(p, s)) for s in STYLES)
        assert direct < worked < verbose, p
        cap = 85 if p.family in ("add", "sub", "sort") else 120
        assert worked <= cap, solution_text(p, "worked")
    for family in FAMILIES:
        hard = [p for p in MANY if p.family == family and p.difficulty == 4]
        ratio = mean(tokens(solution_text(p, "verbose")) for p in hard) / mean(
            tokens(solution_text(p, "worked")) for p in hard)
        assert 1.8 < ratio < 3.0, (family, ratio)


@pytest.mark.parametrize(("question", "answer", "worked"), [
    ("347+285=?", "632", "7+5=12 c1,4+8+1=13 c1,3+2+1=6"),
    ("95+87=?", "182", "5+7=12 c1,9+8+1=18 c1"),
    ("645-378=?", "267", "15-8=7 b1,14-7-1=6 b1,6-3-1=2"),
    ("1234-5678=?", "-4444", "-(5678-1234):8-4=4,7-3=4,6-2=4,5-1=4"),
    ("47*6=?", "282", "7*6=42,40*6=240,42+240=282"),
    ("347*85=?", "29495", "347*5=1735,347*80=27760,1735+27760=29495"),
    ("7*8=?", "56", "7*8=56"),
    ("Sort: 9,4,1,7", "1,4,7,9", "1:9,4,7 4:9,7 7:9"),
])
def test_worked_solutions_by_example(question, answer, worked):
    family = {"+": "add", "-": "sub", "*": "mul", "S": "sort"}[re.search(r"[-+*S]", question)[0]]
    p = Problem("x-1-000000", family, 1, question, answer)
    assert solution_text(p, "worked") == f"<think>{worked}</think><answer>{answer}</answer>"
    assert solution_text(p, "direct") == f"<think></think><answer>{answer}</answer>"
    verbose = solution_text(p, "verbose")
    assert worked in verbose and f"So the answer is {answer}." in verbose


def test_countdown_worked_is_a_search_that_ends_in_the_answer():
    p = Problem("countdown-2-000000", "countdown", 2, "Make 16 from 5,3,2", "(5+3)*2", (5, 3, 2), 16)
    assert solution_text(p, "worked") == (
        "<think>5+3=8,8+2=10 no;5+3=8,8*2=16 ok</think><answer>(5+3)*2</answer>")
    total = Problem("countdown-1-000000", "countdown", 1, "Make 9 from 4,5", "4+5", (4, 5), 9)
    assert solution_text(total, "worked") == "<think>4+5=9 ok</think><answer>4+5</answer>"


def test_expression_parser_and_printer():
    assert parse_expression("(5+3)*2") == ("*", ("+", 5, 3), 2)
    assert parse_expression(" 2 * ( 3 - 1 ) ") == ("*", 2, ("-", 3, 1))
    for bad in ["", "-5+3", "5+", "(5+3", "5+3)", "5/2", "2**3", "5 3", "abc", "()", "5+-3",
                "1" * 7, "+".join(["1"] * 40), None, 12]:
        assert parse_expression(bad) is None, bad
    for p in (p for p in MANY if p.family == "countdown"):
        tree = parse_expression(p.answer)
        assert format_expression(tree) == p.answer
    for text in ["2-(3-1)", "2-(3+1)", "(2-3)+1", "2*(3*4)", "(2+3)*(4-1)", "8-3-2"]:
        tree = parse_expression(text)
        assert tasks.evaluate(parse_expression(format_expression(tree))) == tasks.evaluate(tree)


def test_countdown_and_the_calculator_read_expressions_alike():
    """One parser (labkit.tasks.expressions) serves both: every countdown answer has the value
    the calculator computes, and what countdown refuses the calculator either refuses too or
    reads with its wider grammar (division, unary minus, longer literals)."""
    from labkit.agents.calculator import calculate

    for p in (p for p in MANY if p.family == "countdown"):
        assert calculate(p.answer) == str(tasks.evaluate(parse_expression(p.answer))) == str(
            p.target)
    assert calculate("5/2") == "5/2" and calculate("-5+3") == "-2"
    assert calculate("1" * 7) == "1111111" and parse_expression("1" * 7) is None
    assert calculate("5+") == "error: expression ends early; expected a number or '('"


def test_check_countdown_rules():
    nums, target = (5, 3, 2), 16
    assert check_countdown("(5+3)*2", nums, target)
    assert check_countdown("2*(3+5)", nums, target)
    assert not check_countdown("(5+3)*2+0", nums, target)  # 0 not given
    assert not check_countdown("(5+5)+3*2", nums, target)  # 5 used twice
    assert check_countdown("5+5", (5, 5), 10)  # repeated numbers may be used as often as given
    assert not check_countdown("(5+3)*2", nums, 17)
    assert check_countdown("(5+3)*2", nums, 16.0)  # targets read back as floats still count
    assert not check_countdown("(5+3)*2", nums, None)


def test_check_answer_rules():
    row = {"answer": "632"}
    for good in ["632", " 632 ", "+632", "6 32", "0632"]:
        assert check_answer("add", good, row), good
    for bad in ["633", "632.0", "-632", "", "six", "632,", "٦٣٢", "9" * 5000]:
        assert not check_answer("add", bad, row), bad
    assert check_answer("sub", "-12", {"answer": "-12"})
    assert check_answer("sort", "1, 4,9", {"answer": "1,4,9"})
    assert not check_answer("sort", "1,9,4", {"answer": "1,4,9"})
    assert not check_answer("sort", "1,4,9,", {"answer": "1,4,9"})
    assert not check_answer("sort", ",".join(["1"] * 500), {"answer": "1,4,9"})
    for good in ["1200", "$1,200", "1200.0", "1,200.00", "1200."]:
        assert check_answer("gsm8k", good, {"answer": "1200"}), good
    assert not check_answer("gsm8k", "1200.5", {"answer": "1200"})
    assert not check_answer("add", None, row)
    with pytest.raises(ValueError, match="cannot check family"):
        check_answer("chess", "e4", row)


def test_rows_have_a_uniform_schema():
    rows = [to_row(p) for p in MANY]
    assert all(list(r) == list(rows[0]) for r in rows)
    add = to_row(make_problem("add", 3, random.Random(1)))
    assert add["prompt"] == [{"role": "user", "content": add["question"]}]
    assert add["numbers"] == [] and add["target"] is None
    count = to_row(make_problem("countdown", 3, random.Random(1)))
    assert len(count["numbers"]) == 3 and isinstance(count["target"], int)


def test_shipped_splits_match_a_fresh_regeneration(tmp_path):
    build.main(["--out", str(tmp_path)])
    for name in ("train", "eval"):
        shipped = tasks.data_dir() / "tasks" / f"{name}.jsonl"
        assert shipped.read_bytes() == (tmp_path / f"{name}.jsonl").read_bytes(), (
            f"{shipped} is stale: run python -m labkit tasks --out data/tasks")


def test_splits_sizes_balance_and_disjointness():
    train, held_out = tasks.load_split("train"), tasks.load_split("eval")
    assert len(train) == 2000 and len(held_out) == 200
    assert set(Counter(zip(held_out["family"], held_out["difficulty"])).values()) == {10}
    assert set(Counter(zip(train["family"], train["difficulty"])).values()) == {100}
    assert len(set(held_out["question"])) == 200
    assert not set(train["question"]) & set(held_out["question"])
    assert not set(train["id"]) & set(held_out["id"])
    assert len(set(train["id"])) == 2000
    assert train.features == tasks.task_features()
    row = held_out[0]
    assert row["prompt"] == [{"role": "user", "content": row["question"]}]


def test_load_split_paths_and_errors(tmp_path, monkeypatch):
    (tmp_path / "tasks").mkdir()
    line = json.dumps(to_row(make_problem("sort", 1, random.Random(0)))) + "\n"
    (tmp_path / "tasks" / "eval.jsonl").write_text(line)
    monkeypatch.setenv("LABKIT_DATA", str(tmp_path))
    assert len(tasks.load_split("eval")) == 1
    assert len(tasks.load_split("eval", path=tmp_path / "tasks" / "eval.jsonl")) == 1
    with pytest.raises(FileNotFoundError, match="python -m labkit tasks"):
        tasks.load_split("train")
    with pytest.raises(ValueError, match="split"):
        tasks.load_split("test")


def test_load_split_keeps_the_asked_cells_and_names_a_bad_one():
    rows = tasks.load_split("eval", families="add", difficulties=(2, 3))
    assert set(zip(rows["family"], rows["difficulty"])) == {("add", 2), ("add", 3)}
    assert len(rows) == 20
    medium = tasks.medium_cells("train")
    assert set(zip(medium["family"], medium["difficulty"])) == {
        (f, d) for f in tasks.MEDIUM_CELLS["families"] for d in tasks.MEDIUM_CELLS["difficulties"]}
    assert len(medium) == 400
    with pytest.raises(ValueError, match="families must be a non-empty subset"):
        tasks.load_split("eval", families=("addition",))
    with pytest.raises(ValueError, match="difficulties"):
        tasks.load_split("eval", difficulties=(5,))
    with pytest.raises(ValueError, match="families"):
        tasks.load_split("eval", families=())


def test_sft_examples_avoid_eval_and_follow_style_weights():
    held_out = {p.question for p in tasks.eval_problems()}
    examples = tasks.sft_examples(2000, seed=0)
    assert examples == tasks.sft_examples(2000, seed=0)
    assert not {e["prompt"] for e in examples} & held_out
    assert set(examples[0]) == {"prompt", "completion", "family", "difficulty", "style"}
    styles = Counter(e["style"] for e in examples)
    assert 0.3 < styles["direct"] / 2000 < 0.5 and 0.1 < styles["verbose"] / 2000 < 0.3
    worked = tasks.sft_examples(40, seed=1, style_weights={"worked": 1.0})
    assert {e["style"] for e in worked} == {"worked"}
    assert format_reward(None, [e["completion"] for e in worked]) == [1.0] * 40
    for e in worked:  # check each answer against the prompt alone
        given = extract_answer(e["completion"])
        if e["family"] == "sort":
            values = sorted(int(v) for v in e["prompt"].removeprefix("Sort: ").split(","))
            assert given == ",".join(map(str, values))
        elif e["family"] == "countdown":
            target, numbers = re.fullmatch(r"Make (\d+) from ([\d,]+)", e["prompt"]).groups()
            assert check_countdown(given, [int(n) for n in numbers.split(",")], int(target))
        else:
            assert int(given) == tasks.evaluate(parse_expression(e["prompt"].removesuffix("=?")))
    for bad in ({"terse": 1.0}, {"direct": -1.0}, {"direct": 0.0}):
        with pytest.raises(ValueError, match="style_weights"):
            tasks.sft_examples(4, style_weights=bad)
