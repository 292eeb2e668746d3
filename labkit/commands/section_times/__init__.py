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

One module per job: :mod:`~labkit.commands.section_times.execution` (the timed kernel run),
:mod:`~labkit.commands.section_times.sections` (headings and per-section sums),
:mod:`~labkit.commands.section_times.machine` (the machine described),
:mod:`~labkit.commands.section_times.report` (the records, the JSON and the markdown),
:mod:`~labkit.commands.section_times.summaries` (the pages' summary tables) and
:mod:`~labkit.commands.section_times.command` (the command).
"""

from labkit.commands.section_times.command import (
    NOTEBOOKS_DIR,
    WIDGET_VIEW,
    main,
    resolve_notebooks,
    save_results,
    without_widget_state,
)
from labkit.commands.section_times.execution import (
    DEFAULT_CELL_TIMEOUT,
    KERNEL_ENV,
    CellTime,
    check_device,
    check_kernels,
    execute_timed,
    kernel_env,
)
from labkit.commands.section_times.machine import describe_machine
from labkit.commands.section_times.report import (
    DEFAULT_JSON,
    DEFAULT_MARKDOWN,
    DEVICE_NAMES,
    DEVICES,
    REPORT_FORMAT,
    ROOT,
    TITLE,
    check_markdown_target,
    load_report,
    markdown_report,
    merge_records,
    notebook_record,
    records_of,
    write_report,
)
from labkit.commands.section_times.sections import (
    SETUP,
    group_by_section,
    level_two_headings,
)
from labkit.commands.section_times.summaries import (
    SUMMARY_BEGIN,
    SUMMARY_END,
    SUMMARY_PAGES,
    summary_table,
    with_summary,
    write_summaries,
)

__all__ = ["DEFAULT_CELL_TIMEOUT", "DEFAULT_JSON", "DEFAULT_MARKDOWN", "DEVICES", "DEVICE_NAMES",
           "KERNEL_ENV", "NOTEBOOKS_DIR", "REPORT_FORMAT", "ROOT", "SETUP", "SUMMARY_BEGIN",
           "SUMMARY_END", "SUMMARY_PAGES", "TITLE", "WIDGET_VIEW", "CellTime", "check_device",
           "check_kernels", "check_markdown_target", "describe_machine", "execute_timed",
           "group_by_section", "kernel_env", "level_two_headings", "load_report", "main",
           "markdown_report", "merge_records", "notebook_record", "records_of",
           "resolve_notebooks", "save_results", "summary_table", "with_summary",
           "without_widget_state", "write_report", "write_summaries"]
