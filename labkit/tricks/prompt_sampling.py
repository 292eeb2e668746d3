"""Which prompts a step trains on: uniform passes, a difficulty curriculum, prioritized sampling
by solve rate, and multi-task weights.

Every prompt order has the same four methods: ``take(count)`` returns dataset row indices,
``observe(indices, solve_rates)`` feeds back how often each sampled prompt's group was right (the
trainer calls it after scoring every group, in every sampling round), ``end_batch()`` says that
one training step's batch is complete (the trainer calls it once per batch, however many rounds
dynamic sampling took to fill it), and ``state_dict()``/``load_state_dict()`` make a run
resumable. All draws come from a seeded ``random.Random``, so a seed gives the same prompts.

=========================  ================================================================
prompt order               method (``TrainConfig.prompt_sampler``)
=========================  ================================================================
:class:`UniformOrder`      shuffled passes over the data (``"uniform"``, the default)
:class:`CurriculumOrder`   easy to hard (Kimi k1.5, arXiv 2501.12599, section 2.3.4): the
                           hardest difficulty allowed rises linearly over the first
                           ``curriculum_ratio`` of training (``"curriculum"``)
:class:`PrioritizedOrder`  Kimi k1.5's prioritized sampling: p_i proportional to 1 - s_i,
                           s_i the prompt's running solve rate (``"prioritized"``): the
                           adaptive curriculum
:class:`MultiTaskOrder`    MT-GRPO (arXiv 2602.05547, Subroutine 1): family weights
                           z = softmax(xi) move toward the families whose accuracy (and its
                           improvement) is below the weighted average (``"multitask"``)
=========================  ================================================================

Lab choices: a prompt never seen counts as unsolved (s = 0) for prioritized sampling, and every
weight keeps a floor (``1 - s + floor``) so that a solved prompt can come back (Kimi's rule draws
a solved prompt with probability 0, and an all-solved set would divide by 0); MT-GRPO's logits
move by plain gradient steps (the paper uses AdamW on them) and the improvement term is the change
of each family's batch accuracy since its last draw; the ratio-preserving resampler (the paper's
Algorithm 2) is left out: the lab's dynamic sampling refills a batch regardless of family.
"""

from __future__ import annotations

import math
import random

import pandas as pd

PROMPT_SAMPLERS = ("uniform", "curriculum", "prioritized", "multitask")


class UniformOrder:
    """Shuffled passes over ``n`` prompts; the order depends only on ``(seed, epoch)``, so the
    position ``(epoch, offset)`` is the whole state."""

    def __init__(self, n: int, seed: int):
        if n < 1:
            raise ValueError("the train dataset is empty")
        self.n, self.seed, self.epoch, self.offset = n, seed, 0, 0
        self._order = self._permutation()

    def _permutation(self) -> list[int]:
        order = list(range(self.n))
        random.Random(self.seed * 1_000_003 + self.epoch).shuffle(order)
        return order

    def take(self, count: int) -> list[int]:
        indices = []
        while len(indices) < count:
            if self.offset == self.n:
                self.epoch, self.offset = self.epoch + 1, 0
                self._order = self._permutation()
            chunk = min(count - len(indices), self.n - self.offset)
            indices += self._order[self.offset:self.offset + chunk]
            self.offset += chunk
        return indices

    def observe(self, indices, solve_rates) -> None:
        """Uniform sampling ignores the feedback."""

    def end_batch(self) -> None:
        """Uniform passes follow no schedule."""

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "offset": self.offset}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.offset = state["epoch"], state["offset"]
        self._order = self._permutation()


