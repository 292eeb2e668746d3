"""Every number the prose quotes has a recorded source, and a check that the quote still holds.

A notebook's markdown, its instructor notes, the README and the teaching guide quote numbers
that a notebook cell printed (a live run's pass@1, a reference log's mean). When the notebook is
re-executed those outputs can change, and a quote typed by hand then silently contradicts the
output beside it. This module gives each quoted number a source that the execution itself writes,
and a check that fails, naming the quote, when the two disagree.

**Recording.** A notebook records the values its prose quotes, one call next to the output each
comes from::

    record = recorder("01_ppo")                  # once, in the first cell that records
    record("live.pass1_after", after)             # prints nothing, returns the value

What a call does depends on ``LABKIT_RESULTS`` in the kernel's environment:

* unset (a learner running the notebook by hand): nothing; no file is read or written;
* ``check`` (the notebook tests, ``notebooks/conftest.py``): the value is compared with the
  committed ``notebooks/results/NN_name.json``. On the platform that recorded it (the same CPU,
  kernel path and versions, :mod:`labkit.runtime.platform_record`) a value that moved by more
  than the call's ``tolerance`` (default 0: a seeded run repeats bit for bit there) raises
  :class:`StaleResult`, naming the key, both values, the tolerance and every quote that the new
  value would make false. On any other platform the value must lie in its portable band,
  measured by ``python -m labkit bands`` (:mod:`labkit.runtime.bands`); a value outside it, or
  one with no band measured for the committed value, raises the same way. Each check writes a
  line into the folder ``LABKIT_RESULTS_LOG`` names, if set, for the tests' summary
  (:func:`check_summary`);
* ``write`` (``python -m labkit section_times --lab --save-executed DIR``, the command that refreshes
  the committed outputs): the values go to ``$LABKIT_RESULTS_DIR/NN_name.json``, a file this
  module writes whole (the notebook's record calls of this kernel, the environment that computed
  them); a file there that it did not write is refused.

**Quoting.** A quoted number carries its source in an HTML comment right after it, which
JupyterLab and GitHub do not display::

    pass@1 rose to 43.1%<!--=01:live.pass1_after %-->

``01`` names the notebook (its results file), then the key; an optional last word scales the
recorded value: ``%`` multiplies by 100, ``min`` divides seconds by 60. ``times:01/6`` reads the
wall seconds of notebook 01's section 6 (the section whose title starts with "6.", or
``setup``, the cells before the first heading) from the
CPU records of ``docs/teaching/section_times.json``, ``times:01`` the whole notebook's, and a
``/cpu`` at the end the kernel's CPU seconds instead; items joined by ``+`` add up
(``times:02/1/cpu+02/2/cpu``: a workshop block of two sections).
The tolerance of a quote is the digits it shows: it must equal the recorded value rounded to
them (43.1% holds for 0.4305 to 0.4315). A ``lowest`` or ``highest`` word after the key quotes the
lowest or highest outcome of the runs the lab measured for that value (other seeds, other CPU
kernel paths; :func:`labkit.runtime.bands.measured_range`), rounded outwards
(``56.6%<!--=02:live.pass1_after %--> (range over runs: 47.5<!--=02:live.pass1_after lowest %--> to
66.3%<!--=02:live.pass1_after highest %-->)``); a quote of a run's outcome needs both in its sentence
(:func:`unbanded_quotes`). A ``low`` or ``high`` word quotes an edge of the value's portable band
instead, the wider 99.9% prediction interval the notebook tests accept on another machine.
:func:`render_times` rewrites every timing quote from the report (``section_times`` calls it)
and :func:`render_bands` every band edge from the bands, so both are generated text; a result
quote is only checked, because a new value may need new words around it.

**Outputs and files.** ``1.837<!--=out:ed743ab8-->`` quotes a number that the stored outputs of
a code cell of the same notebook show (the cell's ``id``; ``out:03/ed743ab8`` names the notebook
from a page, as the instructor notes do), ``20.79<!--=file:docs/measurements/gpu_h100.txt-->`` one
that a committed file holds (a path from the repository root). Such a quote holds when a number of
its source, scaled by the tag's last word, rounds to it at the digits it shows; a hand reading of a
printed output or a log is sourced without re-executing anything, and a re-execution or a new log
that changes the number fails :func:`stale_quotes`, naming the place, the number and the source.

**Retyped numbers.** :func:`labkit.quotes.prose.untagged_numbers` lists every number of the prose
a learner reads that is neither tagged nor in a class that needs no source (settings and counts,
code and math, citation furniture, versions, commit hashes, model sizes, a code cell's literals,
generated text): :mod:`labkit.quotes.prose` defines each class and why it needs none. ``tests/test_quotes.py``
runs every check.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from labkit.quotes.paths import NOTEBOOKS_DIR, PAGES, RESULTS_DIR, ROOT, TIMES_JSON
from labkit.quotes.sources import found_in
from labkit.runtime.bands import band_entry, load_bands, measured_range
from labkit.runtime.platform_record import describe, platform_differences, platform_record

MODE_VARIABLE = "LABKIT_RESULTS"
DIR_VARIABLE = "LABKIT_RESULTS_DIR"
MODES = ("", "check", "write")
#: A folder where each check writes a line (what was checked, exactly or within a band).
LOG_VARIABLE = "LABKIT_RESULTS_LOG"
#: The bands of the values, beside the results (:mod:`labkit.runtime.bands`).
BANDS_FOLDER = "bands"
WRITER = "labkit.quotes"
#: Words a minute at which :func:`reading_minutes` reads a notebook: technical prose with math
#: reads slower than the 238 words a minute of non-fiction (Brysbaert 2019, J. Memory and
#: Language 109, 104047).
READING_WPM = 200
#: How a tag's last word scales the recorded value into the quoted unit.
SCALES = {"%": 100.0, "min": 1 / 60}


class StaleResult(AssertionError):
    """A recorded value moved past its tolerance: the committed results and quotes are stale."""


# --- recording --------------------------------------------------------------------------------

def _environment() -> dict:
    return platform_record()


def _number(key: str, value) -> float:
    if isinstance(value, bool) or not hasattr(value, "__float__"):
        raise TypeError(f"record({key!r}, ...): the value must be a real number, got "
                        f"{type(value).__name__} {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"record({key!r}, ...): the value must be finite, got {number}")
    return number


def results_path(notebook: str, folder: Path = RESULTS_DIR) -> Path:
    return Path(folder) / f"{notebook}.json"


def _results_file(path: Path) -> dict:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("written_by") != WRITER:
        raise ValueError(f"{path} was not written by {WRITER} (no \"written_by\": {WRITER!r})")
    return data


def load_results(notebook: str, folder: Path = RESULTS_DIR) -> dict:
    """The recorded values of ``notebook`` (its stem, ``01_ppo``) as {key: entry}; a file that
    this module did not write is refused."""
    return _results_file(results_path(notebook, folder))["values"]


class recorder:
    """``record(key, value, tolerance=0.0)`` for one notebook; see the module docstring."""

    def __init__(self, notebook: str):
        if not re.fullmatch(r"\d\d_\w+", str(notebook)):
            raise ValueError(f"recorder: notebook must be a notebook's stem such as '01_ppo', "
                             f"got {notebook!r}")
        mode = os.environ.get(MODE_VARIABLE, "")
        if mode not in MODES:
            raise ValueError(f"{MODE_VARIABLE}={mode!r}: allowed values are unset, 'check' "
                             f"(compare with the committed results) or 'write'")
        self.notebook, self.mode, self.values, self.platform = notebook, mode, {}, None
        self.folder = Path(os.environ.get(DIR_VARIABLE) or RESULTS_DIR)
        if mode == "write":
            if not os.environ.get(DIR_VARIABLE):
                raise ValueError(f"{MODE_VARIABLE}=write needs {DIR_VARIABLE}, the folder to "
                                 f"write {notebook}.json into")
            path = results_path(notebook, self.folder)
            if path.exists():
                load_results(notebook, self.folder)  # refuses a file it did not write

    def __call__(self, key: str, value, tolerance: float = 0.0) -> None:
        # returns nothing, so a record cell ending in a record(...) shows no stray value
        if not re.fullmatch(r"[A-Za-z0-9_.@-]+", str(key)):
            raise ValueError(f"record: key must be letters, digits and . _ @ -, got {key!r}")
        number = _number(key, value)
        if not (isinstance(tolerance, (int, float)) and 0 <= tolerance < math.inf):
            raise ValueError(f"record({key!r}, ...): tolerance must be a number >= 0, "
                             f"got {tolerance!r}")
        if self.mode == "check":
            self._check(key, number, tolerance)
        elif self.mode == "write":
            self.values[key] = {"value": number, "tolerance": tolerance}
            self._write()

    def _check(self, key: str, number: float, tolerance: float) -> None:
        path = results_path(self.notebook, self.folder)
        data = _results_file(path) if path.exists() else {}
        recorded = data.get("values", {})
        if key not in recorded:
            raise StaleResult(f"{self.notebook}: {key} = {number!r} has no recorded value in "
                              f"{path}; refresh it with python -m labkit section_times "
                              f"{self.notebook[:2]} --save-executed notebooks")
        old = recorded[key]["value"]
        # a value transcribed from a printed output is known only to its printed digits
        tolerance = max(tolerance, recorded[key].get("tolerance", 0.0))
        if self.platform is None:
            self.platform = platform_record()
        differences = platform_differences(data.get("environment"), self.platform)
        if not differences:  # the lab's own platform: a seeded value repeats bit for bit
            self._log(key, "exact", differences)
            if abs(number - old) <= tolerance:
                return
            self._fail(key, number, old, path, f"more than its tolerance {tolerance!r}",
                       f"Re-execute with python -m labkit section_times {self.notebook[:2]} "
                       f"--save-executed notebooks, then reread and fix each quote "
                       f"(pytest tests/test_quotes.py lists them).")
        if abs(number - old) <= tolerance:  # another platform, and still the same digits
            self._log(key, "repeated", differences)
            return
        where = (f"this platform ({describe(self.platform)}) is not the one that recorded "
                 f"it ({'; '.join(differences)})")
        try:
            band = band_entry(load_bands(self.notebook, self.folder / BANDS_FOLDER), key, old)
        except ValueError as err:
            band = str(err)
        if isinstance(band, str):
            self._log(key, "no band", differences)
            raise StaleResult(
                f"{self.notebook}: {key} = {number!r}, the lab recorded {old!r}, and {where}; "
                f"{band}, so it cannot be checked here. Measure the bands where the notebook "
                f"was recorded: python -m labkit bands measure {self.notebook[:2]}")
        self._log(key, "band", differences)
        if band.contains(number):
            return
        self._fail(key, number, old, path, f"outside its {band.describe()}, and {where}",
                   "A value outside its band is a different result, not a different machine: "
                   "find what changed (python -m labkit bands explains the bands).")

    def _fail(self, key: str, number: float, old: float, path: Path, why: str, then: str):
        stale = [q for q in find_quotes() if q.source == self.notebook[:2] and q.key == key
                 and not q.holds(number)]
        where = "".join(f"\n  {q.where}: {q.text!r} (new value {q.expected(number)})"
                        for q in stale)
        raise StaleResult(
            f"{self.notebook}: {key} changed from {old!r} (committed in {path}) to {number!r}, "
            f"{why}. Quotes this makes false: {where or ' none'}\n{then}")

    def _log(self, key: str, check: str, differences: list[str]) -> None:
        """One line per checked value in ``$LABKIT_RESULTS_LOG`` (the notebook tests' summary,
        :func:`check_summary`); nothing when the variable is unset."""
        folder = os.environ.get(LOG_VARIABLE)
        if not folder:
            return
        line = {"notebook": self.notebook, "key": key, "check": check,
                "platform": describe(self.platform), "differences": differences}
        with open(Path(folder) / f"{self.notebook}.{os.getpid()}.jsonl", "a",
                  encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")

    def _write(self) -> None:
        data = {"written_by": WRITER, "notebook": self.notebook,
                "environment": _environment(), "values": self.values}
        self.folder.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(dir=self.folder, prefix=f".{self.notebook}.",
                                        suffix=".labkit-tmp")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as f:
                f.write(json.dumps(data, indent=1) + "\n")
            os.replace(name, results_path(self.notebook, self.folder))
        except BaseException:
            Path(name).unlink(missing_ok=True)
            raise


def check_summary(folder: Path) -> str:
    """What the checks that wrote into ``folder`` (:data:`LOG_VARIABLE`) did: how many values
    were checked exactly, how many within a band, and on what platform; ``""`` if none ran."""
    lines = []
    for path in sorted(Path(folder).glob("*.jsonl")):
        for text in path.read_text(encoding="utf-8").splitlines():
            try:
                lines.append(json.loads(text))
            except ValueError:
                continue  # a line cut short by a kernel that died while writing it
    if not lines:
        return ""
    counts: dict[tuple, int] = {}
    for line in lines:
        key = (line.get("check"), line.get("platform"), tuple(
            d.split(":", 1)[0] for d in line.get("differences") or ()))
        counts[key] = counts.get(key, 0) + 1
    notebooks = len({line.get("notebook") for line in lines})
    out = [f"{len(lines)} recorded values checked in {notebooks} notebooks (labkit.quotes):"]
    for (check, where, fields), count in sorted(counts.items(), key=lambda kv: -kv[1]):
        how = {"exact": "exactly, on the platform that recorded them",
               "repeated": "exactly, on another platform (their digits repeated)",
               "band": "within their portable bands",
               "no band": "with no band to check them against (failed)"}.get(check, check)
        differs = f"; it differs in {', '.join(fields)}" if fields else ""
        out.append(f"  {count} {how} ({where}{differs})")
    return "\n".join(out)


# --- quotes in the prose ----------------------------------------------------------------------

_NUMBER = r"[+\-−]?\d+(?:,\d{3})*(?:\.\d+)?"
#: A number, an optional unit (% or one word), then the tag.
_TAG = re.compile(rf"(?P<number>{_NUMBER})(?P<unit>%|\s?[A-Za-z]+)?\s?"
                  r"<!--=(?P<source>times:(?:\d\d(?:/(?:\d+|setup))?(?:/cpu)?\+?)+|reading:\d\d|"
                  r"out:(?:\d\d/)?[\w-]+|file:[\w./-]+|\d\d):?"
                  r"(?P<key>[A-Za-z0-9_.@-]*)(?:\s+(?P<edge>low|high|lowest|highest))?"
                  r"(?:\s+(?P<scale>%|min))?\s*-->")
_ANY_TAG = re.compile(r"<!--=.*?-->", re.DOTALL)


@dataclass(frozen=True)
class Quote:
    """One tagged number: where it is, the text, its source and key, the scale and its digits."""

    where: str
    text: str
    number: float
    decimals: int
    source: str
    key: str
    scale: float
    edge: str = ""
    """``low`` or ``high`` for an edge of the key's portable band, ``lowest`` or ``highest`` for the
    lowest or highest of the runs it was measured on, ``""`` for the value itself"""

    def expected(self, value: float) -> str:
        """``value`` as this quote would print it; a band's edges round outwards."""
        scaled, unit = value * self.scale, 10.0 ** -self.decimals
        if self.edge:
            rounding = math.floor if self.edge in ("low", "lowest") else math.ceil
            scaled = rounding(round(scaled / unit, 6)) * unit
        return f"{scaled:.{self.decimals}f}" if scaled != 0 else f"{0:.{self.decimals}f}"

    def holds(self, value: float) -> bool:
        """The quote equals ``value``, scaled, to the digits it shows (a band's edge: rounded
        outwards)."""
        if self.edge:
            return abs(self.number - float(self.expected(value))) < 0.5 * 10.0 ** -self.decimals
        half = 0.5 * 10.0 ** -self.decimals
        return abs(self.number - value * self.scale) <= half * (1 + 1e-9) + 1e-12


