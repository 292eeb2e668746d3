"""What the trainer accepts as a dataset, checked up front with errors that say what to fix.

A dataset is a ``datasets.Dataset`` (or anything that becomes one: a list of row dicts, a dict of
columns, a pandas DataFrame) with a ``prompt`` column, as in TRL: a string, or a list of chat
messages (``[{"role": "user", "content": ...}]``) that the chat template renders. Every other
column reaches the reward functions as a keyword argument.

What the rows must hold for the code that reads them: with the default accuracy reward, an
``answer`` and ``family`` it can judge in at least one row (:func:`check_judgeable`); for
evaluation, which groups samples by ``id``, no id shared by two rows (:func:`check_unique_ids`).

Chat-control tokens in content. A tokenizer turns the text ``<|im_start|>`` inside a message into
the real control token, so dataset text could open a new turn of the conversation ("template
injection"). The lab's task suite never contains such text (tested); for other data,
:func:`labkit.sampling.prompt_text` refuses a message whose content holds one of the tokenizer's
special tokens, naming it, rather than silently handing the model a forged turn.
"""

from __future__ import annotations

import warnings
from collections import Counter

from labkit.rewards.rule_based import can_judge
from labkit.tasks import CHECKABLE_FAMILIES


def as_dataset(data, name: str):
    """``data`` as a ``datasets.Dataset``; a clear TypeError for anything else."""
    from datasets import Dataset

    if isinstance(data, Dataset):
        return data
    try:
        import pandas as pd

        if isinstance(data, pd.DataFrame):
            return Dataset.from_pandas(data, preserve_index=False)
    except ImportError:  # pragma: no cover - pandas is a dependency
        pass
    if isinstance(data, dict):
        return Dataset.from_dict(data)
    if isinstance(data, (list, tuple)) and all(isinstance(row, dict) for row in data):
        return Dataset.from_list(list(data))
    raise TypeError(f"{name} must be a datasets.Dataset, a pandas DataFrame, a dict of columns or "
                    f"a list of row dicts, got {type(data).__name__}")


def _is_empty_prompt(prompt) -> bool:
    if isinstance(prompt, str):
        return not prompt.strip()
    if isinstance(prompt, list) and prompt:
        return all(not str(m.get("content") or "").strip() if isinstance(m, dict) else True
                   for m in prompt)
    return True


def check_prompt_dataset(dataset, name: str, *, needs_answers: bool) -> None:
    """Raise for a dataset the trainer cannot use; warn when the default rewards cannot judge it.

    ``needs_answers``: the default accuracy reward is in use, which reads ``answer`` and
    ``family`` (without them every completion is scored on format alone).
    """
    columns = set(dataset.column_names)
    if "prompt" not in columns:
        raise ValueError(f"{name} has no 'prompt' column (columns: {sorted(columns)}): TRL's "
                         f"convention, a string or a list of chat messages per row")
    if len(dataset) == 0:
        raise ValueError(f"{name} is empty")
    empty = [i for i, prompt in enumerate(dataset["prompt"]) if _is_empty_prompt(prompt)]
    if empty:
        raise ValueError(f"{name} has {len(empty)} empty prompt(s), first at row {empty[0]}: "
                         f"every row needs a non-empty string or chat message")
    if needs_answers and not {"answer", "family"} <= columns:
        missing = sorted({"answer", "family"} - columns)
        warnings.warn(f"{name} has no {' or '.join(missing)} column: the default accuracy "
                      f"reward cannot judge its rows (it returns None) and training sees the "
                      f"format reward alone; pass reward_funcs that fit your data",
                      stacklevel=3)
    elif needs_answers:
        check_judgeable(dataset, name)


def check_judgeable(dataset, name: str) -> None:
    """Refuse a dataset with ``answer`` and ``family`` columns of which the accuracy reward
    (:func:`labkit.rewards.accuracy_reward`) can judge no row: a family the checker does not know
    (``"Add"``), or no answer. It would return None for every completion, the accuracy would be
    NaN everywhere, and a run would train on its other rewards (the format) alone. A dataset
    where some rows can be judged is fine: the others get None, as TRL's convention has it."""
    families, answers = dataset["family"], dataset["answer"]
    if any(can_judge(f, a) for f, a in zip(families, answers)):
        return
    unknown = list(dict.fromkeys(repr(f) for f in families if f not in CHECKABLE_FAMILIES))
    no_answer = sum(f in CHECKABLE_FAMILIES and a is None for f, a in zip(families, answers))
    reasons = []
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if unknown[5:] else "")
        reasons.append(f"column 'family' holds {shown}, not a family the checker knows "
                       f"({', '.join(map(repr, CHECKABLE_FAMILIES))})")
    if no_answer:
        reasons.append(f"column 'answer' is None in the {no_answer} row(s) of a known family")
    raise ValueError(f"{name}: the accuracy reward can judge none of its {len(families)} rows: "
                     f"{'; '.join(reasons)}. Every completion would get None and its accuracy "
                     f"NaN; fix the column, or pass reward_funcs that fit your data")


def check_unique_ids(dataset, name: str) -> None:
    """Refuse rows that share an ``id``. Evaluation groups its samples by id
    (:func:`labkit.evaluate.sample_answers`, and all that reads its frame: the accuracy and pass@k
    tables, solve rates, rejection sampling's per-prompt deduplication), so two questions under
    one id would be merged into one. Without an ``id`` column the rows are numbered instead."""
    if "id" not in dataset.column_names:
        return
    counts: Counter = Counter()
    for value in dataset["id"]:
        try:
            counts[value] += 1
        except TypeError:  # unhashable: no id a table can group by
            raise TypeError(f"{name}: column 'id' must hold one string or number per row, got "
                            f"{value!r} ({type(value).__name__})") from None
    shared = [repr(value) for value, count in counts.items() if count > 1]
    if shared:
        shown = ", ".join(shared[:5]) + (f" and {len(shared) - 5} more" if shared[5:] else "")
        raise ValueError(f"{name} has rows that share an id ({shown}): evaluation groups its "
                         f"samples by id, so their questions would be merged into one. Give "
                         f"every row its own id, or drop the 'id' column (the rows are then "
                         f"numbered)")


__all__ = ["as_dataset", "check_judgeable", "check_prompt_dataset", "check_unique_ids"]
