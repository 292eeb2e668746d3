"""The machine a run measures on: CPU model and cores, memory, OS, Python and library
versions, the date, and for ``cuda`` the GPU (:func:`describe_machine`)."""

from __future__ import annotations

import datetime as dt
import os
import platform
from importlib import metadata
from pathlib import Path

from labkit.commands.section_times.execution import KERNEL_ENV, psutil


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