class _WeightedOrder:
    """Draws without replacement within a call, with weights from :meth:`weights`."""

    def __init__(self, n: int, seed: int):
        if n < 1:
            raise ValueError("the train dataset is empty")
        self.n = n
        self._rng = random.Random(seed)

    def weights(self) -> list[float]:
        raise NotImplementedError

    def end_batch(self) -> None:
        """No schedule over training steps (the curriculum has one)."""

    def take(self, count: int) -> list[int]:
        weights = list(self.weights())
        chosen = []
        for _ in range(count):
            if not any(w > 0 for w in weights):  # all drawn this call: start a new round
                weights = list(self.weights())
            i = self._rng.choices(range(self.n), weights=weights)[0]
            chosen.append(i)
            weights[i] = 0.0
        return chosen

    def state_dict(self) -> dict:
        return {"rng": self._rng.getstate()}

    def load_state_dict(self, state: dict) -> None:
        version, internal, gauss = state["rng"]
        self._rng.setstate((version, tuple(internal), gauss))


class CurriculumOrder(_WeightedOrder):
    """Easy to hard: at progress p = step / (ratio * total steps), prompts whose difficulty is at
    most ``d_min + p * (d_max - d_min)`` are drawn uniformly; after that, all of them. ``step``
    counts training steps (batches completed, :meth:`end_batch`), not sampling rounds: with
    dynamic sampling a step takes several."""

    def __init__(self, difficulties, seed: int, total_steps: int, ratio: float = 0.5):
        super().__init__(len(difficulties), seed)
        self.difficulties = [int(d) for d in difficulties]
        self.low, self.high = min(self.difficulties), max(self.difficulties)
        self.ramp = max(1, round(ratio * total_steps))
        self.step = 0

    def allowed_difficulty(self) -> float:
        progress = min(self.step / self.ramp, 1.0)
        return self.low + progress * (self.high - self.low)

    def weights(self) -> list[float]:
        top = self.allowed_difficulty()
        return [1.0 if d <= top + 1e-9 else 0.0 for d in self.difficulties]

    def observe(self, indices, solve_rates) -> None:
        """The fixed curriculum ignores the feedback (the prioritized order is the adaptive
        one)."""

    def end_batch(self) -> None:
        self.step += 1  # the schedule advances with training

    def state_dict(self) -> dict:
        return {**super().state_dict(), "step": self.step}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.step = state["step"]


class PrioritizedOrder(_WeightedOrder):
    r"""Kimi k1.5's prioritized sampling: :math:`p_i \propto 1 - s_i + \text{floor}` with
    :math:`s_i` an exponential moving average (weight ``ema`` on the newest) of prompt i's group
    solve rate; unseen prompts have :math:`s_i = 0`."""

    def __init__(self, n: int, seed: int, floor: float = 0.05, ema: float = 0.5):
        super().__init__(n, seed)
        self.floor, self.ema = floor, ema
        self.solve_rate = [0.0] * n

    def weights(self) -> list[float]:
        return [1.0 - s + self.floor for s in self.solve_rate]

    def observe(self, indices, solve_rates) -> None:
        for i, rate in zip(indices, solve_rates):
            if not math.isnan(rate):
                self.solve_rate[i] += self.ema * (rate - self.solve_rate[i])

    def state_dict(self) -> dict:
        return {**super().state_dict(), "solve_rate": list(self.solve_rate)}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.solve_rate = list(state["solve_rate"])


def iwu_step(logits: list[float], scores: list[float], lr: float) -> list[float]:
    r"""MT-GRPO's improvement-aware weight update (arXiv 2602.05547, Subroutine 1), one plain
    gradient step on the task logits.

    Textbook form::

        z = softmax(logits)
        g = z * (scores - (z * scores).sum())          # below-average scores get g < 0
        return logits - lr * g                         # ... so their logits rise

    Check: uniform z and scores (0.2, 0.5, 0.8) give g = (-0.1, 0, 0.1); equal scores leave the
    logits unchanged.
    """
    top = max(logits)
    exp = [math.exp(x - top) for x in logits]
    z = [e / sum(exp) for e in exp]
    mean = sum(zk * sk for zk, sk in zip(z, scores))
    return [x - lr * zk * (sk - mean) for x, zk, sk in zip(logits, z, scores)]


