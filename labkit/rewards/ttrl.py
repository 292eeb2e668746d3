"""Label-free rewards by majority vote: Test-Time Reinforcement Learning (TTRL, arXiv 2504.16084).

TTRL trains on prompts without answers. For each prompt the policy samples G completions; the
most common extracted answer becomes the pseudo-label, and a completion is rewarded 1 when its
answer equals it (paper section 2, "majority voting reward function"):

.. math:: \\hat y = \\operatorname{mode}(\\text{ans}(y_1), \\dots, \\text{ans}(y_G)),\\qquad
          R(y_i) = \\mathbb 1[\\text{ans}(y_i) = \\hat y]

GRPO then sharpens the policy toward its own consensus. That helps when the consensus is right
more often than a single sample is (self-consistency), and it reinforces the error when a prompt's
majority is wrong: the signal is only as good as the vote. :func:`label_accuracy_reward` measures
that, the share of groups whose vote equals the true answer (the paper's "label accuracy"), as a
diagnostic column the trainer logs with weight 0.

Answers are compared after the same normalisation :func:`labkit.tasks.check_answer` applies per
family (:func:`answer_key`): integers for add/sub/mul (so ``+58`` and `` 58`` vote together), the
integer list for sort, the number for gsm8k (``$1,200`` = ``1200.0``), and the canonical form of
the parsed expression for countdown (a countdown check needs no label at all: the target is in the
prompt, so the lab's strict reward is already "label-free" there; the vote is over expressions).

Departures from the paper, on purpose: one set of G samples both votes and trains (TTRL votes with
64 and trains on 32 of them); the lab trains on the task suite's train split rather than on the
test set, so that the eval split stays a held-out measurement of what majority voting taught.

Measured on the shipped tiny Qwen (GRPO preset, ``medium_cells`` train/eval, 16 prompts x 8
completions per step, 40 steps, seed 0, one thread, 51 s; reward functions ``[ttrl_reward,
label_accuracy_reward]`` with weights ``(1, 0)``; means over the first / last five steps):

===================================== =============== ===============
column                                steps 1-5       steps 36-40
===================================== =============== ===============
``reward`` (the TTRL pseudo-reward)   0.28            0.69
``accuracy`` (strict, never trained)  0.19            0.02
``reward_label_accuracy``             0.36            0.01
``completion_length``                 14              27
===================================== =============== ===============

Eval accuracy (k = 4) fell from 22.5% to 2.5%. Majority voting led the model astray: the vote is
right on only a third of the groups at the start (a single sample is right a fifth of the time, so
self-consistency helps a little), and GRPO rewards agreement, not correctness, so the policy
learned to agree with itself on answers that are wrong. TTRL's reported gains need a model whose
majority is usually right (its label accuracy starts far higher on MATH-500); the tiny Qwen on
the medium cells is the counter-example.
"""

from __future__ import annotations

import re
from collections import Counter

from labkit.rewards.registry import register_reward
from labkit.rewards.rule_based import completion_content, completion_list, extract_answer
from labkit.tasks import CHECKABLE_FAMILIES, check_answer, format_expression, parse_expression
from labkit.tasks.grading import _int_or_none, _parse_decimal

__all__ = ["answer_key", "group_indices", "label_accuracy_reward", "majority_labels",
           "majority_vote", "ttrl_reward"]


def answer_key(family, predicted):
    """The normalised, hashable form of an extracted answer for voting, or None when the answer is
    unparsable for its family (None never votes).

    ========= ============================================================================
    family    key
    ========= ============================================================================
    add/sub/  ``int`` (spaces and a leading ``+`` ignored; over-long numbers are None)
    mul
    sort      ``tuple`` of ints
    gsm8k     a ``Fraction`` (``$``, commas and a trailing ``.`` ignored; ``12.0 == 12``)
    countdown the canonical text of the parsed expression (``(3+9)`` and ``3 + 9`` agree)
    other     the stripped text (an unknown family still votes, by exact text)
    ========= ============================================================================
    """
    if not isinstance(predicted, str) or not predicted.strip():
        return None
    if family in ("add", "sub", "mul"):
        return _int_or_none(predicted)
    if family == "sort":
        items = predicted.replace(" ", "").split(",")
        if len(items) > 100:
            return None
        values = [_int_or_none(item) for item in items]
        return None if None in values else tuple(values)
    if family == "gsm8k":  # check_answer's cleaning: no spaces, commas, "$", final "."
        return _parse_decimal(re.sub(r"[\s,$]", "", predicted).removesuffix("."))
    if family == "countdown":
        tree = parse_expression(predicted)
        return None if tree is None else format_expression(tree)
    return predicted.strip()


