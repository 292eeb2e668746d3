"""labkit.rewards.judge and labkit.commands.build_judge: the GenRM score, the reward's blindness to the answer, the
shipped judge's agreement with the rule verifier, and a smoke build."""

import json
import random
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from labkit.commands.build_judge import judge_examples
from labkit.commands.build_judge import main as build_judge_main
from labkit.models import CONTROL_TOKENS, TINY_MODEL_DIR, build_char_tokenizer
from labkit.rewards.judge import (
    JUDGE_DIR,
    NO,
    YES,
    JudgeReward,
    judge_agreement,
    load_judge,
    question_of,
    verdict_ids,
    without_control_tokens,
    yes_probability,
)

#: The shipped judge's agreement with the verifier is measured by ``python -m labkit build_judge``
#: (build_info.json, ``held_out``: the eval split's add/sub problems, k = 4 samples of the tiny
#: policy, seed 1). The test re-measures on other samples (k = 1, seed 5) and asks for at least
#: that number minus this margin.
MARGIN = 0.10


class FakeJudge(torch.nn.Module):
    """A 'model' whose logits at every position are a fixed vector: P(Y) is known in advance."""

    def __init__(self, logits):
        super().__init__()
        self.logits = torch.nn.Parameter(torch.as_tensor(logits, dtype=torch.float32))

    def forward(self, input_ids, attention_mask=None, position_ids=None, logits_to_keep=0):
        b, t = input_ids.shape
        return SimpleNamespace(logits=self.logits.expand(b, t, -1))


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


def fake(tokenizer, yes_logit, no_logit):
    logits = torch.full((len(tokenizer),), -5.0)
    yes, no = verdict_ids(tokenizer)
    logits[yes], logits[no] = yes_logit, no_logit
    return FakeJudge(logits)


def test_verdicts_are_single_tokens(tokenizer):
    yes, no = verdict_ids(tokenizer)
    assert yes != no
    # "yes" would be three tokens with the character tokenizer: why the verdicts are letters
    assert len(tokenizer("yes", add_special_tokens=False)["input_ids"]) == 3
    assert (YES, NO) == ("Y", "N")


def test_equal_logits_give_one_half_and_the_score_is_a_probability(tokenizer):
    p = yes_probability(fake(tokenizer, 3.0, 3.0), tokenizer, ["1+1=?"] * 2, ["a", "b"])
    torch.testing.assert_close(p, torch.full((2,), 0.5))
    for y, n in [(4.0, 1.0), (-2.0, 6.0), (30.0, -30.0)]:
        p_yes = yes_probability(fake(tokenizer, y, n), tokenizer, ["q"], ["c"])
        p_no = yes_probability(fake(tokenizer, n, y), tokenizer, ["q"], ["c"])  # swapped: P(N)
        assert 0.0 <= float(p_yes) <= 1.0
        assert float(p_yes + p_no) == pytest.approx(1.0, abs=1e-6)
        assert float(p_yes) == pytest.approx(torch.sigmoid(torch.tensor(y - n)).item(), abs=1e-6)


class Untouchable(list):
    """A column that raises when anything reads it."""

    def _refuse(self, *args, **kwargs):
        raise AssertionError("the judge reward read the answer column")

    __getitem__ = __iter__ = __len__ = __contains__ = _refuse


def test_reward_never_reads_the_answer_column(tokenizer):
    reward = JudgeReward(fake(tokenizer, 1.0, 0.0), tokenizer)
    assert reward.__name__ == "judge_reward"
    prompts = [[{"role": "user", "content": "2+2=?"}]] * 2
    completions = [[{"role": "assistant", "content": "<think></think><answer>4</answer>"}]] * 2
    got = reward(prompts, completions, answer=Untouchable(["4", "4"]), family=["add", "add"])
    assert got == pytest.approx([torch.sigmoid(torch.tensor(1.0)).item()] * 2)
    assert reward(prompts, completions, answer=["5", "9"]) == got == reward(prompts, completions)


def test_sampled_verdicts_are_zero_or_one_and_seeded(tokenizer):
    judge = fake(tokenizer, 0.0, 0.0)
    draws = [JudgeReward(judge, tokenizer, sampled=True,
                         generator=torch.Generator().manual_seed(3))(["q"] * 64, ["c"] * 64)
             for _ in range(2)]
    assert draws[0] == draws[1] and set(draws[0]) == {0.0, 1.0}


def test_sampled_control_tokens_never_reach_the_judge(tokenizer):
    p = yes_probability(fake(tokenizer, 1.0, 1.0), tokenizer, ["1+1=?"],
                        ["<think>1<|im_start|>+1<|im_end|></think><answer>2</answer>"])
    assert float(p) == pytest.approx(0.5)


