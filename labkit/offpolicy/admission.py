"""Admission: which groups an asynchronous trainer accepts when groups take different times.

In a real async system (AReaL, Fu et al., arXiv 2505.24298, section 4) the inference engine
decodes many groups at once and a group is done when its longest completion is: a long group
started with the weights of step ``v`` finishes while the trainer has moved on to ``v + 2`` or
``v + 5``, so **long groups carry older policy versions**. A staleness bound k (``max_staleness``)
then has to be kept one of two ways (``staleness_admission``):

* ``"discard"``: the trainer takes groups in the order they finish and drops any group more than k
  steps old; the sampler refills the freed place with a new prompt (open-instruct's
  ``max_result_age_steps``, the older tinker-cookbook and prime-rl's cancel-and-drop). Nothing
  waits, but what is dropped is not random: the long groups, often the hard prompts. Reports of
  real runs: about a fifth of groups discarded by every async arm (marin issue 8955), slow
  problems "regenerated over and over and rarely make it into a batch" (tinker-cookbook pull
  request 822).
* ``"slow_down"``: admission control. The sampler may have at most ``(k + 1) * B`` groups in
  flight or waiting (AReaL's rule: ``(k + v + 1) * B`` groups may have started by version v), the
  trainer trains oldest version first, and it waits for a straggler rather than let it pass the
  bound. No group is dropped, so the trained lengths are the sampled lengths (the invariant
  Magistral states, arXiv 2506.10910, section 3); the price is the trainer's waiting, and the
  sampler's, whose budget grows only as the trainer advances.

Both modes share the start budget; they differ where the bound is enforced. With k = 0 both are
the synchronous trainer: B groups start, the trainer waits for all of them.

The clock here is **simulated**: one unit of time per decoded token of a group's longest
completion (a group decodes on its own slot, as in an engine's continuous batching), and
``train_time`` units per training step. Nothing sleeps; the simulation only decides *which* groups
each step trains, and the sampling itself is real (:class:`AdmissionSource`: each group is
sampled, with the trainer's current weights, at the simulated moment it starts). The same
:class:`AdmissionClock` runs :func:`simulate_admission`, a pure function over given lengths that a
widget can call to show which lengths survive.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, fields, replace

import pandas as pd

from labkit.offpolicy.staleness import (
    StampedBatch,
    experience_from_state,
    experience_state,
    version_stamp,
)
from labkit.plugins import config_rule

#: ``staleness_admission`` values (None: whole batches, no clock: :mod:`labkit.offpolicy.staleness`).
ADMISSIONS = ("discard", "slow_down")
#: The ``outcome`` of a group in the admission log.
OUTCOMES = ("trained", "discarded", "pending")


@dataclass
class Group:
    """One group on the simulated clock."""

    id: int
    """its place in the sampling stream (0, 1, 2, ...)"""
    version: int
    """the trainer step whose weights sampled it"""
    start: float
    finish: float
    length: float
    """decoding time: its longest completion, in tokens"""


def check_admission(admission, max_staleness, groups_per_step, train_time) -> None:
    """Refuse values the clock cannot run, naming the argument, the value and what is allowed."""
    if admission not in ADMISSIONS:
        raise ValueError(f"staleness_admission must be one of {', '.join(map(repr, ADMISSIONS))}"
                         f", got {admission!r}")
    for name, value, low in (("max_staleness", max_staleness, 0),
                             ("groups_per_step", groups_per_step, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if isinstance(train_time, bool) or not isinstance(train_time, int | float) \
            or not math.isfinite(train_time) or train_time < 0:
        raise ValueError(f"admission_train_time must be a finite number >= 0, got "
                         f"{train_time!r}")


class AdmissionClock:
    """The simulated clock of one run (module docstring): call :meth:`step` once per training
    step with a function that starts groups and returns their lengths."""

    def __init__(self, groups_per_step: int, max_staleness: int, admission: str,
                 train_time: float):
        check_admission(admission, max_staleness, groups_per_step, train_time)
        self.groups_per_step, self.max_staleness = groups_per_step, max_staleness
        self.admission, self.train_time = admission, float(train_time)
        self.now, self.version, self.next_id = 0.0, 0, 0
        self.in_flight: list[Group] = []
        self.finished: list[Group] = []  # arrived, waiting for the trainer, in finish order
        self.records: list[dict] = []  # one per trained or discarded group

    def budget(self) -> int:
        """How many groups may start now: at most (k + 1) * B in flight or waiting."""
        return (self.max_staleness + 1) * self.groups_per_step - len(self.in_flight) \
            - len(self.finished)

    def step(self, start) -> tuple[list[Group], list[Group], float] | None:
        """Advance to the moment the trainer has its batch, then train for ``train_time``.

        ``start(n)`` starts n groups with the current weights (version :attr:`version`) and
        returns their lengths (fewer when the stream has run dry). Returns the batch's groups,
        the groups discarded on the way and the time the trainer waited; None when the stream
        ran dry before a batch was ready."""
        waited_from, discarded = self.now, []
        while True:
            self._arrive()
            if self.admission == "discard":
                stale = [g for g in self.finished if self.version - g.version > self.max_staleness]
                for g in stale:
                    self.finished.remove(g)
                    self._record(g, "discarded")
                discarded += stale
            wanted = self.budget()
            if wanted > 0:
                for length in start(wanted):
                    self._start(float(length))
            batch = self._ready()
            if batch is not None:
                break
            if not self.in_flight:
                return None
            self.now = max(self.now, min(g.finish for g in self.in_flight))
        wait = self.now - waited_from
        for g in batch:
            self.finished.remove(g)
            self._record(g, "trained")
        self.now += self.train_time
        self.version += 1
        return batch, discarded, wait

    def pending(self) -> list[dict]:
        """Records of the groups still in flight or waiting (outcome ``pending``)."""
        return [self._describe(g, "pending") for g in self.finished + self.in_flight]

    # ---- inside the clock ---------------------------------------------------------------------
    def _start(self, length: float) -> None:
        if not math.isfinite(length) or length < 0:
            raise ValueError(f"a group's length must be a finite number >= 0, got {length!r}")
        group = Group(self.next_id, self.version, self.now, self.now + length, length)
        self.next_id += 1
        self.in_flight.append(group)

    def _arrive(self) -> None:
        done = sorted((g for g in self.in_flight if g.finish <= self.now),
                      key=lambda g: (g.finish, g.id))
        for g in done:
            self.in_flight.remove(g)
        self.finished += done

    def _ready(self) -> list[Group] | None:
        """This step's batch, or None while the trainer must wait."""
        size = self.groups_per_step
        if len(self.finished) < size:
            return None
        if self.admission == "discard":
            return self.finished[:size]  # finish order: the fast groups first
        # slow_down: a group that would be more than k steps old at the next step must be in this
        # batch; while one is still decoding, the trainer waits for it
        if any(self.version + 1 - g.version > self.max_staleness for g in self.in_flight):
            return None
        return sorted(self.finished, key=lambda g: (g.version, g.finish, g.id))[:size]

    def _describe(self, g: Group, outcome: str) -> dict:
        done = outcome != "pending"
        return {"group": g.id, "length": g.length, "version": g.version, "start": g.start,
                "finish": g.finish, "step": self.version + 1 if done else None,
                "staleness": self.version - g.version if done else None, "outcome": outcome}

    def _record(self, g: Group, outcome: str) -> None:
        self.records.append(self._describe(g, outcome))

    def state_dict(self) -> dict:
        """The clock as plain data (a checkpoint stores it)."""
        return {"now": self.now, "version": self.version, "next_id": self.next_id,
                "in_flight": [vars(g).copy() for g in self.in_flight],
                "finished": [vars(g).copy() for g in self.finished],
                "records": copy.deepcopy(self.records)}

    def load_state_dict(self, state: dict) -> None:
        self.now, self.version, self.next_id = state["now"], state["version"], state["next_id"]
        self.in_flight = [Group(**g) for g in state["in_flight"]]
        self.finished = [Group(**g) for g in state["finished"]]
        self.records = copy.deepcopy(state["records"])


