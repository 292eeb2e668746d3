"""Rebuild the shipped tiny Qwen: ``python -m labkit build_tiny``.

The steps, all deterministic from ``--seed`` on a CPU:

1. build the character tokenizer (:func:`labkit.models.build_char_tokenizer`), a ``transformers``
   fast tokenizer with Qwen's chat template;
2. create a Qwen3 model from :func:`labkit.models.tiny_qwen_config` with fresh weights;
3. warm-start it by supervised fine-tuning (:mod:`labkit.finetune.sft`) on solutions from the task suite
   (:func:`labkit.tasks.sft_examples`), a mix of direct answers, worked solutions and verbose ones,
   with the loss on the completion tokens only;
4. save model, tokenizer and ``build_info.json`` (settings, loss curve summary, timing) with
   ``save_pretrained`` under ``data/models/tiny-qwen``.

The warm-start is deliberately short: the goal is a model that has learned the answer format and
the solution styles but still fails often (pass@1 at temperature 1 well below 100%), so that RL
has something to improve, and that answers directly more often than the direct style deserves,
so that accuracy-only RL has a reason to lengthen responses.

``--steps 0`` saves the random-initialised model with the same tokenizer (the "RL cannot start
from nothing" demo); :func:`labkit.models.load_policy` with ``random_init=True`` gives the same.
``--tokenizer-only`` rewrites just the tokenizer files of an existing model folder (token ids are
unchanged, so the weights stay valid): the shipped model's tokenizer is rebuilt this way, seconds
instead of a warm-start.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from labkit.finetune.sft import encode_sft, fit, length_bucketed_batches, sft_optimizer
from labkit.models import TINY_MODEL_DIR, build_char_tokenizer, count_parameters, tiny_qwen_config
from labkit.tasks import WARM_START_STYLE_WEIGHTS

__all__ = ["STYLE_WEIGHTS", "build", "encode_sft", "length_bucketed_batches", "main",
           "save_tokenizer", "warm_start"]

#: Mix of solution styles in the warm-start data (see labkit.tasks.solution_text); defined in
#: labkit.tasks, where the PTX loss reads it too.
STYLE_WEIGHTS = WARM_START_STYLE_WEIGHTS


def warm_start(model, tokenizer, *, steps: int, batch_size: int, lr: float, seed: int,
               max_len: int = 256, log_every: int = 50, style_weights=None):
    """Supervised fine-tuning on freshly drawn task solutions; returns a list of (step, loss).

    The data are ``steps * batch_size`` examples of :func:`labkit.tasks.sft_examples`, batched by
    length (:func:`labkit.finetune.sft.length_bucketed_batches`); the optimizer is AdamW with a 5% linear
    warm-up and a cosine decay to 10% (:func:`labkit.finetune.sft.sft_optimizer`).
    """
    from labkit.tasks import sft_examples

    style_weights = style_weights or STYLE_WEIGHTS
    examples = sft_examples(steps * batch_size, seed=seed, style_weights=style_weights)
    batches = length_bucketed_batches(tokenizer, examples, batch_size, seed)
    optimizer, scheduler = sft_optimizer(model, lr=lr, steps=steps)
    return fit(model, tokenizer, batches[:steps], optimizer, scheduler, max_len=max_len,
               log_every=log_every)


def build(out: Path, *, steps: int, batch_size: int, lr: float, seed: int, threads: int | None):
    from transformers import AutoModelForCausalLM

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    tokenizer = build_char_tokenizer()
    config = tiny_qwen_config(len(tokenizer), bos_token_id=None,
                              eos_token_id=tokenizer.eos_token_id,
                              pad_token_id=tokenizer.pad_token_id)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    start = time.perf_counter()
    curve = warm_start(model, tokenizer, steps=steps, batch_size=batch_size, lr=lr, seed=seed) \
        if steps else []
    seconds = time.perf_counter() - start
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    info = {
        "command": f"python -m labkit build_tiny --out {out} --steps {steps} "
                   f"--batch-size {batch_size} --lr {lr} --seed {seed} "
                   f"--threads {torch.get_num_threads()}",
        "architecture": type(model).__name__,
        "parameters": count_parameters(model),
        "vocab_size": len(tokenizer),
        "steps": steps,
        "batch_size": batch_size,
        "lr": lr,
        "seed": seed,
        "style_weights": STYLE_WEIGHTS,
        "warm_start_seconds": round(seconds, 1),
        "loss_curve": curve,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
    }
    (out / "build_info.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"saved {info['parameters']:,}-parameter {info['architecture']} to {out} "
          f"after {seconds:.0f} s of warm-start")
    return model, tokenizer


def save_tokenizer(out: Path):
    """Write the character tokenizer into the model folder ``out``, checking that every token
    keeps the id the saved weights were trained with."""
    from transformers import AutoTokenizer

    tokenizer = build_char_tokenizer()
    if (out / "tokenizer.json").exists():
        saved = AutoTokenizer.from_pretrained(out).get_vocab()
        if saved != tokenizer.get_vocab():
            raise SystemExit(f"the tokenizer's ids differ from those saved in {out}: rebuild the "
                             f"whole model (python -m labkit build_tiny --out {out})")
    tokenizer.save_pretrained(out)
    print(f"saved the tokenizer to {out}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=TINY_MODEL_DIR)
    ap.add_argument("--steps", type=int, default=6000, help="SFT steps (0: random init)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    # one thread by default: bit-for-bit repeatable, and on 2 cores barely slower for a model
    # this small (the matmuls are too small to split well)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--tokenizer-only", action="store_true",
                    help="rewrite only the tokenizer files of the model folder --out")
    args = ap.parse_args(argv)
    if args.tokenizer_only:
        save_tokenizer(args.out)
        return
    build(args.out, steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
          threads=args.threads)


if __name__ == "__main__":
    main()
