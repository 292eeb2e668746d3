"""Rule-based rewards for the task suite, with TRL's reward-function signature.

Every reward function is called as ``fn(prompts, completions, **columns)`` and returns one
``float`` or ``None`` per completion, exactly as TRL's ``GRPOTrainer`` calls custom reward
functions: ``completions`` are strings or conversational message lists
(``[{"role": "assistant", "content": ...}]``), and every other dataset column (``answer``,
``family``, ``numbers``, ``target``, ...) arrives as a list with one entry per completion. ``None``
means "this function cannot judge this row". The functions never raise on a malformed
completion: missing, repeated or nested tags, huge numbers, non-ASCII text and hostile countdown
expressions all get a defined reward. ``completions`` itself must be a list
(:func:`completion_list`): a string or None is refused by name, not scored character by character.

:func:`combine_rewards_by_weight` runs several reward functions and sums them with weights the
way TRL does, turning a faulty function into a :class:`RewardFunctionError` that names it;
:class:`CheckedReward` applies the same check to a function handed to TRL's trainer.
"""

from __future__ import annotations

import math
from numbers import Real

from labkit.rewards.registry import register_reward
from labkit.tasks import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    CHECKABLE_FAMILIES,
    THINK_CLOSE,
    THINK_OPEN,
    check_answer,
)

_TAGS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)
#: Where an episode's next assistant turn starts, after a tool's reply (ChatML).
_ASSISTANT_HEADER = "<|im_start|>assistant\n"


class RewardFunctionError(ValueError):
    """A reward function raised, or returned something other than one number or None per row."""


def completion_list(completions) -> list:
    """``completions`` as a list, one entry per row, as TRL passes them. A string, None, a dict
    or any other single object is refused with a TypeError: iterating over it would score its
    characters or keys as if they were completions."""
    if completions is None or isinstance(completions, (str, bytes, dict)) or not hasattr(
            completions, "__len__"):
        raise TypeError(f"completions must be a list with one completion (a string or a list "
                        f"of messages) per row, got {type(completions).__name__}")
    return list(completions)


def completion_content(completion) -> str:
    """The text of a completion: a string as is, or the joined contents of a message list.

    Message contents may be strings or lists of ``{"type": "text", "text": ...}`` parts.
    Anything else counts as empty text.
    """
    if isinstance(completion, str):
        return completion
    if not isinstance(completion, list):
        return ""
    texts = []
    for message in completion:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(part["text"] for part in content
                         if isinstance(part, dict) and isinstance(part.get("text"), str))
    return "".join(texts)


def answering_turn(completion) -> str:
    """The turn that answers: in a message list (TRL's conversational completions: assistant,
    tool, assistant, ...), the last assistant message; in an episode's text (the lab's trainer
    passes it whole, as one message), what follows its last assistant header; a single-turn
    completion whole."""
    if isinstance(completion, list):
        assistant = [m for m in completion if isinstance(m, dict) and m.get("role") == "assistant"]
        completion = assistant[-1:] or completion
    # the lab's trainer passes a whole episode as one message: its turns are split by headers
    return completion_content(completion).rsplit(_ASSISTANT_HEADER, 1)[-1]


def extract_answer(text) -> str | None:
    """The stripped content of the last ``<answer>...</answer>`` pair in ``text``, else None."""
    if not isinstance(text, str):
        return None
    end = text.rfind(ANSWER_CLOSE)
    start = text.rfind(ANSWER_OPEN, 0, end) if end >= 0 else -1
    if start < 0:
        return None
    return text[start + len(ANSWER_OPEN):end].strip()


def _column(columns: dict, name: str, i: int):
    values = columns.get(name)
    if values is None or i >= len(values):
        return None
    return values[i]


def can_judge(family, answer) -> bool:
    """Whether :func:`accuracy_reward` can judge a row: its family is one the checker knows
    (:data:`labkit.tasks.CHECKABLE_FAMILIES`) and it has an answer."""
    return family in CHECKABLE_FAMILIES and answer is not None


