"""Benchmark one GRPO step of labkit against TRL's ``GRPOTrainer`` on the same model and data.

    python -m labkit.bench [--steps 8] [--warmup 2] [--model tiny] [--threads 1]

Both sides get the same settings: the shipped tiny Qwen (loaded offline, float32), the task
suite's train split with its accuracy and format rewards, 16 prompts x 8 completions per step,
``max_completion_length=64``, temperature 1, top-p 1, no top-k, ``beta=0``, one pass per batch
(``num_iterations=1``), the whole batch in one micro-batch, ``loss_type="grpo"``, the same
learning rate, and the same number of CPU threads. TRL runs on the CPU with ``bf16=False``,
``use_cpu=True``, ``use_vllm=False``, no gradient checkpointing, no saving and no reporting.

The two trainers take turns, one step each, so that both see the same load on a shared machine.
Printed: the median seconds per optimizer step of each (warm-up steps discarded), each one's
distance from a compute floor, and last, the ratio ``labkit / TRL``. The floor is the step's
matmul FLOPs (2 x params x tokens for the sampling forwards, 6 x params x tokens for the training
forward and backward, attention scores included) divided by this machine's float32 matmul
throughput measured on a large matmul. It ignores memory traffic and per-op overheads, which
weigh heavily on a model this small, and it counts the work of a plain implementation: every
completion's prompt in the training forward and every completion trained. labkit skips part of
that work without changing the gradient (one prompt forward per group, no training forward for
zero-advantage completions), so its distance to this floor can approach or fall below 1.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from dataclasses import dataclass, field

import torch

SETTINGS = {"prompts": 16, "num_generations": 8, "max_completion_length": 64,
            "learning_rate": 1e-6, "loss_type": "grpo", "seed": 0}


def matmul_flops_per_second(size: int = 2048, repeats: int = 5) -> float:
    """Measured float32 matmul throughput of this machine (best of ``repeats``)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def step_flops(model, prompt_tokens: float, completion_tokens: float, rows: int) -> float:
    """Matmul FLOPs of one step: sampling forwards (prefill + one token at a time) and the
    training forward + backward over prompt and completion, with attention scores."""
    from labkit.models import count_parameters

    params = count_parameters(model)
    cfg = model.config
    attention_width = cfg.num_attention_heads * getattr(cfg, "head_dim", cfg.hidden_size
                                                        // cfg.num_attention_heads)
    tokens = prompt_tokens + completion_tokens
    # a token at position t attends to about t others: QK^T and AV cost 4 * width * t per layer
    mean_context = tokens / rows / 2
    attention = 4 * cfg.num_hidden_layers * attention_width * mean_context * tokens
    forward = 2 * params * tokens + attention
    return forward + 3 * forward  # sampling forwards, then training forward + backward (2x)


@dataclass
class Timings:
    """Per-step measurements of one trainer."""

    seconds: list = field(default_factory=list)
    prompt_tokens: list = field(default_factory=list)
    completion_tokens: list = field(default_factory=list)
    trained: list = field(default_factory=list)


def labkit_stepper(model_path: str, dataset, steps: int):
    """labkit's GRPO with the shared settings; returns (model, timings, step function)."""
    from labkit.config import TrainConfig
    from labkit.models import load_policy
    from labkit.trainer import Trainer

    model, tokenizer = load_policy(model_path, device="cpu", dtype="float32")
    config = TrainConfig(prompts_per_step=SETTINGS["prompts"],
                         num_generations=SETTINGS["num_generations"],
                         max_completion_length=SETTINGS["max_completion_length"],
                         learning_rate=SETTINGS["learning_rate"], loss_type=SETTINGS["loss_type"],
                         beta=0.0, num_iterations=1, temperature=1.0, top_p=1.0, top_k=0,
                         max_steps=steps, seed=SETTINGS["seed"], progress=False)
    trainer = Trainer(config, model=model, tokenizer=tokenizer, train_dataset=dataset)
    timings = Timings()
    sample = trainer._sample_batch

    def counting_sample():
        exp, row = sample()
        timings.prompt_tokens.append(float(exp.prompt_mask.sum()))
        timings.completion_tokens.append(float(exp.completion_mask.sum()))
        return exp, row

    trainer._sample_batch = counting_sample

    def step():
        start = time.perf_counter()
        row = trainer.training_step()
        timings.seconds.append(time.perf_counter() - start)
        timings.trained.append(row["completions_trained"])

    return model, timings, step


def run_trl_with(model_path: str, dataset, steps: int, between_steps):
    """Run TRL's GRPOTrainer for ``steps`` optimizer steps, calling ``between_steps()`` after
    each (outside TRL's timing), so that both trainers see the same machine load."""
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from labkit.models import load_policy
    from labkit.rewards import accuracy_reward, format_reward

    model, tokenizer = load_policy(model_path, device="cpu", dtype="float32")
    batch = SETTINGS["prompts"] * SETTINGS["num_generations"]
    timings = Timings()

    class StepTimer(TrainerCallback):
        """Times each optimizer step and reads the step's token counts off TRL's metrics."""

        start, seen, trainer = 0.0, 0, None

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            timings.seconds.append(time.perf_counter() - self.start)
            completion = self.trainer._metrics["train"]["completions/mean_length"][-1] * batch
            timings.completion_tokens.append(completion)
            timings.prompt_tokens.append(state.num_input_tokens_seen - self.seen - completion)
            timings.trained.append(batch)
            self.seen = state.num_input_tokens_seen
            between_steps()

    timer = StepTimer()
    with tempfile.TemporaryDirectory() as output_dir:
        args = GRPOConfig(
            output_dir=output_dir, max_steps=steps, per_device_train_batch_size=batch,
            gradient_accumulation_steps=1, num_generations=SETTINGS["num_generations"],
            max_completion_length=SETTINGS["max_completion_length"],
            learning_rate=SETTINGS["learning_rate"], loss_type=SETTINGS["loss_type"], beta=0.0,
            num_iterations=1, temperature=1.0, top_p=1.0, top_k=0, use_vllm=False,
            bf16=False, use_cpu=True, gradient_checkpointing=False, save_strategy="no",
            report_to=[], logging_steps=10**6, disable_tqdm=True, seed=SETTINGS["seed"])
        trainer = GRPOTrainer(model=model, reward_funcs=[accuracy_reward, format_reward],
                              args=args, train_dataset=dataset, processing_class=tokenizer,
                              callbacks=[timer])
        timer.trainer = trainer
        trainer.train()
    return model, timings


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8, help="timed steps per trainer")
    parser.add_argument("--warmup", type=int, default=2, help="untimed first steps")
    parser.add_argument("--model", default="tiny", help="model path or alias (default: tiny)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads for both (default 1: the tiny model's matmuls "
                             "gain little from more, and on a busy machine extra threads spin; "
                             "0 = torch's choice)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from labkit.tasks import load_split

    dataset = load_split("train")
    throughput = matmul_flops_per_second()
    total = args.steps + args.warmup
    print(f"machine: {torch.get_num_threads()} threads, float32 matmul "
          f"{throughput / 1e9:.1f} GFLOP/s; {SETTINGS['prompts']} prompts x "
          f"{SETTINGS['num_generations']} completions, max {SETTINGS['max_completion_length']} "
          f"tokens, {args.steps} timed steps after {args.warmup} warm-up, the two trainers "
          f"taking turns step by step")
    labkit_model, labkit, labkit_step = labkit_stepper(args.model, dataset, total)
    trl_model, trl = run_trl_with(args.model, dataset, total, labkit_step)
    rows = SETTINGS["prompts"] * SETTINGS["num_generations"]
    medians = {}
    for name, model, timings in (("labkit", labkit_model, labkit), ("trl", trl_model, trl)):
        kept = slice(args.warmup, None)
        times = timings.seconds[kept]
        floors = [step_flops(model, p, c, rows) / throughput
                  for p, c in zip(timings.prompt_tokens[kept], timings.completion_tokens[kept])]
        medians[name] = statistics.median(times)
        floor = statistics.median(floors)
        trained = statistics.mean(timings.trained[kept]) / rows
        print(f"{name:>6}: median {medians[name]:.3f} s/step (steps: "
              f"{', '.join(f'{t:.2f}' for t in times)}); mean completion "
              f"{statistics.mean(timings.completion_tokens[kept]) / rows:.1f} tokens; "
              f"{trained:.0%} of completions in the training forward; compute floor "
              f"{floor:.3f} s, {medians[name] / floor:.1f}x above it")
    print(f"ratio labkit/trl: {medians['labkit'] / medians['trl']:.2f}")


if __name__ == "__main__":
    main()
