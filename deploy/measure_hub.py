"""Measure a room of students on one machine through a real JupyterHub.

    python deploy/measure_hub.py --students 3                  # notebook 02's live run as shipped
    python deploy/measure_hub.py --students 3 --steps 2 --json hub.json   # a short check

Starts a throwaway JupyterHub and its configurable-http-proxy on 127.0.0.1 (``local_hub``), logs
N students in through the hub's login form, has each ask the hub for an API token and start their
own server through the hub's REST API, opens notebooks 00 and 02 on each server (one kernel each,
as a student with both tabs open) and then, all students at the same time, runs notebook 00's
setup cells, and notebook 02's setup cell and live GRPO run (``notebook_pieces``), sending the
cells through each server's kernel websocket (``kernel_ws``). With the notebook's own step count
it also runs the notebook's cell that asserts the run learned.

Every student's server and kernels get ``LABKIT_THREADS=1``, ``OMP_NUM_THREADS=1`` and
``MKL_NUM_THREADS=1`` (one CPU each, as the shipped config's ``cpu_limit`` of 1), and the report
reads back torch's thread count inside each kernel (in notebook 00's, which never sets one, it
comes from the environment; notebook 02 also calls ``torch.set_num_threads(1)`` itself). Per student it measures, by sampling with
psutil every 0.2 s: the peak RSS of notebook 02's kernel, of notebook 00's kernel, and of the
student's whole process tree (server + kernels, what a per-user memory limit counts); and the
CPU seconds (user + system) and wall time of the live run. Writes a JSON record (``--json``) and
prints a markdown table (also to ``--markdown``).

Everything listens on 127.0.0.1 only; every request and wait has a timeout; on exit, also on
Ctrl-C, SIGTERM or a failure, the hub is stopped (which stops the servers and the proxy), any
process it left is killed and the temporary folder (hub database, homes) is deleted.

Needs ``jupyterhub`` (``pip install -c requirements-lock.txt -e ".[hub]"``) and
``configurable-http-proxy`` (npm) and runs on Linux or macOS; JupyterHub does not run on Windows.
Every number on the command line is checked before anything starts.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shutil
import signal
import sys
import threading
import time
import traceback
from importlib.metadata import version
from pathlib import Path

import psutil
from hub_student import HubStudent
from kernel_ws import KernelClient
from local_hub import LocalHub
from notebook_pieces import grpo_pieces, tour_setup

ROOT = Path(__file__).resolve().parent.parent
STUDENT_ENV = {"LABKIT_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               # the lab runs offline; a kernel must never wait on a model hub
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
SAMPLE_PERIOD_S = 0.2
MAX_STUDENTS = 64
MAX_STEPS = 1000
#: The longest a cell may run: a day. Past it the waits' arithmetic stops meaning anything (a
#: socket refuses a timeout of 1e300 s) long after any classroom would have given up.
MAX_CELL_TIMEOUT_S = 86400.0
PID_PROBE = "import os\nprint(os.getpid())"
THREADS_PROBE = "import torch as _torch\nprint(_torch.get_num_threads())"
RUN_PROBE = """\
import json as _json, os as _os
import torch as _torch
_evals = result.eval_history
print(_json.dumps({"steps": len(result.history), "eval_steps": [int(s) for s in _evals["step"]],
                   "accuracy_before": float(_evals["eval_accuracy"].iloc[0]),
                   "accuracy_after": float(_evals["eval_accuracy"].iloc[-1]),
                   "torch_threads": _torch.get_num_threads(),
                   "LABKIT_THREADS": _os.environ.get("LABKIT_THREADS"),
                   "OMP_NUM_THREADS": _os.environ.get("OMP_NUM_THREADS")}))
