"""The preflight check's Python and package rows: the Python version, labkit's declared floors
(:mod:`labkit.runtime.compat`) and the known-good ``requirements-lock.txt`` at the repository root,
compared only where this install has or needs a locked package."""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

from labkit.commands.check.rows import Check
from labkit.runtime import compat

REPO_ROOT = Path(__file__).resolve().parents[3]
#: The known-good environment: ``name==version`` lines, ``#`` comments, optional markers.
LOCK_FILE = REPO_ROOT / "requirements-lock.txt"

MIN_PYTHON, TESTED_PYTHON = (3, 10), (3, 11)


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
