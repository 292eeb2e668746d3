"""Preflight check: is this machine ready for the lab? ``python -m labkit check``

What a student or a teacher runs before a workshop. Each check is a row with a status (``ok``,
``warn``, ``fail``, or ``skip`` when a failure upstream makes it meaningless) and a one-line
detail; a verdict follows: READY, with the expected time of notebook 02's live GRPO run on this
machine, or NOT READY with one line per thing to fix. The exit status is 0 when ready (warnings
allowed) and 1 when any check fails.

The checks: the Python version; the installed dependencies against labkit's declared floors
(``labkit.runtime.compat``) and against the known-good ``requirements-lock.txt`` at the repository root,
when there is one (only the locked packages this install has or needs: the lock is one file for
every platform and lists the CUDA libraries that only torch's CUDA build pulls); the CPU budget (``labkit.runtime.cpu``); free memory, a container's memory limit
included; the shipped model and task files against ``data/MANIFEST.sha256``; loading the tiny
Qwen and a greedy answer; and the time of a GRPO step with notebook 02's live-run config.

Commands::

    python -m labkit check                   # the rows and the verdict, as plain text
    python -m labkit check --json            # the same as JSON, for tooling
    python -m labkit check --no-timing       # all but the timed step: a few seconds
    python -m labkit check --write-manifest  # rewrite data/MANIFEST.sha256 from data/ as it is

The manifest holds the sha256 of every file under ``data/models`` and ``data/tasks`` in
``sha256sum`` format (``sha256sum -c MANIFEST.sha256`` from ``data/`` verifies it too); the
reference-run logs in ``data/runs`` change with every rerun and are left out. Rewrite it after
rebuilding a model or the task splits on purpose. ``LABKIT_DATA`` points every check at another
data folder, as it does the rest of labkit.

From a notebook: ``print(report(run_checks()))``.

One module per job: :mod:`~labkit.commands.check.rows` (the row, :class:`Check`),
:mod:`~labkit.commands.check.packages` (Python, floors, lock), :mod:`~labkit.commands.check.
machine` (CPU, memory), :mod:`~labkit.commands.check.manifest` (the shipped files' hashes),
:mod:`~labkit.commands.check.speed` (the model and the timed step), :mod:`~labkit.commands.check.
reporting` (verdict, text, JSON) and :mod:`~labkit.commands.check.command` (every row in order,
and the command).
"""

from labkit.commands.check.command import main, run_checks
from labkit.commands.check.machine import GIB, check_cpu, check_memory, container_memory_headroom
from labkit.commands.check.manifest import (
    MANIFEST_FOLDERS,
    MANIFEST_NAME,
    check_data,
    manifest_files,
    read_manifest,
    write_manifest,
)
from labkit.commands.check.packages import (
    LOCK_FILE,
    check_floors,
    check_lock,
    check_python,
    installed_distributions,
    read_lock,
    required_here,
)
from labkit.commands.check.reporting import as_json, ready, report, verdict
from labkit.commands.check.rows import STATUSES, Check
from labkit.commands.check.speed import (
    TIMED_STEPS,
    check_model,
    check_speed,
    estimate_live_run,
    live_run_config,
    time_live_run_steps,
)

__all__ = ["GIB", "LOCK_FILE", "MANIFEST_FOLDERS", "MANIFEST_NAME", "STATUSES", "TIMED_STEPS",
           "Check", "as_json", "check_cpu", "check_data", "check_floors", "check_lock",
           "check_memory", "check_model", "check_python", "check_speed",
           "container_memory_headroom", "estimate_live_run", "installed_distributions",
           "live_run_config", "main", "manifest_files", "read_lock", "read_manifest", "ready",
           "report", "required_here", "run_checks", "time_live_run_steps", "verdict",
           "write_manifest"]
