"""What a rule-based reward really rewards: lax verifiers a policy can exploit, and partial credit.

RL with verifiable rewards (RLVR; Tulu 3, arXiv 2411.15124, section 6) replaces a learned reward
model by a rule: the reward is 1 when the answer checks out, else 0. The policy optimises the
rule, not the intention behind it, so every gap between the two is a target. The strict rule of
the lab is :func:`labkit.rewards.accuracy_reward` (the last ``<answer>`` must be the answer); the
functions here loosen it the way hastily written graders do, so that a learner can watch a policy
find the gap within a few dozen GRPO steps. The trainer always logs the strict ``accuracy``
column, whatever it trains on, which is how the exploit shows: the lax reward rises, the strict
accuracy does not follow.

================================ ===============================================================
function                         rewards (and the exploit it invites)
================================ ===============================================================
:func:`lenient_length_reward`    a right answer OR a long think section: write a long, wrong
                                 reasoning
:func:`answer_anywhere_reward`   the answer's text anywhere in the completion: spray numbers
:func:`format_only_reward`       the format alone: nothing to learn once the format is right
:func:`digit_credit_reward`      the share of digits right in place (partial credit, not lax:
                                 its maximum is the right answer, but "nearly right" pays)
================================ ===============================================================

All have TRL's signature ``fn(prompts, completions, **columns) -> list[float | None]`` (the
completions strings or ``[{"role": "assistant", "content": ...}]`` lists, the dataset columns
``answer``, ``family``, ``numbers``, ``target`` one entry per completion) and never raise on a
malformed completion. Settings (a threshold) are keyword-only with a default; bind another value
with ``functools.partial`` (the trainer names a partial after its function).

Measured on the shipped tiny Qwen (GRPO preset, ``medium_cells`` train/eval, 16 prompts x 8
completions per step, 40 steps, seed 0, one thread; each run trains on the one reward named;
"first/last 5" are means over the first and last five steps of the training log):

======================== ============ ============ ============ =============== ======
trained on               reward       strict acc.  length       eval accuracy   wall
                         first/last 5 first/last 5 first/last 5 (k=4) 0 -> 40
======================== ============ ============ ============ =============== ======
accuracy_reward (strict) 0.19 / 0.51  0.19 / 0.51  15 / 28      22.5% -> 50.6%  30 s
answer_anywhere_reward   0.19 / 0.56  0.19 / 0.53  15 / 30      22.5% -> 50.0%  33 s
lenient_length_reward    0.21 / 0.97  0.20 / 0.11  15 / 86      22.5% -> 14.4%  44 s
======================== ============ ============ ============ =============== ======

The lenient-length exploit appears within 40 steps: the reward climbs to 0.97 while the strict
accuracy falls by half and the completions grow sixfold (long, wrong think sections). The
answer-anywhere exploit does NOT appear in this budget: its reward stays within 3 points of the
strict accuracy and the run learns about what the strict run learns (our reading: on these cells
the shortest way to contain the answer is still to compute it). The reward-hacking run to show
is :func:`lenient_length_reward`.
"""

from __future__ import annotations

import re

from labkit.rewards.registry import register_reward
from labkit.rewards.rule_based import (
    accuracy_reward,
    completion_content,
    completion_list,
    extract_answer,
    format_reward,
)
from labkit.tasks import THINK_CLOSE, THINK_OPEN, check_answer

__all__ = ["NUMERIC_FAMILIES", "answer_anywhere_reward", "digit_credit", "digit_credit_reward",
           "format_only_reward", "lenient_length_reward", "sort_credit", "think_text"]

#: Families whose answer is one integer: digit credit compares their digits place by place.
NUMERIC_FAMILIES = ("add", "sub", "mul", "gsm8k")
#: Think sections at least this long (in characters) pass :func:`lenient_length_reward`. The
#: medium cells' worked solutions are 11-40 characters, their verbose ones 50-80.
LONG_THINK_CHARS = 40

