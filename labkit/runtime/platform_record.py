"""What computed a number: the CPU, its kernel path, the math libraries and the versions.

A seeded run repeats bit for bit only where every kernel that touched it is the same. Two x86
CPUs that both run torch 2.13 can still disagree in a float32 product's last bit: torch picks its
vectorised kernels by the CPU's instruction set (``torch.backends.cpu.get_cpu_capability()``,
overridden by ``ATEN_CPU_CAPABILITY``), MKL and oneDNN pick theirs by vendor and instruction set
(``MKL_ENABLE_INSTRUCTIONS``, ``MKL_CBWR``, ``ONEDNN_MAX_CPU_ISA``), and a GPU or Apple's MPS
computes with other kernels again. A live training run amplifies a last-bit difference into a
different sampled token within a few steps, and from then on into a different trajectory.

:func:`platform_record` writes all of that down beside a recorded value, and
:func:`same_platform` says whether two records describe the same kernels: only then can a value
be expected to repeat exactly (``labkit.quotes`` checks it exactly there and within the value's
measured band anywhere else).

The thread count is recorded but is not part of the identity: the notebooks' tiny products stay
below torch's parallel grain, and the lab's 2-thread notebook tests reproduce the 1-thread
records bit for bit (measured on the reference machine; docs/reproducibility.md).
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path

#: Variables that change a run's numbers, recorded when set: a CPU's kernel choice (torch's
#: ATen, MKL, oneDNN) and the lab's seed offset (:mod:`labkit.runtime.seeds`).
NUMBER_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR",
                    "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "LABKIT_SEED_OFFSET")
#: The fields two records must share (``None`` included) to count as one platform.
IDENTITY = ("cpu_vendor", "cpu_model", "cpu_capability", "variables", "blas", "mkl",
            "onednn", "accelerator", "os", "machine", "python", "torch", "transformers",
            "numpy")


def _cpuinfo() -> dict[str, str]:
    path = Path("/proc/cpuinfo")
    fields: dict[str, str] = {}
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return fields
    for line in text.splitlines():
        if not line.strip():
            break  # the first processor's block describes them all
        name, _, value = line.partition(":")
        fields.setdefault(name.strip().lower(), value.strip())
    return fields


def _sysctl(name: str) -> str | None:
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True,
                             timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def cpu_name() -> tuple[str | None, str | None]:
    """(vendor, model) of this machine's CPU, as the OS names them; ``None`` where unknown."""
    system = platform.system()
    if system == "Linux":
        info = _cpuinfo()
        vendor = info.get("vendor_id") or info.get("cpu implementer")
        model = info.get("model name")
        if model is None and "cpu part" in info:  # ARM: implementer and part numbers
            model = f"part {info['cpu part']}"
        if model is not None and "cpu family" in info:  # x86: the name may be generic (KVM)
            model += f" (family {info['cpu family']}, model {info.get('model', '?')})"
        return vendor, model
    if system == "Darwin":
        return _sysctl("machdep.cpu.vendor") or "Apple", _sysctl("machdep.cpu.brand_string")
    text = platform.processor()  # Windows: "Intel64 Family 6 Model 158 Stepping 10, GenuineIntel"
    vendor = text.rsplit(",", 1)[1].strip() if "," in text else None
    return vendor, text or None


def _math_libraries(config: str) -> dict[str, str | None]:
    blas = re.search(r"BLAS_INFO=([^,\s]+)", config)
    mkl = re.search(r"Math Kernel Library Version ([\d.]+)", config)
    onednn = re.search(r"MKL-DNN v([^\s]+)", config)
    return {"blas": blas and blas[1], "mkl": mkl and mkl[1], "onednn": onednn and onednn[1]}


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _accelerator(torch) -> str | None:
    """The device a notebook's ``device="auto"`` would compute on, when it is not the CPU."""
    if torch.cuda.is_available():
        return f"cuda: {torch.cuda.get_device_name(0)}"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return None


def platform_record() -> dict:
    """This process's platform: the :data:`IDENTITY` fields, the thread count, the full OS name
    and the date (UTC)."""
    import torch  # the library whose kernels decide a run's last bits

    vendor, model = cpu_name()
    return {
        "cpu_vendor": vendor, "cpu_model": model,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "variables": {name: os.environ[name] for name in NUMBER_VARIABLES
                             if os.environ.get(name)},
        **_math_libraries(torch.__config__.show()),
        "accelerator": _accelerator(torch),
        "os": platform.system(), "os_release": platform.platform(),
        "machine": platform.machine(), "python": platform.python_version(),
        "torch": _version("torch"), "transformers": _version("transformers"),
        "numpy": _version("numpy"), "torch_threads": torch.get_num_threads(),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def platform_differences(recorded, current: dict) -> list[str]:
    """The :data:`IDENTITY` fields in which ``recorded`` and ``current`` differ, each as
    ``'field: recorded -> current'``; a field missing from ``recorded`` (an older record, a
    hand-edited file) counts as a difference, and so does a record that is not a mapping."""
    if not isinstance(recorded, dict):
        return [f"no platform record (found {type(recorded).__name__})"]
    return [f"{field}: {recorded[field]!r} -> {current.get(field)!r}" if field in recorded
            else f"{field}: not recorded" for field in IDENTITY
            if field not in recorded or recorded[field] != current.get(field)]


def same_platform(recorded, current: dict) -> bool:
    """Whether two platform records describe the same kernels (:data:`IDENTITY`)."""
    return not platform_differences(recorded, current)


def describe(record: dict) -> str:
    """One line for a person: CPU, kernel path, accelerator, OS and torch."""
    if not isinstance(record, dict):
        return "an unrecorded platform"
    variables = " ".join(f"{k}={v}" for k, v in (record.get("variables") or {}).items())
    parts = [record.get("cpu_model") or "unknown CPU",
             f"torch kernels {record.get('cpu_capability') or '?'}" + (f" ({variables})"
                                                                       if variables else ""),
             record.get("accelerator"), record.get("os"), f"torch {record.get('torch')}"]
    return ", ".join(str(p) for p in parts if p)
