"""Time the lab's notebooks section by section, for instructors planning a workshop.

A teacher needs to know how long each part of a notebook computes before deciding what to run
live. This command executes each notebook top to bottom with nbclient, in a fresh kernel pinned to
one CPU thread, times every code cell, and adds the times up per section::

    python -m labkit.section_times                   # every notebook in notebooks/
    python -m labkit.section_times 00 02_grpo        # the ones named (number, stem or path)

A section starts at a markdown heading of level two (``## ...``, outside fenced code); the cells
before the first one form the ``setup`` section. Each cell's wall time runs from sending it to the
kernel to the kernel's reply; its CPU time is the kernel process's user + system time over the same
interval (a wall time well above the CPU time means the machine was busy with other work).

The kernel's environment gets ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and ``LABKIT_THREADS`` set
to 1, the Hugging Face offline switches, and ``LABKIT_STATIC=1`` (widgets draw their static figure,
as under the notebook tests, ``notebooks/conftest.py``). Every cell has a timeout. The notebooks
are read, never written: outputs stay in memory, unless ``--save-executed DIR`` asks for a copy of
each notebook that ran cleanly (``--save-executed notebooks`` refreshes the committed outputs). The results go to a JSON file and a markdown
table (``docs/teaching/section_times.json`` and ``.md`` by default) together with a description
of the machine and the command that produced them. A notebook that fails is recorded with its
error and the times of the cells that ran; the command then exits with status 1. The kernels
listen on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

try:  # a dependency of ipykernel, which runs the notebooks; without it CPU times are not read
    import psutil
except ImportError:
    psutil = None

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS_DIR = ROOT / "notebooks"
DEFAULT_JSON = ROOT / "docs" / "teaching" / "section_times.json"
DEFAULT_MARKDOWN = ROOT / "docs" / "teaching" / "section_times.md"
DEFAULT_CELL_TIMEOUT = 900  # seconds; the notebook tests allow the same (pyproject.toml)
SETUP = "setup"

# One thread per kernel: the notebooks' tiny matrix products gain nothing from more, and a shared
# machine's other work would otherwise make the times depend on how many cores were free.
KERNEL_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "LABKIT_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "LABKIT_STATIC": "1",
}

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


@dataclass(frozen=True)
class CellTime:
    """How long one code cell took."""

    index: int
    wall_s: float
    cpu_s: float | None
    """kernel CPU seconds (user + system); None when the kernel process cannot be read"""


class _CellClock:
    """nbclient hooks that time each code cell, in wall and kernel CPU seconds."""

    def __init__(self, client: NotebookClient):
        self.client = client
        self.times: list[CellTime] = []
        self.running: tuple[int, float, float | None] | None = None

    def _kernel_cpu(self) -> float | None:
        provisioner = getattr(self.client.km, "provisioner", None)
        pid = getattr(provisioner, "pid", None)  # None for a kernel that is not a local process
        if psutil is None or not isinstance(pid, int):
            return None
        try:
            cpu = psutil.Process(pid).cpu_times()
        except psutil.Error:  # the kernel just died
            return None
        return cpu.user + cpu.system

    def start(self, cell, cell_index: int) -> None:
        self.running = (cell_index, time.perf_counter(), self._kernel_cpu())

    def stop(self, cell=None, cell_index: int | None = None, execute_reply=None) -> None:
        if self.running is None:
            return
        index, wall0, cpu0 = self.running
        cpu1 = self._kernel_cpu()
        cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
        self.times.append(CellTime(index, time.perf_counter() - wall0, cpu))
        self.running = None


def execute_timed(path: Path, cell_timeout: float = DEFAULT_CELL_TIMEOUT,
                  kernel_name: str | None = None,
                  ) -> tuple[nbformat.NotebookNode, list[CellTime], str | None]:
    """Execute the notebook at ``path`` in memory, in its own folder, timing every code cell.

    Returns the executed notebook (outputs filled in, the file untouched), the cell times, and
    the error that stopped it (``None`` if every cell ran). A cell past ``cell_timeout`` seconds
    stops the notebook; its time up to then is kept.
    """
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=cell_timeout, startup_timeout=120,
                            resources={"metadata": {"path": str(path.parent)}})
    if kernel_name:
        client.kernel_name = kernel_name  # otherwise the notebook's own kernelspec
    # the kernel's sockets on the loopback interface only, whatever a Jupyter config file says
    client.create_kernel_manager().ip = "127.0.0.1"
    clock = _CellClock(client)
    client.on_cell_execute = clock.start
    client.on_cell_executed = clock.stop
    error = None
    try:
        client.execute(env={**os.environ, **KERNEL_ENV})
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as err:  # keep what ran
        # a cell that raised has been timed already (last in the list); one that timed out or
        # killed the kernel is still running
        failed_at = clock.running[0] if clock.running else (
            clock.times[-1].index if clock.times else None)
        clock.stop()
        if hasattr(err, "ename"):  # nbclient's CellExecutionError: the cell's own exception
            detail = f"{err.ename}: {err.evalue}"
        else:
            detail = (str(err).strip().splitlines() or [""])[0]
        where = f" in cell {failed_at}" if failed_at is not None else ""
        error = f"{type(err).__name__}{where}: {detail}"
    return nb, clock.times, error


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


def notebook_record(path: Path, nb, times: list[CellTime], error: str | None) -> dict:
    """The JSON record of one timed notebook."""
    sections = group_by_section(nb, times)
    cpu = [t.cpu_s for t in times]
    return {"notebook": path.name, "status": "ok" if error is None else "error", "error": error,
            "wall_s": sum(t.wall_s for t in times),
            "cpu_s": None if None in cpu else sum(cpu),
            "sections": sections,
            "cells": [{"index": t.index, "wall_s": t.wall_s, "cpu_s": t.cpu_s} for t in times]}


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def without_widget_state(nb):
    """``nb`` without the widgets' saved state (progress bars' models, 0.6-0.7 MB per training
    notebook) and without the widget views that need it: each output keeps its text or figure."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            output.get("data", {}).pop(WIDGET_VIEW, None)
    return nb