_INT_RE = re.compile(r"[+-]?[0-9]+")


def think_text(text: str) -> str:
    """The content of the first ``<think>...</think>`` of ``text`` ("" when there is none; an
    unclosed think runs to the end of the text)."""
    start = text.find(THINK_OPEN)
    if start < 0:
        return ""
    start += len(THINK_OPEN)
    end = text.find(THINK_CLOSE, start)
    return text[start:] if end < 0 else text[start:end]


def _at(values, i: int):
    """Row ``i`` of a column, None where the column is missing or too short."""
    return values[i] if values is not None and i < len(values) else None


def _row(columns: dict, i: int) -> dict:
    return {name: _at(values, i) for name, values in columns.items()}


@register_reward("lenient_length", summary="a lax verifier")
def lenient_length_reward(prompts, completions, *, min_think_chars: int = LONG_THINK_CHARS,
                          **columns) -> list[float | None]:
    """1.0 when the answer is right (strict :func:`labkit.rewards.accuracy_reward`) OR the think
    section has at least ``min_think_chars`` characters; else 0.0. None where the strict reward
    cannot judge the row and the think section is short.

    A grader impressed by effort: "it showed its work, give it the point". The exploit: a long
    think section earns the reward whatever the answer, so the policy learns to write long
    reasoning (the warm-start's verbose style is right there) and stops caring whether it ends in
    the right answer; the trainer's strict ``accuracy`` lags the reward, and the completion length
    climbs. Compare: the strict reward also lengthens answers, because worked solutions are right
    more often, so length alone is not the signature; the gap between reward and accuracy is.
    """
    completions = completion_list(completions)
    strict = accuracy_reward(prompts, completions, **columns)
    rewards = []
    for right, completion in zip(strict, completions, strict=True):
        effort = len(think_text(completion_content(completion))) >= min_think_chars
        rewards.append(1.0 if (right == 1.0 or effort) else (None if right is None else 0.0))
    return rewards


@register_reward("answer_anywhere", summary="a lax verifier")
def answer_anywhere_reward(prompts, completions, **columns) -> list[float | None]:
    """1.0 when the reference answer's text occurs anywhere in the completion, think included
    (a plain substring test, as in ``answer in text``), else 0.0. None where the row has no
    ``answer``.

    The grader of a hurried evaluation script. The exploit: the more numbers a completion writes,
    the likelier one of them contains the answer: "58" is found in "158", in "5+8=13 ... 58" and
    in a think section that lists candidates. A policy drifts toward long, number-heavy
    completions whose final answer need not be right; even an honest worked solution often
    contains the answer's digits as a partial sum (the reward is then 1 for a wrong answer).
    Countdown rows compare the canonical expression's text, so they are rarely credited this way.
    """
    rewards = []
    for i, completion in enumerate(completion_list(completions)):
        answer = _at(columns.get("answer"), i)
        if answer is None or str(answer).strip() == "":
            rewards.append(None)
            continue
        rewards.append(float(str(answer).strip() in completion_content(completion)))
    return rewards


@register_reward("format_only", summary="a lax verifier")
def format_only_reward(prompts, completions, **columns) -> list[float]:
    """:func:`labkit.rewards.format_reward` under its own name: 1.0 for the exact
    ``<think>...</think><answer>...</answer>`` layout, whatever the answer.

    A reward that checks the form and not the content. The exploit is the trivial one, and on a
    warm-started policy it shows as *nothing*: the tiny Qwen is already formatted 100% of the time,
    so every group's rewards are equal, every advantage is 0 and GRPO does not move (the
    ``frac_reward_zero_std`` column is 1). On a base model the policy would learn the tags and
    nothing else: format rewards are a scaffold added to a correctness reward, never a goal.
    """
    return format_reward(prompts, completions, **columns)


