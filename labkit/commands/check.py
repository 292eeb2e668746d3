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
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import sys
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from labkit import tasks
from labkit.runtime import compat, cpu
from labkit.runtime.hashing import file_sha256

REPO_ROOT = Path(__file__).resolve().parents[2]
#: The known-good environment: ``name==version`` lines, ``#`` comments, optional markers.
LOCK_FILE = REPO_ROOT / "requirements-lock.txt"
MANIFEST_NAME = "MANIFEST.sha256"
#: The folders of ``data/`` the manifest covers (not ``runs``: its logs change with every rerun).
MANIFEST_FOLDERS = ("models", "tasks")
#: How to rebuild what ``git checkout`` cannot restore, by folder under ``data/``.
REBUILD_COMMANDS = {"models/tiny-qwen": "python -m labkit build_tiny",
                    "models/tiny-judge": "python -m labkit build_judge",
                    "models/tiny-qwen-tools": "python -m labkit build_tools",
                    "tasks": "python -m labkit tasks --out data/tasks"}

MIN_PYTHON, TESTED_PYTHON = (3, 10), (3, 11)
GIB = 1024 ** 3
#: Free memory below which the check warns, and below which it fails: a notebook kernel holds
#: about 0.8 GB and the tiny model's runs peak at a few hundred MB more.
WARN_MEMORY, FAIL_MEMORY = 2 * GIB, 1 * GIB
#: cgroup v1 writes "no limit" as a number near 2**63.
NO_MEMORY_LIMIT = 2 ** 60

#: Notebook 02's live GRPO run (its "live GRPO run" cell): this preset and these overrides, on
#: the medium cells, evaluated at steps 0 and 30.
LIVE_RUN_PRESET = "grpo"
LIVE_RUN_STEPS = 30
LIVE_RUN_OVERRIDES = {"max_steps": LIVE_RUN_STEPS, "seed": 0, "progress": False}
#: The check runs the live run's first steps: one to warm up (allocator, first-call overheads),
#: then TIMED_STEPS timed; seeded, so every machine times the same prompts.
TIMED_STEPS = 3
#: The reference machine's numbers: the lab's 2-core CPU machine (torch 2.13 CPU, Python 3.11),
#: one torch thread (LABKIT_THREADS=1), timing in one process and in turns (three rounds) notebook
#: 02's live-run cell as written (model load, two evaluations, 30 steps) and this check's timed
#: steps on a fresh model (:func:`time_live_run_steps`). The machine was shared with other jobs
#: (load average 3.3-4.2 on its 2 cores), so the numbers are CPU seconds of the process
#: (``time.process_time``), the time an idle core would take, which the load barely moves (CPU
#: ratios 12.4-15.3 over the rounds; a first attempt in wall-clock seconds gave 10-34). Medians of
#: the three rounds: live run 40.3 s (37.0-43.7), timed steps 2.99 s (2.85-3.10); ratio 13.5. The
#: live run reached eval pass@1 26.6% -> 56.6% every round, as the notebook does. Checked on the
#: same machine at one thread: estimated 40.3 s and 53.8 s, then measured 43.2 s and 36.1 s.
REFERENCE_STEPS_SECONDS = 2.99
REFERENCE_LIVE_RUN_SECONDS = 40.3
#: An estimate above this warns: a workshop cannot wait on every live run.
SLOW_LIVE_RUN_SECONDS = 300.0

STATUSES = ("ok", "warn", "fail", "skip")


@dataclass
class Check:
    """One row of the check: what was checked, how it went, and what to do about it."""

    name: str
    status: str
    detail: str
    fixes: tuple[str, ...] = ()
    """one line per thing to fix (named package/file/value and what is needed)"""
    value: float | None = None
    """the row's measurement for tooling: GiB free, seconds per step..."""

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")


# ---- Python and packages --------------------------------------------------------------------------


def check_python(version_info=sys.version_info) -> Check:
    found = ".".join(map(str, version_info[:3]))
    if tuple(version_info[:2]) < MIN_PYTHON:
        need = ".".join(map(str, MIN_PYTHON))
        return Check("python", "fail", f"Python {found}; the lab needs {need} or newer",
                     (f"Python {found} is too old: install Python {need}+ (3.11 is tested)",))
    tested = ".".join(map(str, TESTED_PYTHON))
    note = "" if tuple(version_info[:2]) == TESTED_PYTHON else f" (the lab is tested on {tested})"
    return Check("python", "ok", f"Python {found}{note}")


