"""Benchmark one GRPO step of labkit against TRL's ``GRPOTrainer`` on the same model and data.

    python -m labkit bench [--steps 8] [--warmup 2] [--model tiny] [--threads 1]
    python -m labkit bench --device cuda --model Qwen/Qwen2.5-0.5B-Instruct --reward alternating
    python -m labkit bench --device cuda --model Qwen/Qwen2.5-0.5B-Instruct --reward alternating \
        --only labkit    # (or --only trl): one trainer alone, for its peak GPU memory
    python -m labkit bench --decode [--device cuda]   # ms per decode step of each decode loop

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

On a GPU (``--device cuda``, bfloat16 weights for both unless ``--dtype`` says otherwise) the
real Qwen shapes of :data:`labkit.models.SHIPPED_CONFIGS` are built offline with random weights
(:func:`labkit.models.load_policy` with ``random_init=True``): their completions are near-empty
text, so the task's rewards would all be 0 and ``--reward alternating`` gives each group half 1s
and half 0s, so every completion trains on both sides. Each side also reports its sampling
throughput (completion tokens per second of generation: labkit's ``generation_time``, TRL's
``_generate`` timed) and, alone (``--only``), its peak of live GPU tensors
(``torch.cuda.max_memory_allocated``), beside the memory planner's total for labkit
(:func:`labkit.scale.memory.memory_plan`).

Each side's step is also split into phases (:data:`PHASES`, :class:`PhaseClock`): sampling,
the no-grad scoring forwards (behaviour or reference log-probs; none in this on-policy run
without KL), the training forward and backward, the optimizer (gradient clipping included), and
the rest (rewards, advantages, the trainers' loops). labkit's come from its trainer's methods,
TRL's from ``GRPOTrainer._generate``, ``_get_per_token_logps_and_entropies`` inside
``_generate_and_score_completions``, ``compute_loss``, accelerate's ``backward`` and the
optimizer-step callback. Timing a phase waits for the GPU at its ends, so the phases slow a GPU
step a little; they say where the time goes.

``--decode`` times sampling rounds alone on each decode loop the device has
(:func:`decode_benchmark`, :mod:`labkit.sampling`): the dynamic loop, the fixed-shape loop with
eager steps and, on CUDA, the fixed-shape loop replayed as a CUDA graph, in milliseconds per
decode step. Random weights of a real shape are drawn on the run's device (:func:`load_bench_model`),
so the Qwen2.5-1.5B shape starts in seconds on a GPU rather than initialising on a CPU core.

The floor is the step's matmul FLOPs (2 x params x tokens for the sampling forwards, 6 x params x
tokens for the training forward and backward, attention scores included) divided by this
machine's matmul throughput in the run's dtype, measured on a large matmul. It ignores memory traffic and
per-op overheads, which weigh heavily on a model this small, and it counts the work of a plain
implementation: every completion's prompt in the training forward and every completion trained.
labkit skips part of that work without changing the gradient (one prompt forward per group, no
training forward for zero-advantage completions), so its distance to this floor can approach or
fall below 1.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import tempfile
import time
from dataclasses import dataclass, field

import torch

from labkit.config import TrainConfig
from labkit.runtime.counts import count_option
from labkit.scale.bench_memory import alternating_reward, prompt_length

SETTINGS = {"prompts": 16, "num_generations": 8, "max_completion_length": 64,
            "learning_rate": 1e-6, "loss_type": "grpo", "seed": 0}


def bench_config(model: str = "tiny", steps: int = 10, device: str = "cpu",
                 dtype: str = "float32") -> TrainConfig:
    """The run both trainers time: :data:`SETTINGS` (on the CPU in float32 unless told), no KL,
    one pass."""
    return TrainConfig(model_name_or_path=model, device=device, dtype=dtype,
                       prompts_per_step=SETTINGS["prompts"],
                       num_generations=SETTINGS["num_generations"],
                       max_completion_length=SETTINGS["max_completion_length"],
                       learning_rate=SETTINGS["learning_rate"], loss_type=SETTINGS["loss_type"],
                       beta=0.0, num_iterations=1, temperature=1.0, top_p=1.0, top_k=0,
                       gradient_checkpointing=False, max_steps=steps, seed=SETTINGS["seed"],
                       progress=False)


def matmul_flops_per_second(size: int = 2048, repeats: int = 5, device: str = "cpu",
                            dtype: torch.dtype = torch.float32) -> float:
    """Measured matmul throughput of this machine in ``dtype`` (best of ``repeats``)."""
    if device == "cuda":
        size = max(size, 8192)  # a small product leaves most of a GPU idle
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    a @ b
    best = math.inf
    for _ in range(repeats):
        _synchronize(device)
        start = time.perf_counter()
        a @ b
        _synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def _synchronize(device) -> None:
    """Wait for the GPU's queued work, so that a wall-clock reading covers it."""
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def load_bench_model(config: TrainConfig):
    """The benchmark's model: a shipped real Qwen shape with random weights (offline), else the
    named model with its weights. Random weights are drawn on the run's device: on one CPU
    thread (the bench's default) the Qwen2.5-0.5B shape took 19.6 s to initialise (2-core AMD
    EPYC, bfloat16), the 1.5B shape has three times the weights, and the bench builds two."""
    from labkit.models import SHIPPED_CONFIGS, load_policy

    random_init = config.model_name_or_path in SHIPPED_CONFIGS
    with torch.device(config.device) if random_init else contextlib.nullcontext():
        return load_policy(config.model_name_or_path, device=config.device, dtype=config.dtype,
                           random_init=random_init, seed=config.seed)


