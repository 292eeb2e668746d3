"""Reference runs: the longer training runs that the notebooks plot from committed logs.

A laptop CPU can afford a short live run in a notebook, not hundreds of steps of several variants.
So each comparison a notebook draws is described by a small JSON spec under ``data/runs/``::

    {"preset": "dapo", "overrides": {"max_steps": 200}, "seeds": [0, 1, 2],
     "data": {"families": ["add", "sub"], "difficulties": [2, 3]},
     "about": "DAPO, all four ideas, on the medium cells"}

``seeds`` (default ``[0]``; distinct integers below 2**32) trains one run per seed, so a plot can
show the spread between seeds as a band; ``data`` selects task-suite cells for both the train and
the eval split (default: the whole suite); ``eval_data`` (optional) evaluates on other cells
instead, e.g. the easy cells a run on the medium ones may forget (``{}`` = the whole eval split);
``reward_funcs`` (optional) lists the reward functions to train on by their keys in
:data:`labkit.rewards.REWARD_REGISTRY` (never by import path: a spec is data and must not choose
what code runs); ``environment`` (optional) runs episodes with one of
:data:`labkit.agents.NAMED_ENVIRONMENTS`. A spec whose rewards would judge nothing is refused when
it is read: an environment reward (``"environment"``, ``"turns"``) without an environment that
keeps what it reads, and the guessing game (which brings its own rows) with ``data``,
``eval_data`` or the accuracy reward. This command trains it and writes the history next to the
spec, as ``<spec>.csv`` (one ``seed`` column, the runs one after the other)::

    python -m labkit reference_runs data/runs/04_dapo/dapo.json [more specs...]

The CSV is written to a temporary file beside it and renamed over ``<spec>.csv`` only once every
seed has finished, so the committed log is either the old one or the new one, never a mix. Ctrl-C
(or SIGTERM) stops the whole command: the seed in progress stops at a safe point, no later seed
or spec starts, the spec's CSV is left byte for byte as it was, and the command exits with the
signal's status (130 for SIGINT, 143 for SIGTERM). A spec whose name ends in ``.csv`` is refused
(its log would overwrite it), and so is a ``<spec>.csv`` that this command did not write (its
first line is not the ``# command:`` line below).

The CSV's first line is ``# command: ...``, the exact command that regenerates it;
:func:`labkit.viz.load_run` reads it back with that command in ``df.attrs["command"]``, and the
plots print it under the figure. The evaluation columns (``eval_*``) are merged into the history
at the steps where an evaluation ran (step 0 is the model before training).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import pandas as pd
import torch

from labkit.agents import named_environment
from labkit.agents.guessing import FAMILY as GUESSING_FAMILY
from labkit.agents.guessing import guessing_dataset
from labkit.config import PRESETS, preset
from labkit.rewards import REWARD_REGISTRY, named_reward
from labkit.rewards.environment import check_environment_rewards
from labkit.runtime.counts import int_at_least
from labkit.tasks import DIFFICULTIES, FAMILIES, load_split
from labkit.trainer import train
from labkit.training.run_control import terminate_as_interrupt

#: The keys a spec may hold.
SPEC_KEYS = ("preset", "overrides", "seeds", "data", "eval_data", "reward_funcs", "environment",
             "about")
#: A spec is a few hundred bytes; a file larger than this is not one, and is not read.
MAX_SPEC_BYTES = 1 << 20
#: Seeds stay within 32 bits, the range every seeded library (numpy included) accepts.
MAX_SEED = 2**32 - 1
#: What ``data`` and ``eval_data`` may select: the task suite's cells.
_CELLS = {"families": (FAMILIES, str), "difficulties": (DIFFICULTIES, int)}
#: The first line of every log this command writes, before the spec's path.
COMMAND_LINE = "# command: python -m labkit reference_runs "
#: The first line of a log written before the commands moved behind ``python -m labkit`` (a
#: learner's older logs): still this command's own, so a rerun replaces it.
OLDER_COMMAND_LINES = ("# command: python -m labkit.reference_runs ",)


def load_spec(path: str | Path) -> dict:
    """Read and check a run spec (the module docstring's keys); returns it as a dict with
    ``seeds`` filled in.

    Every key is checked here, before anything trains (the overrides by building the run's
    :class:`~labkit.config.TrainConfig`), so a bad spec fails at once with a ``ValueError`` naming
    the file, the key, the value and what is allowed; a path that is not there raises
    ``FileNotFoundError``. Nothing in a spec is imported or run.
    """
    path = Path(path)
    _check_log_path(path)
    spec = _read_json(path)
    if "preset" not in spec:
        raise ValueError(f"{path}: a run spec needs a 'preset' key (e.g. \"grpo\")")
    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        raise ValueError(f"{path}: unknown spec keys {unknown}; a spec takes "
                         f"{', '.join(SPEC_KEYS)}")
    if not isinstance(spec["preset"], str) or spec["preset"] not in PRESETS:
        raise ValueError(f"{path}: 'preset' must be one of {', '.join(map(repr, PRESETS))}, got "
                         f"{spec['preset']!r}")
    overrides = spec.get("overrides", {})
    if not isinstance(overrides, dict):
        raise ValueError(  # noqa: TRY004 (a value read from a file)
            f"{path}: 'overrides' must be an object of TrainConfig fields (e.g. "
            f"{{\"max_steps\": 200}}), got {overrides!r}")
    refused = sorted({"resume_from", "output_dir", "seed"} & set(overrides))
    if refused:
        raise ValueError(f"{path}: a reference run starts from the shipped model, writes only "
                         f"its log and takes its seeds from the spec's 'seeds' list; the "
                         f"overrides may not set {', '.join(refused)}")
    seeds = spec.setdefault("seeds", [0])
    if (not isinstance(seeds, list) or not seeds
            or not all(type(s) is int and 0 <= s <= MAX_SEED for s in seeds)
            or len(set(seeds)) != len(seeds)):
        raise ValueError(f"{path}: 'seeds' must be a non-empty list of distinct integers in "
                         f"[0, {MAX_SEED}], got {seeds!r}")
    for key in ("data", "eval_data"):
        if key in spec:
            _check_cells(spec[key], key, path)
    _check_reward_names(spec.get("reward_funcs"), path)
    _check_environment(spec, path)
    if not isinstance(spec.get("about", ""), str):
        raise ValueError(  # noqa: TRY004 (a value read from a file)
            f"{path}: 'about' must be a string, got {spec['about']!r}")
    try:
        with warnings.catch_warnings():  # the run itself warns about its settings, once
            warnings.simplefilter("ignore")
            spec_config(spec, seeds[0])
    except (ValueError, TypeError) as err:
        raise ValueError(f"{path}: 'overrides': {err}") from None
    return spec


def log_path(path: str | Path) -> Path:
    """Where the log of the spec at ``path`` goes: ``<spec>.csv``."""
    return Path(path).with_suffix(".csv")


def _check_log_path(path: Path) -> None:
    """Refuse a spec whose log would overwrite the spec itself or a file this command did not
    write: the lab overwrites only its own logs."""
    if path.suffix.lower() == ".csv":
        raise ValueError(f"{path}: a run spec's log is written to <spec>.csv, so a spec named "
                         f"{path.suffix} would be overwritten by its own log; name the spec "
                         f"{path.with_suffix('.json').name}")
    out = log_path(path)
    if not (out.exists() or out.is_symlink()):
        return
    if out.is_symlink() or not out.is_file():
        kind = "a symlink" if out.is_symlink() else "a folder" if out.is_dir() else "not a file"
        raise ValueError(f"{path}: its log would go to {out}, which is {kind}; the lab writes "
                         f"the log as a plain file there and replaces only a log that "
                         f"python -m labkit reference_runs wrote. Move {out.name} away")
    ours = [line.encode() for line in (COMMAND_LINE, *OLDER_COMMAND_LINES)]
    with out.open("rb") as f:
        first = f.read(max(map(len, ours)))
    if not first.startswith(tuple(ours)):
        raise ValueError(f"{path}: its log would replace {out}, which python -m labkit "
                         f"reference_runs did not write (its first line is not "
                         f"{COMMAND_LINE.strip()!r} + the spec); the lab never overwrites a file "
                         f"it did not write. Move {out.name} away or rename the spec")


def spec_config(spec: dict, seed: int):
    """The TrainConfig of one seed of a (checked) spec."""
    return preset(spec["preset"], **{"progress": False, **spec.get("overrides", {}),
                                     "seed": seed})


def _read_json(path: Path) -> dict:
    """The JSON object in ``path``: a UTF-8 file (a byte-order mark is fine) of at most
    :data:`MAX_SPEC_BYTES`, strict JSON (no NaN or Infinity, no key twice)."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such run spec")
    if not path.is_file():
        raise ValueError(f"{path} is not a file: a run spec is a JSON file")
    size = path.stat().st_size
    if size > MAX_SPEC_BYTES:
        raise ValueError(f"{path}: {size:,} bytes is too large for a run spec (at most "
                         f"{MAX_SPEC_BYTES:,} bytes)")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not UTF-8 text ({err})") from None
    try:
        spec = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply to be a run spec") from None
    except ValueError as err:
        raise ValueError(f"{path} is not a valid JSON run spec: {err}") from None
    if not isinstance(spec, dict):
        raise ValueError(  # noqa: TRY004 (a value read from a file)
            f"{path}: a run spec is a JSON object ({{\"preset\": ...}}), got "
            f"{type(spec).__name__}")
    return spec


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON: a spec's numbers are finite")


