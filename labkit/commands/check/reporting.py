"""The preflight check's verdict and its two forms: plain text for a terminal or a notebook cell,
and JSON for tooling."""

from __future__ import annotations

import json
from dataclasses import asdict

from labkit.commands.check.rows import Check, duration
from labkit.commands.check.speed import LIVE_RUN_STEPS


def ready(checks: list[Check]) -> bool:
    return not any(c.status == "fail" for c in checks)


def verdict(checks: list[Check]) -> str:
    if ready(checks):
        speed = next((c for c in checks if c.name == "speed" and c.value is not None), None)
        if speed is None:
            return "READY (the step was not timed: no estimate of the live runs)."
        return (f"READY: notebook 02's live GRPO run ({LIVE_RUN_STEPS} steps, two evaluations) "
                f"should take about {duration(speed.value)} here.")
    fixes = [fix for c in checks if c.status == "fail" for fix in (c.fixes or (c.detail,))]
    return "\n".join(["NOT READY. Fix these, then run `python -m labkit check` again:",
                      *(f"  - {fix}" for fix in fixes)])


def report(checks: list[Check]) -> str:
    """The rows and the verdict as plain text (no colour codes: it reads the same in a notebook
    cell and a terminal)."""
    width = max(len(c.name) for c in checks)
    rows = [f"{c.status:<4}  {c.name:<{width}}  {c.detail}" for c in checks]
    return "\n".join(["labkit preflight check", *rows, "", verdict(checks)])


def as_json(checks: list[Check]) -> str:
    return json.dumps({"ready": ready(checks), "checks": [asdict(c) for c in checks]}, indent=2)
