"""One scratch folder per process for the files the cases write (specs, checkpoints, data
copies); it is deleted when the interpreter exits."""

from __future__ import annotations

import functools
import itertools
import tempfile
from pathlib import Path

_COUNTER = itertools.count()


@functools.cache
def _root() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="labkit-fuzz-")


def scratch(name: str) -> Path:
    """A fresh, empty folder ``<n>-<name>`` under the process's scratch folder."""
    folder = Path(_root().name) / f"{next(_COUNTER)}-{name}"
    folder.mkdir(parents=True)
    return folder


def write(name: str, content: str | bytes) -> Path:
    """A file ``name`` holding ``content`` in a fresh scratch folder."""
    path = scratch(Path(name).stem) / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path
