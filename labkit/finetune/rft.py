"""Rejection-sampling fine-tuning (RFT; Yuan et al., arXiv 2308.01825, section 3.3).

RFT is not RL: sample ``k`` completions per training prompt from the current model, keep the ones
the rule verifier accepts, drop duplicates per prompt, and fine-tune on what is left with the
ordinary SFT loss (:mod:`labkit.finetune.sft`). It is "filtered behaviour cloning": the model imitates its
own successes. GRPO uses the same samples differently: it also pushes down the failures, weighs
each success by how surprising it was within its group (the advantage), and updates after every
batch instead of once per pass.

======================== ========================================================================
function                 what it does
======================== ========================================================================
:func:`dedup_correct`    keep correct samples, one per distinct solution per prompt (pure, no
                         model: the testable core)
:func:`rejection_sample` sample ``k`` per prompt with :func:`labkit.evaluate.sample_answers`,
                         then :func:`dedup_correct`; returns SFT examples and counts
:func:`rft`              ``rounds`` x (sample, filter, SFT); returns a history frame
======================== ========================================================================

Departures from the paper: two solutions are duplicates when their texts agree after removing
whitespace (the paper compares the lists of calculator equations, which our completions do not
have; our worked solutions are mostly their equations, so the two are close), and the first one
sampled is kept (the paper keeps the one farthest in edit distance from those already kept). The
paper does one round from the SFT model and adds the original SFT data; ``rounds > 1`` is
iterated RFT ("expert iteration"), each round sampling from the previous round's model, and the
original warm-start data are not mixed in.

Measured on the shipped tiny Qwen (seed 0, one thread; ``rft(model, tokenizer,
medium_cells("train"), rounds=2, k=4, eval_dataset=medium_cells("eval"))``, lr 3e-4, one epoch,
batch 16; eval accuracy at k = 4, temperature 1; 9 s in all):

===== ====== ======= ======== =============== ========= =============
round budget correct distinct sample accuracy SFT steps eval accuracy
===== ====== ======= ======== =============== ========= =============
0     0                                                 22.5%
1     1600   322     220      20.1%           14        31.2%
2     3200   469     277      29.3%           18        52.5%
===== ====== ======= ======== =============== ========= =============

GRPO at about the same sampling budget (the preset, 16 prompts x 8 per step, seed 0): 24 steps =
3072 completions gave 22.5% -> 58.1% (27 s, ``tests/test_learning.py``), 40 steps = 5120 gave
22.5% -> 50.6% (30 s, :mod:`labkit.rewards.verifiers`). On these cells RFT matches GRPO per sampled
completion within a few points, with far fewer optimizer steps (32 vs 24-40) and a third of the
wall time: filtered imitation is enough when the model already writes the right solution style
some of the time. One seed; the difference between the two is within what seeds move.
"""

from __future__ import annotations

import math
import time

import pandas as pd

from labkit.evaluate import evaluate, sample_answers
from labkit.finetune.sft import fit, length_bucketed_batches, sft_optimizer
from labkit.runtime.seeds import shifted_seed
from labkit.training.data import as_dataset, check_unique_ids

__all__ = ["dedup_correct", "rejection_sample", "rft", "solution_key"]


def solution_key(text: str) -> str:
    """What makes two solutions the same: their text without whitespace."""
    return "".join(str(text).split())


def dedup_correct(samples: pd.DataFrame) -> pd.DataFrame:
    """The correct rows of ``samples``, one per distinct solution (:func:`solution_key`) per
    prompt ``id``, the first sampled kept, in the original order.

    ``samples`` has at least the columns ``id``, ``correct`` (1.0 / 0.0 / NaN: NaN = not judged,
    never kept) and ``text``, as :func:`labkit.evaluate.sample_answers` returns.
    """
    missing = {"id", "correct", "text"} - set(samples.columns)
    if missing:
        raise ValueError(f"samples lacks the column(s) {sorted(missing)}; pass the frame of "
                         f"labkit.evaluate.sample_answers")
    right = samples[samples["correct"].fillna(0.0) > 0]
    keys = right["text"].map(solution_key)
    return right[~pd.DataFrame({"id": right["id"], "key": keys}).duplicated()]


