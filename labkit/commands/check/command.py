"""The preflight check as a whole: every row in order (:func:`run_checks`) and the command,
``python -m labkit check``."""

from __future__ import annotations

import argparse
from pathlib import Path

from labkit import tasks
from labkit.commands.check.machine import check_cpu, check_memory
from labkit.commands.check.manifest import MANIFEST_NAME, check_data, read_manifest, write_manifest
from labkit.commands.check.packages import LOCK_FILE, check_floors, check_lock, check_python
from labkit.commands.check.reporting import as_json, ready, report
from labkit.commands.check.rows import Check
from labkit.commands.check.speed import check_model, check_speed


def run_checks(data_dir: Path | None = None, lock_file: Path = LOCK_FILE,
               timing: bool = True) -> list[Check]:
    """Every check, in order. The model is loaded only when its files are intact and the packages
    meet their floors, and the step is timed only when the model loaded (``timing=False`` skips
    it: the check then takes a few seconds)."""
    data_dir = Path(data_dir or tasks.data_dir())
    checks = [check_python(), check_floors(), check_lock(lock_file), check_cpu(), check_memory()]
    data = check_data(data_dir)
    checks.append(data)
    blocked = [c.name for c in checks if c.name in ("packages", "data") and c.status == "fail"]
    if blocked:
        reason = f"skipped: the {' and '.join(blocked)} check failed"
        return [*checks, Check("model", "skip", reason), Check("speed", "skip", reason)]
    model_check, loaded = check_model(data_dir)
    checks.append(model_check)
    if loaded is None:
        checks.append(Check("speed", "skip", "skipped: the model did not load"))
    elif not timing:
        checks.append(Check("speed", "skip", "skipped: timing=False"))
    else:
        checks.append(check_speed(*loaded, data_dir))
    return checks


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Check that this machine is ready for the GRPO Lab.")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--write-manifest", action="store_true",
                    help=f"rewrite data/{MANIFEST_NAME} from the files as they are, and exit")
    ap.add_argument("--no-timing", action="store_true", help="skip the timed training step")
    args = ap.parse_args(argv)
    if args.write_manifest:
        out = write_manifest()
        print(f"wrote {out} ({len(read_manifest(out))} files)")
        return 0
    checks = run_checks(timing=not args.no_timing)
    print(as_json(checks) if args.json else report(checks))
    return 0 if ready(checks) else 1
