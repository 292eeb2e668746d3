"""Running a notebook with its cells timed: the timing kernel's environment, each code cell's
wall and kernel CPU seconds (:func:`execute_timed`), and the device and kernels refused before
anything runs."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
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

DEFAULT_CELL_TIMEOUT = 900  # seconds; the notebook tests allow the same (pyproject.toml)

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
