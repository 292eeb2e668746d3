"""Measure how far each recorded number travels: re-execute notebooks under other CPU kernel paths.

A recorded value (:mod:`labkit.quotes`) repeats bit for bit only on the platform that recorded
it. This command measures, on that platform, what another one would see: it executes each
notebook again with torch's and MKL's kernels switched to another path, and from those values
and the live runs' seeds derives each value's portable band (:mod:`labkit.runtime.bands`)::

    python -m labkit bands                        # what the bands rest on, notebook by notebook
    python -m labkit bands measure                # every notebook under every kernel path
    python -m labkit bands measure 02 --path default
    python -m labkit bands build                  # the bands again from what was measured

The paths (:data:`PATHS`): two kernel paths, chosen because each changes the last bits of the
lab's float32 products on an x86 CPU with MKL as another CPU does (measured: a matrix product,
a softmax and a log-softmax each change bits under each), and eight seed paths:

* ``default``: ``ATEN_CPU_CAPABILITY=default``, torch's kernels without vector instructions;
* ``compatible``: ``ATEN_CPU_CAPABILITY=avx2`` and ``MKL_CBWR=COMPATIBLE``, torch's AVX2
  kernels and MKL's vendor-neutral code path (``avx2`` alone changes nothing in notebooks 02
  and 03 on the lab's AMD EPYC, whose MKL already takes its AVX2 path);
* ``seed1000`` ... ``seed8000``: ``LABKIT_SEED_OFFSET`` 1000 to 8000, every training run under
  another seed (:mod:`labkit.runtime.seeds`; far from the live-seed logs' seeds 1-4).

``--path holdout`` (``default`` and ``COMPATIBLE`` together, a kernel path again different)
measures without storing anything: it only says whether the bands built without it hold
(``.ci/portable`` runs the notebook tests that way). A notebook keeps running past a failing
cell under every path (an asserted claim that fails under another seed is printed: the claim
does not travel).

``measure`` stores each notebook's values under ``notebooks/results/bands/NN_name.json`` after
that notebook finishes (an interrupted run keeps what it measured), then builds every band.
A value's measurements belong to the committed value they were made against: re-executing the
notebook and changing that value drops them, and its band is then missing until measured again.
Each kernel runs with the variables of ``section_times`` (one thread, offline, static widgets).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from labkit import quotes
from labkit.runtime import bands
from labkit.runtime.platform_record import describe
from labkit.runtime.seeds import SEED_OFFSET_VARIABLE

BANDS_DIR = quotes.RESULTS_DIR / quotes.BANDS_FOLDER
#: Path name -> the variables it sets (module docstring).
PATHS = {
    "default": {"ATEN_CPU_CAPABILITY": "default"},
    "compatible": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"},
    **{f"seed{offset}": {SEED_OFFSET_VARIABLE: str(offset)} for offset in range(1000, 9000, 1000)},
}
#: A path whose values are never stored: the check that the bands hold on a path they do not
#: rest on.
HOLDOUT = {"holdout": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}}


def _empty(notebook: str) -> dict:
    return {"written_by": bands.WRITER, "notebook": notebook, "paths": {}, "floor": None,
            "bands": {}}


def store_measurement(notebook: str, path_name: str, measured: dict, committed: dict,
                      folder: Path = BANDS_DIR) -> dict:
    """Put one path's values of ``notebook`` into its bands file, each under the committed value
    it was measured against; returns the file's data. A path outside :data:`PATHS` (values the
    same notebook code recorded on another machine) keeps the variables its platform names."""
    data = bands.load_bands(notebook, folder) or _empty(notebook)
    platform = measured.get("environment")
    variables = PATHS.get(path_name, (platform or {}).get("variables") or {})
    data["paths"][path_name] = {"variables": variables, "platform": platform}
    for key, entry in committed.items():
        value = entry["value"]
        stored = data["bands"].get(key)
        if not isinstance(stored, dict) or stored.get("value") != value:
            stored = {"value": value, "measured": {}}  # measured against another value: stale
        if key in measured["values"]:
            stored.setdefault("measured", {})[path_name] = measured["values"][key]["value"]
        data["bands"][key] = stored
    _write(data, folder)
    return data


def _write(data: dict, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = bands.bands_path(data["notebook"], folder)
    if path.exists():
        bands.load_bands(data["notebook"], folder)  # refuses a file it did not write
    handle, name = tempfile.mkstemp(dir=folder, prefix=f".{data['notebook']}.",
                                    suffix=".labkit-tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write(json.dumps(data, indent=1) + "\n")
        os.replace(name, path)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise


def _is_seed_path(name: str, data: dict) -> bool:
    variables = (data.get("paths", {}).get(name) or {}).get("variables") or PATHS.get(name, {})
    return SEED_OFFSET_VARIABLE in variables


def _inputs(results: dict, data: dict) -> dict[str, tuple]:
    """key -> (value, kernels, seeds) of a notebook: each path's value where it was measured
    against today's committed value, split into kernel paths and seeds (seed paths, then the
    live run's recorded seeds)."""
    inputs = {}
    for key, entry in results.items():
        stored = data.get("bands", {}).get(key) or {}
        measured = stored.get("measured", {}) if stored.get("value") == entry["value"] else {}
        kernels = {n: v for n, v in measured.items() if not _is_seed_path(n, data)}
        seeds = [v for n, v in measured.items() if _is_seed_path(n, data)]
        inputs[key] = (entry["value"], kernels, [*seeds, *bands.seed_values(key, results)])
    return inputs