def _parse(number: str) -> tuple[float, int]:
    clean = number.replace(",", "").replace("−", "-")
    return float(clean), len(clean.split(".")[1]) if "." in clean else 0


def quotes_in(text: str, where: str) -> list[Quote]:
    found = []
    for match in _TAG.finditer(text):
        number, decimals = _parse(match["number"])
        source = match["source"]
        found.append(Quote(where, match[0], number, decimals, source, match["key"],
                           SCALES.get(match["scale"] or "", 1.0), match["edge"] or ""))
    return found


def documents() -> list[tuple[str, str]]:
    """(where, markdown) for every notebook markdown cell and every checked page."""
    import nbformat

    docs = []
    for path in sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        docs += [(f"notebooks/{path.name} cell {i}", cell.source)
                 for i, cell in enumerate(nb.cells) if cell.cell_type == "markdown"]
    docs += [(str(page.relative_to(ROOT)), page.read_text(encoding="utf-8")) for page in PAGES]
    return docs


def find_quotes(docs=None) -> list[Quote]:
    return [q for where, text in (documents() if docs is None else docs)
            for q in quotes_in(text, where)]


def malformed_tags(docs=None) -> list[str]:
    """Tags that do not follow a number or do not parse: 'where: tag'."""
    bad = []
    for where, text in documents() if docs is None else docs:
        good = {m.start("source") for m in _TAG.finditer(text)}
        for match in _ANY_TAG.finditer(text):
            if match.start() + len("<!--=") not in good:
                bad.append(f"{where}: {match[0]!r} (a tag follows its number: "
                           f"43.1%<!--=01:key %-->)")
    return bad