def _unique_keys(pairs: list) -> dict:
    keys = [key for key, _ in pairs]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        raise ValueError(f"key {twice[0]!r} appears twice in one object")
    return dict(pairs)


def _check_cells(cells, key: str, path: Path) -> None:
    if not isinstance(cells, dict):
        raise ValueError(  # noqa: TRY004 (a value read from a file)
            f"{path}: '{key}' must be an object with 'families' and/or 'difficulties' (e.g. "
            f"{{\"families\": [\"add\"]}}; {{}} is the whole suite), got {cells!r}")
    unknown = sorted(set(cells) - set(_CELLS))
    if unknown:
        raise ValueError(f"{path}: '{key}' takes 'families' and 'difficulties', got {unknown}")
    for name, (allowed, kind) in _CELLS.items():
        chosen = cells.get(name, list(allowed))
        if (not isinstance(chosen, list) or not chosen
                or not all(type(c) is kind and c in allowed for c in chosen)):
            raise ValueError(f"{path}: '{key}.{name}' must be a non-empty list of "
                             f"{', '.join(map(repr, allowed))}, got {chosen!r}")


def _check_reward_names(names, path: Path) -> None:
    if names is None:
        return
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{path}: 'reward_funcs' must be a non-empty list of reward names "
                         f"({', '.join(REWARD_REGISTRY)}), got {names!r}")
    unknown = [n for n in names if n not in REWARD_REGISTRY]
    if unknown:
        raise ValueError(f"{path}: 'reward_funcs' names {unknown[0]!r}, which is not one of the "
                         f"lab's named rewards ({', '.join(REWARD_REGISTRY)}); a spec names "
                         f"rewards by these keys only, never by import path")


