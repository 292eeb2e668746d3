"""The table of named rewards: one entry per key a data file may name, written by the file that
implements the reward (the losses' and estimators' pattern, :mod:`labkit.losses.registry`).

A data file (a reference-run spec) names a reward by its key, never by an import path: a spec is
data and must not decide what code runs. A reward module registers its functions with
:func:`register_reward`; :func:`labkit.rewards.named_reward`, the reference runs and the check
that an environment reward has an environment that keeps what it reads all read this table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from labkit.plugins import Registry

__all__ = ["REWARD_REGISTRY", "NamedReward", "get_reward", "register_reward", "reward_names",
           "unregister_reward"]


@dataclass(frozen=True)
class NamedReward:
    """One registered reward.

    Attributes:
        name: the key a data file names it by.
        code: the reward function (TRL's signature), or the class whose instances are one.
        summary: one line saying what it rewards.
        reads: the attribute of an episode's environment it reads (``"turn_rewards"``), or None
            when it reads no environment; a run naming it needs an environment that keeps it.
        build: ``build() -> reward function``, called each time a data file names it (a judge
            loads its model); None when ``code`` is the reward function itself.
    """

    name: str
    code: Callable
    summary: str
    reads: str | None = None
    build: Callable[[], Callable] | None = None

    @property
    def module(self) -> str:
        """The module that registered it."""
        return self.code.__module__

    def function(self) -> Callable:
        """The reward function a run calls."""
        return self.build() if self.build is not None else self.code


_TABLE = Registry("reward_funcs", "a named reward")
#: Read-only view of every named reward, by key, in registration order.
REWARD_REGISTRY: Mapping[str, NamedReward] = _TABLE.view


def register_reward(name: str, *, summary: str, reads: str | None = None,
                    build: Callable[[], Callable] | None = None):
    """Decorator: register the decorated reward function (or class, with ``build``) as the named
    reward ``name`` (returns it unchanged)."""
    return _TABLE.decorator(name, lambda code: NamedReward(
        name=name, code=code, summary=summary, reads=reads, build=build))


#: Remove a named reward (for tests that register a toy one).
unregister_reward = _TABLE.remove
#: ``get_reward(name)``: the named reward, or ``ValueError`` listing the keys.
get_reward = _TABLE.entry
#: ``reward_names()``: every key, in registration order.
reward_names = _TABLE.names
