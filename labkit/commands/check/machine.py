"""The preflight check's machine rows: the CPU budget (:mod:`labkit.runtime.cpu`) and free memory,
a container's memory limit included."""

from __future__ import annotations

import os
from pathlib import Path

from labkit.commands.check.rows import Check
from labkit.runtime import cpu

GIB = 1024 ** 3
#: Free memory below which the check warns, and below which it fails: a notebook kernel holds
#: about 0.8 GB and the tiny model's runs peak at a few hundred MB more.
WARN_MEMORY, FAIL_MEMORY = 2 * GIB, 1 * GIB
#: cgroup v1 writes "no limit" as a number near 2**63.
NO_MEMORY_LIMIT = 2 ** 60


def check_cpu() -> Check:
    import torch

    cores, affinity, quota = os.cpu_count(), cpu.affinity_cpus(), cpu.cpu_quota()
    usable, threads = cpu.usable_cpus(), torch.get_num_threads()
    limit = "no cgroup CPU quota" if quota is None else f"cgroup quota {quota:g} CPUs"
    detail = (f"{cores} logical cores, {affinity} in this process's affinity, {limit}; "
              f"torch uses {threads} threads")
    if threads > usable:
        return Check("cpu", "warn", f"{detail}, more than the {usable} usable CPUs: set "
                     f"LABKIT_THREADS={usable} before starting Jupyter", value=threads)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0  # no load average on Windows
    if threads > 1 and cores and load > cores:
        # torch's threads wait for each other at every operation; when other processes hold the
        # cores they wait far longer (3 steps took 183 s with 2 threads and 10-16 s with 1 on
        # the lab's 2-core machine at load 9)
        return Check("cpu", "warn", f"{detail}; the machine is busy (load {load:.1f} on {cores} "
                     "cores): LABKIT_THREADS=1 is faster while it stays so", value=threads)
    return Check("cpu", "ok", detail, value=threads)


def _system_available() -> tuple[int | None, str]:
    try:
        import psutil
    except ImportError:
        pass
    else:
        return psutil.virtual_memory().available, "psutil"
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        for line in meminfo.read_text(encoding="ascii", errors="replace").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "/proc/meminfo"
    return None, "unknown"


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _inactive_file(path: Path, key: str) -> int:
    """Page cache the kernel would drop first (``memory.stat``): not a real claim on the limit."""
    try:
        for line in path.read_text(encoding="ascii").splitlines():
            name, _, number = line.partition(" ")
            if name == key:
                return int(number)
    except (OSError, ValueError):
        pass
    return 0


def container_memory_headroom(root=None, self_cgroup=cpu.SELF_CGROUP) -> int | None:
    """Bytes left under the container's memory limit (cgroup v2 ``memory.max``, v1
    ``memory.limit_in_bytes``, at the process's cgroup and each ancestor; the least wins), or
    None without a limit. Usage counts as the kernel's working set: usage less inactive page
    cache, as container runtimes report it. psutil and ``/proc/meminfo`` see the host's memory,
    which a container's limit can make far larger than what it may use."""
    base = Path(root or os.environ.get("LABKIT_CGROUP_ROOT") or cpu.DEFAULT_CGROUP_ROOT)
    paths = cpu.cgroup_membership(self_cgroup)
    levels = [(folder, "memory.max", "memory.current", "inactive_file")
              for folder in cpu.cgroup_dirs(base, paths.get(""))]
    levels += [(folder, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
               for folder in cpu.cgroup_dirs(base / "memory", paths.get("memory"))]
    headrooms = []
    for folder, limit_file, usage_file, inactive_key in levels:
        limit, usage = _read_int(folder / limit_file), _read_int(folder / usage_file)
        if limit is None or usage is None or limit >= NO_MEMORY_LIMIT:
            continue  # "max" (v2) does not parse: no limit at this level
        working_set = max(0, usage - _inactive_file(folder / "memory.stat", inactive_key))
        headrooms.append(max(0, limit - working_set))
    return min(headrooms) if headrooms else None


def check_memory() -> Check:
    available, source = _system_available()
    headroom = container_memory_headroom()
    if headroom is not None and (available is None or headroom < available):
        available, source = headroom, "under the container's memory limit"
    if available is None:
        return Check("memory", "skip", "free memory unknown (no psutil, no /proc/meminfo)")
    gib = available / GIB
    detail = f"{gib:.1f} GiB available ({source})"
    if available < FAIL_MEMORY:
        fix = (f"free memory is {gib:.1f} GiB: close other programs or kernels, or ask for a "
               "larger container (at least 2 GiB)")
        return Check("memory", "fail", f"{detail}; the lab needs 1 GiB, 2 GiB is comfortable",
                     (fix,), value=round(gib, 2))
    if available < WARN_MEMORY:
        return Check("memory", "warn", f"{detail}; below 2 GiB, run one notebook at a time",
                     value=round(gib, 2))
    return Check("memory", "ok", detail, value=round(gib, 2))
