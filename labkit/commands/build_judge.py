"""Rebuild the shipped generative judge: ``python -m labkit build_judge``.

The steps, all deterministic from ``--seed`` on a CPU (one thread):

1. load the shipped tiny Qwen policy (``data/models/tiny-qwen``);
2. sample ``--k`` completions at temperature 1 for every addition and subtraction problem of the
   task suite's **train** split (all difficulties; the eval split is never seen), and label each by
   the rule verifier (:func:`labkit.rewards.accuracy_reward`);
3. balance: keep every distinct correct completion up to ``--per-class`` and as many wrong ones,
   drawn with the seed (the policy is wrong about three times out of four, so unbalanced data
   would teach "always N");
4. warm-start a copy of the policy's weights (same architecture and tokenizer) and fine-tune it with
   :mod:`labkit.finetune.sft` to answer ``Y`` or ``N`` to :func:`labkit.rewards.judge.judge_prompt` (the loss is on
   the one verdict token and the end-of-turn token);
5. measure agreement with the verifier on fresh completions of the **eval** split's add/sub
   problems (:func:`labkit.rewards.judge.judge_agreement`), save model, tokenizer and
   ``build_info.json`` (command, settings, data counts, loss curve, agreement, wall time).

The shipped judge (defaults, seed 0, one thread, 111 s on the 2-core machine): 12,800 sampled
completions of the 800 train problems (k = 16), 4,390 correct, of which 729 distinct (question,
text) pairs, so 729 Y + 729 N = 1,458 examples; 6 epochs = 552 SFT steps at lr 1e-3 (the final
loss, over the verdict and end-of-turn tokens, 0.13). On 320 held-out completions (eval add/sub,
k = 4, seed 1; 33.8% correct) the judge agrees with the verifier 84.1% of the time, with precision
68.9% and recall 96.3% (mean P(Y) 0.92 on correct completions, 0.25 on wrong ones): a lenient
judge, whose errors are mostly wrong answers it accepts. A first build with 2 epochs at lr 5e-4
(138 steps) had not learned (it said Y to everything: agreement 41.9%).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from pathlib import Path

import torch

from labkit.finetune.sft import fit, length_bucketed_batches, sft_optimizer
from labkit.rewards.judge import JUDGE_DIR, NO, YES, judge_agreement, judge_prompt

__all__ = ["FAMILIES", "build", "judge_examples", "labelled_samples", "main"]

#: The families the judge is trained and measured on (the notebooks' live runs use add/sub).
FAMILIES = ("add", "sub")


def labelled_samples(policy, tokenizer, dataset, *, k: int, seed: int):
    """The policy's ``k`` samples per row of ``dataset``, with the verifier's label and the
    question: the frame of :func:`labkit.evaluate.sample_answers` plus ``question``."""
    from labkit.evaluate import sample_answers

    samples = sample_answers(policy, tokenizer, dataset, k=k, seed=seed)
    question_of = dict(zip(dataset["id"], dataset["question"]))
    samples["question"] = samples["id"].map(question_of)
    return samples[samples["correct"].notna()].reset_index(drop=True)


def judge_examples(samples, *, per_class: int, seed: int) -> list[dict]:
    """Balanced SFT examples ``{"prompt", "completion"}`` (completion ``Y`` or ``N``): distinct
    (question, text) pairs, ``min(per_class, #correct, #wrong)`` of each class, seeded."""
    distinct = samples.drop_duplicates(["question", "text"])
    rng = random.Random(seed)
    classes = []
    for verdict, rows in ((YES, distinct[distinct["correct"] > 0]),
                          (NO, distinct[distinct["correct"] <= 0])):
        pairs = list(zip(rows["question"], rows["text"]))
        rng.shuffle(pairs)
        classes.append((verdict, pairs))
    n = min(per_class, *(len(pairs) for _, pairs in classes))
    examples = [{"prompt": judge_prompt(q, text), "completion": verdict}
                for verdict, pairs in classes for q, text in pairs[:n]]
    rng.shuffle(examples)
    return examples


def build(out: Path, *, k: int, per_class: int, epochs: int, steps: int | None, batch_size: int,
          lr: float, seed: int, threads: int | None, eval_k: int, command: str):
    from labkit.models import load_policy
    from labkit.tasks import load_split

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    start = time.perf_counter()
    policy, tokenizer = load_policy("tiny", device="cpu", dtype="float32")
    train = load_split("train", families=FAMILIES)
    samples = labelled_samples(policy, tokenizer, train, k=k, seed=seed)
    # held-out completions come from the same (untouched) policy, on eval problems only
    held_out = labelled_samples(policy, tokenizer, load_split("eval", families=FAMILIES),
                                k=eval_k, seed=seed + 1)
    examples = judge_examples(samples, per_class=per_class, seed=seed)
    sample_seconds = time.perf_counter() - start

    judge = policy  # the warm start: the policy's own weights, fine-tuned in place
    batches = [b for e in range(epochs)
               for b in length_bucketed_batches(tokenizer, examples, batch_size, seed + e)]
    if steps is not None:
        batches = batches[:steps]
    optimizer, scheduler = sft_optimizer(judge, lr=lr, steps=max(1, len(batches)))
    curve = fit(judge, tokenizer, batches, optimizer, scheduler, max_len=512,
                log_every=max(1, len(batches) // 20), verbose=False)
    train_seconds = time.perf_counter() - start - sample_seconds

    agreement = judge_agreement(judge, tokenizer, held_out)
    out.mkdir(parents=True, exist_ok=True)
    judge.save_pretrained(out)
    tokenizer.save_pretrained(out)
    info = {
        "command": command,
        "warm_start": "data/models/tiny-qwen",
        "verdicts": [YES, NO],
        "families": list(FAMILIES),
        "k": k, "per_class": per_class, "epochs": epochs, "steps": len(batches),
        "batch_size": batch_size, "lr": lr, "seed": seed,
        "train_samples": len(samples), "train_correct": int((samples["correct"] > 0).sum()),
        "train_examples": len(examples),
        "held_out": {"split": "eval", "families": list(FAMILIES), "k": eval_k,
                     "seed": seed + 1, **{key: round(v, 4) if isinstance(v, float) else v
                                          for key, v in agreement.items()}},
        "loss_curve": [[s, round(v, 4)] for s, v in curve],
        "sample_seconds": round(sample_seconds, 1),
        "train_seconds": round(train_seconds, 1),
        "wall_seconds": round(time.perf_counter() - start, 1),
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
    }
    (out / "build_info.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"saved the judge to {out}: {len(examples)} examples, {len(batches)} steps, held-out "
          f"agreement {agreement['agreement']:.3f} (precision {agreement['precision']:.3f}, "
          f"recall {agreement['recall']:.3f}) in {info['wall_seconds']:.0f} s")
    return judge, tokenizer, info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=JUDGE_DIR)
    ap.add_argument("--k", type=int, default=16, help="samples per training problem")
    ap.add_argument("--per-class", type=int, default=3000,
                    help="at most this many Y and as many N examples")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--steps", type=int, default=None, help="stop after this many SFT steps")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-k", type=int, default=4, help="samples per held-out problem")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = ap.parse_args(argv)
    for name in ("k", "per_class", "epochs", "batch_size", "eval_k"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.steps is not None and args.steps < 1:
        ap.error("--steps must be >= 1")
    try:  # a command to paste from the repository root, not this machine's absolute path
        shown_out = args.out.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        shown_out = args.out.as_posix()
    command = (f"python -m labkit build_judge --out {shown_out} --k {args.k} "
               f"--per-class {args.per_class} --epochs {args.epochs} "
               + (f"--steps {args.steps} " if args.steps else "")
               + f"--batch-size {args.batch_size} --lr {args.lr} --seed {args.seed} "
               f"--eval-k {args.eval_k} --threads {args.threads}")
    build(args.out, k=args.k, per_class=args.per_class, epochs=args.epochs, steps=args.steps,
          batch_size=args.batch_size, lr=args.lr, seed=args.seed, threads=args.threads,
          eval_k=args.eval_k, command=command)


if __name__ == "__main__":
    main()
