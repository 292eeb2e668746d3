"""The preflight check's model and speed rows: the shipped tiny Qwen loads and answers, and a few
steps of notebook 02's live GRPO run timed and scaled to the reference machine's live run."""

from __future__ import annotations

import random
import time
from pathlib import Path

from labkit import tasks
from labkit.commands.check.rows import Check, duration, one_line

#: Notebook 02's live GRPO run (its "live GRPO run" cell): this preset and these overrides, on
#: the medium cells, evaluated at steps 0 and 30.
LIVE_RUN_PRESET = "grpo"
LIVE_RUN_STEPS = 30
LIVE_RUN_OVERRIDES = {"max_steps": LIVE_RUN_STEPS, "seed": 0, "progress": False}
#: The check runs the live run's first steps: one to warm up (allocator, first-call overheads),
#: then TIMED_STEPS timed; seeded, so every machine times the same prompts.
TIMED_STEPS = 3
#: The reference machine's numbers: the lab's 2-core CPU machine (torch 2.13 CPU, Python 3.11),
#: one torch thread (LABKIT_THREADS=1), timing in one process and in turns (three rounds) notebook
#: 02's live-run cell as written (model load, two evaluations, 30 steps) and this check's timed
#: steps on a fresh model (:func:`time_live_run_steps`). The machine was shared with other jobs
#: (load average 3.3-4.2 on its 2 cores), so the numbers are CPU seconds of the process
#: (``time.process_time``), the time an idle core would take, which the load barely moves (CPU
#: ratios 12.4-15.3 over the rounds; a first attempt in wall-clock seconds gave 10-34). Medians of
#: the three rounds: live run 40.3 s (37.0-43.7), timed steps 2.99 s (2.85-3.10); ratio 13.5. The
#: live run reached eval pass@1 26.6% -> 56.6% every round, as the notebook does. Checked on the
#: same machine at one thread: estimated 40.3 s and 53.8 s, then measured 43.2 s and 36.1 s.
REFERENCE_STEPS_SECONDS = 2.99
REFERENCE_LIVE_RUN_SECONDS = 40.3
#: An estimate above this warns: a workshop cannot wait on every live run.
SLOW_LIVE_RUN_SECONDS = 300.0


def check_model(data_dir: Path | None = None):
    """Load the shipped tiny Qwen and answer one medium-cell question greedily; returns the row
    and ``(model, tokenizer)`` (None when loading failed)."""
    from labkit.models import load_policy
    from labkit.sampling import generate
    from labkit.tasks import medium_cells

    data_dir = Path(data_dir or tasks.data_dir())
    try:
        model, tokenizer = load_policy(data_dir / "models" / "tiny-qwen")
        row = medium_cells("eval", path=data_dir / "tasks")[0]
        text = generate(model, tokenizer, [row["prompt"]], max_completion_length=64,
                        greedy=True).texts[0]
    except Exception as error:  # noqa: BLE001 (any failure is the finding: report it)
        message = one_line(error)
        fix = (f"the tiny Qwen does not load ({message}): restore data/models/tiny-qwen "
               f"(git checkout -- data/models/tiny-qwen)")
        return Check("model", "fail", f"loading or sampling the tiny Qwen failed: {message}",
                     (fix,)), None
    params = sum(p.numel() for p in model.parameters()) / 1e6
    device = next(model.parameters()).device.type
    answer = " ".join(text.split())
    answer = answer if len(answer) <= 60 else answer[:57] + "..."
    detail = (f"tiny Qwen, {params:.2f}M parameters on {device}; greedy on {row['question']} "
              f"{answer} (correct: {row['answer']})")
    if "<answer>" not in text:
        return Check("model", "warn", f"{detail}: no <answer> tag, not the shipped weights?"), \
            (model, tokenizer)
    return Check("model", "ok", detail), (model, tokenizer)


def live_run_config():
    """Notebook 02's live GRPO run (GRPO: Shao et al. 2024, arXiv 2402.03300, section 4.1) without
    its evaluations: the check times training steps."""
    from labkit.config import preset

    return preset(LIVE_RUN_PRESET, eval_every=0, **LIVE_RUN_OVERRIDES)


def time_live_run_steps(model=None, tokenizer=None, data_dir: Path | None = None) -> float:
    """Seconds for steps 2..TIMED_STEPS+1 of notebook 02's live run (step 1 warms up).

    Trains ``model`` in place (default: the shipped tiny Qwen, loaded afresh). The global random
    states are put back afterwards, so a notebook that calls this draws the same numbers as
    without it.
    """
    import torch

    from labkit.tasks import medium_cells
    from labkit.trainer import Trainer

    states = random.getstate(), torch.random.get_rng_state()
    try:
        data_dir = Path(data_dir or tasks.data_dir())
        trainer = Trainer(live_run_config(), model=model, tokenizer=tokenizer,
                          train_dataset=medium_cells("train", path=data_dir / "tasks"))
        trainer.training_step()
        start = time.perf_counter()
        for _ in range(TIMED_STEPS):
            trainer.training_step()
        return time.perf_counter() - start
    finally:
        random.setstate(states[0])
        torch.random.set_rng_state(states[1])


def estimate_live_run(steps_seconds: float) -> float:
    """Notebook 02's live run here: the reference run's time scaled by this machine's speed on
    the same steps."""
    return steps_seconds / REFERENCE_STEPS_SECONDS * REFERENCE_LIVE_RUN_SECONDS


def check_speed(model, tokenizer, data_dir: Path | None = None) -> Check:
    try:
        seconds = time_live_run_steps(model, tokenizer, data_dir)
    except Exception as error:  # noqa: BLE001 (a step that fails is the finding: report it)
        message = one_line(error)
        fix = (f"a GRPO step of notebook 02's config fails ({message}): reinstall with "
               f"pip install -e . and rerun the check")
        return Check("speed", "fail", f"a GRPO training step failed: {message}", (fix,))
    per_step = seconds / TIMED_STEPS
    estimate = estimate_live_run(seconds)
    reference = REFERENCE_STEPS_SECONDS / TIMED_STEPS
    detail = (f"{per_step:.2f} s per GRPO step of notebook 02's config ({reference:.2f} s on one "
              f"core of the reference machine): its live run ~{duration(estimate)}")
    if estimate > SLOW_LIVE_RUN_SECONDS:
        return Check("speed", "warn", f"{detail}: slow for a workshop (CPU quota or load?)",
                     value=round(estimate, 1))
    return Check("speed", "ok", detail, value=round(estimate, 1))