def decode_benchmark(model_name: str = "tiny", device: str = "cpu", dtype: str = "float32",
                     prompts: int = 16, generations: int = 8, max_completion_length: int = 64,
                     rounds: int = 5) -> list[dict]:
    """Time sampling rounds of ``prompts`` x ``generations`` rows on each decode loop this
    device has (:mod:`labkit.sampling`): the dynamic loop, the fixed-shape loop with eager steps,
    and on CUDA the fixed-shape loop replayed as a CUDA graph. Two untimed rounds first (a
    shape is captured at its second use), then ``rounds`` timed ones from the same seed. Returns one row per
    loop: median seconds per round, decode steps (the longest completion: one forward per
    token after the prefill), milliseconds per step and completion tokens per second."""
    from labkit.sampling import Decoder, generate
    from labkit.tasks import load_split

    config = bench_config(model_name, 1, device, dtype)
    model, tokenizer = load_bench_model(config)
    batch = load_split("train").select(range(prompts))["prompt"]
    loops = {"dynamic": Decoder("dynamic"), "fixed, eager steps": Decoder("fixed", False)}
    if device == "cuda":
        loops["fixed, CUDA graph"] = Decoder("fixed", True)
    results = []
    for name, decoder in loops.items():
        seconds = []
        for round_ in range(rounds + 2):
            generator = torch.Generator(device=device).manual_seed(0)
            _synchronize(device)
            start = time.perf_counter()
            rollout = generate(model, tokenizer, batch, num_generations=generations,
                               max_completion_length=max_completion_length,
                               generator=generator, decoder=decoder)
            _synchronize(device)
            if round_ >= 2:
                seconds.append(time.perf_counter() - start)
        steps = int(rollout.lengths.max())
        median = statistics.median(seconds)
        if decoder.cuda_graphs and decoder.capture_failure(model):
            name += f" (not captured: {decoder.capture_failure(model)[:80]})"
        results.append({"loop": name, "seconds": median, "steps": steps,
                        "ms_per_step": 1000 * median / steps,
                        "tokens_per_second": float(rollout.lengths.sum()) / median})
    return results


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
    generation_seconds: list = field(default_factory=list)
    """seconds of the step spent sampling"""
    phases: list = field(default_factory=list)
    """per step, ``{phase: seconds}`` for the phases of :data:`PHASES` (see :class:`PhaseClock`)"""


#: The phases of a step the bench times on both sides; ``other`` is the rest of the step
#: (rewards, advantages, bookkeeping, and TRL's Trainer loop).
PHASES = ("sampling", "scoring forwards", "training forward+backward", "optimizer", "other")


