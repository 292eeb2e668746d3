"""A multi-turn guessing game whose every reply depends on all the earlier turns.

The environment hides a code of k digits (k = 2, 3 or 4, the row's difficulty). Each turn the
policy calls the tool ``guess`` with k digits; the reply gives, per position, ``=`` (right), ``<``
(the hidden digit is lower) or ``>`` (higher), then the digits each position can still take
given ALL the guesses so far, as ``lo-hi`` (or the digit alone once it is known). Hidden ``347``
guessed ``363`` from scratch gives ``=<> 3 0-5 4-9``; a right guess ends with ``solved``. The
reply carries the game's state, so the policy need not remember its earlier turns; a good policy
binary-searches each position and solves any code in at most 4 guesses.

Rewards. RAGEN's StarPO (arXiv 2504.20073) frames a multi-turn agent episode as an MDP with a
reward ``r_t`` for every turn and the objective ``E[sum_t gamma^t r_t]``; turn-level rewards give
credit to the turn that earned it, where an outcome reward spreads it over all of them
(arXiv 2505.11821 compares the two). :meth:`GuessingEnv.get_reward` is the outcome (1.0 if a guess
hit the code, else 0.0), the reward TRL reads. ``turn_rewards`` holds one reward per turn: the
share of the code's information that the turn's reply revealed,
``log(N_before / N_after) / log(10**k)``, where ``N`` counts the codes still consistent with
every reply. It lies in [0, 1]; a malformed or wasted guess earns 0; and the rewards of an
episode sum to 1 (up to rounding) exactly when the code is pinned down, however the search was
split into turns. (The share of candidates eliminated, ``1 - N_after / N_before``, was the alternative: it
pays about 0.9 for almost any first guess and its sum means nothing.)

:func:`guessing_dataset` builds seeded rows in TRL's conversational format and
:func:`expert_transcript` writes a binary-search player's episode for warm-start demonstrations.
"""

from __future__ import annotations

import math
import random

from labkit.agents.tool_calls import ERROR_PREFIX, format_tool_call
from labkit.tasks import THINK_CLOSE, THINK_OPEN, completion_text

__all__ = ["CODE_LENGTHS", "FAMILY", "MAX_TURNS", "GuessingEnv", "expert_transcript",
           "guessing_dataset", "guessing_prompt", "turns_needed"]

FAMILY = "guess"
CODE_LENGTHS = (2, 3, 4)
#: Guesses allowed per episode: binary search needs at most 4; two spare turns forgive mistakes.
MAX_TURNS = 6
_DIGITS = "0123456789"
_FULL_RANGE = (0, 9)


