"""The CPU budget of this process, and torch's thread count set to fit it.

torch starts one intra-op thread per core it sees, and it sees the host's cores even inside a
container that a CPU quota holds to one or two of them (JupyterHub, Docker ``--cpus``, a
Kubernetes CPU limit). Those threads then take turns on the quota, and each training step is
slower than with one thread per CPU actually granted. :func:`usable_cpus` reads the budget (the
affinity mask and the cgroup quota) and :func:`limit_torch_threads`, called when ``labkit`` is
imported, lowers torch's thread count to it unless the user has chosen a count.

Environment variables:

* ``LABKIT_THREADS``: a positive integer forces torch's thread count to it;
* ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS``: the user has chosen; labkit leaves torch alone;
* ``LABKIT_CGROUP_ROOT``: read the cgroup files from this folder instead of ``/sys/fs/cgroup``
  (for tests, and for a container that mounts the cgroup tree elsewhere).

The quota is the kernel's CFS bandwidth control: ``quota / period`` CPUs, written ``cpu.max``
(``"150000 100000"`` = 1.5 CPUs, ``"max 100000"`` = none) under cgroup v2 and
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota -1 = none) under cgroup v1. A limit set on
any ancestor of the process's cgroup applies too, so every level is read and the smallest wins.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from labkit.runtime.counts import int_at_least

#: Where Linux mounts the cgroup tree.
DEFAULT_CGROUP_ROOT = "/sys/fs/cgroup"
#: The file listing the cgroups this process belongs to (Linux only).
SELF_CGROUP = "/proc/self/cgroup"
#: Variables with which the user has chosen torch's thread count; labkit then leaves it alone.
USER_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
#: Variable that forces torch's thread count.
THREADS_VARIABLE = "LABKIT_THREADS"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="strict").strip()
    except (OSError, ValueError):  # missing, unreadable, or not text: no information
        return None


def cgroup_membership(self_cgroup: str | os.PathLike) -> dict[str, str]:
    """Controller -> cgroup path from ``/proc/self/cgroup`` (``""`` is cgroup v2's entry)."""
    text = _read(Path(self_cgroup)) or ""
    paths = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        for controller in parts[1].split(","):
            paths.setdefault(controller, parts[2])
    return paths


def cgroup_dirs(base: Path, path: str | None) -> list[Path]:
    """``base/path`` and each of its ancestors up to ``base``, deepest first.

    Inside a container the process's own path is often not mounted (the container sees its
    cgroup as the root), so callers read whichever of these folders exist.
    """
    parts = [p for p in (path or "").split("/") if p and p not in (".", "..")]
    return [base.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _v2_limit(text: str | None) -> float | None:
    fields = (text or "").split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    return _ratio(fields[0], fields[1])


def _v1_limit(quota: str | None, period: str | None) -> float | None:
    if quota is None or period is None:
        return None
    return _ratio(quota, period)


def _ratio(quota: str, period: str) -> float | None:
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:
        return None
    if quota_us <= 0 or period_us <= 0:  # -1 is v1's "no limit"; 0 is not a valid setting
        return None
    return quota_us / period_us


def cpu_quota(root: str | os.PathLike | None = None,
              self_cgroup: str | os.PathLike = SELF_CGROUP) -> float | None:
    """The container's CPU limit in CPUs (1.5 = one and a half), or None when there is none.

    ``root`` is the cgroup mount (default ``$LABKIT_CGROUP_ROOT``, else ``/sys/fs/cgroup``);
    ``self_cgroup`` the file naming this process's cgroups. Reads cgroup v2's ``cpu.max`` and
    cgroup v1's ``cpu.cfs_quota_us``/``cpu.cfs_period_us`` in the process's cgroup and each
    ancestor, and returns the smallest limit. None on Windows and macOS (no such files), when
    nothing is readable, and when the files hold anything but the kernel's formats.
    """
    base = Path(root or os.environ.get("LABKIT_CGROUP_ROOT") or DEFAULT_CGROUP_ROOT)
    paths = cgroup_membership(self_cgroup)
    limits = [_v2_limit(_read(folder / "cpu.max")) for folder in cgroup_dirs(base, paths.get(""))]
    v1_path = paths.get("cpu")
    # cgroup v1 mounts the cpu controller alone or joined with cpuacct, under either name
    for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        for folder in cgroup_dirs(base / mount, v1_path):
            limits.append(_v1_limit(_read(folder / "cpu.cfs_quota_us"),
                                    _read(folder / "cpu.cfs_period_us")))
    found = [limit for limit in limits if limit is not None]
    return min(found) if found else None


def affinity_cpus() -> int:
    """CPUs this process may run on: its affinity mask where the OS has one, else all cores."""
    if hasattr(os, "sched_getaffinity"):  # Linux; absent on Windows and macOS
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def usable_cpus(root: str | os.PathLike | None = None) -> int:
    """CPUs this process can keep busy: the affinity count, capped by the quota rounded up.

    A quota of 1.5 CPUs gives 2: the second thread still gets half a CPU's time, and rounding
    down would leave it idle. Always at least 1.
    """
    count = affinity_cpus()
    quota = cpu_quota(root)
    if quota is not None:
        count = min(count, math.ceil(quota))
    return max(1, count)


def forced_threads() -> int | None:
    """The thread count ``LABKIT_THREADS`` forces, or None when it is unset or empty."""
    value = os.environ.get(THREADS_VARIABLE, "").strip()
    if not value:
        return None
    count = int_at_least(value, 1)
    if count is None:
        raise ValueError(f"{THREADS_VARIABLE} must be a positive integer (torch's CPU thread "
                         f"count, e.g. 1 or 2), got {value!r}")
    return count


def user_chose_threads() -> bool:
    """True when ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` is set: torch already obeys it."""
    return any(os.environ.get(name, "").strip() for name in USER_THREAD_VARIABLES)


def limit_torch_threads() -> int:
    """Fit torch's intra-op thread count to this process's CPU budget; returns the count in
    effect.

    ``LABKIT_THREADS`` forces a count (an invalid value raises ValueError). Otherwise, unless the
    user chose with ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS``, the count is lowered to
    :func:`usable_cpus` when torch's is larger; it is never raised.
    """
    import torch

    forced = forced_threads()
    if forced is not None:
        torch.set_num_threads(forced)
    elif not user_chose_threads():
        budget = usable_cpus()
        if torch.get_num_threads() > budget:
            torch.set_num_threads(budget)
    return torch.get_num_threads()


__all__ = ["affinity_cpus", "cgroup_dirs", "cgroup_membership", "cpu_quota", "forced_threads",
           "limit_torch_threads", "usable_cpus", "user_chose_threads"]
