"""Count the fuzz cases' outcomes per surface: ``python tests/fuzz/tally.py [--slow]
[--interrupts N] [--surfaces 1,4]``. Prints one row per surface (tried, clear, handled, silent,
crash, hang) and every case that is neither clear nor handled, with what happened. The counts
before and after the fixes of round two are in ``tests/fuzz/tally_before.txt`` and
``tally_after.txt``; round three's (surfaces 12-15 added, 4, 6, 10 and 11 extended) in
``tally_round3.txt``."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(name, "1")

from fuzz.harness import GOOD, OUTCOMES, run_case


def all_cases(slow: bool):
    from fuzz import (
        agents,
        checkpoints,
        classroom,
        data_rewards,
        deploy,
        doctor,
        exercises,
        memory,
        preflight,
        specs,
        trl_in,
        trl_rewards,
        trl_settings,
        verifiers,
    )

    modules = (specs, trl_settings, trl_rewards, verifiers, memory, doctor, checkpoints,
               exercises, preflight, deploy, classroom, data_rewards, agents, trl_in)
    return [case for module in modules for case in module.cases() if slow or not case.slow]


def interrupt_rows(trials: int) -> list[tuple[str, str, str]]:
    from fuzz import interrupts
    from fuzz.scratch import scratch

    rows = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        for i, (kind, delay) in enumerate(interrupts.schedule(signum, trials, seed=0)):
            trial = interrupts.run_trial(kind, signum, delay, scratch("trial"))
            outcome = ("hang" if trial.hung else "handled" if trial.ok else "silent")
            rows.append((f"s8-{signum.name}-{i}-{kind}", outcome, str(trial)))
        step = interrupts.checkpoint_after_own_signal("lora_grpo", signum, 3,
                                                      scratch("no-save-every"))
        rows.append((f"s8-{signum.name}-checkpoint-at-interrupt",
                     "handled" if step == 3 else "silent",
                     f"signal after step 3, save_every=0: checkpoint of step {step}"))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slow", action="store_true", help="include the slow cases (TRL, 100 MB)")
    ap.add_argument("--interrupts", type=int, default=0, metavar="N",
                    help="also run N interrupt trials per signal (surface 8)")
    ap.add_argument("--surfaces", default="", help="comma-separated surface numbers")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    chosen = {int(s) for s in args.surfaces.split(",") if s}
    rows = []
    for case in all_cases(args.slow):
        if chosen and case.surface not in chosen:
            continue
        result = run_case(case)
        rows.append((case.id, result.outcome, result.detail))
        print(f"{case.id}: {result.outcome}", file=sys.stderr, flush=True)
    if args.interrupts and (not chosen or 8 in chosen):
        rows += interrupt_rows(args.interrupts)
    counts: dict[int, Counter] = {}
    for case_id, outcome, _ in rows:
        counts.setdefault(int(case_id[1:].split("-")[0]), Counter())[outcome] += 1
    print(f"{'surface':>7}  {'tried':>5}  " + "  ".join(f"{o:>7}" for o in OUTCOMES))
    for surface in sorted(counts):
        c = counts[surface]
        print(f"{surface:>7}  {sum(c.values()):>5}  " + "  ".join(f"{c[o]:>7}" for o in OUTCOMES))
    total = sum(counts.values(), Counter())
    print(f"{'all':>7}  {sum(total.values()):>5}  " + "  ".join(f"{total[o]:>7}"
                                                             for o in OUTCOMES))
    print()
    for case_id, outcome, detail in rows:
        if outcome not in GOOD:
            print(f"{case_id}: {outcome}: {' '.join(detail.split())[:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
