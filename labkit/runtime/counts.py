"""A count read from text: an environment variable or a command-line value, as an integer with a
floor, and an argparse ``type`` for a command's count option that says what is allowed."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def int_at_least(text, minimum: int) -> int | None:
    """``text`` (an environment variable, a command-line value) as an integer >= ``minimum``, or
    None when it is not one; the caller names the setting in its error."""
    try:
        value = int(str(text).strip())
    except ValueError:
        return None
    return value if value >= minimum else None


def count_option(option: str, minimum: int, meaning: str | None = None) -> Callable[[str], int]:
    """An argparse ``type`` for a command's count ``option``: its value as an integer >=
    ``minimum``; anything else is argparse's usage error (exit status 2), naming the option, the
    value and what is allowed (``meaning``: what the count counts, said in the error)."""
    def parse(text: str) -> int:
        value = int_at_least(text, minimum)
        if value is None:
            about = f" ({meaning})" if meaning else ""
            raise argparse.ArgumentTypeError(f"{option} must be an integer >= {minimum}{about}, "
                                             f"got {text!r}")
        return value
    return parse
