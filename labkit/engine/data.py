"""What the trainer accepts as a dataset, checked up front with errors that say what to fix.

A dataset is a ``datasets.Dataset`` (or anything that becomes one: a list of row dicts, a dict of
columns, a pandas DataFrame) with a ``prompt`` column, as in TRL: a string, or a list of chat
messages (``[{"role": "user", "content": ...}]``) that the chat template renders. Every other
column reaches the reward functions as a keyword argument.

Chat-control tokens in content. A tokenizer turns the text ``<|im_start|>`` inside a message into
the real control token, so dataset text could open a new turn of the conversation ("template
injection"). The lab's task suite never contains such text (tested); for other data,
:func:`labkit.rollout.prompt_text` refuses a message whose content holds one of the tokenizer's
special tokens, naming it, rather than silently handing the model a forged turn.
"""

from __future__ import annotations

import warnings


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


__all__ = ["as_dataset", "check_prompt_dataset"]