def _times() -> dict[str, dict]:
    report = json.loads(TIMES_JSON.read_text(encoding="utf-8"))
    return {r["notebook"][:2]: r for r in report["notebooks"] if r["device"] == "cpu"}


def _time_of(item: str, times: dict):
    """One timing item, ``NN``, ``NN/section`` or either with ``/cpu``: its seconds, or why none."""
    notebook, _, section = item.partition("/")
    section, _, clock = section.partition("/")
    field = "cpu_s" if clock == "cpu" or section == "cpu" else "wall_s"
    section = "" if section == "cpu" else section
    record = times.get(notebook)
    if record is None:
        return f"no CPU record of notebook {notebook} in {TIMES_JSON.name}"
    if not section:
        return record[field]
    for entry in record["sections"]:
        if entry["title"].split(" ", 1)[0] in (f"{section}.", "setup" if section == "setup"
                                               else None):
            return entry[field]
    return f"notebook {notebook} has no section '{section}.' in {TIMES_JSON.name}"


def source_value(quote: Quote, results: dict | None = None, times: dict | None = None,
                 bands: dict | None = None):
    """The recorded value a quote cites (an edge of its portable band for a ``low``/``high``
    tag), or a string saying why there is none."""
    if quote.source.startswith("reading:"):
        return reading_minutes(quote.source[len("reading:"):])
    if quote.source.startswith("times:"):
        times = times if times is not None else _times()
        total = 0.0
        for item in quote.source[len("times:"):].split("+"):  # a sum of sections: a + b + c
            value = _time_of(item, times)
            if isinstance(value, str):
                return value
            total += value
        return total
    results = results if results is not None else all_results()
    values = results.get(quote.source)
    if values is None:
        return f"no results file notebooks/results/{quote.source}_*.json"
    if quote.key not in values:
        return f"notebooks/results/{quote.source}_*.json has no key {quote.key!r}"
    if not quote.edge:
        return values[quote.key]["value"]
    data = (bands if bands is not None else all_bands()).get(quote.source, {})
    band = band_entry(data, quote.key, values[quote.key]["value"])
    if isinstance(band, str):
        return f"{band} (python -m labkit bands measure {quote.source})"
    if quote.edge in ("lowest", "highest"):
        lowest, highest = measured_range(data["bands"][quote.key])
        return lowest if quote.edge == "lowest" else highest
    return band.low if quote.edge == "low" else band.high