def check_floors() -> Check:
    """Every dependency labkit declares (extras aside) installed at or above its floor."""
    floors = compat.declared_floors()
    if not floors:
        return Check("packages", "warn", "labkit is not pip-installed, so its declared floors are "
                     "unknown; run `pip install -e .` in the repository")
    problems = []
    for name in floors:  # one at a time, so a version that does not parse names its package
        try:
            problems += compat.check_versions([name])
        except ValueError as error:
            problems.append(f"{name}: {error}; reinstall it (pip install -U '{name}>="
                            f"{floors[name]}')")
    if problems:
        return Check("packages", "fail", f"{len(problems)} of {len(floors)} dependencies missing "
                     f"or below their floor: {'; '.join(problems)}", tuple(problems))
    return Check("packages", "ok", f"{len(floors)} dependencies at or above labkit's floors")


def read_lock(path: Path) -> dict[str, str]:
    """``{normalised name: version}`` from a lock file's ``name==version`` lines; lines whose
    environment marker does not hold here are left out. A line in any other form raises
    ValueError naming the file, the line and the form allowed."""
    from packaging.markers import InvalidMarker, Marker

    pins = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        spec, _, marker = line.partition(";")
        if marker.strip():
            try:
                if not Marker(marker.strip()).evaluate():
                    continue
            except InvalidMarker as error:
                raise ValueError(f"{path.name} line {number}: bad environment marker "
                                 f"{marker.strip()!r} ({error})") from None
        name, sep, version = spec.partition("==")
        if not sep or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name.strip()) \
                or not version.strip():
            raise ValueError(f"{path.name} line {number}: {raw.strip()!r} is not "
                             f"'name==version' (optionally '; marker' and '# comment')")
        pins[_normalise(name.strip())] = version.strip()
    return pins


def _same_version(locked: str, found: str) -> bool:
    """True when equal as versions; a pin without a local tag (``2.13.0``) accepts any local
    build of that release (``2.13.0+cpu``)."""
    from packaging.version import InvalidVersion, Version

    try:
        want, have = Version(locked), Version(found)
    except InvalidVersion:
        return locked == found
    return want == have if want.local else want == Version(have.public)


def installed_distributions() -> dict[str, metadata.Distribution]:
    """``{normalised name: distribution}`` of everything importable from ``sys.path``; where a
    name is installed twice, the first on the path wins, as at import."""
    found = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(_normalise(name), dist)
    return found


def required_here(installed: dict[str, metadata.Distribution], roots) -> dict[str, str]:
    """``{normalised name: the distribution that requires it}`` for every requirement of the
    installed ``roots`` and, transitively, of what they require, with environment markers and
    extras evaluated for this interpreter and platform. A CPU build of torch requires no CUDA
    library, a CUDA build on Linux requires them: the installed metadata says which."""
    from packaging.markers import UndefinedEnvironmentName
    from packaging.requirements import InvalidRequirement, Requirement

    needed: dict[str, str] = {}
    queue = [(name, frozenset()) for name in roots if name in installed]
    seen = set()
    while queue:
        name, extras = queue.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        dist = installed[name]
        for text in dist.requires or []:
            try:
                requirement = Requirement(text)
                if requirement.marker is not None and not any(
                        requirement.marker.evaluate({"extra": extra})
                        for extra in ("", *extras)):
                    continue
            except (InvalidRequirement, UndefinedEnvironmentName):
                continue  # another project's malformed metadata is not this check's finding
            dependency = _normalise(requirement.name)
            needed.setdefault(dependency, dist.metadata["Name"])
            if dependency in installed:
                queue.append((dependency, frozenset(requirement.extras)))
    return needed


