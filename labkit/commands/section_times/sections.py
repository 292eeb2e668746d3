"""A notebook's sections: its level-two markdown headings (outside fenced code) and the code
cells' times added up per section."""

from __future__ import annotations

import re

from labkit.commands.section_times.execution import CellTime

SETUP = "setup"

_LEVEL_TWO = re.compile(r"^ {0,3}##[ \t]+(\S.*?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def level_two_headings(markdown: str) -> list[str]:
    """The ``## `` headings of a markdown text, in order, skipping fenced code blocks."""
    headings, fence = [], None
    for line in markdown.splitlines():
        opening = _FENCE.match(line)
        if opening:
            marker = opening.group(1)
            if fence is None:
                fence = marker
            elif marker[0] == fence[0] and len(marker) >= len(fence):
                fence = None
            continue
        if fence is None:
            heading = _LEVEL_TWO.match(line)
            if heading:
                headings.append(heading.group(1))
    return headings


def group_by_section(nb, times: list[CellTime]) -> list[dict]:
    """Sections in notebook order, each with its code-cell count and summed wall and CPU seconds.

    Every ``##`` heading opens a section (a title that returns later, such as a second
    "Summary", is a new one); the cells before the first heading form ``setup``.
    """
    timed = {t.index: t for t in times}
    sections: list[dict] = []
    for index, cell in enumerate(nb.cells):
        headings = level_two_headings(cell.source) if cell.cell_type == "markdown" else []
        titles = headings or ([SETUP] if not sections else [])
        for title in titles:
            sections.append({"title": title, "first_cell": index, "code_cells": 0,
                             "timed_cells": 0, "wall_s": 0.0, "cpu_s": 0.0})
        section = sections[-1]
        if cell.cell_type == "code" and cell.source.strip():
            section["code_cells"] += 1
        if index in timed:
            section["timed_cells"] += 1
            section["wall_s"] += timed[index].wall_s
            cpu = timed[index].cpu_s
            section["cpu_s"] = None if cpu is None or section["cpu_s"] is None else (
                section["cpu_s"] + cpu)
    return sections