class PhaseClock:
    """Seconds per phase within one step, from wrapped methods: ``clock.wrap(obj, "name",
    phase)`` replaces ``obj.name`` by a version that waits for the GPU before and after and
    adds its wall time to ``phase``. A call made while another timed call is running counts
    only toward the outer phase, except where ``inside`` names the outer phase it refines (TRL's
    sampling inside its generate-and-score). The waits add host syncs the trainers would not
    make: the phases are for comparing where time goes, the step time beside them is taken
    without them being the point."""

    def __init__(self, device):
        self.device = device
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.active: list[str] = []

    def wrap(self, obj, name: str, phase: str, inside: str | None = None) -> None:
        method = getattr(obj, name)

        def timed(*args, **kwargs):
            outer = self.active[-1] if self.active else None
            if outer is not None and outer != inside:
                return method(*args, **kwargs)
            _synchronize(self.device)
            start = time.perf_counter()
            self.active.append(phase)
            try:
                return method(*args, **kwargs)
            finally:
                self.active.pop()
                _synchronize(self.device)
                elapsed = time.perf_counter() - start
                self.seconds[phase] += elapsed
                if outer is not None:
                    self.seconds[outer] -= elapsed

        setattr(obj, name, timed)

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] += seconds

    def lap(self, step_seconds: float) -> dict:
        """This step's phases (``other`` = the step less the timed phases); resets the clock."""
        phases = dict(self.seconds)
        phases["other"] = step_seconds - sum(v for k, v in phases.items() if k != "other")
        self.seconds = dict.fromkeys(PHASES, 0.0)
        return phases


def labkit_stepper(config: TrainConfig, dataset, reward_funcs=None):
    """labkit's trainer on ``config``; returns (trainer, timings, step function)."""
    from labkit.trainer import Trainer

    model, tokenizer = load_bench_model(config)
    trainer = Trainer(config, model=model, tokenizer=tokenizer, train_dataset=dataset,
                      reward_funcs=reward_funcs)
    timings = Timings()
    clock = PhaseClock(config.device)
    clock.wrap(trainer, "score_forwards", "scoring forwards")
    clock.wrap(trainer, "accumulate_gradients", "training forward+backward")
    clock.wrap(trainer, "_apply_gradients", "optimizer")
    name = "sample_and_score" if hasattr(trainer, "sample_and_score") else "_sample_batch"
    sample = getattr(trainer, name)

    def counting_sample():
        batch, row = sample()
        timings.prompt_tokens.append(float(batch.prompt_mask.sum()))
        timings.completion_tokens.append(float(batch.completion_mask.sum()))
        return batch, row

    setattr(trainer, name, counting_sample)

    def step():
        _synchronize(config.device)
        start = time.perf_counter()
        row = trainer.training_step()
        _synchronize(config.device)
        timings.seconds.append(time.perf_counter() - start)
        timings.generation_seconds.append(row["generation_time"])
        clock.add("sampling", row["generation_time"])
        timings.phases.append(clock.lap(timings.seconds[-1]))
        timings.trained.append(row["completions_trained"])
        timings.reward.append(row["reward"])
        timings.reward_std.append(row["reward_std"])

    return trainer, timings, step