def check_lock(path: Path = LOCK_FILE) -> Check:
    """The installed versions against the known-good lock file: a difference warns.

    Compared: every locked package that is installed, and every locked package that labkit or an
    installed locked package requires here. The lock is universal (one file for Linux, macOS and
    Windows, with the libraries of torch's CUDA build, extras such as ``dev`` included), so a
    locked package that nothing installed here requires is not a difference: a CPU install has
    no CUDA libraries, and an install without the dev extra no pytest.
    """
    if not path.is_file():
        return Check("lock", "skip", f"no {path.name} at the repository root: versions not "
                     "compared with a known-good set")
    try:
        pins = read_lock(path)
    except (OSError, ValueError) as error:
        return Check("lock", "warn", f"cannot read {path.name}: {error}")
    installed = installed_distributions()
    needed = required_here(installed, ["labkit", *pins])
    differences, compared = [], 0
    for name, locked in sorted(pins.items()):
        if name in installed:
            compared += 1
            found = installed[name].version
            if not _same_version(locked, found):
                differences.append(f"{name} (tested with {locked}, found {found})")
        elif name in needed:
            compared += 1
            differences.append(f"{name} (tested with {locked}, not installed; "
                               f"{needed[name]} requires it)")
    unused = len(pins) - compared
    not_used = (f"; {unused} other locked package{'s' * (unused != 1)} not used by this install "
                "(such as the libraries of torch's CUDA build)" if unused else "")
    if not differences:
        return Check("lock", "ok", f"{compared} package{'s' * (compared != 1)} as in "
                     f"{path.name}{not_used}")
    shown = "; ".join(differences[:4]) + (f"; and {len(differences) - 4} more"
                                         if len(differences) > 4 else "")
    return Check("lock", "warn", f"{len(differences)} of {compared} packages differ from "
                 f"{path.name}: {shown}")


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ---- CPU and memory -------------------------------------------------------------------------------


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


# ---- shipped files --------------------------------------------------------------------------------


def manifest_files(data_dir: Path) -> list[str]:
    """POSIX paths, relative to ``data_dir``, of every file the manifest covers, sorted."""
    found = []
    for folder in MANIFEST_FOLDERS:
        for path in (data_dir / folder).rglob("*"):
            rel = path.relative_to(data_dir)
            # editor, OS and Python droppings (.DS_Store, .ipynb_checkpoints, __pycache__)
            if path.is_file() and not any(part.startswith((".", "__")) for part in rel.parts):
                found.append(rel.as_posix())
    return sorted(found)


def write_manifest(data_dir: Path | None = None) -> Path:
    """Write ``data_dir/MANIFEST.sha256`` from the files as they are now; returns its path."""
    data_dir = Path(data_dir or tasks.data_dir())
    files = manifest_files(data_dir)
    if not files:
        raise FileNotFoundError(f"no files under {data_dir}/models or {data_dir}/tasks: is "
                                f"{data_dir} the lab's data folder?")
    lines = [f"{file_sha256(data_dir / rel)}  {rel}\n" for rel in files]
    out = data_dir / MANIFEST_NAME
    with out.open("w", encoding="utf-8", newline="\n") as f:
        f.writelines(lines)
    return out


def read_manifest(path: Path) -> dict[str, str]:
    """``{relative path: sha256}`` from a manifest in ``sha256sum`` format; a malformed line, or
    a path that leaves the data folder, raises ValueError naming the line."""
    entries = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        found = re.fullmatch(r"([0-9a-f]{64}) [ *](.+)", line.strip())
        rel = found and found.group(2)
        if not found or rel.startswith("/") or ".." in rel.split("/"):
            raise ValueError(f"{path.name} line {number}: {line.strip()[:80]!r} is not "
                             f"'<64 hex digits>  <path inside the data folder>'")
        entries[rel] = found.group(1)
    return entries


def _matches(path: Path, expected: str) -> bool:
    if file_sha256(path) == expected:
        return True
    # git on Windows (core.autocrlf) may check text files out with CRLF line ends
    content = path.read_bytes()
    return b"\r\n" in content and hashlib.sha256(content.replace(b"\r\n", b"\n")).hexdigest() \
        == expected


def _restore_hint(rel: str) -> str:
    hint = f"git checkout -- data/{rel}"
    for folder, command in REBUILD_COMMANDS.items():
        if rel.startswith(folder + "/"):
            return (f"{hint} (or rebuild: {command}, then python -m labkit check "
                    f"--write-manifest)")
    return hint


