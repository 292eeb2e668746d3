"""Benchmark one GRPO step of labkit against TRL's ``GRPOTrainer`` on the same model and data.

    python -m labkit.bench [--steps 8] [--warmup 2] [--model tiny] [--threads 1]

Both sides run ONE :class:`~labkit.config.TrainConfig` (:func:`bench_config`): labkit's trainer
reads it, and TRL's ``GRPOConfig`` is built from it by the TRL bridge
(:func:`labkit.trl_bridge.to_trl`), so the settings agree by construction: the model (default the
shipped tiny Qwen, loaded offline, float32, on the CPU), the task suite's train split with its
accuracy and format rewards, 16 prompts x 8 completions per step, ``max_completion_length=64``,
temperature 1, top-p 1, no top-k, ``beta=0``, one pass per batch, the whole batch in one
micro-batch, ``loss_type="grpo"``, the same learning-rate schedule, no gradient checkpointing, and
the same number of CPU threads. TRL also gets ``use_vllm=False``, no saving and no reporting.

The two trainers take turns, one step each, so that both see the same load on a shared machine.
Printed: for each, the median seconds per optimizer step (warm-up steps discarded) beside the mean
reward and the reward spread (standard deviation over a step's completions) of its timed steps,
and its distance from a compute floor; last, the ratio ``labkit / TRL``. The ratio is refused (exit
status 1, with the side and the reason) when either trainer saw a zero mean reward or no reward
spread: then every advantage is 0, the step trains nothing, and its time is not a training step's
time (a trainer may skip work that has no gradient). That is what happened to TRL before the
tiny Qwen's format tags became non-special tokens: TRL decodes completions with
``skip_special_tokens=True``, so its reward functions never saw a tag and scored 0.

The floor is the step's matmul FLOPs (2 x params x tokens for the sampling forwards, 6 x params x
tokens for the training forward and backward, attention scores included) divided by this
machine's float32 matmul throughput measured on a large matmul. It ignores memory traffic and
per-op overheads, which weigh heavily on a model this small, and it counts the work of a plain
implementation: every completion's prompt in the training forward and every completion trained.
labkit skips part of that work without changing the gradient (one prompt forward per group, no
training forward for zero-advantage completions), so its distance to this floor can approach or
fall below 1.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from dataclasses import dataclass, field

import torch

from labkit.config import TrainConfig

SETTINGS = {"prompts": 16, "num_generations": 8, "max_completion_length": 64,
            "learning_rate": 1e-6, "loss_type": "grpo", "seed": 0}


def bench_config(model: str = "tiny", steps: int = 10) -> TrainConfig:
    """The run both trainers time: :data:`SETTINGS` on the CPU in float32, no KL, one pass."""
    return TrainConfig(model_name_or_path=model, device="cpu", dtype="float32",
                       prompts_per_step=SETTINGS["prompts"],
                       num_generations=SETTINGS["num_generations"],
                       max_completion_length=SETTINGS["max_completion_length"],
                       learning_rate=SETTINGS["learning_rate"], loss_type=SETTINGS["loss_type"],
                       beta=0.0, num_iterations=1, temperature=1.0, top_p=1.0, top_k=0,
                       gradient_checkpointing=False, max_steps=steps, seed=SETTINGS["seed"],
                       progress=False)


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
    reward: list = field(default_factory=list)
    """mean total reward of the step's completions"""
    reward_std: list = field(default_factory=list)
    """standard deviation of the total reward over the step's completions"""


def labkit_stepper(config: TrainConfig, dataset):
    """labkit's trainer on ``config``; returns (model, timings, step function)."""
    from labkit.models import load_policy
    from labkit.trainer import Trainer

    model, tokenizer = load_policy(config.model_name_or_path, device=config.device,
                                   dtype=config.dtype)
    trainer = Trainer(config, model=model, tokenizer=tokenizer, train_dataset=dataset)
    timings = Timings()
    name = "sample_and_score" if hasattr(trainer, "sample_and_score") else "_sample_batch"
    sample = getattr(trainer, name)

    def counting_sample():
        batch, row = sample()
        timings.prompt_tokens.append(float(batch.prompt_mask.sum()))
        timings.completion_tokens.append(float(batch.completion_mask.sum()))
        return batch, row

    setattr(trainer, name, counting_sample)

    def step():
        start = time.perf_counter()
        row = trainer.training_step()
        timings.seconds.append(time.perf_counter() - start)
        timings.trained.append(row["completions_trained"])
        timings.reward.append(row["reward"])
        timings.reward_std.append(row["reward_std"])

    return model, timings, step


