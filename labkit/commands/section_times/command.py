"""The command, ``python -m labkit section_times``: which notebooks to time, and the run that
times them, merges the report, rewrites the pages and saves the executed notebooks."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import nbformat

from labkit import quotes
from labkit.commands.section_times.execution import (
    DEFAULT_CELL_TIMEOUT,
    check_device,
    check_kernels,
    execute_timed,
)
from labkit.commands.section_times.machine import describe_machine
from labkit.commands.section_times.report import (
    DEFAULT_JSON,
    DEFAULT_MARKDOWN,
    DEVICES,
    ROOT,
    check_markdown_target,
    load_report,
    merge_records,
    notebook_record,
    write_report,
)
from labkit.commands.section_times.summaries import SUMMARY_PAGES, with_summary, write_summaries

NOTEBOOKS_DIR = ROOT / "notebooks"


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def without_widget_state(nb):
    """``nb`` without the widgets' saved state (progress bars' models, 0.6-0.7 MB per training
    notebook) and without the widget views that need it: each output keeps its text or figure."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            output.get("data", {}).pop(WIDGET_VIEW, None)
    return nb


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
    parser = argparse.ArgumentParser(description="Time the lab's notebooks section by section, "
                                                 "for instructors planning a workshop.")
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