def _memory_gib() -> float | None:
    if psutil is not None:
        return psutil.virtual_memory().total / 2**30
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20  # kB
    return None


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _load_average() -> list[float] | None:
    # os.getloadavg exists on Linux and macOS only; Windows has no equivalent
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def describe_machine() -> dict:
    """CPU model, logical cores, memory, OS, Python and library versions, and the date (UTC)."""
    memory = _memory_gib()
    return {"cpu": _cpu_model(), "logical_cores": os.cpu_count(),
            "threads_per_kernel": int(KERNEL_ENV["OMP_NUM_THREADS"]),
            "memory_gib": None if memory is None else round(memory, 1),
            "os": platform.platform(), "python": platform.python_version(),
            "torch": _version("torch"), "transformers": _version("transformers"),
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "load_average_before": _load_average()}


def resolve_notebooks(names: list[str], notebooks_dir: Path) -> list[Path]:
    """Paths of the notebooks named by number (``02``), stem (``02_grpo``), file name or path.

    No names: every ``*.ipynb`` in ``notebooks_dir``, in name order.
    """
    available = sorted(notebooks_dir.glob("*.ipynb")) if notebooks_dir.is_dir() else []
    if not names:
        if not available:
            raise ValueError(f"notebooks folder {str(notebooks_dir)!r} holds no .ipynb file; "
                             "pass --notebooks-dir or name the notebooks' paths")
        return available
    chosen = []
    for name in names:
        as_path = Path(name)
        if as_path.suffix == ".ipynb" and as_path.is_file():
            chosen.append(as_path)
            continue
        matches = [p for p in available
                   if name in (p.name, p.stem) or p.stem.split("_", 1)[0] == name]
        if len(matches) != 1:
            options = ", ".join(p.stem for p in available) or "none found"
            raise ValueError(f"notebook {name!r} matches {len(matches)} notebooks in "
                             f"{str(notebooks_dir)!r}; give a number, a stem or a path "
                             f"(available: {options})")
        chosen.append(matches[0])
    return chosen