@dataclass
class AdmissionRun:
    """What :func:`simulate_admission` returns."""

    groups: pd.DataFrame
    """one row per group: group, length, version, start, finish, step (the history's step that
    trained or discarded it, 1-based as the history's), staleness, outcome (:data:`OUTCOMES`),
    kept"""
    steps: pd.DataFrame
    """one row per training step: step, time (when its batch was ready), wait, groups_discarded,
    staleness_mean, staleness_max"""


def simulate_admission(lengths, groups_per_step: int, max_staleness: int,
                       admission: str = "discard", train_time: float = 32.0,
                       steps: int | None = None) -> AdmissionRun:
    """Run the simulated clock on given group lengths (in tokens, in sampling order) and return
    which groups were trained, discarded or still pending, and each step's wait.

    The groups start in the order of ``lengths``; the run stops after ``steps`` steps (None: when
    the lengths run out). Pure: the same arguments give the same tables, so a widget can redraw
    them as a slider moves."""
    lengths = [float(x) for x in lengths]
    clock = AdmissionClock(groups_per_step, max_staleness, admission, train_time)
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 0):
        raise ValueError(f"steps must be an integer >= 0 or None, got {steps!r}")
    stream = iter(lengths)

    def start(n):
        return [x for _, x in zip(range(n), stream)]

    rows = []
    while steps is None or clock.version < steps:
        time_before = clock.now
        result = clock.step(start)
        if result is None:
            break
        batch, discarded, wait = result
        stale = [clock.version - 1 - g.version for g in batch]
        rows.append({"step": clock.version, "time": time_before + wait, "wait": wait,
                     "groups_discarded": len(discarded),
                     "staleness_mean": sum(stale) / len(stale), "staleness_max": max(stale)})
    groups = pd.DataFrame(clock.records + clock.pending(),
                          columns=["group", "length", "version", "start", "finish", "step",
                                   "staleness", "outcome"]).sort_values("group",
                                                                        ignore_index=True)
    groups["kept"] = groups["outcome"] == "trained"
    return AdmissionRun(groups, pd.DataFrame(rows, columns=["step", "time", "wait",
                                                            "groups_discarded",
                                                            "staleness_mean", "staleness_max"]))


