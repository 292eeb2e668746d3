"""Surface 8: interrupts. A LoRA GRPO run and a DAPO run with dynamic sampling (the shipped tiny
Qwen on the medium cells, 4 prompts x 4 completions of at most 16 tokens, 6 steps, a checkpoint
every step) are started in a child process and sent SIGINT or SIGTERM after a seeded random
delay; the run is then resumed from the newest whole checkpoint in this process, and its final
history and weights must equal an uninterrupted run's bit for bit (CPU, one thread).

The child is forked from this process, which has already imported everything, so a trial costs
the training it does rather than a Python start-up: POSIX only (the test skips elsewhere).
"""

from __future__ import annotations

import copy
import functools
import multiprocessing
import os
import random
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import torch

STEPS = 6
RUNS = {
    "lora_grpo": ("grpo", {"use_peft": True, "lora_target_modules": "all-linear",
                           "learning_rate": 1e-3, "warmup_ratio": 0.0}),
    "dapo": ("dapo", {"num_mini_batches": 2}),
}
COMMON = {"prompts_per_step": 4, "num_generations": 4, "max_completion_length": 16,
          "max_steps": STEPS, "progress": False, "device": "cpu", "dtype": "float32",
          "eval_every": 0, "seed": 0}
_CHECKPOINT = re.compile(r"checkpoint-(\d+)")


@functools.cache
def _tiny():
    from labkit.models import load_policy
    from labkit.tasks import medium_cells

    model, tokenizer = load_policy("tiny", device="cpu", dtype="float32")
    return model, tokenizer, medium_cells("train")


def trainer(kind: str, output_dir=None, save_every: int = 1, resume_from=None, callbacks=()):
    from labkit.config import preset
    from labkit.trainer import Trainer

    model, tokenizer, data = _tiny()
    name, overrides = RUNS[kind]
    config = preset(name, **{**COMMON, **overrides, "save_every": save_every if output_dir
                             else 0, "output_dir": None if output_dir is None
                             else str(output_dir),
                             "resume_from": None if resume_from is None else str(resume_from)})
    return Trainer(config, model=copy.deepcopy(model), tokenizer=tokenizer, train_dataset=data,
                   callbacks=callbacks)


def outcome(run) -> tuple:
    """(history without timings, weights) of a finished trainer."""
    from labkit.trainer import TIMING_COLUMNS

    history = run.history.drop(columns=[c for c in TIMING_COLUMNS if c in run.history])
    return history, {k: v.detach().clone() for k, v in run.model.state_dict().items()}


@functools.cache
def baseline(kind: str) -> tuple:
    """The uninterrupted run: (history, weights, seconds)."""
    torch.set_num_threads(1)
    run = trainer(kind)
    start = time.perf_counter()
    run.train()
    return (*outcome(run), time.perf_counter() - start)


def _child(kind: str, folder: str, save_every: int, pipe) -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # see _signal_self
    run = trainer(kind, folder, save_every)
    pipe.send("ready")
    result = run.train()
    pipe.send("interrupted" if result.interrupted else "finished")


def newest_checkpoint(folder: Path) -> Path | None:
    """The checkpoint of the highest step that was written whole (``.partial`` and ``.old``
    folders are a save in progress)."""
    found = [(int(m.group(1)), p) for p in folder.glob("checkpoint-*")
             if (m := _CHECKPOINT.fullmatch(p.name)) and p.is_dir()]
    return max(found)[1] if found else None


@dataclass
class Trial:
    kind: str
    signal_name: str
    delay: float
    exit_code: int | None
    resumed_from: int | None
    equal_history: bool
    equal_weights: bool
    hung: bool = False
    finished: bool = False
    """the run reached its last step before the signal came"""

    @property
    def ok(self) -> bool:
        return not self.hung and self.equal_history and self.equal_weights


def run_trial(kind: str, signum: int, delay: float, folder: Path, save_every: int = 1,
              timeout: float = 120.0) -> Trial:
    """Start the run in a forked child, signal it ``delay`` seconds into training, resume the
    newest checkpoint here and compare with :func:`baseline`."""
    history, weights, _ = baseline(kind)
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(kind, str(folder), save_every, send))
    child.start()
    hung = not receive.poll(timeout)
    if not hung:
        receive.recv()
        time.sleep(delay)
        if child.is_alive():
            os.kill(child.pid, signum)
        child.join(timeout)
        hung = child.is_alive()
    if hung:
        child.kill()
        child.join()
    finished = not hung and receive.poll(0) and receive.recv() == "finished"
    checkpoint = newest_checkpoint(folder)
    resumed = trainer(kind, folder, save_every, resume_from=checkpoint)
    resumed.train()
    got_history, got_weights = outcome(resumed)
    return Trial(kind, signal.Signals(signum).name, delay, child.exitcode,
                 None if checkpoint is None else int(_CHECKPOINT.fullmatch(
                     checkpoint.name).group(1)),
                 got_history.equals(history),
                 all(torch.equal(got_weights[k], weights[k]) for k in weights), hung,
                 finished)


def _signal_self(kind: str, folder: str, signum: int, at_step: int) -> None:
    # A learner's script or kernel turns Ctrl-C into KeyboardInterrupt; a pytest-xdist worker
    # ignores SIGINT, and a forked child inherits that, so give the child Python's own handler.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def send(trainer, row):
        if row["step"] == at_step:
            os.kill(os.getpid(), signum)

    trainer(kind, folder, save_every=0, callbacks=[send]).train()


def checkpoint_after_own_signal(kind: str, signum: int, at_step: int, folder: Path) -> int | None:
    """A forked run sends itself ``signum`` from a callback after step ``at_step`` (outside any
    guarded block, at a moment fixed in advance); the step of the checkpoint it left, if any
    (``save_every`` is 0: only an interrupt saves)."""
    context = multiprocessing.get_context("fork")
    child = context.Process(target=_signal_self, args=(kind, str(folder), signum, at_step))
    child.start()
    child.join(120)
    if child.is_alive():
        child.kill()
        child.join()
    found = newest_checkpoint(folder)
    return None if found is None else int(_CHECKPOINT.fullmatch(found.name).group(1))


def schedule(signum: int, trials: int, seed: int) -> list[tuple[str, float]]:
    """``trials`` (kind, delay) pairs: the two runs in turn, delays drawn uniformly over the
    uninterrupted run's length plus a tenth (some land after the end)."""
    rng = random.Random(seed * 1000 + signum)
    kinds = list(RUNS)
    return [(kinds[i % len(kinds)], rng.uniform(0, 1.1 * baseline(kinds[i % len(kinds)])[2]))
            for i in range(trials)]
