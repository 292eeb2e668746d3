"""The cells of the lab's notebooks that the hub measurement runs, found by what they do.

Cells are found by their content, not their position, so edits to the notebooks do not silently
shift the measurement onto other cells:

- notebook 00's setup: its code cells from the top through the first one that loads the tiny
  model (``load_policy(``): the imports and the model load (the preflight check, which these cells
  held until 2026-11-29, now closes the notebook);
- notebook 02's setup: its first code cell (imports, the one-thread setting, paths);
- notebook 02's live run: the cell that assigns ``result = train(...)``; with ``steps`` given, its
  ``STEPS = <n>`` line is rewritten to that count (everything else verbatim);
- notebook 02's check: the first later code cell that asserts on ``result``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

TRAIN_CALL = re.compile(r"^result\s*=\s*train\(", re.MULTILINE)
STEPS_LINE = re.compile(r"^STEPS\s*=\s*\d+\s*$", re.MULTILINE)
ASSERT_ON_RESULT = re.compile(r"^assert\b", re.MULTILINE)


def code_cells(path: Path) -> list[tuple[int, str]]:
    """(index in the notebook, source) of every code cell."""
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    return [(i, "".join(c["source"])) for i, c in enumerate(cells) if c["cell_type"] == "code"]


def tour_setup(path: Path) -> list[tuple[int, str]]:
    """Notebook 00's code cells from the top through the one that loads the tiny model."""
    cells = code_cells(path)
    for position, (_, source) in enumerate(cells):
        if "load_policy(" in source:
            return cells[:position + 1]
    raise ValueError(f"{path}: no code cell calls load_policy(; expected notebook 00 (the tour)")


def grpo_pieces(path: Path, steps: int | None = None) -> dict[str, tuple[int, str]]:
    """Notebook 02's setup, live-run and check cells (see the module docstring)."""
    if steps is not None and (not isinstance(steps, int) or steps < 1):
        raise ValueError(f"steps: expected a positive integer or None, got {steps!r}")
    cells = code_cells(path)
    runs = [position for position, (_, source) in enumerate(cells) if TRAIN_CALL.search(source)]
    if not runs:
        raise ValueError(f"{path}: no code cell assigns `result = train(...)`; expected notebook "
                         "02 (GRPO) with its live run")
    run_index, run_source = cells[runs[0]]
    if steps is not None:
        run_source, count = STEPS_LINE.subn(f"STEPS = {steps}", run_source)
        if count != 1:
            raise ValueError(f"{path}: the live-run cell {run_index} has {count} `STEPS = <n>` "
                             "lines; expected exactly one to set the step count")
    check = next(((i, s) for i, s in cells[runs[0] + 1:]
                  if ASSERT_ON_RESULT.search(s) and "result." in s), None)
    if check is None:
        raise ValueError(f"{path}: no code cell after the live run (cell {run_index}) asserts on "
                         "`result`")
    return {"setup": cells[0], "run": (run_index, run_source), "check": check}
