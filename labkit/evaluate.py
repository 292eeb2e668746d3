"""Evaluation: sample k answers per prompt and report accuracy by family and difficulty.

``evaluate(model, tokenizer, dataset)`` returns one row per (family, difficulty) plus an ``all``
row, with

============== ==============================================================================
column         meaning
============== ==============================================================================
prompts        number of eval prompts in the cell
accuracy       mean correctness over all k samples: pass@1 at the sampling temperature
pass@k         fraction of prompts with at least one correct sample among the k
length         mean response length in tokens (end-of-turn included)
format_rate    fraction of samples whose format reward is 1
truncation     fraction of samples cut at ``max_completion_length``
============== ==============================================================================

Samples are drawn with a seeded generator, so the same model, data and seed give the same table.
"""

from __future__ import annotations

import math

import pandas as pd
import torch

from labkit.rewards import accuracy_reward, format_reward, per_completion
from labkit.rollout import generate

GROUP_COLUMNS = ("family", "difficulty")


def sample_answers(model, tokenizer, dataset, *, k: int = 4, temperature: float = 1.0,
                   max_completion_length: int = 128, prompts_per_batch: int = 64,
                   seed: int = 0, top_p: float = 1.0, greedy: bool = False) -> pd.DataFrame:
    """Sample ``k`` completions for every row of ``dataset``; one output row per sample.

    Columns: ``id, family, difficulty, sample, correct, formatted, length, truncated, text``.
    """
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    records = []
    for start in range(0, len(dataset), prompts_per_batch):
        rows = dataset[start:start + prompts_per_batch]
        roll = generate(model, tokenizer, rows["prompt"], num_generations=k,
                        max_completion_length=max_completion_length, temperature=temperature,
                        top_p=top_p, greedy=greedy, generator=generator)
        prompts, columns = per_completion(rows, k)
        correct = accuracy_reward(prompts, roll.texts, **columns)
        formatted = format_reward(prompts, roll.texts, **columns)
        for i, text in enumerate(roll.texts):
            records.append({
                "id": columns["id"][i] if "id" in columns else start + i // k,
                "family": columns["family"][i] if "family" in columns else "?",
                "difficulty": columns["difficulty"][i] if "difficulty" in columns else 0,
                "sample": i % k,
                # None = the reward cannot judge the row (no answer): NaN, never a fake 0
                "correct": math.nan if correct[i] is None else float(correct[i]),
                "formatted": float(formatted[i] or 0.0),
                "length": int(roll.lengths[i]), "truncated": bool(roll.truncated[i]),
                "text": text,
            })
    return pd.DataFrame.from_records(records)


def summarize(samples: pd.DataFrame, by=GROUP_COLUMNS) -> pd.DataFrame:
    """Aggregate per-sample results (from :func:`sample_answers`) into the evaluation table."""
    per_prompt = samples.groupby([*by, "id"], sort=True).agg(
        accuracy=("correct", "mean"), solved=("correct", "max"), length=("length", "mean"),
        format_rate=("formatted", "mean"), truncation=("truncated", "mean"))

    def table(frame):
        return frame.agg(prompts=("accuracy", "size"), accuracy=("accuracy", "mean"),
                         **{"pass@k": ("solved", "mean")}, length=("length", "mean"),
                         format_rate=("format_rate", "mean"), truncation=("truncation", "mean"))

    cells = table(per_prompt.groupby(list(by), sort=True)).reset_index()
    overall = table(per_prompt.groupby(lambda _: "all")).reset_index(drop=True)
    for col in by:
        overall[col] = "all"
    return pd.concat([cells, overall[cells.columns]], ignore_index=True)


def prompt_solve_rates(samples: pd.DataFrame) -> pd.Series:
    """Fraction of the k samples that are correct, per prompt id: 1.0 = always solved, 0.0 = never
    (the groups that DAPO's dynamic sampling drops)."""
    return samples.groupby("id")["correct"].mean()


def evaluate(model, tokenizer, dataset, *, k: int = 4, temperature: float = 1.0,
             max_completion_length: int = 128, seed: int = 0, prompts_per_batch: int = 64,
             return_samples: bool = False):
    """Sample ``k`` answers per prompt of ``dataset`` and return the table described above
    (and the per-sample frame when ``return_samples``)."""
    samples = sample_answers(model, tokenizer, dataset, k=k, temperature=temperature,
                             max_completion_length=max_completion_length, seed=seed,
                             prompts_per_batch=prompts_per_batch)
    table = summarize(samples)
    return (table, samples) if return_samples else table
