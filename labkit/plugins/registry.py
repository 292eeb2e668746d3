"""One table of named entries, the shape both method registries share (loss types in
:mod:`labkit.losses.registry`, advantage estimators in :mod:`labkit.advantages.registry`).

A :class:`Registry` holds the entries in registration order, refuses a second entry under one
name (two files cannot silently fight over a method), and answers an unknown name with the
registered ones. Listeners hear of every entry added and removed, so a table built from the
registries (:class:`labkit.config.TrainConfig`'s fields for the methods' own settings) follows a
method registered after it was built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType


class Registry:
    """Entries by name, read-only to everyone but :meth:`add` and :meth:`remove`.

    Args:
        field: the setting whose value names an entry (``"loss_type"``), used in errors.
        noun: what one entry is, with its article (``"a loss type"``), used in errors.
    """

    def __init__(self, field: str, noun: str):
        self.field, self.noun = field, noun
        self._entries: dict[str, object] = {}
        self._listeners: list[Callable[[str, object | None], None]] = []
        #: Read-only view of the entries, by name, in registration order.
        self.view: Mapping[str, object] = MappingProxyType(self._entries)

    def check_name(self, name) -> None:
        """Refuse a name that is not an identifier, or one already taken (naming its module)."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"{self.noun} name must be an identifier-like string, got {name!r}")
        if name in self._entries:
            raise ValueError(f"{self.field} {name!r} is already registered (by "
                             f"{self._entries[name].module})")

    def add(self, name: str, entry) -> None:
        """Register ``entry`` (which has a ``module`` attribute) as ``name``. The listeners hear
        of it first: one that raises refuses the entry, and nothing is registered."""
        self.check_name(name)
        for listener in self._listeners:
            listener(name, entry)
        self._entries[name] = entry

    def decorator(self, name: str, build: Callable[[Callable], object]):
        """A decorator that registers ``build(function)`` as ``name`` and returns the function
        unchanged (the name is checked at once, where the decorator is written)."""
        self.check_name(name)

        def register(function):
            self.add(name, build(function))
            return function

        return register

    def remove(self, name: str) -> None:
        """Remove a registered entry (for tests that register a toy one)."""
        self._entries.pop(name)
        for listener in self._listeners:
            listener(name, None)

    def entry(self, name):
        """The entry ``name``; ``ValueError`` listing the registered ones otherwise."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise ValueError(f"{self.field} must be one of {self.names()}, got "
                             f"{name!r}") from None

    def names(self, where: Callable[[object], bool] | None = None) -> tuple[str, ...]:
        """Names of every entry (those for which ``where(entry)`` holds), in registration
        order."""
        return tuple(name for name, entry in self._entries.items()
                     if where is None or where(entry))

    def listen(self, listener: Callable[[str, object | None], None]) -> None:
        """Call ``listener(name, entry)`` before every entry added from now on (it may refuse
        the entry by raising), and ``listener(name, None)`` after every removal."""
        self._listeners.append(listener)