def reading_minutes(notebook: str):
    """Minutes to read notebook ``notebook``'s markdown (its two-digit number) at
    :data:`READING_WPM` words a minute, code, math, links and tags left out; or why there is
    none."""
    import nbformat

    paths = sorted(NOTEBOOKS_DIR.glob(f"{notebook}_*.ipynb"))
    if not paths:
        return f"no notebook {notebook} in {NOTEBOOKS_DIR.name}/"
    nb = nbformat.read(paths[0], as_version=4)
    words = sum(len(re.findall(r"[A-Za-z0-9][\w'’-]*", _ANY_TAG.sub(" ", _HIDDEN.sub(" ", cell.source))))
                for cell in nb.cells if cell.cell_type == "markdown")
    return words / READING_WPM


def all_bands(folder: Path | None = None) -> dict[str, dict]:
    """Every notebook's bands file (:mod:`labkit.runtime.bands`), by its two-digit number."""
    folder = RESULTS_DIR / BANDS_FOLDER if folder is None else folder
    return {path.stem[:2]: load_bands(path.stem, folder)
            for path in sorted(Path(folder).glob("[0-9][0-9]_*.json"))}


def unbanded_quotes(docs=None) -> list[str]:
    """Quotes of a run's outcome (a ``run`` band) without both edges of that band in the same
    sentence: the prose must say how far the number travels."""
    every, problems = all_bands(), []
    for where, text in documents() if docs is None else docs:
        for sentence in _sentences(text):
            found = quotes_in(sentence, where)
            edges = {(q.source, q.key, q.edge) for q in found if q.edge}
            for q in found:
                entry = (every.get(q.source, {}).get("bands") or {}).get(q.key) or {}
                if (q.edge or q.source.startswith("times:") or entry.get("kind") != "run"
                        or {(q.source, q.key, "low"), (q.source, q.key, "high")} <= edges
                        or {(q.source, q.key, "lowest"), (q.source, q.key, "highest")} <= edges):
                    continue
                problems.append(f"{where}: {q.text!r} quotes a run's outcome without the range "
                                f"of its runs (add e.g. '(range over runs: X<!--={q.source}:"
                                f"{q.key} lowest--> to Y<!--={q.source}:{q.key} highest-->)')")
    return problems