@register_reward("accuracy", summary="1 for a right answer (strict)")
def accuracy_reward(prompts, completions, **columns) -> list[float | None]:
    """1.0 when the last answer passes :func:`labkit.tasks.check_answer`, else 0.0.

    Needs the ``answer`` and ``family`` columns (countdown also uses ``numbers`` and ``target``
    when present). A completion without an answer pair scores 0.0. Rows with a missing answer or
    a family the checker does not know get None (:func:`can_judge`).
    """
    rewards = []
    for i, completion in enumerate(completion_list(completions)):
        family, answer = _column(columns, "family", i), _column(columns, "answer", i)
        if not can_judge(family, answer):
            rewards.append(None)
            continue
        row = {"answer": answer, "numbers": _column(columns, "numbers", i),
               "target": _column(columns, "target", i)}
        predicted = extract_answer(completion_content(completion))
        rewards.append(float(predicted is not None and check_answer(family, predicted, row)))
    return rewards


@register_reward("format", summary="the think/answer format")
def format_reward(prompts, completions, **columns) -> list[float]:
    """1.0 when the completion is exactly ``<think>...</think><answer>...</answer>``, else 0.0.

    Each tag must appear exactly once, in that order, with nothing before ``<think>``, nothing
    between ``</think>`` and ``<answer>``, and only whitespace after ``</answer>``. In a
    multi-turn episode (:mod:`labkit.agents`) the answering turn is judged
    (:func:`answering_turn`), so calling a tool first costs no format reward.
    """
    rewards = []
    for completion in completion_list(completions):
        text = answering_turn(completion).rstrip()
        ok = (all(text.count(tag) == 1 for tag in _TAGS)
              and text.startswith(THINK_OPEN) and text.endswith(ANSWER_CLOSE)
              and THINK_CLOSE + ANSWER_OPEN in text)
        rewards.append(float(ok))
    return rewards


def _function_name(fn) -> str:
    """A function's name, also for ``functools.partial`` objects and callable instances."""
    return (getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", None)
            or type(fn).__name__)


#: Metric names a reward column may not take (``reward_<name>`` would overwrite them).
_RESERVED_REWARD_NAMES = ("std",)


def reward_function_names(funcs) -> list[str]:
    """Short, unique names for reward functions: ``accuracy_reward`` -> ``accuracy``; the history
    logs function k as ``reward_<name>``. Repeats and names that would collide with another
    column (``std_reward`` -> ``reward_std``) get a numeric suffix."""
    names = []
    for fn in funcs:
        name = _function_name(fn).removesuffix("_reward")
        if name in names or name in _RESERVED_REWARD_NAMES:
            name = f"{name}_{len(names)}"
        names.append(name)
    return names


def per_completion(rows: dict, num_generations: int) -> tuple[list, dict]:
    """Spread a batch of dataset rows over its completions, as reward functions receive them.

    ``rows`` maps a column name to one value per prompt (a sliced :class:`datasets.Dataset`);
    each prompt has ``num_generations`` consecutive completions. Returns ``(prompts, columns)``:
    the prompt of every completion, and every other column repeated the same way, ready for
    ``fn(prompts, completions, **columns)`` (TRL's reward signature).
    """
    def repeat(values):
        return [v for v in values for _ in range(num_generations)]

    return repeat(rows["prompt"]), {k: repeat(v) for k, v in rows.items() if k != "prompt"}


