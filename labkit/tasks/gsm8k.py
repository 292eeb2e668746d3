"""GSM8K for the GPU path: grade-school word problems in the task suite's row format.

On a machine that can reach the Hugging Face hub, ``load_gsm8k("train")`` loads
``openai/gsm8k`` (config ``main``); ``load_gsm8k("test", path="my.jsonl")`` loads a local JSON or
JSONL file with the same ``question``/``answer`` fields instead (the tests use a small fixture and
never touch the network). Rows get the task suite's columns (:func:`labkit.tasks.task_features`):
a conversational ``prompt``, the ``question``, the canonical numeric ``answer``, family
``"gsm8k"`` and difficulty 0, so :func:`labkit.rewards.accuracy_reward` and
:func:`labkit.rewards.format_reward` score them unchanged.
"""

from __future__ import annotations

from pathlib import Path

from labkit.tasks.solutions import ANSWER_CLOSE, ANSWER_OPEN, THINK_CLOSE, THINK_OPEN
from labkit.tasks.splits import task_features

#: system message that tells a real instruction-tuned model the lab's answer format
GSM8K_SYSTEM_PROMPT = (
    f"Reason step by step inside {THINK_OPEN}{THINK_CLOSE}, then write only the final number "
    f"inside {ANSWER_OPEN}{ANSWER_CLOSE}."
)


def extract_gsm8k_answer(solution_text: str) -> str:
    """The final answer of a GSM8K solution: the text after ``####``, commas removed.

    Raises ValueError when the solution has no ``####`` line.
    """
    _, marker, final = solution_text.rpartition("####")
    if not marker:
        raise ValueError(f"no '####' final answer in GSM8K solution {solution_text[:80]!r}")
    return final.strip().replace(",", "")


def load_gsm8k(split: str = "train", path: str | Path | None = None,
               system_prompt: str | None = GSM8K_SYSTEM_PROMPT):
    """GSM8K as a :class:`datasets.Dataset` with the task suite's columns.

    ``path=None`` downloads ``openai/gsm8k`` (needs the network); otherwise ``path`` is a local
    JSON/JSONL file with ``question`` and ``answer`` (the worked solution ending in ``#### N``)
    and ``split`` only names the rows' ids. The prompt is the question as a user message, after
    ``system_prompt`` as a system message unless it is None. Ids are ``gsm8k-{split}-{index}``.
    """
    from datasets import load_dataset

    if path is None:
        raw = load_dataset("openai/gsm8k", "main", split=split)
    else:
        raw = load_dataset("json", data_files={split: str(path)}, split=split)
    system = [] if system_prompt is None else [{"role": "system", "content": system_prompt}]

    def to_row(example: dict, index: int) -> dict:
        question = example["question"].strip()
        return {
            "prompt": [*system, {"role": "user", "content": question}],
            "question": question,
            "answer": extract_gsm8k_answer(example["answer"]),
            "family": "gsm8k",
            "difficulty": 0,
            "id": f"gsm8k-{split}-{index:05d}",
            "numbers": [],
            "target": None,
        }

    return raw.map(to_row, with_indices=True, remove_columns=raw.column_names,
                   features=task_features())
