"""The configuration rules of every method, registered by the module that implements the method.

:class:`labkit.config.TrainConfig` validates each field's type and range itself; whether a
combination of switches makes sense (GFPO needs groups, a temperature schedule needs its end point,
LoRA cannot reset a reference) is the business of the method, so each method module writes its
rule next to its code and registers it here::

    @config_rule
    def _check_gfpo(config):
        if config.num_remains_in_group is not None and config.advantage_estimator != "grpo":
            raise ValueError("...what to change...")

A rule reads fields of the config it is given and raises ``ValueError`` saying what to fix; it
must not change the config. ``TrainConfig`` runs every registered rule on construction and on
every assignment (:mod:`labkit.config.methods` imports the method modules, so their rules are
registered before any config exists). A method module imports this from :mod:`labkit.plugins`,
never from :mod:`labkit.config`, which stands above the methods and reads their registrations.
"""

from __future__ import annotations

from collections.abc import Callable

_RULES: list[Callable[[object], None]] = []


def config_rule(rule: Callable[[object], None]) -> Callable[[object], None]:
    """Decorator: register ``rule(config)`` (returned unchanged)."""
    if rule not in _RULES:
        _RULES.append(rule)
    return rule


def config_rules() -> tuple[Callable[[object], None], ...]:
    """Every registered rule, in registration order."""
    return tuple(_RULES)