class GuessingEnv:
    """The guessing game in TRL's ``environment_factory`` contract (one instance per rollout).

    :meth:`reset` takes the row's columns (``code``, optional ``max_turns``); :meth:`guess` is
    the tool; :meth:`get_reward` the outcome reward. Public state: ``secret``, ``max_turns``,
    ``turns`` (guesses counted, malformed ones included), ``solved``, ``turn_rewards`` (one per
    counted turn) and ``ranges`` (per position, the (lo, hi) digits still possible).
    """

    def __init__(self):
        self.secret = ""
        self.max_turns = MAX_TURNS
        self.turns = 0
        self.solved = False
        self.turn_rewards: list[float] = []
        self.ranges: list[tuple[int, int]] = []

    def reset(self, **row) -> None:
        """Start an episode on a dataset row (its columns as keyword arguments)."""
        code, max_turns = row.get("code"), row.get("max_turns", MAX_TURNS)
        if not (isinstance(code, str) and len(code) in CODE_LENGTHS
                and all(char in _DIGITS for char in code)):
            raise ValueError(f"row['code'] must be a string of {CODE_LENGTHS[0]} to "
                             f"{CODE_LENGTHS[-1]} ASCII digits, got {code!r:.40}")
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"row['max_turns'] must be a positive integer, got {max_turns!r}")
        if row.get("difficulty", len(code)) != len(code):
            raise ValueError(f"row['difficulty'] is {row['difficulty']!r} but row['code'] has "
                             f"{len(code)} digits")
        self.secret = code
        self.max_turns = max_turns
        self.turns = 0
        self.solved = False
        self.turn_rewards = []
        self.ranges = [_FULL_RANGE] * len(code)

    def guess(self, code: str) -> str:
        """Guess the hidden code; the reply rates each digit and narrows its range.

        Args:
            code: One digit 0-9 per position of the hidden code, e.g. 307.

        Returns:
            Per position = (right), < (the hidden digit is lower) or > (higher), then the digits
            each position can still take given every guess so far, e.g. "=<> 3 0-5 4-9".
        """
        if not self.secret:
            raise RuntimeError("call reset(**row) before guess")
        if self.solved:
            return "the code is solved; give your answer"
        if self.turns >= self.max_turns:
            return f"no guesses left (the limit is {self.max_turns})"
        self.turns += 1
        problem = _malformed(code, len(self.secret))
        if problem:
            self.turn_rewards.append(0.0)
            return ERROR_PREFIX + problem
        before = _candidates(self.ranges)
        hints = "".join(_hint(hidden, guessed) for hidden, guessed in zip(self.secret, code))
        self.ranges = [_narrow(span, hint, int(guessed))
                       for span, hint, guessed in zip(self.ranges, hints, code)]
        self.turn_rewards.append(math.log(before / _candidates(self.ranges))
                                 / math.log(10 ** len(self.secret)))
        self.solved = code == self.secret
        reply = " ".join([hints, *(_show(span) for span in self.ranges)])
        return reply + " solved" if self.solved else reply

    def get_reward(self) -> float:
        """1.0 if a guess hit the code, else 0.0 (the episode's outcome reward)."""
        return 1.0 if self.solved else 0.0


def _malformed(code, length: int) -> str | None:
    """Why ``code`` is not a guess of ``length`` digits (short, for the policy), or None."""
    if not isinstance(code, str):
        return f"code must be a string of {length} digits, got {type(code).__name__}"
    if len(code) != length:
        return f"code must be {length} digits, got {len(code)} characters"
    if not all(char in _DIGITS for char in code):
        return f"code must be {length} digits 0-9, got {code!a}"
    return None


def _hint(hidden: str, guessed: str) -> str:
    if hidden == guessed:
        return "="
    return "<" if hidden < guessed else ">"


def _narrow(span: tuple[int, int], hint: str, guessed: int) -> tuple[int, int]:
    """The digits still possible after a hint: the old range met with the hint's constraint."""
    lo, hi = span
    if hint == "=":
        return guessed, guessed
    if hint == "<":
        return lo, min(hi, guessed - 1)
    return max(lo, guessed + 1), hi


def _show(span: tuple[int, int]) -> str:
    lo, hi = span
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _candidates(ranges: list[tuple[int, int]]) -> int:
    return math.prod(hi - lo + 1 for lo, hi in ranges)


def turns_needed(ranges: list[tuple[int, int]]) -> int:
    """Guesses a binary-search player still needs, at worst, to hit every position at once.

    Guessing the midpoint of ``s`` possible digits either hits or leaves at most ``s // 2`` of
    them, so one position needs ``f(s) = 1 + f(s // 2)`` guesses with ``f(0) = 0``: the number
    of bits of ``s``. Positions are searched in parallel. From scratch, ``f(10) = 4``.
    """
    return max((hi - lo + 1).bit_length() for lo, hi in ranges)


def guessing_prompt(length: int) -> str:
    """The user turn that starts a game of ``length`` digits."""
    return f"Guess {length} digits"