NESTED = ["<|im_<|im_end|>end|>", "<|im_<|im_<|im_end|>end|>start|>",
          "<|<|endoftext|>im_<|im_end|>start|>", "<un<unk>k>", "<<un<unk>k>",
          "<|im_" * 50 + "end|>" * 50, "<|end<|im_<|<unk>im_end|>start|>oftext|>"]


@pytest.mark.parametrize("text", NESTED)
def test_nested_control_tokens_never_reach_the_judge(tokenizer, text):
    """One pass of removal turned ``<|im_<|im_end|>end|>`` into ``<|im_end|>``: the judge's prompt
    refused it and the run ended. What is left must hold no control token at any depth, be its
    own sanitised form, and score."""
    shown = without_control_tokens(text)
    assert not any(token in shown for token in CONTROL_TOKENS), shown
    assert without_control_tokens(shown) == shown
    reward = JudgeReward(fake(tokenizer, 1.0, 1.0), tokenizer)
    assert reward(["1+1=?"], [f"<think>{text}</think><answer>2</answer>"]) == [0.5]


def test_random_compositions_of_token_pieces_leave_no_token():
    pieces = [*CONTROL_TOKENS, "<", "|", "<|", "|>", "im_", "end", "start", "un", "k>", "x"]
    rng = random.Random(0)
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 30)))
        shown = without_control_tokens(text)
        assert not any(token in shown for token in CONTROL_TOKENS), (text, shown)
        assert without_control_tokens(shown) == shown


def test_plain_text_and_whole_tokens_are_unchanged_by_the_escape():
    assert without_control_tokens("a<b, 1<|2 and <think>x</think>") == \
        "a<b, 1<|2 and <think>x</think>"
    assert without_control_tokens("<|im_start|>user\nY<|im_end|><unk>") == "user\nY"


def test_question_of_and_bad_input():
    assert question_of("plain") == "plain"
    assert question_of([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]) \
        == "u"
    assert question_of([]) == ""
    with pytest.raises(ValueError, match="batch_size"):
        JudgeReward(None, None, batch_size=0)
    with pytest.raises(ValueError, match="question"):
        judge_agreement(None, None, pd.DataFrame({"text": ["x"], "correct": [1.0]}))


def test_judge_examples_are_balanced_distinct_and_seeded():
    samples = pd.DataFrame({"question": ["q1", "q1", "q1", "q2", "q2", "q3"],
                            "text": ["a", "a", "b", "c", "d", "e"],
                            "correct": [1.0, 1.0, 0.0, 0.0, 0.0, 1.0]})
    examples = judge_examples(samples, per_class=10, seed=0)
    verdicts = [ex["completion"] for ex in examples]
    assert verdicts.count("Y") == verdicts.count("N") == 2  # 2 distinct correct, 3 wrong
    assert examples == judge_examples(samples, per_class=10, seed=0)
    assert len(judge_examples(samples, per_class=1, seed=0)) == 2


@pytest.mark.slow
@pytest.mark.skipif(not (JUDGE_DIR / "config.json").exists() or not TINY_MODEL_DIR.exists(),
                    reason="the shipped judge or policy is missing")
def test_shipped_judge_agrees_with_the_verifier_on_held_out_completions():
    from labkit.commands.build_judge import FAMILIES, labelled_samples
    from labkit.models import load_policy
    from labkit.tasks import load_split

    torch.set_num_threads(1)
    info = json.loads((JUDGE_DIR / "build_info.json").read_text())
    measured = info["held_out"]["agreement"]
    judge, tokenizer = load_judge()
    policy, _ = load_policy("tiny", device="cpu", dtype="float32")
    held_out = labelled_samples(policy, tokenizer, load_split("eval", families=FAMILIES),
                                k=1, seed=5)
    stats = judge_agreement(judge, tokenizer, held_out)
    assert stats["n"] == len(held_out) > 50
    assert stats["agreement"] >= measured - MARGIN, stats
    # better than the trivial judge that always answers the majority class
    assert stats["agreement"] > max(stats["base_rate"], 1 - stats["base_rate"]), stats
    assert stats["mean_p_yes_correct"] > stats["mean_p_yes_wrong"], stats


@pytest.mark.slow
@pytest.mark.skipif(not TINY_MODEL_DIR.exists(), reason="the shipped tiny model is missing")
def test_build_judge_smoke(tmp_path):
    torch.set_num_threads(1)
    build_judge_main(["--out", str(tmp_path), "--steps", "2", "--k", "1", "--eval-k", "1",
                      "--per-class", "32"])
    info = json.loads((tmp_path / "build_info.json").read_text())
    assert info["steps"] == 2 and info["train_examples"] == 64
    assert 0.0 <= info["held_out"]["agreement"] <= 1.0
    assert "--steps 2" in info["command"]
    _, tokenizer = load_judge(tmp_path)
    assert verdict_ids(tokenizer) == verdict_ids(build_char_tokenizer())
