"""Validators of configuration fields, shared by :class:`labkit.config.TrainConfig` and the rules
that method modules register (:mod:`labkit.plugins.rules`), and :class:`Setting`, the declaration
of a field by the method that owns it.

Each validator takes the config and a field name, reads the value and raises ``ValueError``
naming the field, the value and what is allowed (every config error is a ``ValueError``: one type
to catch). A few normalise what they accept (a path-like to ``str``, a list to a tuple) in place.
The range factories (:func:`between`, :func:`whole`, :func:`one_of`, :func:`flag`) return such a
check with its bounds bound, so a range can be written beside its field.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass

#: ``check(config, field_name)``: raises ``ValueError`` when the field's value is out of range.
#: The factories below also set ``check.annotation``, the field's type as a string.
Check = Callable[[object, str], None]


def _typed(check, kind: str, optional: bool) -> Check:
    check.annotation = f"{kind} | None" if optional else kind
    return check


@dataclass(frozen=True)
class Setting:
    """A config field declared by the method that reads it (a loss's own knob): everything
    :class:`~labkit.config.TrainConfig`, the TRL bridge and the catalog need, in one place.

    Attributes:
        default: the field's default value.
        range: the check of its values (:func:`between`, :func:`whole`, :func:`one_of`...).
        doc: one line for ``help(TrainConfig)`` and ``labkit.config.FIELD_DOCS``.
        trl: the ``trl.GRPOConfig`` field of the same meaning, copied by the TRL bridge; None
            when TRL has none (the bridge then refuses any value but the default).
        why: with ``trl=None``, why TRL cannot express it (the bridge's refusal says so).
    """

    default: object
    range: Check
    doc: str
    trl: str | None = None
    why: str = ""


def between(low, high, *, low_open=False, high_open=False, allow_inf=False,
            optional=False) -> Check:
    """A real number in the interval (:func:`number`); ``optional``: None is allowed too."""
    def check(cfg, name):
        if not (optional and getattr(cfg, name) is None):
            number(cfg, name, low, high, low_open, high_open, allow_inf)
    return _typed(check, "float", optional)


def whole(low, high=None, *, optional=False) -> Check:
    """An integer >= ``low`` (and <= ``high``, a number or ``high(config)``); ``optional``: or
    None."""
    def check(cfg, name):
        if not (optional and getattr(cfg, name) is None):
            integer(cfg, name, low, high(cfg) if callable(high) else high)
    return _typed(check, "int", optional)


def one_of(allowed, *, optional=False) -> Check:
    """One of ``allowed`` (a tuple, or a function returning one, for a registry read at each
    check); ``optional``: or None."""
    def check(cfg, name):
        if not (optional and getattr(cfg, name) is None):
            choice(cfg, name, allowed() if callable(allowed) else allowed)
    return _typed(check, "str", optional)


def flag() -> Check:
    """True or False (:func:`boolean`)."""
    return _typed(lambda cfg, name: boolean(cfg, name), "bool", False)


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