def build(results_dir: Path = quotes.RESULTS_DIR, folder: Path = BANDS_DIR) -> dict[str, dict]:
    """Every notebook's bands from its measurements (:mod:`labkit.runtime.bands`), the float
    floor measured over all of them; returns {notebook: data}. A value with no measurement
    keeps no band."""
    every = {}
    for path in sorted(Path(results_dir).glob("[0-9][0-9]_*.json")):
        results = quotes.load_results(path.stem, results_dir)
        data = bands.load_bands(path.stem, folder)
        if data:
            every[path.stem] = (data, results, _inputs(results, data))
    floor = bands.float_floor([i for _, _, inputs in every.values() for i in inputs.values()])
    for data, results, inputs in every.values():
        data["floor"] = floor
        for key, (value, kernels, seeds) in inputs.items():
            stored = data["bands"].get(key) or {}
            measured = stored.get("measured", {}) if stored.get("value") == value else {}
            entry = {"value": value, "measured": measured}
            if measured:
                band = bands.band_of(value, kernels, seeds, floor)
                entry.update(kind=band.kind, low=band.low, high=band.high,
                             seeds_recorded=bands.seed_values(key, results))
            data["bands"][key] = entry
        data["bands"] = {k: v for k, v in data["bands"].items() if k in inputs}
        _write(data, folder)
    return {data["notebook"]: data for data, _, _ in every.values()}


def measure(paths: list[Path], path_names: list[str], folder: Path = BANDS_DIR) -> list[str]:
    """Execute each notebook under each kernel path and store its values; returns the errors."""
    from labkit.commands.section_times import execute_timed

    errors = []
    for path in paths:
        committed = quotes.load_results(path.stem)
        for name in path_names:
            variables = {**PATHS, **HOLDOUT}[name]
            print(f"{path.name}: {name} ({' '.join(f'{k}={v}' for k, v in variables.items())})",
                  flush=True)
            with tempfile.TemporaryDirectory(prefix="labkit-bands-") as out:
                _, times, error = execute_timed(path, results_dir=Path(out), env=variables,
                                                allow_errors=True)
                written = quotes.results_path(path.stem, Path(out))
                measured = json.loads(written.read_text(encoding="utf-8")) \
                    if written.exists() else None
            seconds = sum(t.wall_s for t in times)
            if error is not None:
                errors.append(f"{path.name} under {name}: {error}")
                print(f"  stopped after {seconds:.0f} s: {error}", flush=True)
            if measured is None:
                continue
            moved = [k for k, e in committed.items() if k in measured["values"]
                     and measured["values"][k]["value"] != e["value"]]
            print(f"  {seconds:.0f} s, {len(measured['values'])} values, {len(moved)} moved "
                  f"({describe(measured['environment'])})", flush=True)
            if name in PATHS:
                store_measurement(path.stem, name, measured, committed, folder)
            else:
                _report_holdout(path.stem, measured, folder)
    return errors


def _report_holdout(notebook: str, measured: dict, folder: Path) -> None:
    data = bands.load_bands(notebook, folder)
    committed = quotes.load_results(notebook)
    outside = []
    for key, entry in measured["values"].items():
        band = bands.band_entry(data, key, committed.get(key, {}).get("value"))
        if isinstance(band, str) or not band.contains(entry["value"]):
            outside.append(f"{key} = {entry['value']!r}: {band if isinstance(band, str) else band.describe()}")
    print(f"  holdout: {len(measured['values']) - len(outside)} within their bands, "
          f"{len(outside)} not" + "".join(f"\n    {line}" for line in outside), flush=True)


def summary(folder: Path = BANDS_DIR) -> str:
    """Per notebook: how many values of each kind, and on what the bands rest."""
    lines = []
    for path in sorted(Path(folder).glob("[0-9][0-9]_*.json")):
        data = bands.load_bands(path.stem, folder)
        counts = {kind: 0 for kind in (*bands.KINDS, "missing")}
        for entry in data["bands"].values():
            counts[entry.get("kind", "missing")] += 1
        lines.append(f"{path.stem:22s} " + ", ".join(f"{n} {k}" for k, n in counts.items())
                     + f"; paths: {', '.join(data['paths'])}")
    floors = {bands.load_bands(p.stem, folder).get("floor")
              for p in Path(folder).glob("[0-9][0-9]_*.json")}
    lines.append(f"float floor (relative): {', '.join(f'{f:.3g}' for f in floors if f)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", nargs="?", choices=("summary", "measure", "build"),
                        default="summary")
    parser.add_argument("notebooks", nargs="*", help="for measure: a number (02), a stem or a "
                                                     "path; default: all")
    parser.add_argument("--path", choices=(*PATHS, *HOLDOUT, "all"), default="all",
                        help="the kernel path to measure (default: every stored one)")
    args = parser.parse_args(argv)
    if args.action == "summary":
        print(summary())
        return 0
    if args.action == "measure":
        from labkit.commands.section_times import NOTEBOOKS_DIR, resolve_notebooks

        try:
            paths = resolve_notebooks(args.notebooks, NOTEBOOKS_DIR)
        except ValueError as err:
            parser.error(str(err))
        names = list(PATHS) if args.path == "all" else [args.path]
        errors = measure(paths, names)
        for error in errors:
            print(f"error: {error}", file=sys.stderr)
    else:
        errors = []
    build()
    for path in quotes.render_bands():
        print(f"rendered the band edges quoted in {path}")
    print(summary())
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