def run_trl_with(config: TrainConfig, dataset, between_steps, reward_funcs=None):
    """TRL's GRPOTrainer on ``config`` through the bridge, for ``config.max_steps`` optimizer
    steps, calling ``between_steps()`` after each (outside TRL's timing), so that both trainers
    see the same machine load. Returns (model, timings, the GRPOConfig)."""
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    from labkit.trl_bridge import to_trl

    model, tokenizer = load_bench_model(config)
    batch = config.prompts_per_step * config.num_generations
    timings = Timings()
    clock = PhaseClock(config.device)

    class StepTimer(TrainerCallback):
        """Times each optimizer step and its optimizer phase (gradient clipping included, as in
        labkit's); reads its tokens and rewards off TRL's per-step log."""

        start, seen, backward_end = 0.0, 0, 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            _synchronize(config.device)
            self.start = time.perf_counter()

        def on_optimizer_step(self, args, state, control, **kwargs):
            _synchronize(config.device)  # clipping and the step, since the last backward
            clock.add("optimizer", time.perf_counter() - self.backward_end)

        def on_step_end(self, args, state, control, **kwargs):
            _synchronize(config.device)
            timings.seconds.append(time.perf_counter() - self.start)
            timings.trained.append(batch)
            timings.phases.append(clock.lap(timings.seconds[-1]))
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
        trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs or run.reward_funcs,
                              args=run.args, train_dataset=dataset, processing_class=tokenizer,
                              callbacks=[StepTimer()])
        trainer.remove_callback(PrinterCallback)
        # its phases: generate-and-score holds the sampling and the no-grad scoring forwards;
        # the loss holds the training forward; backward runs in accelerate
        clock.wrap(trainer, "_generate_and_score_completions", "other")
        clock.wrap(trainer, "_generate", "sampling", inside="other")
        clock.wrap(trainer, "_get_per_token_logps_and_entropies", "scoring forwards",
                   inside="other")
        clock.wrap(trainer, "compute_loss", "training forward+backward")
        backward = trainer.accelerator.backward

        def timed_backward(*args, **kwargs):
            _synchronize(config.device)
            tic = time.perf_counter()
            backward(*args, **kwargs)
            _synchronize(config.device)
            StepTimer.backward_end = time.perf_counter()
            clock.add("training forward+backward", StepTimer.backward_end - tic)

        trainer.accelerator.backward = timed_backward
        generate = trainer._generate  # the timed sampling, also kept per step

        def counted_generate(*args, **kwargs):
            before = clock.seconds["sampling"]
            out = generate(*args, **kwargs)
            timings.generation_seconds.append(clock.seconds["sampling"] - before)
            return out

        trainer._generate = counted_generate
        trainer.train()
    return model, timings, run.args