def all_results(folder: Path | None = None) -> dict[str, dict]:
    """Every notebook's recorded values, by its two-digit number."""
    folder = RESULTS_DIR if folder is None else folder
    return {path.stem[:2]: load_results(path.stem, folder)
            for path in sorted(Path(folder).glob("[0-9][0-9]_*.json"))}


def stale_quotes(docs=None) -> list[str]:
    """Each quote whose recorded value it no longer matches, or whose source is missing:
    'where: quote: new value'."""
    results, times, bands = all_results(), _times(), all_bands()
    problems = []
    for quote in find_quotes(docs):
        if quote.source.startswith(("out:", "file:")):  # the number must show in its source
            why = found_in(quote, quote.where)
            if why is not None:
                problems.append(f"{quote.where}: {quote.text!r}: {why}")
            continue
        value = source_value(quote, results, times, bands)
        if isinstance(value, str):
            problems.append(f"{quote.where}: {quote.text!r}: {value}")
        elif not quote.holds(value):
            problems.append(f"{quote.where}: {quote.text!r} quotes {quote.number:g}, the "
                            f"recorded value is {quote.expected(value)}")
    return problems


# --- retyped numbers --------------------------------------------------------------------------

_HIDDEN = re.compile(r"```.*?```|`[^`\n]*`|\$\$.*?\$\$|\$[^$\n]*\$|\]\([^)]*\)|<!--(?!=).*?-->"
                     r"|https?://\S+|arXiv \d{4}\.\d{4,5}", re.DOTALL)


