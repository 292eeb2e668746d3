"""The rows of the preflight check (:mod:`labkit.commands.check`): :class:`Check`, one row per
thing checked, and the wording every row shares (an error on one line, a duration)."""

from __future__ import annotations

from dataclasses import dataclass

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


def one_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text.splitlines()[0][:200]


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"