def reward_funcs(spec: dict, path) -> list | None:
    """The spec's ``reward_funcs``: keys of the lab's named rewards
    (:data:`labkit.rewards.REWARD_REGISTRY`, e.g. ``"answer_anywhere"``, ``"judge"``); None: the
    trainer's default rewards. A spec names rewards by key, never by import path, so a shared
    spec cannot make this command import or run code of its choosing."""
    names = spec.get("reward_funcs")
    _check_reward_names(names, path)
    return None if names is None else [named_reward(name) for name in names]


def environment_factory(spec: dict, path):
    """The spec's ``environment``: a key of :data:`labkit.agents.NAMED_ENVIRONMENTS` (episodes
    with that environment's tools), or None for ordinary completions."""
    name = spec.get("environment")
    if name is None:
        return None
    try:
        return named_environment(name)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def _check_environment(spec: dict, path: Path) -> None:
    """The spec's environment exists and can feed its rewards: an environment reward
    (one registered with ``reads``) needs an environment that keeps what it reads,
    else every step would train on nothing (reward and loss NaN). The guessing game brings its
    own rows, so it takes no ``data`` (which it would replace) and no accuracy reward (which
    cannot judge a game)."""
    factory = environment_factory(spec, path)
    names = spec.get("reward_funcs")
    if spec.get("environment") == "guessing":
        given = [repr(key) for key in ("data", "eval_data") if key in spec]
        if given:
            raise ValueError(f"{path}: 'environment' 'guessing' brings its own rows (the game's "
                             f"codes) and would replace the spec's {' and '.join(given)}: remove "
                             f"{' and '.join(given)}, or choose another environment")
        if names is None or "accuracy" in names:
            which = "the default rewards hold" if names is None else "'reward_funcs' names"
            raise ValueError(f"{path}: 'environment' 'guessing' with the accuracy reward ({which} "
                             f"it): the game's rows have family {GUESSING_FAMILY!r}, which it "
                             f"cannot judge (every completion would get None); name the game's "
                             f"rewards in 'reward_funcs' ('environment' or 'turns')")
    environment = None if factory is None else factory()
    where = ("the spec names no 'environment'" if factory is None
             else f"'environment' is {spec['environment']!r}")
    for name in names or ():
        if REWARD_REGISTRY[name].reads is not None:
            try:
                check_environment_rewards([named_reward(name)], environment, where)
            except ValueError as err:
                raise ValueError(f"{path}: 'reward_funcs' names {name!r}: {err}") from None


def run_history(result) -> pd.DataFrame:
    """The training history with the evaluation columns merged in at their steps.

    One column per metric: the trainer's history already carries the ``eval_*`` values of the
    steps that evaluated, so those columns are taken from ``eval_history`` alone, which also holds
    the evaluation of step 0 (the model before training).
    """
    history = result.history
    evals = result.eval_history
    if evals is None or evals.empty:
        return history
    evals = evals.rename(columns={c: c if c.startswith("eval_") or c == "step" else f"eval_{c}"
                                  for c in evals.columns})
    history = history.drop(columns=[c for c in evals.columns if c != "step" and c in history])
    return history.merge(evals, on="step", how="outer").sort_values("step", ignore_index=True)


