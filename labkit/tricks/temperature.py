"""Sampling temperature over a run: Kimi K2's decay (arXiv 2507.20534, section 3.2.3) and ProRL's
high constant temperature (arXiv 2505.24864: ``temperature=1.2``).

The schedule's shape and end point are unpublished (K2), so linear and cosine are both offered.
"""

from __future__ import annotations

import math

from labkit.plugins import config_rule

#: ``temperature_schedule`` values.
TEMPERATURE_SCHEDULES = ("constant", "linear", "cosine")


def temperature_at(step: int, total_steps: int, start: float, final: float | None = None,
                   schedule: str = "constant") -> float:
    r"""Sampling temperature of step ``step`` (0-based) of ``total_steps``.

    Textbook form::

        progress = step / max(total_steps - 1, 1)                    # 0 at the first step, 1 at the last
        linear = start + (final - start) * progress
        cosine = final + (start - final) * (1 + cos(pi * progress)) / 2

    ``final=None`` or ``"constant"`` keeps ``start``. The training log-probs of a step use the
    same temperature (the trainer passes it to both), so the on-policy ratio stays exactly 1.
    """
    if schedule not in TEMPERATURE_SCHEDULES:
        raise ValueError(f"schedule must be one of {TEMPERATURE_SCHEDULES}, got {schedule!r}")
    if schedule == "constant" or final is None:
        return float(start)
    progress = min(max(step / max(total_steps - 1, 1), 0.0), 1.0)
    if schedule == "linear":
        return float(start + (final - start) * progress)
    return float(final + (start - final) * (1 + math.cos(math.pi * progress)) / 2)


@config_rule
def _check_temperature_schedule(config) -> None:
    if config.temperature_schedule != "constant" and config.temperature_final is None:
        raise ValueError(f"temperature_schedule={config.temperature_schedule!r} decays to "
                         f"temperature_final: set it (e.g. 0.7)")
