"""The preflight check's data row: the shipped model and task files against ``data/MANIFEST.sha256``
(``sha256sum`` format), and the writing of that manifest (``python -m labkit check
--write-manifest``)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from labkit import tasks
from labkit.commands.check.rows import Check
from labkit.runtime.hashing import file_sha256

MANIFEST_NAME = "MANIFEST.sha256"
#: The folders of ``data/`` the manifest covers (not ``runs``: its logs change with every rerun).
MANIFEST_FOLDERS = ("models", "tasks")
#: How to rebuild what ``git checkout`` cannot restore, by folder under ``data/``.
REBUILD_COMMANDS = {"models/tiny-qwen": "python -m labkit build_tiny",
                    "models/tiny-judge": "python -m labkit build_judge",
                    "models/tiny-qwen-tools": "python -m labkit build_tools",
                    "tasks": "python -m labkit tasks --out data/tasks"}


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


def shown_path(path: Path) -> str:
    """``path`` as the check prints it: relative to the lab's folder when inside it (``data``),
    so a notebook's committed output carries no absolute path of the machine that ran it; a
    folder elsewhere (``$LABKIT_DATA``) as given."""
    lab = Path(__file__).resolve().parents[3]  # labkit/commands/check/ -> the repository
    try:
        return Path(path).resolve().relative_to(lab).as_posix()
    except ValueError:
        return str(path)


def check_data(data_dir: Path | None = None) -> Check:
    """Every file of the manifest present with its recorded sha256."""
    data_dir = Path(data_dir or tasks.data_dir())
    manifest = data_dir / MANIFEST_NAME
    shown, manifest_shown = shown_path(data_dir), shown_path(manifest)
    if not manifest.is_file():
        fix = f"{manifest_shown} is missing: restore it with git checkout -- data/{MANIFEST_NAME}"
        return Check("data", "fail", f"{manifest_shown} not found", (fix,))
    try:
        entries = read_manifest(manifest)
    except (OSError, ValueError) as error:
        return Check("data", "fail", f"cannot read {manifest_shown}: {error}",
                     (f"{manifest_shown} is damaged: git checkout -- data/{MANIFEST_NAME}",))
    if not entries:
        return Check("data", "fail", f"{manifest_shown} lists no files",
                     (f"{manifest_shown} is empty: git checkout -- data/{MANIFEST_NAME}",))
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
        return Check("data", "fail", f"{len(fixes)} of {len(entries)} files in {shown}/ bad: "
                     + ", ".join(named), fixes)
    unlisted = sorted(set(manifest_files(data_dir)) - set(entries))
    if unlisted:
        shown = ", ".join(unlisted[:3]) + (f" and {len(unlisted) - 3} more"
                                           if len(unlisted) > 3 else "")
        return Check("data", "warn", f"{len(entries)} files in {shown}/ match {MANIFEST_NAME}, "
                     f"but {len(unlisted)} are not in it and were not verified: {shown} (after "
                     f"adding or rebuilding files on purpose: python -m labkit check "
                     f"--write-manifest)")
    return Check("data", "ok", f"{len(entries)} files in {shown}/ match {MANIFEST_NAME}")
