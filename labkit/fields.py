"""Validators of configuration fields, shared by :class:`labkit.config.TrainConfig` and the rules
that method modules register (:mod:`labkit.rules`).

Each takes the config and a field name, reads the value and raises ``ValueError`` naming the field,
the value and what is allowed (every config error is a ``ValueError``: one type to catch). A few
normalise what they accept (a path-like to ``str``, a list to a tuple) in place.
"""

from __future__ import annotations

import math
import os


def refuse(message: str):
    raise ValueError(message)


def is_real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def boolean(cfg, name):
    value = getattr(cfg, name)
    if not isinstance(value, bool):  # every config error is a ValueError: one type to catch
        raise ValueError(f"{name} must be True or False, got {value!r} "  # noqa: TRY004
                         f"({type(value).__name__}); a string like 'False' would count as true")


def text(cfg, name):
    value = getattr(cfg, name)
    if isinstance(value, os.PathLike):
        object.__setattr__(cfg, name, os.fspath(value))
        value = getattr(cfg, name)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")


def path(cfg, name):
    if getattr(cfg, name) is not None:
        text(cfg, name)


def device(cfg):
    text(cfg, "device")
    if cfg.device != "auto":
        import torch

        try:
            torch.device(cfg.device)
        except (RuntimeError, ValueError) as error:
            raise ValueError(f"device must be 'auto' or a torch device such as 'cpu', 'cuda', "
                             f"'cuda:1', 'mps', got {cfg.device!r}") from error


def choice(cfg, name, allowed):
    value = getattr(cfg, name)
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")


def integer(cfg, name, low, high=None):
    value = getattr(cfg, name)
    bound = f"[{low}, {high}]" if high is not None else f">= {low}"
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if not is_int or value < low or (high is not None and value > high):
        raise ValueError(f"{name} must be an integer {bound}, got {value!r}")


def number(cfg, name, low, high, low_open=False, high_open=False, allow_inf=False):
    """A real number in the interval; infinity only where ``allow_inf`` (then the interval is
    printed closed at inf)."""
    value = getattr(cfg, name)
    top = "inf" if high == math.inf else f"{high}"
    closing = "]" if (high == math.inf and allow_inf) or (high != math.inf and not high_open) \
        else ")"
    interval = ("(" if low_open else "[") + f"{low}, {top}" + closing
    if not is_real(value) or math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise ValueError(f"{name} must be a finite number in {interval}, got {value!r}"
                         if not allow_inf else f"{name} must be a number in {interval}, got "
                         f"{value!r}")
    too_low = value <= low if low_open else value < low
    too_high = value >= high if (high_open and high != math.inf) else value > high
    if too_low or too_high:
        raise ValueError(f"{name} must be in {interval}, got {value}")


def number_tuple(cfg, name):
    value = getattr(cfg, name)
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise ValueError(f"{name} must be a list of numbers (one per reward function), got "
                         f"{value!r}")
    value = tuple(value)
    if not all(is_real(w) and math.isfinite(w) for w in value):
        raise ValueError(f"{name} must hold finite numbers, got {value}")
    object.__setattr__(cfg, name, value)


def integer_tuple(cfg, name, length, low, high):
    value = getattr(cfg, name)
    ok = (not isinstance(value, (str, bytes, dict)) and hasattr(value, "__iter__")
          and len(tuple(value)) == length)
    value = tuple(value) if ok else value
    if not ok or not all(isinstance(v, int) and not isinstance(v, bool) and low <= v <= high
                         for v in value):
        raise ValueError(f"{name} must be {length} integers in [{low}, {high}], got {value!r}")
    object.__setattr__(cfg, name, value)


def int_at_least(text, minimum: int) -> int | None:
    """``text`` (an environment variable, a command-line value) as an integer >= ``minimum``, or
    None when it is not one; the caller names the setting in its error."""
    try:
        value = int(str(text).strip())
    except ValueError:
        return None
    return value if value >= minimum else None
