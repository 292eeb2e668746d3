"""How far a recorded number travels: its portable band, measured across CPU kernel paths and seeds.

A notebook records every value its prose quotes (:mod:`labkit.quotes`). On the platform that
recorded it (:mod:`labkit.runtime.platform_record`) a seeded value repeats bit for bit, and the
notebook tests check it exactly. On any other platform (another CPU, another kernel path, a GPU)
its last bits move, and a live training run that samples from the model takes another trajectory
within a few steps. There each value is checked against a band the lab measured
(``python -m labkit bands measure``) by executing the notebook again on its own machine:

* under other kernel paths (``ATEN_CPU_CAPABILITY=default``; torch's AVX2 kernels with MKL's
  vendor-neutral path), which move every float32 product's last bits as another CPU does;
* with every training run's seed shifted (:mod:`labkit.runtime.seeds`), which gives each run
  outcome the spread a new trajectory has; a live run's committed other seeds
  (``seeds.s<i>.<name>`` for ``live.<name>``) count too.

Each value then falls in one of three kinds (:func:`kind_of`):

``exact``
    nothing moved it: a number read from a committed log, a count, a rule's verdict. Checked
    within the float floor (below), so a platform whose arithmetic differs in a last bit passes.
``float``
    a computation on fixed inputs (a forward pass, a formula) that a kernel path moved in its
    last digits and no seed moved further than :data:`DIVERGED` (relative). Its band is the value
    plus or minus :data:`SAFETY` times the largest move measured, never narrower than the floor.
``run``
    an outcome of training or sampling: another seed, or a kernel path that took another
    trajectory, moved it by more than :data:`DIVERGED`. Its band is a 99.9% prediction interval
    for one more outcome (:func:`prediction_half_width`) around the mean of every outcome
    measured (the lab's value, each diverged kernel path's, each seed's), cut to the range
    such an outcome lives in (:func:`domain`), and always holds all of them. A value outside
    it is a different result, not a different machine.

The floor is measured too: :func:`float_floor` is :data:`SAFETY` times the largest relative move
of any ``float`` value of any notebook.

The bands of a notebook live in ``notebooks/results/bands/NN_name.json`` with every measurement
they rest on; each band names the committed value it was measured for, and a band whose value is
no longer the committed one is stale (the notebook tests then fail, asking for a new measurement,
rather than pass on an old band).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from labkit.runtime.seeds import SEED_OFFSET_VARIABLE

WRITER = "labkit.bands"
#: A relative move above this is a different trajectory (a run), not float32 rounding.
DIVERGED = 1e-5
#: Float bands are this many times the largest move measured; the floor is too.
SAFETY = 10.0
#: Student's t at 0.9995 for 1, 2, ... 30 degrees of freedom, then the normal's 3.291: a run's
#: band is a 99.9% prediction interval for one more outcome (:func:`prediction_half_width`).
T_9995 = (636.62, 31.599, 12.924, 8.610, 6.869, 5.959, 5.408, 5.041, 4.781, 4.587, 4.437,
          4.318, 4.221, 4.140, 4.073, 4.015, 3.965, 3.922, 3.883, 3.850, 3.819, 3.792, 3.768,
          3.745, 3.725, 3.707, 3.690, 3.674, 3.659, 3.646, 3.291)
#: The floor when no value has moved at all (no measurement yet): float32's epsilon.
FLOAT_FLOOR = 2.0 ** -23
KINDS = ("exact", "float", "run")
#: Seed names that differ from the live name: live.pass8_* <-> seeds.s<i>.passk_*.
_SEED_ALIASES = (("pass8", "passk"),)


@dataclass(frozen=True)
class Band:
    """A value's portable band: its kind, the value it was measured for, and its edges."""

    kind: str
    value: float
    low: float
    high: float

    def contains(self, number: float) -> bool:
        return self.low <= number <= self.high

    def describe(self) -> str:
        return f"{self.kind} band [{self.low!r}, {self.high!r}]"


def relative_move(value: float, other: float) -> float:
    """|other - value| relative to the larger magnitude; 0 for equal numbers."""
    if other == value:
        return 0.0
    return abs(other - value) / max(abs(value), abs(other))


def seed_values(key: str, values: dict[str, dict]) -> list[float]:
    """The per-seed values a notebook recorded for ``live.<name>``: ``seeds.s<i>.<name>``."""
    if not key.startswith("live."):
        return []
    names = {key[len("live."):]}
    for live, seeds in _SEED_ALIASES:
        names |= {name.replace(live, seeds) for name in names}
    pattern = re.compile(r"seeds\.s\d+\.(" + "|".join(map(re.escape, sorted(names))) + r")")
    return [entry["value"] for name, entry in sorted(values.items()) if pattern.fullmatch(name)]


def seed_runs(data: dict, keys) -> dict[str, dict[str, float]]:
    """How far one seed's story travels: ``{run: {key: value}}`` for each seed path a bands file
    (``data``, :func:`load_bands`) measured (``seed1000`` ... ``seed8000``: every training seed
    shifted by that offset, :mod:`labkit.runtime.seeds`), with the committed value as run
    ``"recorded"``. A key a path did not measure is left out of that run."""
    paths = data.get("paths", {})
    seeded = [name for name, path in paths.items()
              if SEED_OFFSET_VARIABLE in (path.get("variables") or {})]
    entries = {key: data.get("bands", {}).get(key) or {} for key in keys}
    runs = {"recorded": {key: entry["value"] for key, entry in entries.items() if "value" in entry}}
    for name in sorted(seeded, key=lambda n: int(paths[n]["variables"][SEED_OFFSET_VARIABLE])):
        runs[name] = {key: entry["measured"][name] for key, entry in entries.items()
                      if name in entry.get("measured", {})}
    return runs