def run_spec(path: str | Path, *, threads: int | None = None) -> Path:
    """Train the runs a spec describes (one per seed) and write ``<spec>.csv``; returns its path.

    An interrupted seed (Ctrl-C, SIGTERM) raises KeyboardInterrupt: no later seed runs and
    ``<spec>.csv`` is left as it was (the log replaces it only once every seed is complete).
    """
    path = Path(path)
    spec = load_spec(path)
    if threads:
        torch.set_num_threads(threads)
    cells = spec.get("data", {})
    train_data = load_split("train", **cells) if cells else None
    eval_cells = spec.get("eval_data", cells)  # another eval set: what the run may forget
    eval_data = load_split("eval", **eval_cells) if eval_cells else None
    factory = environment_factory(spec, path)
    if spec.get("environment") == "guessing":  # the game brings its own data
        train_data = guessing_dataset(256, seed=0, difficulties=(2, 3))
        eval_data = guessing_dataset(40, seed=1, difficulties=(2, 3))
    histories = []
    start = time.perf_counter()
    out = log_path(path)
    for seed in spec["seeds"]:
        result = train(spec_config(spec, seed), train_dataset=train_data, eval_dataset=eval_data,
                       reward_funcs=reward_funcs(spec, path), environment_factory=factory)
        if result.interrupted:
            raise KeyboardInterrupt(f"{path}: seed {seed} was interrupted at step "
                                    f"{result.trainer.step}; no later seed ran and {out} was "
                                    f"left as it was")
        history = run_history(result)
        history.insert(0, "seed", seed)
        histories.append(history)
    minutes = (time.perf_counter() - start) / 60
    _write_log(out, path, pd.concat(histories, ignore_index=True))
    print(f"{path}: {len(spec['seeds'])} seed(s) x {len(histories[0]) - 1} steps in "
          f"{minutes:.1f} min -> {out}")
    return out


def _write_log(out: Path, path: Path, table: pd.DataFrame) -> None:
    """Write the log to a temporary file of the lab's own beside ``out``, then rename it over
    ``out`` (atomic: a reader, or a crash, sees the old log or the new one)."""
    _check_log_path(path)  # still the lab's, after the training
    handle, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".labkit-tmp")
    temporary = Path(name)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write(f"{COMMAND_LINE}{path.as_posix()}\n")
            table.to_csv(f, index=False, float_format="%.6g")
        os.replace(temporary, out)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _signals_received():
    """Within the block, a function that returns the number of the last signal the process
    received (None if none). Python writes every signal's number to a wakeup socket, whichever
    handler then runs: the trainer's own handlers turn SIGINT and SIGTERM alike into a
    KeyboardInterrupt, and the exit status must still tell them apart."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    receive, send = socket.socketpair()  # a socket: what Windows accepts as a wakeup fd
    receive.setblocking(False)
    send.setblocking(False)
    previous = signal.set_wakeup_fd(send.fileno(), warn_on_full_buffer=False)

    def last() -> int | None:
        try:
            data = receive.recv(4096)
        except OSError:  # nothing received
            return None
        stops = [number for number in data if number in (signal.SIGINT, signal.SIGTERM)]
        return stops[-1] if stops else None

    try:
        yield last
    finally:
        signal.set_wakeup_fd(previous)
        receive.close()
        send.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description="Train reference runs from JSON specs and write "
                                             "their histories as CSV next to the specs.")
    ap.add_argument("specs", nargs="+", type=Path)
    ap.add_argument("--threads", type=_threads, default=None, help="torch CPU threads (>= 1)")
    args = ap.parse_args(argv)
    for spec in args.specs:  # every spec is checked before the first one trains
        load_spec(spec)
    with _signals_received() as last_signal, terminate_as_interrupt():
        try:
            for spec in args.specs:
                run_spec(spec, threads=args.threads)
        except KeyboardInterrupt as stop:
            signum = last_signal() or signal.SIGINT
            print(f"python -m labkit reference_runs: stopped by {signal.Signals(signum).name}"
                  f"{': ' + str(stop) if str(stop) else ''}; the logs of unfinished specs were "
                  f"left as they were", file=sys.stderr)
            raise SystemExit(128 + signum) from None


def _threads(text: str) -> int:
    count = int_at_least(text, 1)
    if count is None:
        raise argparse.ArgumentTypeError(f"--threads must be an integer >= 1 (torch CPU "
                                         f"threads), got {text!r}")
    return count


if __name__ == "__main__":
    main()