def _sentences(text: str) -> list[str]:
    units = []
    for line in _HIDDEN.sub(lambda m: "" if not m[0].startswith("<!--=") else m[0], text
                            ).split("\n\n"):
        if line.lstrip().startswith("|"):
            units += line.splitlines()          # a table row is one sentence
        else:
            units += re.split(r"(?<=[.!?;])\s+(?=[A-Z*(])|\n[*-] ", line)
    return units


# --- timings are generated ----------------------------------------------------------------------

_TIMING = re.compile(rf"(?<![\w.<])(?<!< )(?:about |~)?{_NUMBER}(?:[-–]{_NUMBER})?\s?"
                     r"(?:CPU[- ])?(?:s|sec|seconds?|min|minutes?|hours?|h)\b(?!\s?<!--=)")


def untagged_timings(docs=None) -> list[str]:
    """Times in the prose that carry no tag ("< 1 s" aside): a time is a measurement, so it
    quotes the timing report (``times:``) or a committed file (``file:``)."""
    from labkit.quotes.prose import GENERATED_PAGES, without_generated  # prose imports this module

    problems = []
    for where, text in documents() if docs is None else docs:
        if where in GENERATED_PAGES:
            continue  # a script writes it whole from its measurements
        text = without_generated(text)[0]  # likewise a block a command writes
        visible = _ANY_TAG.sub("<!--=-->", _HIDDEN.sub("", text))  # a tag's words are no time
        # left out: tables, where the guide's timing tables put tagged measurements beside the
        # minutes of discussion that we estimate, and headings, which name a workshop path's
        # length (tests/test_teaching_paths.py holds each path's rows to it)
        visible = "\n".join(line for line in visible.splitlines()
                             if not line.lstrip().startswith(("|", "#")))
        problems += [f"{where}: {m[0]!r} is a typed timing; quote section_times.json with a "
                     f"times: tag (labkit.quotes)" for m in _TIMING.finditer(visible)]
    return problems