"""


class RssSampler(threading.Thread):
    """Peak RSS of watched processes and of watched process trees, sampled every period."""

    def __init__(self, period: float = SAMPLE_PERIOD_S):
        super().__init__(daemon=True)
        self.period = period
        self.peaks: dict[str, int] = {}
        self._procs: dict[str, tuple[psutil.Process, bool]] = {}
        self._lock = threading.Lock()
        self._stop_event = threading.Event()

    def watch(self, label: str, pid: int, tree: bool = False) -> None:
        with self._lock:
            self._procs[label] = (psutil.Process(pid), tree)
            self.peaks.setdefault(label, 0)

    def run(self) -> None:
        while not self._stop_event.wait(self.period):
            with self._lock:
                watched = list(self._procs.items())
            for label, (proc, tree) in watched:
                rss = self._rss(proc, tree)
                if rss:
                    self.peaks[label] = max(self.peaks[label], rss)

    @staticmethod
    def _rss(proc: psutil.Process, tree: bool) -> int:
        total = 0
        for member in [proc] + (proc.children(recursive=True) if tree else []):
            try:
                total += member.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue  # a process that ended between listing and reading
        return total

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def last_json_line(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def run_student(student: HubStudent, pieces: dict, sampler: RssSampler, barrier: threading.Barrier,
                record: dict, cell_timeout: float) -> None:
    """One student's whole session; fills ``record`` (the caller reads it after join)."""
    started = time.perf_counter()
    student.log_in()
    student.request_token()
    student.start_server()
    record["server_start_s"] = round(time.perf_counter() - started, 2)
    kernels = {}
    try:
        for key, path in (("00", "notebooks/00_tour.ipynb"), ("02", "notebooks/02_grpo.ipynb")):
            client = KernelClient(student.kernel_ws_url(student.open_notebook(path)),
                                  student.token)
            kernels[key] = (client, 0)
            client.wait_ready()
            pid = int(client.execute(PID_PROBE, timeout=60).strip())
            sampler.watch(f"{student.name}/{key}", pid)
            kernels[key] = (client, pid)
        server = psutil.Process(kernels["02"][1]).parent()  # the student's jupyterhub-singleuser
        sampler.watch(f"{student.name}/server", server.pid)
        sampler.watch(f"{student.name}/tree", server.pid, tree=True)
        barrier.wait()  # everyone's kernels are up: the room starts notebook 00 together
        (tour, tour_pid), (grpo, grpo_pid) = kernels["00"], kernels["02"]
        start, cpu0 = time.perf_counter(), cpu_seconds(tour_pid)
        for _, source in pieces["tour"]:
            tour.execute(source, timeout=cell_timeout)
        record["tour_setup_s"] = round(time.perf_counter() - start, 2)
        record["tour_setup_cpu_s"] = round(cpu_seconds(tour_pid) - cpu0, 2)
        # notebook 00 never sets a thread count: torch's count there comes from the environment
        record["tour_torch_threads"] = int(tour.execute(THREADS_PROBE, timeout=60).strip())
        grpo.execute(pieces["grpo"]["setup"][1], timeout=cell_timeout)
        barrier.wait()  # and the live GRPO run together
        start, cpu0 = time.perf_counter(), cpu_seconds(grpo_pid)
        grpo.execute(pieces["grpo"]["run"][1], timeout=cell_timeout)
        record["run_wall_s"] = round(time.perf_counter() - start, 2)
        record["run_cpu_s"] = round(cpu_seconds(grpo_pid) - cpu0, 2)
        record.update(last_json_line(grpo.execute(RUN_PROBE, timeout=60)))
        if pieces["run_notebook_check"]:
            grpo.execute(pieces["grpo"]["check"][1], timeout=60)
            record["notebook_check"] = "passed"
        record["completed"] = True
    finally:
        for client, _ in kernels.values():
            client.close()


def measure(students: int, notebooks: Path, steps: int | None, cell_timeout: float) -> dict:
    names = [f"student{i + 1}" for i in range(students)]
    pieces = {"tour": tour_setup(notebooks / "00_tour.ipynb"),
              "grpo": grpo_pieces(notebooks / "02_grpo.ipynb", steps),
              "run_notebook_check": steps is None}
    load_before = [round(x, 2) for x in psutil.getloadavg()]
    report = {"machine": machine(), "load_average_before": load_before, "students": students,
              "steps": steps or "the notebook's own", "student_env": STUDENT_ENV,
              "cells": {"00 setup": [i for i, _ in pieces["tour"]],
                        "02 setup": pieces["grpo"]["setup"][0], "02 run": pieces["grpo"]["run"][0],
                        "02 check": pieces["grpo"]["check"][0] if steps is None else None}}
    with LocalHub(names, notebooks, STUDENT_ENV) as hub:
        report["workdir"] = str(hub.workdir)  # deleted on exit; the test checks it is gone
        impostor = HubStudent(hub.url, names[0], hub.password + "-wrong")
        try:
            impostor.log_in()
        except PermissionError:
            report["wrong_password_refused"] = True
        else:
            raise RuntimeError("the test hub accepted a wrong password")
        sampler = RssSampler()
        sampler.start()
        barrier = threading.Barrier(students, timeout=cell_timeout)
        records = {name: {"student": name, "completed": False} for name in names}
        threads = []
        for name in names:
            student = HubStudent(hub.url, name, hub.password)
            thread = threading.Thread(target=_guarded, daemon=True, args=(
                barrier, records[name], run_student,
                (student, pieces, sampler, barrier, records[name], cell_timeout)))
            thread.start()
            threads.append((thread, student))
        # each student runs len(tour) + 2 notebook cells, plus logins, spawns and short probes
        session_timeout = (len(pieces["tour"]) + 3) * cell_timeout + 600
        deadline = time.monotonic() + session_timeout
        for thread, _ in threads:  # poll, so Ctrl-C and SIGTERM reach this thread at once
            while thread.is_alive() and time.monotonic() < deadline:
                thread.join(timeout=0.5)
            if thread.is_alive():
                raise TimeoutError(f"students still running after {session_timeout:.0f} s")
        sampler.stop()
        for _, student in threads:
            if student.server_url:
                student.stop_server()
    for record in records.values():
        for part in ("02", "00", "server", "tree"):
            peak = sampler.peaks.get(f"{record['student']}/{part}", 0)
            record[f"peak_rss_{part}_mib"] = round(peak / 2**20, 1)
    report["per_student"] = list(records.values())
    return report