def check_data(data_dir: Path | None = None) -> Check:
    """Every file of the manifest present with its recorded sha256."""
    data_dir = Path(data_dir or tasks.data_dir())
    manifest = data_dir / MANIFEST_NAME
    if not manifest.is_file():
        fix = f"{manifest} is missing: restore it with git checkout -- data/{MANIFEST_NAME}"
        return Check("data", "fail", f"{manifest} not found", (fix,))
    try:
        entries = read_manifest(manifest)
    except (OSError, ValueError) as error:
        return Check("data", "fail", f"cannot read {manifest}: {error}",
                     (f"{manifest} is damaged: git checkout -- data/{MANIFEST_NAME}",))
    if not entries:
        return Check("data", "fail", f"{manifest} lists no files",
                     (f"{manifest} is empty: git checkout -- data/{MANIFEST_NAME}",))
    missing, changed = [], []
    for rel, expected in entries.items():
        path = data_dir / rel
        if not path.is_file():
            missing.append(rel)
        elif not _matches(path, expected):
            changed.append(rel)
    fixes = tuple([f"data/{rel} is missing: {_restore_hint(rel)}" for rel in missing]
                  + [f"data/{rel} is corrupted (sha256 differs from {MANIFEST_NAME}): "
                     f"{_restore_hint(rel)}" for rel in changed])
    if fixes:
        named = [f"missing {rel}" for rel in missing] + [f"corrupted {rel}" for rel in changed]
        return Check("data", "fail", f"{len(fixes)} of {len(entries)} files in {data_dir} bad: "
                     + ", ".join(named), fixes)
    unlisted = sorted(set(manifest_files(data_dir)) - set(entries))
    if unlisted:
        shown = ", ".join(unlisted[:3]) + (f" and {len(unlisted) - 3} more"
                                           if len(unlisted) > 3 else "")
        return Check("data", "warn", f"{len(entries)} files in {data_dir} match {MANIFEST_NAME}, "
                     f"but {len(unlisted)} are not in it and were not verified: {shown} (after "
                     f"adding or rebuilding files on purpose: python -m labkit check "
                     f"--write-manifest)")
    return Check("data", "ok", f"{len(entries)} files in {data_dir} match {MANIFEST_NAME}")


# ---- the model and a timed step -------------------------------------------------------------------


def check_model(data_dir: Path | None = None):
    """Load the shipped tiny Qwen and answer one medium-cell question greedily; returns the row
    and ``(model, tokenizer)`` (None when loading failed)."""
    from labkit.models import load_policy
    from labkit.rollout import generate
    from labkit.tasks import medium_cells

    data_dir = Path(data_dir or tasks.data_dir())
    try:
        model, tokenizer = load_policy(data_dir / "models" / "tiny-qwen")
        row = medium_cells("eval", path=data_dir / "tasks")[0]
        text = generate(model, tokenizer, [row["prompt"]], max_completion_length=64,
                        greedy=True).texts[0]
    except Exception as error:  # noqa: BLE001 (any failure is the finding: report it)
        message = _one_line(error)
        fix = (f"the tiny Qwen does not load ({message}): restore data/models/tiny-qwen "
               f"(git checkout -- data/models/tiny-qwen)")
        return Check("model", "fail", f"loading or sampling the tiny Qwen failed: {message}",
                     (fix,)), None
    params = sum(p.numel() for p in model.parameters()) / 1e6
    device = next(model.parameters()).device.type
    answer = " ".join(text.split())
    answer = answer if len(answer) <= 60 else answer[:57] + "..."
    detail = (f"tiny Qwen, {params:.2f}M parameters on {device}; greedy on {row['question']} "
              f"{answer} (correct: {row['answer']})")
    if "<answer>" not in text:
        return Check("model", "warn", f"{detail}: no <answer> tag, not the shipped weights?"), \
            (model, tokenizer)
    return Check("model", "ok", detail), (model, tokenizer)


def live_run_config():
    """Notebook 02's live GRPO run (GRPO: Shao et al. 2024, arXiv 2402.03300, section 4.1) without
    its evaluations: the check times training steps."""
    from labkit.config import preset

    return preset(LIVE_RUN_PRESET, eval_every=0, **LIVE_RUN_OVERRIDES)


def time_live_run_steps(model=None, tokenizer=None, data_dir: Path | None = None) -> float:
    """Seconds for steps 2..TIMED_STEPS+1 of notebook 02's live run (step 1 warms up).

    Trains ``model`` in place (default: the shipped tiny Qwen, loaded afresh). The global random
    states are put back afterwards, so a notebook that calls this draws the same numbers as
    without it.
    """
    import torch

    from labkit.tasks import medium_cells
    from labkit.trainer import Trainer

    states = random.getstate(), torch.random.get_rng_state()
    try:
        data_dir = Path(data_dir or tasks.data_dir())
        trainer = Trainer(live_run_config(), model=model, tokenizer=tokenizer,
                          train_dataset=medium_cells("train", path=data_dir / "tasks"))
        trainer.training_step()
        start = time.perf_counter()
        for _ in range(TIMED_STEPS):
            trainer.training_step()
        return time.perf_counter() - start
    finally:
        random.setstate(states[0])
        torch.random.set_rng_state(states[1])


def estimate_live_run(steps_seconds: float) -> float:
    """Notebook 02's live run here: the reference run's time scaled by this machine's speed on
    the same steps."""
    return steps_seconds / REFERENCE_STEPS_SECONDS * REFERENCE_LIVE_RUN_SECONDS