# ---- partial credit ------------------------------------------------------------------------------
def digit_credit(predicted: str, answer: str) -> float:
    """Share of the answer's places that ``predicted`` gets right, aligned from the units digit.

    Both are integers (a leading ``+`` and spaces are ignored). The sign counts as one more place
    to the left of the digits (``-`` or nothing), and the denominator is the longer of the two,
    so missing and extra digits cost: ``digit_credit("1296", "1306") == 0.5``,
    ``digit_credit("58", "58") == 1``, ``digit_credit("158", "58") == 2/3``,
    ``digit_credit("5", "-5") == 0.5``. A prediction that is not an integer scores 0.
    """
    def places(text: str) -> str | None:
        text = str(text).replace(" ", "")
        if len(text) > 40 or not _INT_RE.fullmatch(text):
            return None
        value = int(text)
        return ("-" if value < 0 else "") + str(abs(value))

    mine, theirs = places(predicted), places(answer)
    if mine is None or theirs is None:
        return 0.0
    width = max(len(mine), len(theirs))
    hits = sum(a == b for a, b in zip(mine.rjust(width), theirs.rjust(width)))
    return hits / width


def sort_credit(predicted: str, answer: str) -> float:
    """Share of the sorted list's positions that ``predicted`` holds right (same number in the
    same slot), over the longer of the two lists; 0 when ``predicted`` is not a comma-separated
    list of integers."""
    def items(text: str) -> list[int] | None:
        parts = str(text).replace(" ", "").split(",")
        if len(parts) > 100 or not all(_INT_RE.fullmatch(p) and len(p) <= 40 for p in parts):
            return None
        return [int(p) for p in parts]

    mine, theirs = items(predicted), items(answer)
    if mine is None or theirs is None:
        return 0.0
    return sum(a == b for a, b in zip(mine, theirs)) / max(len(mine), len(theirs))


@register_reward("digit_credit", summary="partial credit")
def digit_credit_reward(prompts, completions, **columns) -> list[float | None]:
    """Partial credit: the share of the answer's digits right in place (:func:`digit_credit`)
    for the numeric families, of the list's slots right (:func:`sort_credit`) for sort, and the
    binary strict check for countdown. 1.0 exactly when the strict check passes; 0.0 without an
    answer; None where the row has no answer or an unknown family.

    Countdown stays binary on purpose: its answer is an expression, and neither the expression's
    characters nor the distance of its value from the target measure "nearly solved" (an
    expression one off the target may be as far from a solution as any other, and a distance
    reward invites expressions that ignore the given numbers).

    Why partial credit: a binary reward gives a group of all-wrong answers zero advantage, while
    digit credit still ranks "1296" above "1105" for 1306, a denser signal on problems the policy
    never solves. What it costs (the exploit): reward for answers that are wrong. The easy places
    (the leading digit and the length of a sum) are worth most of the credit, so a policy can
    collect 0.6-0.8 on average without ever getting the units right, and GRPO's group
    normalisation amplifies small differences between wrong answers into full-size advantages.
    """
    rewards = []
    for i, completion in enumerate(completion_list(completions)):
        answer, family = _at(columns.get("answer"), i), _at(columns.get("family"), i)
        if answer is None or family is None:
            rewards.append(None)
            continue
        predicted = extract_answer(completion_content(completion))
        if predicted is None:
            rewards.append(0.0)
        elif family in NUMERIC_FAMILIES or family == "sort":
            row = _row(columns, i)
            if check_answer(family, predicted, row):
                rewards.append(1.0)
            elif family == "sort":
                rewards.append(sort_credit(predicted, answer))
            elif family == "gsm8k":  # decimals and "$1,200": partial credit only for integers
                rewards.append(digit_credit(predicted, answer) if _INT_RE.fullmatch(
                    str(answer).strip()) else 0.0)
            else:
                rewards.append(digit_credit(predicted, answer))
        elif family == "countdown":
            rewards.append(float(check_answer(family, predicted, _row(columns, i))))
        else:
            rewards.append(None)
    return rewards
