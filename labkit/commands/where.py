"""Where a registered method's code lives: the file and line of each loss type, advantage
estimator, named reward or config rule of that name: ``python -m labkit where grpo``.

Every plug-in registers itself where its code is written, so the registries know the answer:
``grpo`` is both a loss type (the clipped surrogate it registers) and an advantage estimator,
and both lines are printed, one per registration, as ``FILE:LINE  what (function)``. A config
rule goes by its function's name without ``_check_`` (``group_filters`` for
``_check_group_filters``). An unknown
name is refused with every name each registry knows.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path

#: The folder above the package: paths inside it are printed relative to it.
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Place:
    """Where one registration's code lives."""

    kind: str       # "loss_type", "advantage_estimator", "reward" or "config rule"
    name: str
    code: object    # the function (or class) that the registration holds
    file: str       # relative to the project's root when inside it
    line: int

    def __str__(self) -> str:
        return (f"{self.file}:{self.line}  {self.kind} {self.name!r} "
                f"({getattr(self.code, '__qualname__', self.code)})")


def rule_name(rule) -> str:
    """A config rule's name: its function's, without the leading ``_check_``."""
    return rule.__name__.removeprefix("_").removeprefix("check_")


def registrations() -> dict[str, dict[str, object]]:
    """Every registry's names and the code each holds, by kind, in registration order."""
    import labkit.config  # noqa: F401 (imports every module that registers a method)
    from labkit.advantages import ESTIMATOR_REGISTRY
    from labkit.losses import LOSS_REGISTRY
    from labkit.plugins import config_rules
    from labkit.rewards import REWARD_REGISTRY

    return {
        "loss_type": {name: loss.surrogate for name, loss in LOSS_REGISTRY.items()},
        "advantage_estimator": {name: e.compute for name, e in ESTIMATOR_REGISTRY.items()},
        "reward": {name: reward.code for name, reward in REWARD_REGISTRY.items()},
        "config rule": {rule_name(rule): rule for rule in config_rules()},
    }


def place(kind: str, name: str, code) -> Place:
    """The file of ``code`` and the line of its ``def`` (or ``class``), below any decorator."""
    code = inspect.unwrap(code)
    path = Path(inspect.getsourcefile(code)).resolve()
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    lines, first = inspect.getsourcelines(code)
    opening = next(i for i, text in enumerate(lines)
                   if text.lstrip().startswith(("def ", "async def ", "class ")))
    return Place(kind, name, code, str(shown), first + opening)


def where(name: str) -> list[Place]:
    """Every registration called ``name``; ``ValueError`` listing the known names otherwise."""
    found = [place(kind, name, table[name])
             for kind, table in registrations().items() if name in table]
    if not found:
        known = "; ".join(f"{kind}: {', '.join(table)}"
                          for kind, table in registrations().items())
        raise ValueError(f"no registered method is called {name!r}. The known ones: {known}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="a loss type, advantage estimator, named reward or config "
                                     "rule (grpo, gae, accuracy, group_filters...)")
    args = parser.parse_args(argv)
    try:
        places = where(args.name)
    except ValueError as error:
        print(f"python -m labkit where: {error}", file=sys.stderr)
        return 2
    print("\n".join(map(str, places)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