def check_speed(model, tokenizer, data_dir: Path | None = None) -> Check:
    try:
        seconds = time_live_run_steps(model, tokenizer, data_dir)
    except Exception as error:  # noqa: BLE001 (a step that fails is the finding: report it)
        message = _one_line(error)
        fix = (f"a GRPO step of notebook 02's config fails ({message}): reinstall with "
               f"pip install -e . and rerun the check")
        return Check("speed", "fail", f"a GRPO training step failed: {message}", (fix,))
    per_step = seconds / TIMED_STEPS
    estimate = estimate_live_run(seconds)
    reference = REFERENCE_STEPS_SECONDS / TIMED_STEPS
    detail = (f"{per_step:.2f} s per GRPO step of notebook 02's config ({reference:.2f} s on one "
              f"core of the reference machine): its live run ~{_duration(estimate)}")
    if estimate > SLOW_LIVE_RUN_SECONDS:
        return Check("speed", "warn", f"{detail}: slow for a workshop (CPU quota or load?)",
                     value=round(estimate, 1))
    return Check("speed", "ok", detail, value=round(estimate, 1))


def _one_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text.splitlines()[0][:200]


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


# ---- all of it ------------------------------------------------------------------------------------


def run_checks(data_dir: Path | None = None, lock_file: Path = LOCK_FILE,
               timing: bool = True) -> list[Check]:
    """Every check, in order. The model is loaded only when its files are intact and the packages
    meet their floors, and the step is timed only when the model loaded (``timing=False`` skips
    it: the check then takes a few seconds)."""
    data_dir = Path(data_dir or tasks.data_dir())
    checks = [check_python(), check_floors(), check_lock(lock_file), check_cpu(), check_memory()]
    data = check_data(data_dir)
    checks.append(data)
    blocked = [c.name for c in checks if c.name in ("packages", "data") and c.status == "fail"]
    if blocked:
        reason = f"skipped: the {' and '.join(blocked)} check failed"
        return [*checks, Check("model", "skip", reason), Check("speed", "skip", reason)]
    model_check, loaded = check_model(data_dir)
    checks.append(model_check)
    if loaded is None:
        checks.append(Check("speed", "skip", "skipped: the model did not load"))
    elif not timing:
        checks.append(Check("speed", "skip", "skipped: timing=False"))
    else:
        checks.append(check_speed(*loaded, data_dir))
    return checks


def ready(checks: list[Check]) -> bool:
    return not any(c.status == "fail" for c in checks)


def verdict(checks: list[Check]) -> str:
    if ready(checks):
        speed = next((c for c in checks if c.name == "speed" and c.value is not None), None)
        if speed is None:
            return "READY (the step was not timed: no estimate of the live runs)."
        return (f"READY: notebook 02's live GRPO run ({LIVE_RUN_STEPS} steps, two evaluations) "
                f"should take about {_duration(speed.value)} here.")
    fixes = [fix for c in checks if c.status == "fail" for fix in (c.fixes or (c.detail,))]
    return "\n".join(["NOT READY. Fix these, then run `python -m labkit check` again:",
                      *(f"  - {fix}" for fix in fixes)])


def report(checks: list[Check]) -> str:
    """The rows and the verdict as plain text (no colour codes: it reads the same in a notebook
    cell and a terminal)."""
    width = max(len(c.name) for c in checks)
    rows = [f"{c.status:<4}  {c.name:<{width}}  {c.detail}" for c in checks]
    return "\n".join(["labkit preflight check", *rows, "", verdict(checks)])


def as_json(checks: list[Check]) -> str:
    return json.dumps({"ready": ready(checks), "checks": [asdict(c) for c in checks]}, indent=2)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Check that this machine is ready for the GRPO Lab.")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--write-manifest", action="store_true",
                    help=f"rewrite data/{MANIFEST_NAME} from the files as they are, and exit")
    ap.add_argument("--no-timing", action="store_true", help="skip the timed training step")
    args = ap.parse_args(argv)
    if args.write_manifest:
        out = write_manifest()
        print(f"wrote {out} ({len(read_manifest(out))} files)")
        return 0
    checks = run_checks(timing=not args.no_timing)
    print(as_json(checks) if args.json else report(checks))
    return 0 if ready(checks) else 1


__all__ = ["Check", "check_data", "check_lock", "container_memory_headroom",
           "installed_distributions", "main", "read_lock", "read_manifest", "ready", "report",
           "required_here", "run_checks", "write_manifest"]

if __name__ == "__main__":
    sys.exit(main())