def combine_rewards_by_weight(funcs, weights, prompts, completions, **columns):
    """Run each reward function and sum the rewards with ``weights``, as TRL's GRPOTrainer does.

    Each function is called with keywords, ``fn(prompts=..., completions=..., **columns)``, as
    TRL calls them, so both ``fn(prompts, completions, **columns)`` and the tutorials'
    ``fn(completions, **kwargs)`` work.

    Returns ``(per_function, totals)``: ``per_function[k][i]`` is function k's reward for
    completion i, with None turned into NaN, and ``totals[i]`` is the weighted sum over the
    functions that judged row i (NaN ignored). A row that no function judged has a NaN total;
    TRL marks such rows unscorable and gives them zero advantage. ``weights=None`` weighs every
    function 1.0.

    Raises :class:`RewardFunctionError`, naming the function, when one raises or returns
    anything but one finite number (within float32's range) or None per completion: a string, a
    dict, a 0-d tensor, a list of the wrong length, NaN or inf. A weight-0 function is still run
    and checked, and its rewards are logged, but they never touch the total. ValueError when the
    weights do not match or there is no function.
    """
    if not funcs:
        raise ValueError("no reward functions: give at least one (e.g. accuracy_reward)")
    weights = [1.0] * len(funcs) if weights is None else list(weights)
    if len(weights) != len(funcs):
        raise ValueError(f"got {len(weights)} reward weights for {len(funcs)} reward functions")
    n = len(completions)
    per_function = []
    for fn in funcs:
        name = _function_name(fn)
        try:
            # by keyword, as TRL calls them: `def reward(completions, **kwargs)` works too
            result = fn(prompts=prompts, completions=completions, **columns)
        except Exception as error:
            raise RewardFunctionError(
                f"reward function {name!r} raised {type(error).__name__}: {error}") from error
        per_function.append(check_rewards(name, result, n))
    totals = []
    for i in range(n):
        judged = [w * rewards[i] for w, rewards in zip(weights, per_function)
                  if w != 0 and not math.isnan(rewards[i])]
        totals.append(sum(judged) if judged else math.nan)
    return per_function, totals


_FLOAT32_MAX = 3.4028234663852886e38


def check_rewards(name: str, result, n: int) -> list[float]:
    """One function's result as floats (None -> NaN), or a RewardFunctionError naming it."""
    if hasattr(result, "tolist") and getattr(result, "ndim", 1) == 1:
        result = result.tolist()  # a 1-D tensor or array of rewards is fine
    if isinstance(result, (str, bytes, dict)) or not isinstance(result, (list, tuple)):
        shape = f" of shape {tuple(result.shape)}" if hasattr(result, "shape") else ""
        raise RewardFunctionError(f"reward function {name!r} returned {type(result).__name__}"
                                  f"{shape}; return a list with one float or None per "
                                  f"completion")
    if len(result) != n:
        raise RewardFunctionError(f"reward function {name!r} returned {len(result)} rewards "
                                  f"for {n} completions; return one per completion")
    rewards = []
    for r in result:
        if r is None:
            rewards.append(math.nan)
            continue
        if not isinstance(r, Real):  # bool is a Real: True counts as 1.0, as in TRL
            raise RewardFunctionError(f"reward function {name!r} returned {r!r} "
                                      f"({type(r).__name__}); rewards must be numbers or None")
        value = float(r)
        if not math.isfinite(value) or abs(value) > _FLOAT32_MAX:
            raise RewardFunctionError(f"reward function {name!r} returned {value!r}; rewards "
                                      f"must be finite numbers within float32's range (return "
                                      f"None for a completion it cannot judge)")
        rewards.append(value)
    return rewards


class CheckedReward:
    """A reward function whose every result is checked as the lab's trainer checks it
    (:func:`check_rewards`): called as TRL's ``GRPOTrainer`` calls reward functions (keywords,
    extra columns passed through), it returns the rewards (None where the function returned None)
    or raises :class:`RewardFunctionError` naming the function, where TRL would fail deep inside
    its own code or take a NaN or an infinity without complaint. Carries the function's name, so
    TRL logs ``rewards/<name>/mean`` as before; picklable when the function is."""

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = _function_name(fn)

    def __call__(self, *args, **kwargs):
        try:
            result = self.fn(*args, **kwargs)
        except Exception as error:
            raise RewardFunctionError(f"reward function {self.__name__!r} raised "
                                      f"{type(error).__name__}: {error}") from error
        completions = kwargs["completions"] if "completions" in kwargs else args[1]
        return [None if math.isnan(r) else r
                for r in check_rewards(self.__name__, result, len(completions))]

    def __repr__(self):
        return f"CheckedReward({self.fn!r})"
