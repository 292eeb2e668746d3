"""SHA-256 of a file, read in blocks: the one helper behind the data manifest
(:mod:`labkit.commands.check`) and the checkpoint manifests (:mod:`labkit.training.checkpoint`).

It imports nothing of labkit, so any module can use it without an import cycle.
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def file_sha256(path: Path) -> str:
    """The hex SHA-256 of the file at ``path`` (1 MiB at a time: a model's weights need not fit
    in memory twice)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


__all__ = ["file_sha256"]