def _guarded(barrier: threading.Barrier, record: dict, target, args: tuple) -> None:
    """Run a student; on failure record the error and release the others from the barrier."""
    try:
        target(*args)
    except Exception as error:  # noqa: BLE001 - recorded, and main() fails the run on it
        record["error"] = f"{type(error).__name__}: {error}"
        record["traceback"] = traceback.format_exc()
        barrier.abort()


def machine() -> dict:
    return {"platform": platform.platform(), "python": platform.python_version(),
            "logical_cpus": psutil.cpu_count(),
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "torch": version("torch"), "jupyterhub": version("jupyterhub")}


def markdown_table(report: dict) -> str:
    head = ("| student | server start s | 00 setup s | live run wall s | live run CPU s "
            "| peak RSS 02 kernel MiB | peak RSS 00 kernel MiB | peak RSS server MiB "
            "| peak RSS all MiB | steps | accuracy before → after | torch threads 00 / 02 |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in report["per_student"]:
        if not r["completed"]:
            lines.append(f"| {r['student']} | failed: {r.get('error', 'unknown')} |")
            continue
        lines.append(
            f"| {r['student']} | {r['server_start_s']} | {r['tour_setup_s']} | {r['run_wall_s']}"
            f" | {r['run_cpu_s']} | {r['peak_rss_02_mib']} | {r['peak_rss_00_mib']}"
            f" | {r['peak_rss_server_mib']} | {r['peak_rss_tree_mib']} | {r['steps']}"
            f" | {r['accuracy_before']:.3f} → {r['accuracy_after']:.3f}"
            f" | {r['tour_torch_threads']} / {r['torch_threads']} |")
    m = report["machine"]
    return (f"{report['students']} student(s), steps: {report['steps']}; {m['logical_cpus']} "
            f"logical CPUs, {m['memory_gib']} GiB, load average before "
            f"{report['load_average_before']}; torch {m['torch']}, jupyterhub "
            f"{m['jupyterhub']}\n\n" + "\n".join(lines) + "\n")


def bounded_int(low: int, high: int):
    """An argparse type: an integer from ``low`` to ``high``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected an integer from {low} to {high}, got "
                                             f"{text!r}")
        return value
    return parse


def bounded_seconds(high: float):
    """An argparse type: a finite number of seconds above 0 and at most ``high`` (``nan`` and
    ``inf`` parse as floats, and would reach the barriers and the websockets' waits)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not 0 < value <= high:  # False for nan
            raise argparse.ArgumentTypeError(f"expected a number of seconds above 0 and at most "
                                             f"{high:g}, got {text!r}")
        return value
    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=bounded_int(1, MAX_STUDENTS), required=True,
                        help=f"how many students log in at once (1 to {MAX_STUDENTS})")
    parser.add_argument("--notebooks", type=Path, default=ROOT / "notebooks",
                        help="the notebooks folder each student gets a copy of")
    parser.add_argument("--steps", type=bounded_int(1, MAX_STEPS), default=None,
                        help="GRPO steps of notebook 02's live run (default: the notebook's own; "
                             "the notebook's assertion runs only then)")
    parser.add_argument("--cell-timeout", type=bounded_seconds(MAX_CELL_TIMEOUT_S),
                        default=1800.0, help="seconds any one cell may run (default 1800, at "
                                             f"most {MAX_CELL_TIMEOUT_S:g})")
    parser.add_argument("--json", type=Path, help="write the full record here")
    parser.add_argument("--markdown", type=Path, help="write the table here")
    args = parser.parse_args(argv)  # every number is checked here, before anything starts
    missing = [name for name in ("00_tour.ipynb", "02_grpo.ipynb")
               if not (args.notebooks / name).is_file()]
    if missing:
        parser.error(f"--notebooks: {args.notebooks} has no {', '.join(missing)}; expected the "
                     "lab's notebooks/ folder")
    if shutil.which("configurable-http-proxy") is None:
        parser.error("configurable-http-proxy is not on PATH: npm install -g "
                     "configurable-http-proxy")

    def terminate(signum, frame):  # SIGTERM unwinds like Ctrl-C, so the hub is stopped
        raise SystemExit(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, terminate)
    report = measure(args.students, args.notebooks, args.steps, args.cell_timeout)
    table = markdown_table(report)
    print(table)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if args.markdown:
        args.markdown.write_text(table)
    failed = [r for r in report["per_student"] if not r["completed"]]
    for record in failed:
        print(f"{record['student']} failed:\n{record.get('traceback', '')}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