class MultiTaskOrder(_WeightedOrder):
    r"""MT-GRPO's task weights: a family is drawn with probability :math:`z_k =
    \mathrm{softmax}(\xi)_k`, then a prompt uniformly within it. After each step every family
    seen gets the score :math:`s_k = I_k + \lambda J_k` (its batch accuracy :math:`J_k` and the
    improvement :math:`I_k` since its previous score) and the logits take one :func:`iwu_step`."""

    def __init__(self, families, seed: int, lam: float = 0.2, lr: float = 0.025):
        super().__init__(len(families), seed)
        self.families = list(families)
        self.names = sorted(set(self.families))
        self.logits = [0.0] * len(self.names)
        self.last_accuracy: dict[str, float] = {}
        self.lam, self.lr = lam, lr

    def family_weights(self) -> dict[str, float]:
        top = max(self.logits)
        exp = [math.exp(x - top) for x in self.logits]
        return {name: e / sum(exp) for name, e in zip(self.names, exp)}

    def weights(self) -> list[float]:
        z = self.family_weights()
        size = {name: self.families.count(name) for name in self.names}
        return [z[f] / size[f] for f in self.families]

    def observe(self, indices, solve_rates) -> None:
        by_family: dict[str, list[float]] = {}
        for i, rate in zip(indices, solve_rates):
            if not math.isnan(rate):
                by_family.setdefault(self.families[i], []).append(rate)
        if not by_family:
            return
        accuracy = {f: sum(v) / len(v) for f, v in by_family.items()}
        score = {f: acc - self.last_accuracy.get(f, acc) + self.lam * acc
                 for f, acc in accuracy.items()}
        z = self.family_weights()
        # a family not drawn this step scores the weighted mean of the others: no push either way
        mean = sum(z[f] * score[f] for f in score) / sum(z[f] for f in score)
        self.logits = iwu_step(self.logits, [score.get(n, mean) for n in self.names], self.lr)
        self.last_accuracy.update(accuracy)

    def table(self) -> pd.DataFrame:
        """Current family weights and last batch accuracies, for plots."""
        z = self.family_weights()
        return pd.DataFrame({"family": self.names, "weight": [z[n] for n in self.names],
                             "last_accuracy": [self.last_accuracy.get(n, math.nan)
                                               for n in self.names]})

    def state_dict(self) -> dict:
        return {**super().state_dict(), "logits": list(self.logits),
                "last_accuracy": dict(self.last_accuracy)}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.logits = list(state["logits"])
        self.last_accuracy = dict(state["last_accuracy"])


def make_prompt_order(kind: str, dataset, seed: int, *, total_steps: int,
                 curriculum_ratio: float = 0.5, prioritized_floor: float = 0.05,
                 multitask_lambda: float = 0.2, multitask_lr: float = 0.025):
    """The prompt order ``kind`` over ``dataset`` (curriculum needs a ``difficulty`` column,
    multi-task a ``family`` column)."""
    n = len(dataset)
    if kind == "uniform":
        return UniformOrder(n, seed)
    if kind == "prioritized":
        return PrioritizedOrder(n, seed, prioritized_floor)
    column = {"curriculum": "difficulty", "multitask": "family"}.get(kind)
    if column is None:
        raise ValueError(f"prompt_sampler must be one of {PROMPT_SAMPLERS}, got {kind!r}")
    if column not in dataset.column_names:
        raise ValueError(f"prompt_sampler={kind!r} reads the {column!r} column, which the train "
                         f"dataset does not have")
    if kind == "curriculum":
        return CurriculumOrder(dataset[column], seed, total_steps, curriculum_ratio)
    return MultiTaskOrder(dataset[column], seed, multitask_lambda, multitask_lr)


__all__ = ["PROMPT_SAMPLERS", "CurriculumOrder", "MultiTaskOrder", "PrioritizedOrder",
           "UniformOrder", "iwu_step", "make_prompt_order"]
