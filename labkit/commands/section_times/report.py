"""The report: one record per notebook and device (:func:`notebook_record`), read, merged and
written as JSON and as markdown (:func:`markdown_report`); where the lab's own report lives."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from labkit.commands.section_times.execution import DEFAULT_CELL_TIMEOUT, CellTime
from labkit.commands.section_times.sections import group_by_section

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_JSON = ROOT / "docs" / "teaching" / "section_times.json"
DEFAULT_MARKDOWN = ROOT / "docs" / "teaching" / "section_times.md"
#: The devices a notebook can be timed on, in the report's column order.
DEVICES = ("cpu", "cuda")
DEVICE_NAMES = {"cpu": "CPU, one thread", "cuda": "one GPU"}
#: The report's first markdown line: how a file is recognised as a report this command wrote.
TITLE = "# Compute time per notebook section"
REPORT_FORMAT = 2


def notebook_record(path: Path, nb, times: list[CellTime], error: str | None,
                    device: str = "cpu", machine: dict | None = None, command: str = "",
                    cell_timeout: float = DEFAULT_CELL_TIMEOUT) -> dict:
    """The JSON record of one notebook timed on ``device`` (the machine and the command that
    measured it included: a merged report holds records of several runs)."""
    sections = group_by_section(nb, times)
    cpu = [t.cpu_s for t in times]
    return {"notebook": path.name, "device": device, "machine": machine, "command": command,
            "cell_timeout_s": cell_timeout,
            "status": "ok" if error is None else "error", "error": error,
            "wall_s": sum(t.wall_s for t in times),
            "cpu_s": None if None in cpu else sum(cpu),
            "sections": sections,
            "cells": [{"index": t.index, "wall_s": t.wall_s, "cpu_s": t.cpu_s} for t in times]}


def records_of(report: dict) -> list[dict]:
    """The notebook records of a report, each with its device, machine, command and cell
    timeout. The previous format (one machine and command for the whole run, CPU times only) is
    read as CPU records of that machine."""
    if report.get("format") == REPORT_FORMAT:
        return list(report["notebooks"])
    shared = {"device": "cpu", "machine": report.get("machine"),
              "command": report.get("command", ""),
              "cell_timeout_s": report.get("cell_timeout_s", DEFAULT_CELL_TIMEOUT)}
    return [{**shared, **record} for record in report["notebooks"]]


def load_report(path: Path) -> list[dict]:
    """The records of the report at ``path`` ([] when there is none). A file that is not a
    report of this command is refused: the lab never overwrites a file it did not write."""
    if not path.exists():
        return []
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
        records = records_of(report)
        if not all(isinstance(r, dict) and isinstance(r["notebook"], str)
                   and r["device"] in DEVICES for r in records):
            raise TypeError("a record without a notebook or a known device")
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as err:
        raise ValueError(f"--out-json {path} is not a report of python -m labkit section_times "
                         f"({type(err).__name__}: {err}); the lab never overwrites a file it "
                         f"did not write: choose another --out-json") from None
    return records


def check_markdown_target(path: Path) -> None:
    """Refuse a markdown output that exists and was not written by this command."""
    if not path.exists():
        return
    try:
        first = path.read_text(encoding="utf-8").split("\n", 1)[0]
    except (OSError, UnicodeDecodeError) as err:
        first = f"<unreadable: {err}>"
    if first != TITLE:
        raise ValueError(f"--out-md {path} is not a report of python -m labkit section_times "
                         f"(its first line is {first[:60]!r}, not {TITLE!r}); the lab never "
                         f"overwrites a file it did not write: choose another --out-md")


def merge_records(old: list[dict], new: list[dict]) -> list[dict]:
    """``old`` with every record of a (notebook, device) in ``new`` replaced by the new one;
    in notebook order, then :data:`DEVICES` order."""
    fresh = {(r["notebook"], r["device"]): r for r in new}
    kept = [r for r in old if (r["notebook"], r["device"]) not in fresh]
    return sorted(kept + list(fresh.values()),
                  key=lambda r: (r["notebook"], DEVICES.index(r["device"])))


def write_report(records: list[dict], out_json: Path, out_md: Path) -> None:
    """Write the report as JSON and markdown, each to a temporary file beside it, then renamed
    over it (a reader never sees half a report)."""
    report = {"format": REPORT_FORMAT, "notebooks": records}
    for out, text in ((out_json, json.dumps(report, indent=1) + "\n"),
                      (out_md, markdown_report(report))):
        out.parent.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.",
                                        suffix=".labkit-tmp")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(name, out)
        except BaseException:
            Path(name).unlink(missing_ok=True)
            raise


def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def _machine_line(device: str, machine: dict | None) -> str:
    if not machine:
        return "machine not recorded"
    gpu = (f"{machine['gpu']} ({machine['gpu_memory_gib']} GiB, CUDA {machine['cuda']}) beside "
           if device == "cuda" and machine.get("gpu") else "")
    load = machine.get("load_average_before")
    return (f"{gpu}{machine['cpu']}, {machine['logical_cores']} logical cores, "
            f"{machine['memory_gib']} GiB of memory; {machine['os']}; Python {machine['python']}, "
            f"torch {machine['torch']}, transformers {machine['transformers']}; "
            f"{machine['threads_per_kernel']} CPU thread per kernel; load average (1, 5, 15 min) "
            f"before: {', '.join(map(str, load)) if load else 'not available on this OS'}")


def _runs(records: list[dict]) -> list[tuple[dict, list[str]]]:
    """The runs behind the records: (a record of the run, its notebooks), in first-seen order."""
    runs: dict[str, tuple[dict, list[str]]] = {}
    for record in records:
        key = json.dumps([record["device"], record["machine"], record["command"],
                          record["cell_timeout_s"]], sort_keys=True)
        runs.setdefault(key, (record, []))[1].append(record["notebook"])
    return list(runs.values())


def _status(measured: dict[str, dict]) -> str:
    if all(r["error"] is None for r in measured.values()):
        return "ok"
    return "; ".join(f"{device}: " + ("ok" if r["error"] is None else
                                      f"error: {_escape(r['error'])}")
                     for device, r in measured.items())


def _section_rows(measured: dict[str, dict]) -> list[tuple[str, dict[str, dict]]]:
    """The sections of one notebook with each device's numbers, matched by title and by the
    title's occurrence (a second "Summary" is another section); the first device's order."""
    rows: dict[tuple[str, int], dict[str, dict]] = {}
    for device, record in measured.items():
        seen: dict[str, int] = {}
        for section in record["sections"]:
            occurrence = seen[section["title"]] = seen.get(section["title"], 0) + 1
            rows.setdefault((section["title"], occurrence), {})[device] = section
    return [(title, by_device) for (title, _), by_device in rows.items()]


def markdown_report(report: dict) -> str:
    """The report as markdown: the runs and machines that measured it, a table of notebooks with
    a column per device ("unmeasured" where a notebook was not timed on it), and a table of
    sections per notebook."""
    records = records_of(report)
    lines = [
        TITLE,
        "",
        ("Written by `python -m labkit section_times`, which merges each run into this report: "
         "one record per notebook and device."),
        "",
    ]
    for record, notebooks in _runs(records):
        lines.append(f"- **{record['device']}**, {', '.join(notebooks)}: measured with "
                     f"`{record['command']}` on "
                     f"{(record['machine'] or {}).get('date', 'an unrecorded date')}, cell timeout "
                     f"{record['cell_timeout_s']:g} s; {_machine_line(record['device'], record['machine'])}")
    lines += [
        "",
        ("One fresh kernel per notebook, one CPU thread per kernel (`OMP_NUM_THREADS`, "
         "`MKL_NUM_THREADS`, `LABKIT_THREADS` = 1), `LABKIT_STATIC=1`; on cpu the kernel sees no "
         "GPU (`CUDA_VISIBLE_DEVICES=\"\"`). Wall seconds run from sending a code cell to the "
         "kernel's reply; CPU seconds are the kernel process's user + system time over the same "
         "cells. Kernel start-up is not included."),
        "",
        "| notebook | code cells run | " + " | ".join(f"{d} wall s | {d} CPU s" for d in DEVICES)
        + " | status |",
        "|---|---|" + "---|---|" * len(DEVICES) + "---|",
    ]
    by_notebook: dict[str, dict[str, dict]] = {}
    for record in records:
        by_notebook.setdefault(record["notebook"], {})[record["device"]] = record
    for notebook, measured in by_notebook.items():
        first = next(iter(measured.values()))
        times = " | ".join(f"{_cell(measured[d]['wall_s'])} | {_cell(measured[d]['cpu_s'])}"
                           if d in measured else "unmeasured | unmeasured" for d in DEVICES)
        lines.append(f"| {notebook} | {len(first['cells'])} | {times} | {_status(measured)} |")
    for notebook, measured in by_notebook.items():
        lines += ["", f"## {notebook}", "",
                  "| section | code cells run | " + " | ".join(f"{d} wall s" for d in DEVICES)
                  + " |", "|---|---|" + "---|" * len(DEVICES)]
        for title, sections in _section_rows(measured):
            first = next(iter(sections.values()))
            times = " | ".join(_cell(sections[d]["wall_s"]) if d in sections else "unmeasured"
                               for d in DEVICES)
            lines.append(f"| {_escape(title)} | {first['timed_cells']} of "
                         f"{first['code_cells']} | {times} |")
    return "\n".join(lines) + "\n"