def majority_vote(answers) -> tuple[object, float]:
    """``(label, share)``: the most common non-None answer and its count over ``len(answers)``.

    None answers (nothing extracted, or unparsable) do not vote but do count in the share, as in
    TTRL's ``majority_ratio`` (count / N). Ties go to the tied answer seen first (the paper's code
    uses ``Counter.most_common``, which keeps insertion order among equal counts). With no voting
    answer the label is None and the share 0.0. Example: ``[3, 3, 5, 3, None] -> (3, 0.6)``.
    """
    answers = list(answers)
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return None, 0.0
    label, count = votes.most_common(1)[0]
    return label, count / len(answers)


def _prompt_key(prompt):
    """A hashable identity of a prompt: its text, or the (role, content) pairs of its messages."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, (list, tuple)):
        return tuple((m.get("role"), str(m.get("content"))) if isinstance(m, dict) else repr(m)
                     for m in prompt)
    return repr(prompt)


def group_indices(prompts, n: int) -> list[list[int]]:
    """The completion indices of each distinct prompt, in first-seen order. ``prompts`` is None
    or shorter than the completions: every completion is its own group."""
    if prompts is None or len(prompts) < n:
        return [[i] for i in range(n)]
    groups: dict = {}
    for i in range(n):
        groups.setdefault(_prompt_key(prompts[i]), []).append(i)
    return list(groups.values())


def majority_labels(prompts, completions, family=None):
    """Per completion: ``(keys, labels, label_texts, shares)``: its answer key, its group's label
    (a key), the text of the first answer that voted for the label (None without a label), and
    the label's share. Groups are the completions of the same prompt within this call (the
    trainer passes G consecutive completions per prompt)."""
    completions = completion_list(completions)
    n = len(completions)
    families = family if family is not None else [None] * n
    texts = [extract_answer(completion_content(c)) for c in completions]
    keys = [answer_key(families[i] if i < len(families) else None, texts[i]) for i in range(n)]
    labels: list = [None] * n
    label_texts: list = [None] * n
    shares = [0.0] * n
    for group in group_indices(prompts, n):
        label, share = majority_vote(keys[i] for i in group)
        text = next((texts[i] for i in group if label is not None and keys[i] == label), None)
        for i in group:
            labels[i], label_texts[i], shares[i] = label, text, share
    return keys, labels, label_texts, shares


@register_reward("ttrl_vote", summary="majority-vote pseudo-labels, no answers")
def ttrl_reward(prompts, completions, *, family=None, **_ignored) -> list[float]:
    """TTRL's majority-vote reward: 1.0 when a completion's answer equals the majority answer of
    its prompt's completions in this call, else 0.0.

    It reads only the prompts, the completions and the ``family`` column (to normalise answers);
    every other column, ``answer`` included, is accepted and ignored, so the reward is the same
    whatever the true answers are. A group where no completion has a parsable answer has no label:
    all its rewards are 0.0 (as in TTRL's code, where such a group votes for "None"), which gives
    it zero advantage under GRPO; an unparsable completion in a group with a label also gets 0.0.
    """
    keys, labels, _, _ = majority_labels(prompts, completions, family)
    return [float(k is not None and k == label) for k, label in zip(keys, labels)]


def label_accuracy_reward(prompts, completions, *, family=None, answer=None, numbers=None,
                          target=None, **_ignored) -> list[float | None]:
    """Diagnostic, not for training: 1.0 for every completion of a group whose majority answer
    passes the strict check (:func:`labkit.tasks.check_answer` against the true ``answer``),
    else 0.0 (also when the group has no label); None where the row has no answer or its family
    cannot be checked. Its mean over a step is TTRL's "label accuracy" (groups are equal-sized).

    Give it weight 0 (``reward_weights=(1.0, 0.0)`` with ``[ttrl_reward,
    label_accuracy_reward]``): the trainer still runs it and logs ``reward_label_accuracy`` next to
    the strict ``accuracy`` column, and it never touches the total reward.
    """
    n = len(completion_list(completions))
    answers = answer if answer is not None else [None] * n
    families = family if family is not None else [None] * n
    _, _, label_texts, _ = majority_labels(prompts, completions, families)

    def at(values, i):
        return values[i] if values is not None and i < len(values) else None

    rewards: list[float | None] = []
    for i in range(n):
        fam, truth = at(families, i), at(answers, i)
        if truth is None or fam not in CHECKABLE_FAMILIES:
            rewards.append(None)
            continue
        row = {"answer": truth, "numbers": at(numbers, i), "target": at(target, i)}
        rewards.append(float(label_texts[i] is not None
                             and check_answer(fam, label_texts[i], row)))
    return rewards
