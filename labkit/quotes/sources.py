"""The sources of an ``out:`` or ``file:`` quote (:mod:`labkit.quotes`): the numbers the stored
outputs of a notebook's code cell show, and those a committed file holds."""

from __future__ import annotations

import re
from pathlib import Path

from labkit.quotes import paths  # read at call time: tests point them elsewhere


def notebook_path(where: str) -> Path | None:
    """The notebook a place belongs to: a notebook's cell, or its page of instructor notes
    (``docs/teaching/NN_name.md``)."""
    match = re.match(r"(?:notebooks|docs/teaching)/(\d\d_[\w-]+)\.(?:ipynb|md)\b", where)
    return paths.NOTEBOOKS_DIR / f"{match[1]}.ipynb" if match else None


_OUTPUT_NUMBER = re.compile(r"(?<![\w.])[+\-−]?\d+(?:,\d{3})*(?:\.\d+)?(?:e[+-]?\d+)?",
                            re.IGNORECASE)


def _numbers_of(text: str) -> list[float]:
    found = []
    for token in _OUTPUT_NUMBER.findall(text):
        try:
            found.append(float(token.replace(",", "").replace("−", "-")))
        except ValueError:
            continue
    return found


def output_text(cell) -> str:
    """What a code cell's stored outputs show: streams, plain text, HTML and markdown."""
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        for kind in ("text/plain", "text/markdown", "text/html"):
            parts.append(str(output.get("data", {}).get(kind, "")))
    return "\n".join(parts)


def output_numbers(where: str, name: str):
    """The numbers the stored outputs of cell ``name`` show, ``name`` being a cell's ``id`` in
    the notebook ``where`` names, or ``NN/id`` in notebook NN; or why there are none."""
    import nbformat

    notebook, _, cell_id = name.rpartition("/")
    if notebook:
        named = sorted(paths.NOTEBOOKS_DIR.glob(f"{notebook}_*.ipynb"))
        path = named[0] if named else None
    else:
        path = notebook_path(where)
    if path is None or not path.exists():
        return (f"no notebook for out:{name} (outside a notebook, name it: "
                f"out:NN/cell-id)")
    cells = [c for c in nbformat.read(path, as_version=4).cells if c.get("id") == cell_id]
    if not cells or cells[0].cell_type != "code":
        return f"{path.name} has no code cell with id {cell_id!r}"
    return _numbers_of(output_text(cells[0]))


def file_numbers(name: str):
    """The numbers that the committed file ``name`` (a path from the repository root) holds, or
    why there are none."""
    path = (paths.ROOT / name).resolve()
    if paths.ROOT not in path.parents or not path.is_file():
        return f"no file {name} in the repository"
    return _numbers_of(path.read_text(encoding="utf-8", errors="replace"))


def found_in(quote, where: str):
    """For an ``out:`` or ``file:`` quote: None when a number of its source, scaled, shows the
    quoted number at its digits; else why not."""
    kind, _, name = quote.source.partition(":")
    numbers = output_numbers(where, name) if kind == "out" else file_numbers(name)
    if isinstance(numbers, str):
        return numbers
    if any(quote.holds(n) for n in numbers):
        return None
    shown = "the outputs of cell " + name if kind == "out" else name
    return f"{quote.number:g} is not in {shown} at the digits it shows"


__all__ = ["file_numbers", "found_in", "notebook_path", "output_numbers", "output_text"]
