"""Rebuild the shipped tool model: ``python -m labkit build_tools``.

Notebook 10 needs a policy that knows the tool-call syntax and has a real choice to make: call
the calculator or answer alone. The shipped tiny Qwen has never seen a tool call, so this command
continues its warm start (deterministic from ``--seed`` on one CPU thread):

1. load the tiny Qwen (``data/models/tiny-qwen``) and give its tokenizer Qwen's four tool tags as
   single tokens (:func:`labkit.models.build_char_tokenizer` with ``tool_tags=True``: every old id
   keeps its meaning, the four new embedding rows start at the mean of the old ones) and the
   tool chat template; allow 1,024 positions (RoPE has no learned positions, and a guessing game
   runs to about 500 tokens);
2. fine-tune on a mix drawn fresh from the task suite's train distribution (eval questions never
   appear) and from the guessing game:

   * arithmetic (add, sub, mul) solved with one calculator call with probability
     ``TOOL_SHARE[difficulty]`` (a tenth on the easiest cells, half on the hardest), otherwise
     written out in the warm start's styles (:func:`labkit.agents.calculator_demonstration`,
     :func:`labkit.tasks.solution_text`): the tool is one habit among two, so RL decides when it
     pays (ToRL, arXiv 2503.23383, trains tool use from scratch with RL; ReTool, arXiv
     2504.11536, section 3.1, starts from a cold-start set of tool demonstrations, as here);
   * every other family, tool-free, so the old skills stay;
   * guessing games played by the binary-search expert with some wrong guesses
     (:func:`labkit.agents.expert_transcript`), for the multi-turn environment;

   the loss covers the policy's turns only: the tool's replies are masked out of the labels
   (:mod:`labkit.finetune.sft`), as RL will mask them;
3. measure, on the eval split's hard cells (add and mul at difficulty 3-4) sampled at T = 1, the
   accuracy and tool-call rate with the calculator and without it, and the solve rate of 40
   guessing games; save model, tokenizer and ``build_info.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from pathlib import Path

import torch

from labkit.agents.calculator import calculator_demonstration
from labkit.agents.guessing import expert_transcript, guessing_dataset
from labkit.finetune.sft import fit, length_bucketed_batches, sft_optimizer
from labkit.models import TINY_MODEL_DIR, TOOL_MODEL_DIR, build_char_tokenizer, load_policy
from labkit.tasks import (
    STYLES,
    WARM_START_STYLE_WEIGHTS,
    eval_problems,
    generate_problems,
    solution_text,
    to_row,
)

#: Share of arithmetic demonstrations that call the calculator, by difficulty.
TOOL_SHARE = {1: 0.1, 2: 0.25, 3: 0.45, 4: 0.5}
#: Share of the mix that is guessing games (the rest is the task suite).
GAME_SHARE = 0.3
#: The cells where direct answers fail and the tool should pay: notebook 10's hard cells.
HARD_CELLS = (("add", 3), ("add", 4), ("mul", 3), ("mul", 4))


def tool_examples(n: int, seed: int) -> list[dict]:
    """``n`` SFT examples of the mix described in the module docstring (seeded)."""
    rng = random.Random(f"tools-{seed}")
    games = int(n * GAME_SHARE)
    held_out = {p.question for p in eval_problems()}
    examples = []
    for problem in generate_problems(n - games, f"tools-{seed}", exclude=held_out):
        row = to_row(problem)
        arithmetic = problem.family in ("add", "sub", "mul")
        if arithmetic and rng.random() < TOOL_SHARE[problem.difficulty]:
            examples.append({"prompt": problem.question,
                             "turns": calculator_demonstration(row, use_tool=True)})
            continue
        style = rng.choices(STYLES, weights=[WARM_START_STYLE_WEIGHTS[s] for s in STYLES])[0]
        examples.append({"prompt": problem.question, "completion": solution_text(problem, style)})
    for row in guessing_dataset(games, seed=seed + 1000, difficulties=(2, 3)):
        examples.append({"prompt": row["prompt"],
                         "turns": expert_transcript(row, rng, mistakes=0.3)})
    rng.shuffle(examples)
    return examples


def with_tool_tags(model, seed: int):
    """The tiny Qwen with the tool model's tokenizer: four more embedding rows (tied with the
    output head) at the mean of the existing ones plus a little seeded noise."""
    tokenizer = build_char_tokenizer(tool_tags=True)
    old = model.get_input_embeddings().weight.detach().clone()
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    generator = torch.Generator().manual_seed(seed)
    new = model.get_input_embeddings().weight
    with torch.no_grad():
        new[: len(old)] = old
        noise = torch.randn(len(tokenizer) - len(old), old.size(1), generator=generator)
        new[len(old):] = old.mean(0) + 0.01 * old.std() * noise
    model.config.vocab_size = len(tokenizer)
    model.config.max_position_embeddings = 1024
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


def measure(model, tokenizer, *, seed: int) -> dict:
    """Hard-cell accuracy and tool-call rate with and without the calculator; games solved."""
    from labkit.agents import NoTools
    from labkit.agents.calculator import CalculatorEnv
    from labkit.agents.episodes import run_episodes
    from labkit.agents.guessing import GuessingEnv
    from labkit.rewards import accuracy_reward
    from labkit.tasks import load_split

    hard = load_split("eval").filter(lambda r: (r["family"], r["difficulty"]) in HARD_CELLS)
    k = 4
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for name, make in (("with_calculator", CalculatorEnv), ("no_tool", NoTools)):
        envs = []
        for row in hard:
            for _ in range(k):
                env = make()
                env.reset(**row)
                envs.append(env)
        episodes = run_episodes(model, tokenizer, hard["prompt"], envs, num_generations=k,
                                max_completion_length=256, max_tool_calling_iterations=2,
                                generator=generator)
        columns = {key: [v for v in hard[key] for _ in range(k)]
                   for key in ("answer", "family", "numbers", "target")}
        correct = accuracy_reward(prompts=None, completions=episodes.texts, **columns)
        out[name] = {"accuracy": sum(correct) / len(correct),
                     "tool_call_rate": float((episodes.tool_calls > 0).float().mean()),
                     "episodes": len(correct)}
    games = guessing_dataset(40, seed=seed + 7, difficulties=(2, 3))
    envs = []
    for row in games:
        env = GuessingEnv()
        env.reset(**row)
        envs.append(env)
    run_episodes(model, tokenizer, games["prompt"], envs, max_completion_length=768,
                 max_tool_calling_iterations=6, generator=generator)
    out["guessing_solved"] = sum(env.solved for env in envs) / len(envs)
    return out


def build(out: Path, *, steps: int, batch_size: int, lr: float, seed: int, threads: int | None,
          max_len: int = 768) -> dict:
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    start = time.perf_counter()
    model, _ = load_policy(TINY_MODEL_DIR, device="cpu", dtype="float32")
    model, tokenizer = with_tool_tags(model, seed)
    examples = tool_examples(steps * batch_size, seed)
    batches = length_bucketed_batches(tokenizer, examples, batch_size, seed)[:steps]
    optimizer, scheduler = sft_optimizer(model, lr=lr, steps=len(batches))
    curve = fit(model, tokenizer, batches, optimizer, scheduler, max_len=max_len, log_every=100)
    train_seconds = time.perf_counter() - start
    measured = measure(model, tokenizer, seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    shown = _repo_relative(out)
    info = {
        "command": (f"python -m labkit build_tools --out {shown} --steps {steps} "
                    f"--batch-size {batch_size} --lr {lr} --seed {seed} --threads {threads}"),
        "base": _repo_relative(TINY_MODEL_DIR),
        "steps": steps, "batch_size": batch_size, "lr": lr, "seed": seed, "max_len": max_len,
        "tool_share": TOOL_SHARE, "game_share": GAME_SHARE,
        "examples": {"total": len(examples),
                     "with_tool_turns": sum("turns" in e for e in examples)},
        "train_seconds": round(train_seconds, 1), "loss_curve": curve, "measured": measured,
        "hard_cells": [list(c) for c in HARD_CELLS],
        "machine": f"{platform.machine()}, torch {torch.__version__}, "
                   f"{torch.get_num_threads()} thread(s)",
    }
    (out / "build_info.json").write_text(json.dumps(info, indent=1))
    return info


def _repo_relative(path: Path) -> str:
    """``path`` as the command line of a checkout would write it (data/...), else as given."""
    root = TINY_MODEL_DIR.resolve().parents[2]
    try:
        return Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        return Path(path).as_posix()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=TOOL_MODEL_DIR)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    info = build(args.out, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                 seed=args.seed, threads=args.threads)
    print(json.dumps(info["measured"], indent=1))


if __name__ == "__main__":
    main()