def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_report(report: dict) -> str:
    """The report as markdown: how it was measured, a table per notebook and per section."""
    m = report["machine"]
    load = m["load_average_before"]
    lines = [
        "# Compute time per notebook section",
        "",
        f"Measured with `{report['command']}` on {m['date']}.",
        "",
        (f"- machine: {m['cpu']}, {m['logical_cores']} logical cores, "
         f"{m['memory_gib']} GiB of memory; {m['os']}"),
        f"- software: Python {m['python']}, torch {m['torch']}, transformers {m['transformers']}",
        (f"- one fresh kernel per notebook, {m['threads_per_kernel']} CPU thread per kernel "
         "(`OMP_NUM_THREADS`, `MKL_NUM_THREADS`, `LABKIT_THREADS` = 1), `LABKIT_STATIC=1`, "
         f"cell timeout {report['cell_timeout_s']:g} s"),
        ("- load average (1, 5, 15 min) before the run: "
         f"{', '.join(map(str, load)) if load else 'not available on this OS'}"),
        "",
        ("Wall seconds run from sending a code cell to the kernel's reply; CPU seconds are the "
         "kernel process's user + system time over the same cells. Kernel start-up is not "
         "included."),
        "",
        "| notebook | code cells run | wall s | CPU s | status |",
        "|---|---|---|---|---|",
    ]
    for nb in report["notebooks"]:
        status = nb["status"] if nb["error"] is None else f"error: {_escape(nb['error'])}"
        lines.append(f"| {nb['notebook']} | {len(nb['cells'])} | {_cell(nb['wall_s'])} | "
                     f"{_cell(nb['cpu_s'])} | {status} |")
    for nb in report["notebooks"]:
        lines += ["", f"## {nb['notebook']}", "",
                  "| section | code cells run | wall s | CPU s |", "|---|---|---|---|"]
        for section in nb["sections"]:
            lines.append(f"| {_escape(section['title'])} | {section['timed_cells']} of "
                         f"{section['code_cells']} | {_cell(section['wall_s'])} | "
                         f"{_cell(section['cpu_s'])} |")
    return "\n".join(lines) + "\n"


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(
            f"--cell-timeout must be a number of seconds > 0, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*",
                        help="notebooks to time: a number (02), a stem (02_grpo) or a path; "
                             "default: all")
    parser.add_argument("--notebooks-dir", type=Path, default=NOTEBOOKS_DIR)
    parser.add_argument("--out-json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--out-md", type=Path, default=DEFAULT_MARKDOWN)
    parser.add_argument("--cell-timeout", type=_positive_seconds, default=DEFAULT_CELL_TIMEOUT,
                        help="seconds one cell may run before the notebook is stopped")
    parser.add_argument("--kernel", default=None,
                        help="kernel name (default: the notebook's own kernelspec)")
    parser.add_argument("--save-executed", type=Path, default=None, metavar="DIR",
                        help="also write each notebook that ran without error, with its fresh "
                             "outputs, into DIR (maintainers: DIR=notebooks refreshes the "
                             "committed outputs in the same run)")
    args = parser.parse_args(argv)
    try:
        paths = resolve_notebooks(args.notebooks, args.notebooks_dir)
    except ValueError as err:
        parser.error(str(err))
    command = " ".join(["python -m labkit.section_times", *(argv if argv is not None
                                                            else sys.argv[1:])])
    report = {"command": command, "machine": describe_machine(),
              "cell_timeout_s": args.cell_timeout, "notebooks": []}
    for path in paths:
        print(f"{path.name}: running", flush=True)
        nb, times, error = execute_timed(path, args.cell_timeout, args.kernel)
        record = notebook_record(path, nb, times, error)
        report["notebooks"].append(record)
        if args.save_executed is not None and error is None:
            args.save_executed.mkdir(parents=True, exist_ok=True)
            nbformat.write(without_widget_state(nb), args.save_executed / path.name)
        for section in record["sections"]:
            print(f"  {section['wall_s']:7.1f} s  {section['title']}", flush=True)
        print(f"  {record['wall_s']:7.1f} s  total ({record['status']}"
              f"{': ' + error if error else ''})", flush=True)
    for out in (args.out_json, args.out_md):
        out.parent.mkdir(parents=True, exist_ok=True)
    args.out_json.write_text(json.dumps(report, indent=1) + "\n")
    args.out_md.write_text(markdown_report(report))
    print(f"wrote {args.out_json} and {args.out_md}")
    return 0 if all(nb["status"] == "ok" for nb in report["notebooks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
