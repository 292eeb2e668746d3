"""Measure the overlap: samples per second and wall seconds per step, synchronous against the
deterministic sampler k steps ahead and the overlapped sampling thread, side by side.

    python -m labkit async_overlap [--steps 6] [--k 2] [--prompts 8]

Not a timed test: the numbers are the machine's (its cores, and whatever else runs on them), so
they are printed with the machine and the load average, and recorded by hand
(docs/measurements/async_overlap.txt). Each run is GRPO on the shipped tiny model, the same seed;
torch runs one intra-op thread per Python thread (the overlapped mode's sampling thread and the
training thread then use two cores). The deterministic mode does the same work as synchronous in
one thread (it only changes which weights sample), so it measures the cost of the queue; only the
overlapped mode can be faster, by sampling while the trainer updates.
"""

from __future__ import annotations

import argparse
import os
import platform

import torch

from labkit.config import preset
from labkit.runtime.counts import count_option
from labkit.trainer import train


def measure(mode: str, k: int, steps: int, prompts: int) -> dict:
    """One run's wall time per step and completions sampled per wall second (model loading
    excluded: the clock starts at the first step)."""
    config = preset("grpo", max_steps=steps, prompts_per_step=prompts, eval_every=0,
                    progress=False, seed=0, max_staleness=k, async_mode=mode)
    history = train(config).history
    wall = history["step_time"].sum()
    completions = steps * prompts * config.num_generations
    return {"mode": "synchronous" if k == 0 else f"{mode} k={k}", "wall_per_step": wall / steps,
            "samples_per_s": completions / wall,
            "queue_wait_per_step": float(history["queue_wait"].mean())
            if "queue_wait" in history else 0.0}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m labkit async_overlap",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=count_option("--steps", 1, "steps per run"), default=6)
    parser.add_argument("--k", type=count_option("--k", 0, "max_staleness"), default=2)
    parser.add_argument("--prompts", type=count_option("--prompts", 1, "prompts per step"),
                        default=8)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}, {platform.system()}; load average before: {load}")
    print(f"GRPO, tiny model, {args.prompts} prompts x 8 completions, {args.steps} steps, "
          f"seed 0; step_time summed (model loading excluded)")
    rows = [measure("deterministic", 0, args.steps, args.prompts),
            measure("deterministic", args.k, args.steps, args.prompts),
            measure("overlapped", args.k, args.steps, args.prompts)]
    base = rows[0]["samples_per_s"]
    print(f"{'run':<20} {'wall s/step':>12} {'samples/s':>10} {'vs sync':>8} "
          f"{'queue_wait s/step':>18}")
    for r in rows:
        print(f"{r['mode']:<20} {r['wall_per_step']:>12.2f} {r['samples_per_s']:>10.1f} "
              f"{r['samples_per_s'] / base:>7.2f}x {r['queue_wait_per_step']:>18.2f}")
    if load is not None:
        print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