def phase_line(phases: list[dict]) -> str:
    """The median seconds per step of each phase, on one line."""
    if not phases:
        return "phases: none timed"
    return "phases (median s/step): " + ", ".join(
        f"{name} {statistics.median(p[name] for p in phases):.3f}" for name in PHASES)


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
    parser.add_argument("--steps", type=count_option("--steps", 1, "timed steps per trainer"),
                        default=8, help="timed steps per trainer")
    parser.add_argument("--warmup", type=count_option("--warmup", 0, "untimed first steps"),
                        default=2, help="untimed first steps")
    parser.add_argument("--model", default="tiny",
                        help="model path or alias (default: tiny); a shipped real shape such as "
                             "Qwen/Qwen2.5-0.5B-Instruct is built offline with random weights")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--dtype", default=None,
                        help="weights' dtype for both (default: float32 on the CPU, bfloat16 "
                             "on a GPU)")
    parser.add_argument("--reward", default="task", choices=("task", "alternating"),
                        help="task: the suite's accuracy and format rewards; alternating: half "
                             "of each group 1, half 0 (for random-weight models)")
    parser.add_argument("--only", default=None, choices=("labkit", "trl"),
                        help="run one trainer alone and report its peak GPU memory")
    parser.add_argument("--decode", action="store_true",
                        help="time sampling rounds on each decode loop instead (ms per decode "
                             "step: the dynamic loop, the fixed-shape loop, its CUDA graph)")
    parser.add_argument("--rounds", type=count_option("--rounds", 1, "timed rounds per loop"),
                        default=5, help="--decode: timed rounds per loop")
    parser.add_argument("--threads", type=count_option("--threads", 0, "0 = torch's choice"),
                        default=1,
                        help="torch CPU threads for both (default 1: the tiny model's matmuls "
                             "gain little from more, and on a busy machine extra threads spin; "
                             "0 = torch's choice)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda needs a CUDA GPU, and torch sees none")
    if args.threads:
        torch.set_num_threads(args.threads)
    from labkit.tasks import load_split

    dataset = load_split("train")
    dtype = args.dtype or ("float32" if args.device == "cpu" else "bfloat16")
    if args.decode:
        machine = (f"{torch.get_num_threads()} threads" if args.device == "cpu"
                   else torch.cuda.get_device_name())
        print(f"decode loops on {machine}, {args.model} in {dtype}: {SETTINGS['prompts']} "
              f"prompts x {SETTINGS['num_generations']}, max "
              f"{SETTINGS['max_completion_length']} tokens, median of {args.rounds} rounds")
        for row in decode_benchmark(args.model, args.device, dtype, SETTINGS["prompts"],
                                    SETTINGS["num_generations"],
                                    SETTINGS["max_completion_length"], args.rounds):
            print(f"{row['loop']:>18}: {row['seconds']:.3f} s per round, {row['steps']} decode "
                  f"steps, {row['ms_per_step']:.2f} ms per step, "
                  f"{row['tokens_per_second']:,.0f} completion tokens/s")
        return 0
    throughput = matmul_flops_per_second(device=args.device, dtype=getattr(torch, dtype))
    config = bench_config(args.model, args.steps + args.warmup, args.device, dtype)
    reward_funcs = [alternating_reward] if args.reward == "alternating" else None
    machine = (f"{torch.get_num_threads()} threads" if args.device == "cpu"
               else torch.cuda.get_device_name())
    print(f"machine: {machine}, {dtype} matmul {throughput / 1e12:.2f} TFLOP/s; "
          f"{config.prompts_per_step} prompts x {config.num_generations} completions, max "
          f"{config.max_completion_length} tokens, {args.reward} reward, {args.steps} timed steps "
          f"after {args.warmup} warm-up"
          + ("" if args.only else ", the two trainers taking turns step by step"))
    if args.device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    sides = {}
    if args.only != "trl":
        labkit_trainer, labkit, labkit_step = labkit_stepper(config, dataset, reward_funcs)
        sides["labkit"] = (labkit_trainer.model, labkit)
    if args.only == "labkit":
        for _ in range(config.max_steps):
            labkit_step()
    else:
        between = labkit_step if args.only is None else (lambda: None)
        trl_model, trl, trl_args = run_trl_with(config, dataset, between, reward_funcs)
        sides["trl"] = (trl_model, trl)
        print(f"one TrainConfig for both ({config.model_name_or_path}, loss_type "
              f"{config.loss_type}, beta {config.beta}, lr {config.learning_rate:g}); TRL's "
              f"GRPOConfig from labkit.trl_bridge: per_device_train_batch_size "
              f"{trl_args.per_device_train_batch_size}, gradient_accumulation_steps "
              f"{trl_args.gradient_accumulation_steps}, steps_per_generation "
              f"{trl_args.steps_per_generation}, bf16 {trl_args.bf16}")
    rows = config.prompts_per_step * config.num_generations
    kept = slice(args.warmup, None)
    medians, problems = {}, []
    for name, (model, timings) in sides.items():
        times = timings.seconds[kept]
        floors = [step_flops(model, p, c, rows) / throughput
                  for p, c in zip(timings.prompt_tokens[kept], timings.completion_tokens[kept])]
        medians[name] = statistics.median(times)
        floor = statistics.median(floors)
        trained = statistics.mean(timings.trained[kept]) / rows
        completion_tokens = statistics.mean(timings.completion_tokens[kept])
        sampling = completion_tokens / statistics.median(timings.generation_seconds[kept])
        print(f"{name:>6}: median {medians[name]:.3f} s/step (steps: "
              f"{', '.join(f'{t:.2f}' for t in times)}); sampling {sampling:,.0f} completion "
              f"tokens/s; mean reward {statistics.fmean(timings.reward[kept]):.3f}, reward std "
              f"{statistics.fmean(timings.reward_std[kept]):.3f}; mean completion "
              f"{completion_tokens / rows:.1f} tokens; "
              f"{trained:.0%} of completions in the training forward; compute floor "
              f"{floor:.3f} s, {medians[name] / floor:.1f}x above it")
        print(f"{'':>6}  {phase_line(timings.phases[kept])}")
        problem = reward_problem(name, timings, kept)
        if problem:
            problems.append(problem)
    if args.only and args.device == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**30
        print(f"{args.only:>6}: peak GPU memory (max_memory_allocated) {peak:.2f} GiB")
        if args.only == "labkit":
            from labkit.scale.memory import memory_plan

            plan = memory_plan(config.model_name_or_path, config, device=config.device,
                               prompt_length=prompt_length(labkit_trainer.tokenizer, dataset))
            print(f"planner (labkit.scale.memory.memory_plan): {plan.loc['total', 'GiB']:.2f} GiB")
    if problems:
        for problem in problems:
            print(f"no ratio: {problem}")
        return 1
    if len(medians) == 2:
        print(f"ratio labkit/trl: {medians['labkit'] / medians['trl']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
