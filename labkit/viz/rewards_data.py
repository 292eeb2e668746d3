"""Notebook 08 (rewards and data): TTRL's vote, sampling weights, pass@k."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from labkit.viz.style import SMALL, grouped_bars, legend_beside, make_panels


def majority_vote_groups(samples: pd.DataFrame, group_size: int | None = None) -> pd.DataFrame:
    """TTRL's majority vote per prompt of a per-sample frame, against the verifier's label.

    ``samples`` is the frame of :func:`labkit.evaluate.sample_answers` (one row per sample, with
    ``id``, ``family``, ``text`` and ``correct``: 1.0 / 0.0 / NaN); a ``question`` column, if
    present, is carried over. Each prompt votes with its first ``group_size`` samples (default:
    all), through :func:`labkit.rewards.ttrl.answer_key` and :func:`labkit.rewards.ttrl.majority_vote`, the
    functions of the TTRL reward.

    ============== =====================================================================
    column         meaning (one row per prompt, in the order of ``samples``)
    ============== =====================================================================
    id             the prompt
    group_size     samples that voted
    majority       the text of the majority answer (None: no sample had an answer)
    share          the majority's votes / group_size (TTRL's majority ratio)
    majority_right 1.0 when the majority answer passes the verifier, else 0.0
    accuracy       the group's share of correct samples (pass@1 of this prompt)
    any_right      1.0 when some sample is correct (pass@G)
    ============== =====================================================================
    """
    from labkit.rewards import completion_content, extract_answer
    from labkit.rewards.ttrl import answer_key, majority_vote

    missing = {"id", "family", "text", "correct"} - set(samples.columns)
    if missing:
        raise ValueError(f"samples lacks the column(s) {sorted(missing)}; pass the frame of "
                         f"labkit.evaluate.sample_answers")
    if group_size is not None and group_size < 1:
        raise ValueError(f"group_size must be >= 1 (samples that vote), got {group_size}")
    rows = []
    for prompt_id, group in samples.groupby("id", sort=False):
        group = group.iloc[:group_size] if group_size else group
        texts = [extract_answer(completion_content(t)) for t in group["text"]]
        keys = [answer_key(f, t) for f, t in zip(group["family"], texts)]
        label, share = majority_vote(keys)
        correct = group["correct"].fillna(0.0).to_numpy() > 0
        voters = [i for i, k in enumerate(keys) if label is not None and k == label]
        row = {"id": prompt_id}
        if "question" in group:
            row["question"] = group["question"].iloc[0]
        row.update({"group_size": len(group),
                    "majority": texts[voters[0]] if voters else None, "share": share,
                    "majority_right": float(bool(voters) and bool(correct[voters[0]])),
                    "accuracy": float(correct.mean()), "any_right": float(correct.any())})
        rows.append(row)
    return pd.DataFrame(rows)


def plot_majority_vote(samples: pd.DataFrame, prompt: int = 0, group_size: int | None = None,
                       axes=None) -> Figure:
    """One prompt's sampled answers and their vote; and the vote's accuracy against G.

    Panel 1: how many of the prompt's first ``group_size`` samples gave each answer (the eight
    most common, then "other"), green when the verifier accepts the answer, red when not, the
    majority outlined in black; the title says the majority, its share and whether it is right.
    Panel 2: over every prompt of ``samples``, the majority vote's accuracy (maj@G: the share of
    prompts whose vote passes the verifier, the label accuracy of TTRL's pseudo-labels), the
    single-sample accuracy (pass@1) and pass@G, for G = 1 .. the samples per prompt; the
    dotted line marks ``group_size``. ``prompt`` is the position of the prompt in ``samples``.

    What to see: where maj@G sits above pass@1, a TTRL reward is mostly right and sharpening
    toward the vote raises accuracy (self-consistency); on prompts whose majority is wrong the
    reward pays the policy for agreeing with its own mistake. pass@G is the ceiling: a vote can
    only pick an answer that was sampled.

    Returns:
        the figure (2 panels).
    """
    from labkit.rewards import completion_content, extract_answer
    from labkit.rewards.ttrl import answer_key

    ids = list(dict.fromkeys(samples["id"]))
    if not 0 <= prompt < len(ids):
        raise ValueError(f"prompt must lie in 0..{len(ids) - 1} (the prompts of samples), "
                         f"got {prompt}")
    per_prompt = int(samples.groupby("id").size().min())
    size = per_prompt if group_size is None else group_size
    if not 1 <= size <= per_prompt:
        raise ValueError(f"group_size must lie in 1..{per_prompt} (the fewest samples of a "
                         f"prompt), got {group_size}")
    fig, (ax, ax_g) = make_panels(axes, 2, width=4.6, height=3.1)
    group = samples[samples["id"] == ids[prompt]].iloc[:size]
    vote = majority_vote_groups(group).iloc[0]
    texts = [extract_answer(completion_content(t)) for t in group["text"]]
    keys = [answer_key(f, t) for f, t in zip(group["family"], texts)]
    right = group["correct"].fillna(0.0).to_numpy() > 0
    counts: dict = {}
    for key, text, ok in zip(keys, texts, right):
        label = "(no vote)" if key is None else text.strip()  # no answer, or unparsable
        entry = counts.setdefault(key if key is not None else label, [label, 0, bool(ok)])
        entry[1] += 1
    bars = sorted(counts.values(), key=lambda e: -e[1])
    if len(bars) > 8:
        bars = bars[:8] + [["other", sum(e[1] for e in bars[8:]), False]]
    x = np.arange(len(bars))
    colors = ["C2" if ok else "C3" for _, _, ok in bars]
    edges = ["k" if vote["majority"] is not None and name == str(vote["majority"]).strip()
             else "none" for name, _, _ in bars]
    ax.bar(x, [n for _, n, _ in bars], color=colors, edgecolor=edges, linewidth=2)
    ax.set_xticks(x, [name[:8] for name, _, _ in bars], rotation=45, ha="right",
                  fontsize=SMALL)
    verdict = ("no answer" if vote["majority"] is None
               else f"majority {vote['majority']} ({vote['share']:.0%}): "
                    + ("right" if vote["majority_right"] else "wrong"))
    question = str(group["question"].iloc[0]) if "question" in group else f"prompt {prompt}"
    ax.set(title=f"{question[:40]}\n{verdict}", xlabel="sampled answer",
           ylabel=f"samples (of G = {size})")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color="C2", label="verifier: right"),
                       Patch(color="C3", label="verifier: wrong")], fontsize=SMALL)
    sizes = np.arange(1, per_prompt + 1)
    curves = [majority_vote_groups(samples, g) for g in sizes]
    ax_g.plot(sizes, [c["majority_right"].mean() for c in curves], "o-", ms=3,
              label="majority vote right (maj@G)")
    ax_g.plot(sizes, [c["accuracy"].mean() for c in curves], "--", label="one sample (pass@1)")
    ax_g.plot(sizes, [c["any_right"].mean() for c in curves], ":", label="any sample (pass@G)")
    ax_g.axvline(size, color="0.4", ls=":", lw=1)
    ax_g.set(title=f"over {len(ids)} prompts", xlabel="samples per prompt G",
             ylabel="fraction of prompts", ylim=(0, 1.02))
    legend_beside(ax_g)
    return fig


def difficulty_sampling_weights(difficulties=(1, 2, 3, 4), solve_rates=(0.9, 0.6, 0.3, 0.1),
                                progress: float = 0.25, curriculum_ratio: float = 0.5,
                                floor: float = 0.05) -> pd.DataFrame:
    """Each sampler's share of draws per difficulty, from the samplers' own ``weights()``.

    One prompt per entry of ``difficulties`` with its running solve rate from ``solve_rates``;
    ``progress`` is the share of training done (0..1). ``uniform``: every prompt alike;
    ``curriculum``: :class:`labkit.tricks.prompt_sampling.CurriculumOrder` at that progress (the
    hardest allowed difficulty rises over the first ``curriculum_ratio`` of training);
    ``prioritized``: :class:`labkit.tricks.prompt_sampling.PrioritizedOrder` with those solve rates
    (weight 1 - s + ``floor``). Columns: ``difficulty``, ``solve_rate`` and one per sampler
    (shares summing to 1 over the rows).
    """
    from labkit.tricks.prompt_sampling import CurriculumOrder, PrioritizedOrder

    if len(difficulties) != len(solve_rates) or not difficulties:
        raise ValueError(f"give one solve rate per difficulty: {len(difficulties)} "
                         f"difficulties, {len(solve_rates)} solve rates")
    if not all(0 <= s <= 1 for s in solve_rates):
        raise ValueError(f"solve_rates must lie in [0, 1], got {tuple(solve_rates)}")
    if not 0 <= progress <= 1:
        raise ValueError(f"progress must lie in [0, 1] (share of training done), got {progress}")
    if not 0 < curriculum_ratio <= 1:
        raise ValueError(f"curriculum_ratio must lie in (0, 1], got {curriculum_ratio}")
    total = 1000
    curriculum = CurriculumOrder(difficulties, seed=0, total_steps=total,
                                   ratio=curriculum_ratio)
    curriculum.step = round(progress * total)
    prioritized = PrioritizedOrder(len(difficulties), seed=0, floor=floor)
    prioritized.solve_rate = [float(s) for s in solve_rates]

    def shares(weights):
        weights = np.asarray(weights, dtype=float)
        return weights / weights.sum()

    return pd.DataFrame({"difficulty": list(difficulties), "solve_rate": list(solve_rates),
                         "uniform": shares(np.ones(len(difficulties))),
                         "curriculum": shares(curriculum.weights()),
                         "prioritized": shares(prioritized.weights())})


def multitask_weight_paths(accuracies: Mapping[str, float], steps: int = 150,
                           gains: Mapping[str, float] | None = None, lam: float = 0.2,
                           lr: float = 0.025) -> pd.DataFrame:
    """MT-GRPO's family weights step by step, from :class:`labkit.tricks.prompt_sampling.MultiTaskOrder`.

    Each step every family reports its batch accuracy, ``accuracies[f] + gains[f] * step``
    (clipped to [0, 1]; ``gains`` default 0: a family that does not improve), and the sampler
    takes one :func:`labkit.tricks.prompt_sampling.iwu_step` with ``lam`` and ``lr``. One row per step
    (0 = before any feedback): ``step``, ``weight_<family>`` and ``accuracy_<family>``.
    """
    from labkit.tricks.prompt_sampling import MultiTaskOrder

    if not accuracies:
        raise ValueError("accuracies must name at least one family")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    gains = dict(gains or {})
    names = list(accuracies)
    sampler = MultiTaskOrder(names, seed=0, lam=lam, lr=lr)
    rows = []
    for step in range(steps + 1):
        acc = {f: min(max(accuracies[f] + gains.get(f, 0.0) * step, 0.0), 1.0) for f in names}
        z = sampler.family_weights()
        rows.append({"step": step, **{f"weight_{f}": z[f] for f in names},
                     **{f"accuracy_{f}": acc[f] for f in names}})
        sampler.observe(list(range(len(names))), [acc[f] for f in names])
    return pd.DataFrame(rows)


def plot_sampling_weights(solve_rates=(0.9, 0.6, 0.3, 0.1), progress: float = 0.25,
                          floor: float = 0.05,
                          accuracies: Mapping[str, float] | None = None,
                          gains: Mapping[str, float] | None = None, lam: float = 0.2,
                          lr: float = 0.025, steps: int = 150, axes=None) -> Figure:
    """Which prompts a step trains on: difficulty samplers, and MT-GRPO's family weights.

    Panel 1: the share of draws per difficulty 1..4 of uniform sampling, the fixed curriculum at
    ``progress`` (share of training done; the ramp covers the first half) and prioritized
    sampling with ``solve_rates`` (:func:`difficulty_sampling_weights`). Panel 2: the family
    weights of :class:`labkit.tricks.prompt_sampling.MultiTaskOrder` over ``steps`` steps when the
    families' batch accuracies are ``accuracies`` (default add 0.6, sub 0.45, mul 0.1) rising
    by ``gains`` per step (:func:`multitask_weight_paths`).

    What to see: the curriculum hides the hard cells early and is uniform after the ramp;
    prioritized sampling follows the solve rates at every step (the adaptive curriculum); the
    multi-task weights drift toward the family with the lowest accuracy, at a speed set by
    ``lr`` and the size of the accuracy gaps (at the default 0.025 they move a few points in 150
    steps).

    Returns:
        the figure (2 panels).
    """
    accuracies = dict(accuracies or {"add": 0.6, "sub": 0.45, "mul": 0.1})
    table = difficulty_sampling_weights(solve_rates=solve_rates, progress=progress, floor=floor)
    paths = multitask_weight_paths(accuracies, steps, gains, lam, lr)
    fig, (ax, ax_m) = make_panels(axes, 2, width=4.6, height=3.1)
    columns = {"uniform": table["uniform"].to_numpy(),
               f"curriculum at {progress:.0%} of training": table["curriculum"].to_numpy(),
               "prioritized (1 - solve rate)": table["prioritized"].to_numpy()}
    grouped_bars(ax, columns)
    ax.set_xticks(np.arange(len(table)),
                  [f"d{d}\n{s:.0%}" for d, s in zip(table["difficulty"], table["solve_rate"])])
    ax.set(title="share of draws per difficulty", xlabel="difficulty (solve rate)",
           ylabel="share of prompts drawn", ylim=(0, 1.05))
    ax.legend(fontsize=SMALL)
    for k, family in enumerate(accuracies):
        ax_m.plot(paths["step"], paths[f"weight_{family}"], color=f"C{k}",
                  label=f"{family} (acc. {accuracies[family]:.2f})")
    ax_m.axhline(1 / len(accuracies), color="0.5", ls=":", lw=1)
    ax_m.set(title=f"MT-GRPO family weights (lr {lr:g}, λ {lam:g})", xlabel="training step",
             ylabel="sampling weight z of the family")
    legend_beside(ax_m)
    return fig


def plot_pass_at_k(curves: Mapping[str, pd.DataFrame], cell: str = "all", axes=None) -> Figure:
    """pass@k against k for several models, and each model's gain over the first.

    ``curves`` maps a model's name (e.g. "before", "after") to the frame of
    :func:`labkit.evaluate.pass_at_k_curve` (one row per (family, difficulty) cell and an
    ``all`` row, one ``pass@k`` column per k). ``cell`` is ``"all"`` or a cell as
    ``"<family> d<difficulty>"`` (e.g. ``"add d2"``). Panel 1: pass@k on a log2 axis of k;
    panel 2: pass@k of each model minus the first model's, in percentage points.

    What to see: RL that *sharpens* raises pass@1 a lot and pass@64 little or not at all (the
    gain shrinks to 0, or below, at large k: the base model could already sample those
    answers); RL that teaches a new skill would lift the whole curve.

    Returns:
        the figure (2 panels).
    """
    if not curves:
        raise ValueError("curves must hold at least one model's pass@k frame")

    def row_of(frame):
        if cell == "all":
            chosen = frame[frame["family"] == "all"]
        else:
            family, _, difficulty = cell.partition(" d")
            chosen = frame[(frame["family"] == family)
                           & (frame["difficulty"].astype(str) == difficulty)]
        if chosen.empty:
            cells = [f"{f} d{d}" for f, d in zip(frame["family"], frame["difficulty"])
                     if f != "all"]
            raise ValueError(f"cell must be 'all' or one of {cells}, got {cell!r}")
        row = chosen.iloc[0]
        ks = [int(c.removeprefix("pass@")) for c in frame.columns if c.startswith("pass@")]
        return np.array(ks), np.array([row[f"pass@{k}"] for k in ks], dtype=float), row

    fig, (ax, ax_d) = make_panels(axes, 2, width=4.3, height=3.0)
    first = None
    for k, (name, frame) in enumerate(curves.items()):
        ks, values, row = row_of(frame)
        ax.plot(ks, values, "o-", ms=3, color=f"C{k}", label=name)
        if first is None:
            first = (ks, values)
            prompts = int(row["prompts"])
            continue
        if not np.array_equal(ks, first[0]):
            raise ValueError(f"{name!r} has other k values than the first model's")
        ax_d.plot(ks, 100 * (values - first[1]), "o-", ms=3, color=f"C{k}",
                  label=f"{name} - {next(iter(curves))}")
    for a in (ax, ax_d):
        a.set_xscale("log", base=2)
    ax.set(title=f"pass@k, {cell} ({prompts} prompts)", xlabel="k (samples per prompt)",
           ylabel="pass@k (fraction of prompts)", ylim=(0, 1.02))
    ax.legend(fontsize=SMALL)
    ax_d.axhline(0, color="0.4", lw=0.8)
    ax_d.set(title="gain over the first model", xlabel="k (samples per prompt)",
             ylabel="pass@k difference (points)")
    if len(curves) > 1:
        ax_d.legend(fontsize=SMALL)
    return fig