def measured_range(entry: dict) -> tuple[float, float]:
    """The lowest and the highest outcome the lab measured for one value of a bands file
    (``data["bands"][key]``): the committed value, every path's (the other seeds, the other CPU
    kernel paths) and the committed other seeds of a live run. The prose quotes this range, what
    the runs did; the notebook tests on another machine accept the wider prediction interval."""
    values = [float(entry["value"]), *map(float, (entry.get("measured") or {}).values()),
              *map(float, entry.get("seeds_recorded") or ())]
    return min(values), max(values)


def kind_of(value: float, kernels: dict[str, float], seeds: list[float] = ()) -> str:
    """``exact``, ``float`` or ``run`` (module docstring) from the values of the kernel paths
    and of the other seeds."""
    moves = [relative_move(value, other) for other in kernels.values()]
    if max(moves, default=0.0) > DIVERGED or any(relative_move(value, seed) > DIVERGED
                                                  for seed in seeds):
        return "run"
    return "float" if max(moves, default=0.0) > 0 else "exact"


def run_samples(value: float, kernels: dict[str, float], seeds: list[float]) -> list[float]:
    """The outcomes a run's band rests on: the lab's value, each kernel path's that took another
    trajectory, and each other seed's (seed 0 of a live-seed log, the live cell's own run,
    counted once)."""
    others = list(seeds)
    if value in others:
        others.remove(value)
    return [value, *(k for k in kernels.values() if relative_move(value, k) > DIVERGED), *others]


def prediction_half_width(samples: list[float]) -> float:
    """Half the width of a 99.9% prediction interval for one more outcome drawn like
    ``samples``: Student's t at 0.9995 with n - 1 degrees of freedom, times the samples'
    standard deviation, times sqrt(1 + 1/n)."""
    n = len(samples)
    mean = sum(samples) / n
    deviation = math.sqrt(sum((x - mean) ** 2 for x in samples) / (n - 1))
    return T_9995[min(n - 2, len(T_9995) - 1)] * deviation * math.sqrt(1 + 1 / n)


def domain(samples: list[float]) -> tuple[float, float]:
    """The range a run's outcome is read to live in, from its measured outcomes: [0, 1] when
    every one lies there (a share: pass@1, a clip fraction), [0, inf) when every one is >= 0 (a
    length, a count, an entropy), (-inf, 0] when every one is <= 0 (a log-probability), else the
    whole line. A prediction interval from a handful of runs can reach past these edges; the
    outcome cannot (a gain whose every measured value was positive is read as a gain: a run
    elsewhere that loses accuracy fails its band, as it would fail the notebook's assertion)."""
    if all(0 <= x <= 1 for x in samples):
        return 0.0, 1.0
    if all(x >= 0 for x in samples):
        return 0.0, math.inf
    if all(x <= 0 for x in samples):
        return -math.inf, 0.0
    return -math.inf, math.inf


def band_of(value: float, kernels: dict[str, float], seeds: list[float],
            floor: float) -> Band:
    """The band of ``value`` from its kernel paths' values and its other seeds'."""
    kind = kind_of(value, kernels, seeds)
    if kind == "run":
        samples = run_samples(value, kernels, seeds)
        mean, half = sum(samples) / len(samples), prediction_half_width(samples)
        low, high = min(*samples, mean - half), max(*samples, mean + half)
        floor_, ceiling = domain(samples)
        return Band(kind, value, max(low, floor_), min(high, ceiling))
    moved = max((abs(other - value) for other in (*kernels.values(), *seeds)), default=0.0)
    half = max(floor * abs(value), SAFETY * moved)
    return Band(kind, value, value - half, value + half)


def float_floor(measured) -> float:
    """:data:`SAFETY` times the largest relative move of any ``float`` value among ``measured``
    (``(value, kernels, seeds)`` of every value of every notebook), and never below
    :data:`FLOAT_FLOOR`."""
    moves = [relative_move(value, other) for value, kernels, seeds in measured
             if kind_of(value, kernels, seeds) == "float" for other in kernels.values()]
    return max(FLOAT_FLOOR, SAFETY * max(moves, default=0.0))


# --- the bands files ----------------------------------------------------------------------------

def bands_path(notebook: str, folder: Path) -> Path:
    return Path(folder) / f"{notebook}.json"


def load_bands(notebook: str, folder: Path) -> dict:
    """A notebook's bands file as written by ``python -m labkit bands build``, or ``{}`` where
    there is none; a file this module did not write, or one it cannot read, raises ValueError."""
    path = bands_path(notebook, folder)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"{path} cannot be read as a bands file: {err}") from None
    if not isinstance(data, dict) or data.get("written_by") != WRITER:
        raise ValueError(f"{path} was not written by {WRITER} (no \"written_by\": {WRITER!r})")
    return data


def band_entry(data: dict, key: str, committed: float) -> Band | str:
    """The band of ``key`` in a bands file's data, or a sentence saying why there is none that
    applies (no entry, a malformed one, or one measured for another committed value)."""
    entry = (data.get("bands") or {}).get(key)
    if not isinstance(entry, dict):
        return f"no band is recorded for {key}"
    try:
        band = Band(str(entry["kind"]), float(entry["value"]), float(entry["low"]),
                    float(entry["high"]))
    except (KeyError, TypeError, ValueError):
        return f"the band of {key} is malformed: {entry!r}"
    if band.kind not in KINDS or not all(map(math.isfinite, (band.low, band.high))):
        return f"the band of {key} is malformed: {entry!r}"
    if band.value != committed:
        return (f"the band of {key} was measured for {band.value!r}, not the committed "
                f"{committed!r} (stale)")
    return band