def guessing_dataset(n: int, seed: int, difficulties=(2, 3), max_turns: int = MAX_TURNS):
    """``n`` seeded game rows as a :class:`datasets.Dataset`, the same rows for the same seed.

    Columns: TRL's conversational ``prompt`` (``Guess 3 digits``), ``code`` (the hidden digits,
    leading zeros kept), ``answer`` (the code again, for answer-checking rewards), ``family``
    (``"guess"``), ``difficulty`` (the code's length), ``id`` and ``max_turns``. Difficulties
    take turns in the given order; the digits come from ``random.Random(seed)``.
    """
    from datasets import Dataset, Features, List, Value

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    difficulties = tuple(difficulties)
    if not difficulties or any(d not in CODE_LENGTHS for d in difficulties):
        raise ValueError(f"difficulties must be drawn from {CODE_LENGTHS}, got {difficulties!r}")
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        length = difficulties[i % len(difficulties)]
        code = "".join(rng.choice(_DIGITS) for _ in range(length))
        rows.append({"prompt": [{"role": "user", "content": guessing_prompt(length)}],
                     "code": code, "answer": code, "family": FAMILY, "difficulty": length,
                     "id": f"{FAMILY}-{length}-{i:06d}", "max_turns": max_turns})
    features = Features({
        "prompt": List({"role": Value("string"), "content": Value("string")}),
        "code": Value("string"), "answer": Value("string"), "family": Value("string"),
        "difficulty": Value("int64"), "id": Value("string"), "max_turns": Value("int64"),
    })
    return Dataset.from_list(rows, features=features)


def expert_transcript(row: dict, rng: random.Random, mistakes: float = 0.0,
                      think: bool = True) -> list[tuple[str, str | None]]:
    """A binary-search player's episode on ``row`` as (assistant text, tool reply) turns.

    Each guessing turn thinks the ranges it searches with the digit it picks (``0-5:2``, or the
    digit alone once known; an empty think with ``think=False``) and calls ``guess`` with the
    midpoints; the reply is the environment's own. The last turn answers
    ``<answer>code</answer>`` (its reply is None). With probability ``mistakes`` a turn replaces
    one position's digit by a random one, but only while the turns left exceed
    :func:`turns_needed`, so every transcript solves its code within the row's ``max_turns``.
    The player reads only the replies' state (the ranges), never the secret. Every turn is under
    120 characters.

    Context budget: with the tool model's tokenizer (the four tool tags single tokens, like the
    think and answer tags; :func:`labkit.models.build_char_tokenizer` with ``tool_tags=True``)
    mistake-free episodes take at most 424, 465 and 506 tokens, prompt included, for 2, 3 and 4
    digits (388, 409 and 430 with ``think=False``); spelled out character by character, the tags
    would push them to 624, 665 and 706.
    """
    if not 0.0 <= mistakes <= 1.0:
        raise ValueError(f"mistakes must be a probability in [0, 1], got {mistakes!r}")
    env = GuessingEnv()
    env.reset(**row)
    turns = []
    while not env.solved:
        if env.turns >= env.max_turns:
            raise ValueError(f"row {row.get('id')!r}: max_turns={env.max_turns} is below the "
                             f"{turns_needed([_FULL_RANGE])} guesses a binary search may need")
        digits = [(lo + hi) // 2 for lo, hi in env.ranges]
        if (mistakes and env.max_turns - env.turns > turns_needed(env.ranges)
                and rng.random() < mistakes):
            digits[rng.randrange(len(digits))] = rng.randrange(10)
        thought = " ".join(_show(span) if span[0] == span[1] else f"{_show(span)}:{digit}"
                           for span, digit in zip(env.ranges, digits)) if think else ""
        code = "".join(map(str, digits))
        text = THINK_OPEN + thought + THINK_CLOSE + format_tool_call("guess", {"code": code})
        turns.append((text, env.guess(code)))
    solved_code = "".join(str(lo) for lo, _ in env.ranges)
    turns.append((completion_text("", solved_code), None))
    return turns