def rejection_sample(model, tokenizer, dataset, k: int, *, temperature: float = 1.0,
                     max_completion_length: int = 128, seed: int = 0,
                     prompts_per_batch: int = 64) -> tuple[list[dict], dict]:
    """Sample ``k`` completions per row of ``dataset``; keep the correct ones, deduplicated.

    Returns ``(examples, counts)``: ``examples`` are SFT examples ``{"prompt", "completion",
    "id"}`` (the dataset's prompt, the kept completion); ``counts`` holds ``sampled`` (len(dataset)
    x k, the sampling budget), ``correct`` (before deduplication), ``distinct`` (kept),
    ``prompts_solved`` and ``sample_accuracy`` (correct / sampled).
    """
    if k < 1:
        raise ValueError(f"k must be >= 1 (samples per prompt), got {k}")
    dataset = as_dataset(dataset, "dataset")
    if len(dataset) == 0:
        raise ValueError("dataset is empty: give at least one prompt")
    samples = sample_answers(model, tokenizer, dataset, k=k, temperature=temperature,
                             max_completion_length=max_completion_length, seed=seed,
                             prompts_per_batch=prompts_per_batch)
    kept = dedup_correct(samples)
    # sample j of the frame is the (j mod k)-th of row j // k: each completion meets its own
    # prompt by position, whatever the ids
    prompts = list(dataset["prompt"])
    examples = [{"prompt": prompts[int(j) // k], "completion": text, "id": i}
                for j, i, text in zip(kept.index, kept["id"], kept["text"])]
    correct = int((samples["correct"].fillna(0.0) > 0).sum())
    counts = {"sampled": len(samples), "correct": correct, "distinct": len(examples),
              "prompts_solved": int(kept["id"].nunique()),
              "sample_accuracy": correct / len(samples)}
    return examples, counts


def rft(model, tokenizer, dataset, rounds: int, k: int, *, eval_dataset=None, eval_k: int = 4,
        epochs: int = 1, batch_size: int = 16, lr: float = 3e-4, temperature: float = 1.0,
        max_completion_length: int = 128, seed: int = 0, verbose: bool = False) -> pd.DataFrame:
    """``rounds`` of rejection sampling then SFT on the kept samples; the model is trained in
    place. Returns one row per round (and a row 0 with the starting evaluation):

    =============== ========================================================================
    column          meaning
    =============== ========================================================================
    round           0 = before training
    sampled         completions drawn this round (len(dataset) x k)
    budget          completions drawn so far (compare GRPO at prompts x G x steps)
    correct         correct samples this round, before deduplication
    distinct        kept after deduplication (the SFT examples)
    sample_accuracy correct / sampled: the training-set accuracy of the sampling model
    sft_steps       optimizer steps of the round (``epochs`` x ceil(distinct / batch_size))
    loss            mean SFT loss of the round's last logged interval
    eval_accuracy   accuracy on ``eval_dataset`` (k = ``eval_k``, seed ``seed``) after the round
    seconds         wall time of the round
    =============== ========================================================================

    Each round samples with seed ``seed + round`` (fresh samples) and fine-tunes with a fresh
    AdamW (:func:`labkit.finetune.sft.sft_optimizer`: warm-up then cosine decay) at learning rate ``lr``.
    """
    for name, value in (("rounds", rounds), ("k", k), ("epochs", epochs),
                        ("batch_size", batch_size)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    seed = shifted_seed(seed)  # the same notebook under another seed (python -m labkit bands)
    dataset = as_dataset(dataset, "dataset")  # refused before the first evaluation, not after
    check_unique_ids(dataset, "dataset")
    if eval_dataset is not None:
        eval_dataset = as_dataset(eval_dataset, "eval_dataset")
        check_unique_ids(eval_dataset, "eval_dataset")

    def eval_accuracy():
        if eval_dataset is None:
            return math.nan
        table = evaluate(model, tokenizer, eval_dataset, k=eval_k, temperature=temperature,
                         max_completion_length=max_completion_length, seed=seed)
        return float(table[table["family"] == "all"]["accuracy"].iloc[0])

    rows = [{"round": 0, "sampled": 0, "budget": 0, "correct": 0, "distinct": 0,
             "sample_accuracy": math.nan, "sft_steps": 0, "loss": math.nan,
             "eval_accuracy": eval_accuracy(), "seconds": 0.0}]
    budget = 0
    for r in range(1, rounds + 1):
        tic = time.perf_counter()
        examples, counts = rejection_sample(model, tokenizer, dataset, k,
                                            temperature=temperature,
                                            max_completion_length=max_completion_length,
                                            seed=seed + r)
        budget += counts["sampled"]
        batches = [b for e in range(epochs)
                   for b in length_bucketed_batches(tokenizer, examples, batch_size,
                                                    seed + 1000 * r + e)]
        loss = math.nan
        if batches:
            optimizer, scheduler = sft_optimizer(model, lr=lr, steps=len(batches))
            curve = fit(model, tokenizer, batches, optimizer, scheduler,
                        max_len=max_completion_length + 64, verbose=verbose)
            loss = curve[-1][1]
        rows.append({"round": r, "sampled": counts["sampled"], "budget": budget,
                     "correct": counts["correct"], "distinct": counts["distinct"],
                     "sample_accuracy": counts["sample_accuracy"], "sft_steps": len(batches),
                     "loss": loss, "eval_accuracy": eval_accuracy(),
                     "seconds": time.perf_counter() - tic})
    model.eval()
    return pd.DataFrame(rows)
