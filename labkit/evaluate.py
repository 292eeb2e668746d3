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

The ``pass@k`` column above is the *empirical* one (k = the number of samples drawn).
:func:`pass_at_k` is the unbiased estimator of Chen et al. (arXiv 2107.03374, eq. 1) for any
k <= n, and :func:`pass_at_k_curve` turns the per-sample frame into pass@1..pass@n per cell: the
curve that shows whether RL made the model better at finding answers (pass@k up for every k) or
only more reliable at the answers it could already find (pass@1 up, pass@n flat or down).
"""

from __future__ import annotations

import math

import pandas as pd
import torch

from labkit.agents.episodes import environments, run_episodes
from labkit.rewards import RewardFunctionError, accuracy_reward, format_reward, per_completion
from labkit.rewards.environment import environment_reward
from labkit.rewards.rule_based import check_rewards
from labkit.sampling import generate
from labkit.training.data import as_dataset, check_judgeable, check_unique_ids

GROUP_COLUMNS = ("family", "difficulty")
#: Prompts sampled per call by default (their k samples each): an eval set is sampled in batches
#: of this many and a last, smaller one (:func:`labkit.scale.memory.memory_plan` counts both).
PROMPTS_PER_BATCH = 64


def sample_answers(model, tokenizer, dataset, *, k: int = 4, temperature: float = 1.0,
                   max_completion_length: int = 128,
                   prompts_per_batch: int = PROMPTS_PER_BATCH,
                   seed: int = 0, top_p: float = 1.0, greedy: bool = False,
                   environment_factory=None,
                   max_tool_calling_iterations: int | None = None,
                   decoder=None) -> pd.DataFrame:
    """Sample ``k`` completions for every row of ``dataset``; one output row per sample.

    Columns: ``id, family, difficulty, sample, correct, formatted, length, truncated, text``;
    with an ``environment_factory`` each sample is a multi-turn episode with tools
    (:func:`labkit.agents.episodes.run_episodes`) and ``tool_calls, tool_errors, turns`` are
    added; where the rule verifier cannot judge a row (the guessing game), ``correct`` is the
    environment's outcome (``get_reward()``, checked by :func:`environment_accuracy`).

    The samples are grouped by ``id`` downstream (the tables, pass@k, rejection sampling), so
    rows that share one are refused (:func:`labkit.training.data.check_unique_ids`); without an
    ``id`` column the rows are numbered. Without an environment, a dataset of which the rule can
    judge no row is refused too (:func:`labkit.training.data.check_judgeable`).
    """
    dataset = as_dataset(dataset, "dataset")
    check_unique_ids(dataset, "dataset")
    if environment_factory is None and {"answer", "family"} <= set(dataset.column_names):
        check_judgeable(dataset, "dataset")
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    records = []
    for start in range(0, len(dataset), prompts_per_batch):
        rows = dataset[start:start + prompts_per_batch]
        if environment_factory is None:
            roll = generate(model, tokenizer, rows["prompt"], num_generations=k,
                            max_completion_length=max_completion_length,
                            temperature=temperature, top_p=top_p, greedy=greedy,
                            generator=generator, decoder=decoder)
        else:
            roll = run_episodes(model, tokenizer, rows["prompt"],
                                environments(environment_factory, rows, k), num_generations=k,
                                max_completion_length=max_completion_length,
                                max_tool_calling_iterations=max_tool_calling_iterations,
                                temperature=temperature, top_p=top_p, generator=generator,
                                decoder=decoder)
        prompts, columns = per_completion(rows, k)
        correct = accuracy_reward(prompts, roll.texts, **columns)
        if environment_factory is not None:  # a task no rule can judge: the environment's outcome
            outcome = environment_accuracy(prompts, roll.texts, roll.environments)
            correct = [o if c is None else c for c, o in zip(correct, outcome)]
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
            if environment_factory is not None:
                records[-1].update(tool_calls=int(roll.tool_calls[i]),
                                   tool_errors=int(roll.tool_errors[i]),
                                   turns=int(roll.turns[i]))
    return pd.DataFrame.from_records(records)


def environment_accuracy(prompts, completions, environments) -> list[float | None]:
    """Each episode's outcome as an accuracy: :func:`labkit.rewards.environment.environment_reward`
    (``get_reward()``) checked as the trainer checks a reward
    (:func:`labkit.rewards.rule_based.check_rewards`: a finite number, or None for "not judged"),
    and within [0, 1], since evaluation averages it as the share of episodes solved (a reward of
    5 or -3 would report an accuracy no model can have). Raises
    :class:`~labkit.rewards.RewardFunctionError` naming the value."""
    rewards = environment_reward(prompts, completions, environments=environments)
    outcome = check_rewards("environment.get_reward", rewards, len(completions))
    wrong = next((value for value in outcome if not (math.isnan(value) or 0 <= value <= 1)),
                 None)
    if wrong is not None:
        raise RewardFunctionError(f"the environment's get_reward() returned {wrong!r}: evaluation "
                                  f"reads it as an episode's accuracy, which must lie in [0, 1] "
                                  f"(1 = solved)")
    return [None if math.isnan(value) else value for value in outcome]


def summarize(samples: pd.DataFrame, by=GROUP_COLUMNS) -> pd.DataFrame:
    """Aggregate per-sample results (from :func:`sample_answers`) into the evaluation table."""
    episodes = "tool_calls" in samples
    if episodes:  # per sample: did it call a tool at all
        samples = samples.assign(called=samples["tool_calls"] > 0)
    extra = {"tool_call_rate": ("called", "mean"), "turns": ("turns", "mean")} if episodes else {}
    per_prompt = samples.groupby([*by, "id"], sort=True).agg(
        accuracy=("correct", "mean"), solved=("correct", "max"), length=("length", "mean"),
        format_rate=("formatted", "mean"), truncation=("truncated", "mean"), **extra)

    def table(frame):
        more = {name: (name, "mean") for name in extra}
        return frame.agg(prompts=("accuracy", "size"), accuracy=("accuracy", "mean"),
                         **{"pass@k": ("solved", "mean")}, length=("length", "mean"),
                         format_rate=("format_rate", "mean"), truncation=("truncation", "mean"),
                         **more)

    cells = table(per_prompt.groupby(list(by), sort=True)).reset_index()
    overall = table(per_prompt.groupby(lambda _: "all")).reset_index(drop=True)
    for col in by:
        overall[col] = "all"
    return pd.concat([cells, overall[cells.columns]], ignore_index=True)


def prompt_solve_rates(samples: pd.DataFrame) -> pd.Series:
    """Fraction of the k samples that are correct, per prompt id: 1.0 = always solved, 0.0 = never
    (the groups that DAPO's dynamic sampling drops)."""
    return samples.groupby("id")["correct"].mean()


def pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    r"""The unbiased pass@k estimate of one problem from ``num_correct`` right answers out of
    ``num_samples`` (Chen et al. 2021, arXiv 2107.03374, eq. 1):

    .. math:: \text{pass@}k = 1 - \binom{n-c}{k} \Big/ \binom{n}{k}

    the probability that ``k`` samples drawn without replacement from the ``n`` hold at least one
    right answer. Computed as ``1 - prod_{i=n-c+1}^{n} (1 - k/i)`` (the paper's numerically stable
    form: no huge binomials), and exactly 1.0 when fewer than ``k`` answers are wrong.
    ``k = 1`` gives ``c / n``; ``k = n`` gives 1.0 if any answer is right, else 0.0.
    ValueError unless ``0 <= num_correct <= num_samples`` and ``1 <= k <= num_samples``.
    """
    n, c, k = int(num_samples), int(num_correct), int(k)
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= num_correct <= num_samples, got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= num_samples, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def pass_at_k_curve(samples: pd.DataFrame, ks=None, by=GROUP_COLUMNS) -> pd.DataFrame:
    """pass@k per (family, difficulty) cell and overall, from a per-sample frame.

    ``samples`` is the frame of :func:`sample_answers` (or ``evaluate(..., return_samples=True)``):
    one row per sample with ``id``, the ``by`` columns and ``correct`` (NaN = not judged, counted
    as not correct). Each prompt's estimate is :func:`pass_at_k` of its own n and c; a cell's is the
    mean over its prompts. ``ks`` defaults to 1..n (n = the fewest samples any prompt has).

    ============ ===============================================================
    column       meaning
    ============ ===============================================================
    family, ...  the cell (the ``by`` columns); the last row is ``all``
    prompts      number of prompts in the cell
    pass@k       one column per k in ``ks``: mean unbiased pass@k over the prompts
    ============ ===============================================================
    """
    by = list(by)
    per_prompt = samples.groupby([*by, "id"], sort=True)["correct"].agg(
        n="size", c=lambda x: int((x.fillna(0) > 0).sum())).reset_index()
    smallest = int(per_prompt["n"].min())
    ks = list(range(1, smallest + 1)) if ks is None else [int(k) for k in ks]
    if any(not 1 <= k <= smallest for k in ks):
        raise ValueError(f"every k must lie in 1..{smallest} (the fewest samples of a prompt), "
                         f"got {ks}")
    for k in ks:
        per_prompt[f"pass@{k}"] = [pass_at_k(n, c, k) for n, c in zip(per_prompt["n"],
                                                                       per_prompt["c"])]
    columns = [f"pass@{k}" for k in ks]
    cells = per_prompt.groupby(by, sort=True)[columns].mean()
    cells.insert(0, "prompts", per_prompt.groupby(by, sort=True).size())
    cells = cells.reset_index()
    overall = {**{col: "all" for col in by}, "prompts": len(per_prompt),
               **per_prompt[columns].mean().to_dict()}
    return pd.concat([cells, pd.DataFrame([overall])], ignore_index=True)


def evaluate(model, tokenizer, dataset, *, k: int = 4, temperature: float = 1.0,
             max_completion_length: int = 128, seed: int = 0,
             prompts_per_batch: int = PROMPTS_PER_BATCH,
             return_samples: bool = False, environment_factory=None,
             max_tool_calling_iterations: int | None = None, decoder=None):
    """Sample ``k`` answers per prompt of ``dataset`` and return the table described above
    (and the per-sample frame when ``return_samples``); with an ``environment_factory``, as
    multi-turn episodes with tools, with ``tool_call_rate`` and ``turns`` columns. ``decoder``:
    the decode loop (:class:`labkit.sampling.Decoder`; the trainer passes its run's)."""
    samples = sample_answers(model, tokenizer, dataset, k=k, temperature=temperature,
                             max_completion_length=max_completion_length, seed=seed,
                             prompts_per_batch=prompts_per_batch,
                             environment_factory=environment_factory,
                             max_tool_calling_iterations=max_tool_calling_iterations,
                             decoder=decoder)
    table = summarize(samples)
    return (table, samples) if return_samples else table


def eval_metrics(table, samples: pd.DataFrame | None = None) -> dict:
    """A training history's ``eval_*`` columns from an :func:`evaluate` table: the overall
    accuracy, pass@k, length, format rate and truncation, and the accuracy of each (family,
    difficulty) cell when there are several, so a run shows what it gains and where it forgets.

    With the per-sample frame, also the mean length of the right answers (``correct == 1``) and of
    the wrong ones (``correct == 0``; partial credit and unjudged answers count in neither), NaN
    when there are none: whether a loss lets *wrong* answers grow is then measured, not guessed.
    """
    overall = table[table["family"] == "all"].iloc[0]
    row = {"eval_accuracy": float(overall["accuracy"]),
           "eval_pass@k": float(overall["pass@k"]), "eval_length": float(overall["length"]),
           "eval_format_rate": float(overall["format_rate"]),
           "eval_truncation": float(overall["truncation"])}
    if samples is not None:
        row.update(eval_length_correct=float(samples.loc[samples["correct"] == 1, "length"].mean()),
                   eval_length_wrong=float(samples.loc[samples["correct"] == 0, "length"].mean()))
    if "tool_call_rate" in table:
        row.update(eval_tool_call_rate=float(overall["tool_call_rate"]),
                   eval_turns=float(overall["turns"]))
    cells = table[table["family"] != "all"]
    if len(cells) > 1:
        row.update({f"eval_accuracy_{c.family}_d{c.difficulty}": float(c.accuracy)
                    for c in cells.itertuples()})
    return row