def run_trl_with(config: TrainConfig, dataset, between_steps):
    """TRL's GRPOTrainer on ``config`` through the bridge, for ``config.max_steps`` optimizer
    steps, calling ``between_steps()`` after each (outside TRL's timing), so that both trainers
    see the same machine load. Returns (model, timings, the GRPOConfig)."""
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    from labkit.models import load_policy
    from labkit.trl_bridge import to_trl

    model, tokenizer = load_policy(config.model_name_or_path, device=config.device,
                                   dtype=config.dtype)
    batch = config.prompts_per_step * config.num_generations
    timings = Timings()

    class StepTimer(TrainerCallback):
        """Times each optimizer step; reads its tokens and rewards off TRL's per-step log."""

        start, seen = 0.0, 0

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            timings.seconds.append(time.perf_counter() - self.start)
            timings.trained.append(batch)
            between_steps()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "reward" not in logs:
                return
            completion = logs["completions/mean_length"] * batch
            timings.completion_tokens.append(completion)
            timings.prompt_tokens.append(state.num_input_tokens_seen - self.seen - completion)
            self.seen = state.num_input_tokens_seen
            timings.reward.append(logs["reward"])
            timings.reward_std.append(logs["reward_std"])

    with tempfile.TemporaryDirectory() as output_dir:
        run = to_trl(config, output_dir=output_dir, num_processes=1)
        trainer = GRPOTrainer(model=model, reward_funcs=run.reward_funcs, args=run.args,
                              train_dataset=dataset, processing_class=tokenizer,
                              callbacks=[StepTimer()])
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    return model, timings, run.args


def reward_problem(name: str, timings: Timings, kept: slice) -> str | None:
    """Why ``name``'s timed steps cannot stand for training steps, or None when they can."""
    rewards, spreads = timings.reward[kept], timings.reward_std[kept]
    if not rewards:
        return f"{name} logged no rewards, so what its steps computed is unknown"
    mean, spread = statistics.fmean(rewards), statistics.fmean(spreads)
    if not math.isfinite(mean) or mean == 0:
        return (f"{name}'s mean reward is {mean:.3f} over {len(rewards)} timed steps: its reward "
                f"functions scored no completion, so every advantage is 0 and the step trains "
                f"nothing (if the format tags are special tokens, a trainer that decodes with "
                f"skip_special_tokens=True, as TRL does, never sees them)")
    if not math.isfinite(spread) or spread == 0:
        return (f"{name}'s reward spread is {spread:.3f}: every completion of every timed step "
                f"got the same reward ({mean:.3f}), so every advantage is 0 and the step trains "
                f"nothing")
    return None


def main(argv=None) -> int:
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
    config = bench_config(args.model, args.steps + args.warmup)
    print(f"machine: {torch.get_num_threads()} threads, float32 matmul "
          f"{throughput / 1e9:.1f} GFLOP/s; {config.prompts_per_step} prompts x "
          f"{config.num_generations} completions, max {config.max_completion_length} tokens, "
          f"{args.steps} timed steps after {args.warmup} warm-up, the two trainers taking turns "
          f"step by step")
    labkit_model, labkit, labkit_step = labkit_stepper(config, dataset)
    trl_model, trl, trl_args = run_trl_with(config, dataset, labkit_step)
    print(f"one TrainConfig for both ({config.model_name_or_path}, loss_type "
          f"{config.loss_type}, beta {config.beta}, lr {config.learning_rate:g}); TRL's "
          f"GRPOConfig from labkit.trl_bridge: per_device_train_batch_size "
          f"{trl_args.per_device_train_batch_size}, gradient_accumulation_steps "
          f"{trl_args.gradient_accumulation_steps}, steps_per_generation "
          f"{trl_args.steps_per_generation}, use_bias_correction_kl "
          f"{trl_args.use_bias_correction_kl}")
    rows = config.prompts_per_step * config.num_generations
    kept = slice(args.warmup, None)
    medians, problems = {}, []
    for name, model, timings in (("labkit", labkit_model, labkit), ("trl", trl_model, trl)):
        times = timings.seconds[kept]
        floors = [step_flops(model, p, c, rows) / throughput
                  for p, c in zip(timings.prompt_tokens[kept], timings.completion_tokens[kept])]
        medians[name] = statistics.median(times)
        floor = statistics.median(floors)
        trained = statistics.mean(timings.trained[kept]) / rows
        print(f"{name:>6}: median {medians[name]:.3f} s/step (steps: "
              f"{', '.join(f'{t:.2f}' for t in times)}); mean reward "
              f"{statistics.fmean(timings.reward[kept]):.3f}, reward std "
              f"{statistics.fmean(timings.reward_std[kept]):.3f}; mean completion "
              f"{statistics.mean(timings.completion_tokens[kept]) / rows:.1f} tokens; "
              f"{trained:.0%} of completions in the training forward; compute floor "
              f"{floor:.3f} s, {medians[name] / floor:.1f}x above it")
        problem = reward_problem(name, timings, kept)
        if problem:
            problems.append(problem)
    if problems:
        for problem in problems:
            print(f"no ratio: {problem}")
        return 1
    print(f"ratio labkit/trl: {medians['labkit'] / medians['trl']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