def _render(generated, value_of) -> list[Path]:
    """Rewrite the number of every quote for which ``generated(quote)`` holds, in the notebooks'
    markdown and the pages, from ``value_of(quote)`` at the digits it shows; returns the files
    changed. Only the quoted number changes, nothing around it."""
    import nbformat

    def rewrite(text: str) -> str:
        def one(match):
            quote = quotes_in(match[0], "")[0]
            if not generated(quote):
                return match[0]
            value = value_of(quote)
            if isinstance(value, str) or quote.holds(value):
                return match[0]
            return quote.expected(value) + match[0][len(match["number"]):]
        return _TAG.sub(one, text)

    changed = []
    for path in sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        edited = False
        for cell in nb.cells:
            if cell.cell_type == "markdown" and "<!--=" in cell.source:
                new = rewrite(cell.source)
                edited |= new != cell.source
                cell.source = new
        if edited:
            nbformat.write(nb, path)
            changed.append(path)
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        new = rewrite(text)
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(page)
    return changed


def render_times() -> list[Path]:
    """Rewrite every timing quote from the CPU records of the timing report (``times:`` tags)
    and every reading time from the notebooks' markdown (``reading:`` tags)."""
    times = _times()
    return _render(lambda q: q.source.startswith(("times:", "reading:")),
                   lambda q: source_value(q, times=times))


def render_bands() -> list[Path]:
    """Rewrite every band edge (``low``/``high`` tags) and every range of the measured runs
    (``lowest``/``highest``) from the portable bands
    (``python -m labkit bands`` calls it after building them)."""
    results, every = all_results(), all_bands()
    return _render(lambda q: bool(q.edge), lambda q: source_value(q, results, bands=every))
