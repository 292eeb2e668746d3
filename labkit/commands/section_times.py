"""Time the lab's notebooks section by section, for instructors planning a workshop.

A teacher needs to know how long each part of a notebook computes before deciding what to run
live. This command executes each notebook top to bottom with nbclient, in a fresh kernel pinned to
one CPU thread, times every code cell, and adds the times up per section::

    python -m labkit section_times                   # every notebook in notebooks/
    python -m labkit section_times 00 02_grpo        # the ones named (number, stem or path)
    python -m labkit section_times 00 --device cuda  # on the GPU (default: --device cpu)
    python -m labkit section_times --lab --save-executed notebooks   # maintainers (below)

A teacher's run writes its own report, ``section_times.json`` and ``.md`` in the current folder
(or ``--out-json``), and touches nothing in the repository. ``--lab`` is the maintainers' run: it
merges into the lab's report, ``docs/teaching/section_times.json``, whose times the pages quote.

A section starts at a markdown heading of level two (``## ...``, outside fenced code); the cells
before the first one form the ``setup`` section. Each cell's wall time runs from sending it to the
kernel to the kernel's reply; its CPU time is the kernel process's user + system time over the same
interval (a wall time well above the CPU time means the machine was busy with other work).

The kernel's environment gets ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and ``LABKIT_THREADS`` set
to 1, the Hugging Face offline switches, and ``LABKIT_STATIC=1`` (widgets draw their static figure,
as under the notebook tests, ``notebooks/conftest.py``). ``--device cpu`` also sets
``CUDA_VISIBLE_DEVICES=""``, so that a notebook's ``device="auto"`` finds no GPU and the time is a
CPU time even on a GPU machine; ``--device cuda`` leaves the GPUs visible and is refused where
``torch.cuda`` is not available. Every cell has a timeout. The kernel each notebook needs (``--kernel``, else the
notebook's own kernelspec) is checked against the installed kernels before anything runs.

The notebooks are read, never written: outputs stay in memory, unless ``--save-executed DIR``
asks for a copy of each notebook that ran cleanly (``--save-executed notebooks`` refreshes the
committed outputs, and needs ``--lab``), with the values its ``record`` calls wrote in
``DIR/results/``, the source of every number the prose quotes (:mod:`labkit.quotes`; the timing
quotes are rewritten from the lab's report with the summary tables). The results go to a JSON
file and a markdown table, one record per notebook and
device, each with the machine it ran on (CPU model and cores, the GPU's name for ``cuda``) and the
command. A run merges into the report that is there: the records of the notebooks and the device
it timed are replaced, every other record is kept, so timing one notebook leaves the other
notebooks' times as they were. The report is rewritten after each notebook, so an interrupted or
failing run keeps what it measured. The lab rewrites only its own report: an output file that is
not one is refused before anything runs. docs/reproducibility.md and the instructor guide show a
summary (minutes per notebook and device, the machines named) between two marker lines that
``--lab`` rewrites; ``--render`` rewrites the markdown and those tables from the
JSON without running anything. The report of the previous format (one machine for the
whole run, CPU times only) is read as CPU records. A notebook that fails is recorded with its
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
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import NATIVE_KERNEL_NAME, KernelSpecManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

from labkit import quotes

try:  # a dependency of ipykernel, which runs the notebooks; without it CPU times are not read
    import psutil
except ImportError:
    psutil = None

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS_DIR = ROOT / "notebooks"
DEFAULT_JSON = ROOT / "docs" / "teaching" / "section_times.json"
DEFAULT_MARKDOWN = ROOT / "docs" / "teaching" / "section_times.md"
DEFAULT_CELL_TIMEOUT = 900  # seconds; the notebook tests allow the same (pyproject.toml)
SETUP = "setup"
#: The devices a notebook can be timed on, in the report's column order.
DEVICES = ("cpu", "cuda")
DEVICE_NAMES = {"cpu": "CPU, one thread", "cuda": "one GPU"}
#: The report's first markdown line: how a file is recognised as a report this command wrote.
TITLE = "# Compute time per notebook section"
REPORT_FORMAT = 2
#: Pages that show the per-notebook summary (:func:`summary_table`) between these two lines. The
#: command rewrites what lies between them, nothing else, whenever it writes the default report;
#: ``tests/test_section_times.py`` fails when a page's table differs from the report.
SUMMARY_PAGES = (ROOT / "docs" / "reproducibility.md", ROOT / "docs" / "teaching" / "README.md")
SUMMARY_BEGIN = ("<!-- notebook times: generated by python -m labkit section_times from "
                 "docs/teaching/section_times.json; edits are overwritten -->")
SUMMARY_END = "<!-- end of notebook times -->"

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



def kernel_env(device: str) -> dict[str, str]:
    """The variables a timing kernel gets: :data:`KERNEL_ENV`, and on ``cpu`` no visible GPU."""
    return {**KERNEL_ENV, **({"CUDA_VISIBLE_DEVICES": ""} if device == "cpu" else {})}


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
                  kernel_name: str | None = None, device: str = "cpu",
                  results_dir: Path | None = None, env: dict[str, str] | None = None,
                  allow_errors: bool = False,
                  ) -> tuple[nbformat.NotebookNode, list[CellTime], str | None]:
    """Execute the notebook at ``path`` in memory, in its own folder, timing every code cell;
    the kernel's environment is :func:`kernel_env` of ``device``. With ``results_dir`` the
    notebook's ``record`` calls write its results file there (:mod:`labkit.quotes`); without,
    they do nothing. ``env`` adds variables to the kernel's (``python -m labkit bands`` sets
    its kernel paths there). With ``allow_errors`` a cell that raises does not stop the
    notebook; the error returned then names every cell that raised.

    Returns the executed notebook (outputs filled in, the file untouched), the cell times, and
    the error that stopped it (``None`` if every cell ran). A cell past ``cell_timeout`` seconds
    stops the notebook; its time up to then is kept.
    """
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=cell_timeout, startup_timeout=120,
                            resources={"metadata": {"path": str(path.parent)}})
    client.allow_errors = allow_errors
    if kernel_name:
        client.kernel_name = kernel_name  # otherwise the notebook's own kernelspec
    # the kernel's sockets on the loopback interface only, whatever a Jupyter config file says
    client.create_kernel_manager().ip = "127.0.0.1"
    clock = _CellClock(client)
    client.on_cell_execute = clock.start
    client.on_cell_executed = clock.stop
    error = None
    try:
        recording = ({quotes.MODE_VARIABLE: "write", quotes.DIR_VARIABLE: str(results_dir)}
                     if results_dir is not None else {quotes.MODE_VARIABLE: ""})
        client.execute(env={**os.environ, **kernel_env(device), **recording, **(env or {})})
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
    raised = [f"cell {i}: {out.get('ename')}: {out.get('evalue')}"
              for i, cell in enumerate(nb.cells) for out in cell.get("outputs", [])
              if out.get("output_type") == "error"]
    if allow_errors and raised:
        error = "; ".join(filter(None, [error, *raised]))
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


def describe_machine(device: str = "cpu") -> dict:
    """CPU model, logical cores, memory, OS, Python and library versions, and the date (UTC);
    for ``cuda`` also the GPU's name and memory and torch's CUDA version."""
    memory = _memory_gib()
    machine = {"cpu": _cpu_model(), "logical_cores": os.cpu_count(),
               "threads_per_kernel": int(KERNEL_ENV["OMP_NUM_THREADS"]),
               "memory_gib": None if memory is None else round(memory, 1),
               "os": platform.platform(), "python": platform.python_version(),
               "torch": _version("torch"), "transformers": _version("transformers"),
               "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "load_average_before": _load_average()}
    if device == "cuda":
        import torch

        properties = torch.cuda.get_device_properties(0)
        machine.update(gpu=properties.name, gpu_memory_gib=round(properties.total_memory / 2**30, 1),
                       cuda=torch.version.cuda)
    return machine


def check_device(device: str) -> None:
    """Refuse ``cuda`` where torch cannot reach a GPU (the notebooks would run on the CPU and
    the report would call it a GPU time)."""
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            build = f"built with CUDA {torch.version.cuda}" if torch.version.cuda else (
                "a build without CUDA")
            raise ValueError(f"--device cuda: torch.cuda is not available here (torch "
                             f"{torch.__version__}, {build}); time the notebooks on the CPU with "
                             f"--device cpu, or run on a machine with an NVIDIA GPU")


def check_kernels(paths: list[Path], kernel: str | None) -> None:
    """Refuse, before anything runs, a kernel that is not installed: ``kernel`` (``--kernel``),
    or else each notebook's own kernelspec (nbclient's default, ``python3``, without one)."""
    installed = sorted(KernelSpecManager().find_kernel_specs())
    listed = ", ".join(installed) or "none"
    if kernel is not None:
        if kernel not in installed:
            raise ValueError(f"--kernel {kernel!r} is not installed (installed kernels: "
                             f"{listed}); install it, or choose one of those")
        return
    for path in paths:
        spec = nbformat.read(path, as_version=4).metadata.get("kernelspec") or {}
        name = spec.get("name") or NATIVE_KERNEL_NAME
        if name not in installed:
            raise ValueError(f"notebook {path.name} asks for kernel {name!r} (its kernelspec), "
                             f"which is not installed (installed kernels: {listed}); pass "
                             f"--kernel with one of those")


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


def summary_table(records: list[dict]) -> str:
    """Minutes to run each notebook top to bottom, one column per device, with the machines
    named: the table docs/reproducibility.md and the instructor guide show (from the same records as the
    report, so a re-timing changes both)."""
    by_notebook: dict[str, dict[str, dict]] = {}
    for record in records:
        by_notebook.setdefault(record["notebook"], {})[record["device"]] = record
    lines = ["| notebook | " + " | ".join(f"{DEVICE_NAMES[d]}: minutes" for d in DEVICES) + " |",
             "|---|" + "---|" * len(DEVICES)]
    for notebook, measured in by_notebook.items():
        cells = (f"{measured[d]['wall_s'] / 60:.1f}" + ("" if measured[d]["error"] is None
                                                         else " (failed)")
                 if d in measured else "unmeasured" for d in DEVICES)
        lines.append(f"| `{notebook}` | " + " | ".join(cells) + " |")
    lines.append("")
    runs = _runs(records)
    for device in DEVICES:
        mine = [(record, notebooks) for record, notebooks in runs if record["device"] == device]
        for record, notebooks in mine:
            lines.append(f"- {DEVICE_NAMES[device]}, {', '.join(n.split('_')[0] for n in notebooks)}: "
                         f"{_machine_line(device, record['machine'])}; measured "
                         f"{(record['machine'] or {}).get('date', 'on an unrecorded date')}.")
        if not mine:
            lines.append(f"- {DEVICE_NAMES[device]}: not measured yet.")
    return "\n".join(lines)


def with_summary(text: str, table: str, page: Path) -> str:
    """``text`` with the part between :data:`SUMMARY_BEGIN` and :data:`SUMMARY_END` replaced by
    ``table``; a page without both lines is refused (the command writes nowhere else)."""
    begin, end = text.find(SUMMARY_BEGIN), text.find(SUMMARY_END)
    if begin < 0 or end < begin:
        raise ValueError(f"{page} has no generated notebook-times block (a line {SUMMARY_BEGIN!r} "
                         f"and a later line {SUMMARY_END!r}); add both where the table goes")
    return f"{text[:begin + len(SUMMARY_BEGIN)]}\n{table}\n{text[end:]}"


def write_summaries(records: list[dict], pages=SUMMARY_PAGES) -> None:
    """Rewrite the generated table of every page in ``pages`` (only between its two lines), and
    every timing quote of the notebooks and pages (:func:`labkit.quotes.render_times`)."""
    table = summary_table(records)
    for page in pages:
        text = page.read_text(encoding="utf-8")
        updated = with_summary(text, table, page)
        if updated != text:
            page.write_text(updated, encoding="utf-8")
    quotes.render_times()


def save_results(notebook: str, written: Path, destination: Path) -> None:
    """Move the results file a run wrote (``written/notebook.json``) beside the notebook it
    saved; the one there is replaced only if :mod:`labkit.quotes` wrote it."""
    source = quotes.results_path(notebook, written)
    if not source.exists():
        return  # the notebook records nothing
    target = quotes.results_path(notebook, destination)
    if target.exists():
        quotes.load_results(notebook, destination)  # refuses a file the lab did not write
    destination.mkdir(parents=True, exist_ok=True)
    target.write_text(source.read_text(encoding="utf-8"), encoding="utf-8")


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
    parser.add_argument("--device", choices=DEVICES, default="cpu",
                        help="where the notebooks compute: cpu (the kernel sees no GPU) or cuda")
    parser.add_argument("--lab", action="store_true",
                        help="maintainers: merge into the lab's own report "
                             "(docs/teaching/section_times.json) and rewrite the pages' tables "
                             "and timing quotes from it")
    parser.add_argument("--out-json", type=Path, default=None,
                        help="the report to merge into (created if missing; default: "
                             "section_times.json in the current folder, or the lab's with --lab)")
    parser.add_argument("--out-md", type=Path, default=None)
    parser.add_argument("--cell-timeout", type=_positive_seconds, default=DEFAULT_CELL_TIMEOUT,
                        help="seconds one cell may run before the notebook is stopped")
    parser.add_argument("--kernel", default=None,
                        help="kernel name (default: the notebook's own kernelspec)")
    parser.add_argument("--save-executed", type=Path, default=None, metavar="DIR",
                        help="also write each notebook that ran without error, with its fresh "
                             "outputs, into DIR (maintainers: DIR=notebooks refreshes the "
                             "committed outputs in the same run)")
    parser.add_argument("--render", action="store_true",
                        help="run nothing: rewrite the markdown report and the notebook-times "
                             "tables of docs/reproducibility.md and the instructor guide from the JSON")
    args = parser.parse_args(argv)
    args.lab = args.lab or args.render  # --render rewrites the pages from the lab's report
    if args.out_json is None:
        args.out_json = DEFAULT_JSON if args.lab else Path("section_times.json")
    if args.out_md is None:
        args.out_md = DEFAULT_MARKDOWN if args.lab else args.out_json.with_suffix(".md")
    if args.lab and (args.out_json.resolve(), args.out_md.resolve()) != (DEFAULT_JSON,
                                                                        DEFAULT_MARKDOWN):
        parser.error("--lab writes the lab's own report; leave out --out-json and --out-md")
    if (args.save_executed is not None and not args.lab
            and args.save_executed.resolve() == NOTEBOOKS_DIR.resolve()):
        parser.error("--save-executed notebooks refreshes the committed outputs, whose timings "
                     "the lab's report quotes: add --lab")
    summaries = args.lab  # the pages show the lab's report only
    if args.render:
        try:
            records = load_report(args.out_json)
            check_markdown_target(args.out_md)
            write_report(records, args.out_json, args.out_md)
            if summaries:
                write_summaries(records)
        except (ValueError, OSError) as err:
            parser.error(str(err))
        print(f"wrote {args.out_json} and {args.out_md}"
              + (" and the tables of " + ", ".join(str(p.relative_to(ROOT)) for p in SUMMARY_PAGES)
                 if summaries else ""))
        return 0
    try:  # everything that can be refused is, before the first kernel starts
        paths = resolve_notebooks(args.notebooks, args.notebooks_dir)
        check_device(args.device)
        check_kernels(paths, args.kernel)
        records = load_report(args.out_json)
        check_markdown_target(args.out_md)
        for page in SUMMARY_PAGES if summaries else ():
            with_summary(page.read_text(encoding="utf-8"), "", page)
    except ValueError as err:
        parser.error(str(err))
    command = " ".join(["python -m labkit section_times", *(argv if argv is not None
                                                            else sys.argv[1:])])
    machine = describe_machine(args.device)
    statuses = []
    for path in paths:
        print(f"{path.name}: running on {args.device}", flush=True)
        with tempfile.TemporaryDirectory(prefix="labkit-results-") as results:
            nb, times, error = execute_timed(path, args.cell_timeout, args.kernel, args.device,
                                             results_dir=None if args.save_executed is None
                                             else Path(results))
            if args.save_executed is not None and error is None:
                save_results(path.stem, Path(results), args.save_executed / "results")
        record = notebook_record(path, nb, times, error, args.device, machine, command,
                                 args.cell_timeout)
        statuses.append(record["status"])
        records = merge_records(records, [record])
        write_report(records, args.out_json, args.out_md)  # after each notebook: kept if stopped
        if summaries:
            write_summaries(records)
        if args.save_executed is not None and error is None:
            args.save_executed.mkdir(parents=True, exist_ok=True)
            nbformat.write(without_widget_state(nb), args.save_executed / path.name)
        for section in record["sections"]:
            print(f"  {section['wall_s']:7.1f} s  {section['title']}", flush=True)
        print(f"  {record['wall_s']:7.1f} s  total ({record['status']}"
              f"{': ' + error if error else ''})", flush=True)
    print(f"wrote {args.out_json} and {args.out_md}")
    return 0 if all(status == "ok" for status in statuses) else 1


if __name__ == "__main__":
    sys.exit(main())