def _round_rows(round_, rows: slice):
    """One group's rows of a :class:`~labkit.training.scoring.SampledRound`."""
    return replace(round_, **{f.name: getattr(round_, f.name)[rows] for f in fields(round_)
                              if f.name != "episodes"})


class AdmissionSource:
    """The trainer's producer with ``staleness_admission``: the simulated clock decides which
    groups each step trains; each group is really sampled, with the policy's weights of the
    moment it starts on the clock (its version), and the step's batch is assembled from the
    groups the clock hands over (:meth:`labkit.training.batches.Sampling.assemble`). One thread,
    deterministic: a seed gives the same run, and a checkpoint stores the clock and the groups
    in flight (:meth:`state_dict`)."""

    samples_in_thread = False  # the training thread samples (AheadSource.samples_in_thread)

    def __init__(self, sampling, max_staleness: int, admission: str, train_time: float):
        if sampling.environment_factory is not None:
            raise ValueError(
                f"staleness_admission={admission!r} is not available with episodes "
                f"(environment_factory): the clock splits each sampling round into groups, and "
                f"an episode round's tool calls and turns are recorded for the round, not per "
                f"group, so its episode columns would be lost. Train episodes stale with "
                f"max_staleness alone (whole batches, staleness_admission=None)")
        self.sampling = sampling  # the run's labkit.training.batches.Sampling
        self.clock = AdmissionClock(sampling.config.prompts_per_step, max_staleness, admission,
                                    train_time)
        self.groups: dict[int, tuple] = {}  # id -> (Experience, SampledRound, seconds), untrained
        self.about: dict[int, dict] = {}  # id -> prompt_index, family, difficulty, mean_length

    def _start(self, n: int, temperature: float) -> list[float]:
        """Sample n groups now with the current weights; their decoding times."""
        generations = self.sampling.config.num_generations
        indices, batch, round_, seconds = self.sampling.groups(n, temperature)
        lengths = batch.lengths.view(n, generations).float()
        data = self.sampling.train_dataset
        columns = data.column_names
        for j, index in enumerate(indices):
            rows = slice(j * generations, (j + 1) * generations)
            group = self.clock.next_id + j
            part = batch.select(rows)
            part.token_versions = version_stamp(part, self.clock.version)
            self.groups[group] = (part, _round_rows(round_, rows), seconds / n)
            row = data[int(index)]
            self.about[group] = {
                "prompt_index": int(index),
                "family": row["family"] if "family" in columns else None,
                "difficulty": row["difficulty"] if "difficulty" in columns else None,
                "mean_length": float(lengths[j].mean())}
        return lengths.amax(1).tolist()

    def next(self, step: int) -> StampedBatch:
        """The batch of ``step``: run the clock until the trainer has prompts_per_step groups."""
        temperature = self.sampling.temperature_at(step)  # constant (_check_admission)
        result = self.clock.step(lambda n: self._start(n, temperature))
        if result is None:  # the prompt order never runs dry; kept as a clear failure
            raise RuntimeError("the admission clock ran out of groups to sample")
        batch_groups, discarded, wait = result
        for g in discarded:
            del self.groups[g.id]
        parts = [self.groups.pop(g.id) for g in batch_groups]
        batch, row = self.sampling.assemble([p[0] for p in parts], [p[1] for p in parts],
                                            temperature, sum(p[2] for p in parts))
        trained_at = self.clock.version - 1
        stale = [trained_at - g.version for g in batch_groups]
        row.update(groups_discarded=len(discarded), admission_wait=wait,
                   staleness_mean=sum(stale) / len(stale))
        return StampedBatch(batch, row, min(g.version for g in batch_groups), temperature)

    def log(self) -> pd.DataFrame:
        """One row per sampled group: group, prompt_index, family, difficulty, length (its
        longest completion, the clock's decoding time), mean_length, version, start, finish, step
        (trained or discarded at; None while pending), staleness, outcome (:data:`OUTCOMES`) and
        kept."""
        records = self.clock.records + self.clock.pending()
        table = pd.DataFrame([{**r, **self.about[r["group"]]} for r in records],
                             columns=["group", "prompt_index", "family", "difficulty", "length",
                                      "mean_length", "version", "start", "finish", "step",
                                      "staleness", "outcome"])
        table = table.sort_values("group", ignore_index=True)
        table["kept"] = table["outcome"] == "trained"
        return table

    # ---- a failed step, a checkpoint ----------------------------------------------------------
    def snapshot(self):
        return self.clock.state_dict(), dict(self.groups), copy.deepcopy(self.about)

    def restore(self, state) -> None:
        clock, self.groups, self.about = state
        self.clock.load_state_dict(clock)

    def state_dict(self) -> dict:
        """The clock, the groups sampled and not yet trained, and the log's prompt details, as
        tensors and plain containers (a checkpoint loads them with ``weights_only=True``)."""
        return {"clock": self.clock.state_dict(),
                "groups": {str(i): {"batch": experience_state(e), "round": vars(r).copy(),
                                    "seconds": s} for i, (e, r, s) in self.groups.items()},
                "about": {str(i): dict(a) for i, a in self.about.items()}}

    def load_state_dict(self, state: dict) -> None:
        from labkit.training.scoring import SampledRound

        self.clock.load_state_dict(state["clock"])
        self.groups = {int(i): (experience_from_state(g["batch"]), SampledRound(**g["round"]),
                                g["seconds"]) for i, g in state["groups"].items()}
        self.about = {int(i): dict(a) for i, a in state["about"].items()}

    def close(self) -> None:
        pass  # the clock and its groups stay: another train() call goes on with them


@config_rule
def _check_admission(config):
    admission = config.staleness_admission
    if admission is None:
        return
    if config.async_mode != "deterministic":
        raise ValueError(f"staleness_admission={admission!r} runs a simulated clock in one "
                         f"thread, and async_mode={config.async_mode!r} samples in a thread of "
                         f"its own: use async_mode='deterministic'")
    if config.dynamic_sampling:
        raise ValueError(f"staleness_admission={admission!r} decides which groups a step trains "
                         f"by their time on the clock, and dynamic_sampling drops groups by their "
                         f"rewards within a step's sampling call: use one of them "
                         f"(dynamic_sampling=False)")
    if config.temperature_schedule != "constant":
        raise ValueError(f"staleness_admission={admission!r} trains groups sampled at different "
                         f"steps in one batch, which the update scores at one temperature: "
                         f"temperature_schedule={config.temperature_schedule!r} would make them "
                         f"differ; use temperature_schedule='constant'")
