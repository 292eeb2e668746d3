"""Check the memory planner against one real trainer step: planned total vs measured peak.

    python -m labkit bench_memory [--model tiny|Qwen/Qwen2.5-0.5B-Instruct] [--device cpu|cuda]
                                  [--prompts 2] [--generations 2] [--completion-length 16]

One :class:`labkit.trainer.Trainer` step (GRPO, seed 0) on the shipped tiny Qwen (its trained
weights) or on a real Qwen shape built offline with random weights
(``load_policy(hub_id, random_init=True)``), with a reward that alternates within each group so
every completion has advantage +-1 and runs the training forward and backward. The planner
(:func:`labkit.scale.memory.memory_plan`) gets the same TrainConfig and the measured prompt length (the
longest prompt of the step's data, chat template included).

What is measured:

* on the CPU, the process's resident set (RSS). It also holds what the planner does not count:
  the Python interpreter, torch's and transformers' code and their allocator pools, the dataset,
  the tokenizer, and whatever the libraries initialise on first use (measured: a first step of
  the tiny Qwen raises the RSS by about 0.19 GiB, for a model whose tensors take 13 MB). So a
  warm-up step of the tiny Qwen runs first, then the RSS is read (the baseline), the peak is
  reset (:class:`PeakRSS`), the model is built and stepped, and ``measured = peak RSS -
  baseline``. Freed memory that the C allocator
  keeps, and pages of a tensor that were never touched (``torch.empty``), make RSS differ from
  the bytes of live tensors both ways;
* on a GPU (``--device cuda``, guarded: it refuses to run without one), the caching allocator's
  peak of live tensors, ``torch.cuda.max_memory_allocated`` minus the bytes allocated before the
  model was built. It leaves out the CUDA context and the allocator's cached free blocks (what
  ``nvidia-smi`` adds), exactly as the planner does.

The numbers measured on the lab's CPU box are in :mod:`labkit.scale.memory`'s docstring.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

from labkit.config import TrainConfig
from labkit.runtime.counts import count_option

#: The measured step: G = 2 completions of 2 prompts, 16 new tokens, float32 on the CPU.
DEFAULTS = {"prompts": 2, "generations": 2, "completion_length": 16, "seed": 0}


def alternating_reward(prompts, completions, **columns):
    """1, 0, 1, 0...: each group of 2 gets one 1 and one 0, so every advantage is +-1 and every
    completion trains, whatever the text (a random-weight model's completions are near-empty)."""
    return [float(i % 2 == 0) for i in range(len(completions))]


class PeakRSS:
    """The process's peak resident set since :meth:`reset`, in bytes.

    On Linux the kernel keeps it (``VmHWM``) and resets it when ``5`` is written to
    ``/proc/self/clear_refs``; elsewhere a thread samples the RSS every millisecond (psutil),
    which can miss a spike shorter than that. ``ru_maxrss`` cannot be reset, so a warm-up before
    the measured step would count in it.
    """

    def __init__(self):
        self._kernel = _kernel_peak_rss() is not None
        self._peak, self._thread, self._stop = 0.0, None, None

    def reset(self) -> None:
        if self._kernel:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return
        import threading

        self.stop()
        self._peak = current_rss_bytes()
        self._stop = threading.Event()

        def sample():
            while not self._stop.wait(0.001):
                self._peak = max(self._peak, current_rss_bytes())

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def peak(self) -> float:
        if self._kernel:
            return float(_kernel_peak_rss())
        return max(self._peak, current_rss_bytes())


def _kernel_peak_rss() -> int | None:
    """``VmHWM`` of ``/proc/self/status`` in bytes, if this kernel lets it be reset."""
    try:
        with open("/proc/self/status") as f:
            line = next(line for line in f if line.startswith("VmHWM:"))
        with open("/proc/self/clear_refs", "w"):
            pass
    except (OSError, StopIteration):
        return None
    return int(line.split()[1]) * 1024


def _return_free_memory() -> None:
    """Hand the C allocator's free blocks back to the system (glibc's ``malloc_trim``), so that
    the measured model's tensors cannot hide in pages the warm-up freed but kept resident; a
    no-op where there is no glibc."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError, TypeError):
        pass


def current_rss_bytes() -> float:
    """The process's resident set now, in bytes (psutil, else ``/proc/self/statm``; NaN where
    neither is available)."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        return float(psutil.Process().memory_info().rss)
    try:
        with open("/proc/self/statm") as f:
            return float(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return float("nan")


def bench_config(device: str, prompts: int, generations: int, completion_length: int,
                 seed: int = 0, **overrides) -> TrainConfig:
    """The measured run: GRPO, one step, the whole batch in one micro-batch."""
    values = {"prompts_per_step": prompts, "num_generations": generations,
              "max_completion_length": completion_length, "max_steps": 1, "progress": False,
              "device": device, "dtype": "float32" if device == "cpu" else "auto", "seed": seed,
              "learning_rate": 1e-4, "warmup_ratio": 0.0}
    return TrainConfig(**{**values, **overrides})


def prompt_length(tokenizer, dataset) -> int:
    """Tokens of the longest prompt of ``dataset`` as the sampler encodes it."""
    from labkit.sampling import encode_prompts

    ids, _ = encode_prompts(tokenizer, list(dataset["prompt"]), "cpu")
    return int(ids.size(1))


def measure(model: str = "tiny", device: str = "cpu", prompts: int = 2, generations: int = 2,
            completion_length: int = 16, seed: int = 0, threads: int = 1, steps: int = 2,
            **overrides) -> dict:
    """Build the model, run ``steps`` trainer steps and return planned and measured bytes.

    Two steps by default: the first step's training forward runs before AdamW has allocated
    its moments, so only from the second step on is every phase as the planner counts it (the
    optimizer state lives through all phases). The measured peak covers all the steps.

    ``overrides`` are further :class:`TrainConfig` fields of the measured run (e.g.
    ``micro_batch_size``, ``gradient_checkpointing``).

    Keys: ``planned`` (bytes, the plan's total), ``measured`` (bytes: peak RSS minus the baseline
    on the CPU, peak allocated on CUDA), ``error`` (planned / measured - 1), ``phase`` (the
    plan's largest phase), ``baseline`` (bytes before the model), ``step_time`` (s),
    ``prompt_length``, ``plan`` (the table).
    """
    import gc

    from labkit.models import load_policy
    from labkit.scale.memory import memory_plan
    from labkit.tasks import load_split
    from labkit.trainer import Trainer

    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda needs a CUDA GPU, and torch sees none")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    torch.set_num_threads(threads)
    config = bench_config(device, prompts, generations, completion_length, seed, **overrides)
    data = load_split("train").select(range(4 * prompts))
    # Warm-up: one step of the tiny model loads every lazily initialised piece of the runtime
    # (kernels, autograd's engine, the tokenizer, the optimizer's code paths) before the
    # baseline, so the measurement holds the model's memory, not the library's first use.
    warm, warm_tokenizer = load_policy("tiny", seed=seed, device=device, dtype=config.dtype)
    Trainer(config, model=warm, tokenizer=warm_tokenizer, train_dataset=data,
            reward_funcs=[alternating_reward]).training_step()
    del warm, warm_tokenizer
    gc.collect()
    _return_free_memory()
    random_init = model != "tiny"
    peak = PeakRSS()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        baseline = float(torch.cuda.memory_allocated())
        torch.cuda.reset_peak_memory_stats()
    else:
        baseline = current_rss_bytes()
        peak.reset()
    policy, tokenizer = load_policy(model, random_init=random_init, seed=seed, device=device,
                                    dtype=config.dtype)
    length = prompt_length(tokenizer, data)
    trainer = Trainer(config, model=policy, tokenizer=tokenizer, train_dataset=data,
                      reward_funcs=[alternating_reward])
    for _ in range(steps):
        tic = time.perf_counter()
        row = trainer.training_step()
        step_time = time.perf_counter() - tic
    if device == "cuda":
        torch.cuda.synchronize()
        measured = float(torch.cuda.max_memory_allocated()) - baseline
    else:
        measured = peak.peak() - baseline
        peak.stop()
    plan = memory_plan(model, config, prompt_length=length, device=device)
    planned = float(plan.loc["total", "bytes"])
    return {"model": model, "device": device, "planned": planned, "measured": measured,
            "error": planned / measured - 1, "phase": plan.loc["total", "phases"],
            "baseline": baseline, "step_time": step_time, "prompt_length": length,
            "completion_length": row["completion_length"], "loss": row["loss"], "plan": plan}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny",
                        help="'tiny' or a shipped shape, e.g. Qwen/Qwen2.5-0.5B-Instruct")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--prompts", type=count_option("--prompts", 1),
                        default=DEFAULTS["prompts"])
    parser.add_argument("--generations", default=DEFAULTS["generations"],
                        type=count_option("--generations", 2, "a GRPO group compares two"))
    parser.add_argument("--completion-length", type=count_option("--completion-length", 1),
                        default=DEFAULTS["completion_length"])
    parser.add_argument("--seed", type=count_option("--seed", 0), default=DEFAULTS["seed"])
    parser.add_argument("--threads", type=count_option("--threads", 1, "torch CPU threads"),
                        default=1)
    parser.add_argument("--micro-batch-size", type=count_option("--micro-batch-size", 1),
                        default=None)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--steps", type=count_option("--steps", 1, "trainer steps measured"),
                        default=2,
                        help="trainer steps measured (from the second, AdamW's state exists)")
    args = parser.parse_args(argv)
    result = measure(args.model, args.device, args.prompts, args.generations,
                     args.completion_length, args.seed, args.threads, args.steps,
                     micro_batch_size=args.micro_batch_size,
                     gradient_checkpointing=args.gradient_checkpointing)
    import pandas as pd

    with pd.option_context("display.max_colwidth", 90, "display.width", 200):
        print(result["plan"][["GiB", "phases", "formula"]].round(3))
    what = "peak RSS - baseline" if args.device == "cpu" else "max_memory_allocated"
    print(f"\n{args.model} on {args.device}: prompt {result['prompt_length']} tokens, "
          f"completions {result['completion_length']:.0f} tokens (mean), last step "
          f"{result['step_time']:.1f} s")
    print(f"baseline before the model: {result['baseline'] / 2**30:.3f} GiB")
    print(f"planned total ({result['phase']}): {result['planned'] / 2**30:.3f} GiB")
    print(f"measured ({what}): {result['measured'] / 2**30:.3f} GiB")
    print(f"error (planned / measured - 1): {100 * result['error']:+.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
