"""The instructor guide's three workshop paths add up: each path's blocks, breaks and in-class
compute fit the time its heading promises, and fill most of it."""

import re

import pytest

from labkit import quotes

GUIDE = quotes.ROOT / "docs" / "teaching" / "README.md"


def paths() -> dict[str, list[list[str]]]:
    """Heading -> the rows of its table (cells), for each ``###`` under "Three workshop paths"."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split("## Three workshop paths", 1)[1].split("\n## ", 1)[0]
    found = {}
    for part in section.split("\n### ")[1:]:
        heading, body = part.split("\n", 1)
        rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
                for line in body.splitlines() if line.startswith("|")]
        found[heading] = [row for row in rows[2:]]  # past the header and its rule
    return found


def limit_minutes(heading: str) -> float:
    amount, unit = re.search(r"(\d+(?:\.\d+)?) (minutes|hours)", heading).groups()
    return float(amount) * (60 if unit == "hours" else 1)


def minutes(row: list[str]) -> tuple[float, float]:
    """(discussion minutes, in-class CPU minutes) of one row; a compute cell that starts with
    "none" has none in class (a run done before class is not counted)."""
    discussion = sum(float(m) for m in re.findall(r"(\d+) min", row[-1]))
    compute_cell = row[2]
    compute = 0.0
    if not compute_cell.startswith("none"):
        for quote in quotes.quotes_in(compute_cell, "guide"):
            if quote.source.endswith("/cpu") or "/cpu+" in quote.source:
                compute += quotes.source_value(quote) / 60
    return discussion, compute


def test_the_guide_has_its_three_paths():
    assert len(paths()) == 3


@pytest.mark.parametrize("heading", list(paths()))
def test_a_workshop_path_fits_its_time_and_fills_it(heading):
    rows = paths()[heading]
    total = sum(sum(minutes(row)) for row in rows)
    limit = limit_minutes(heading)
    assert total <= limit, f"{heading}: the rows add up to {total:.1f} minutes"
    assert total >= 0.85 * limit, f"{heading}: only {total:.1f} of {limit:.0f} minutes planned"


def test_the_longer_paths_have_breaks_and_a_buffer():
    """A path of more than two hours plans its breaks and keeps at least 5% of its time free
    for what a room brings (questions, a slow machine, a restart)."""
    for heading, rows in paths().items():
        limit = limit_minutes(heading)
        if limit > 120:
            assert any(row[0] == "break" for row in rows), heading
            buffer = sum(minutes(row)[0] for row in rows if row[0] == "buffer")
            assert buffer >= 0.05 * limit, f"{heading}: a buffer of {buffer:.0f} minutes"
