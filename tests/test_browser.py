"""The widgets in a real browser: JupyterLab + headless Chromium, driven by Python playwright.

One JupyterLab server (localhost, a random free port, a token, its own settings, workspace,
config and runtime dirs, no browser of its own) serves a notebook generated in a temporary dir.
That notebook holds every widget cell of ``notebooks/NN_*.ipynb``, with their sources copied
verbatim (and, for ``runs_widget``, the notebook's own cell that loads the reference logs from
``data/runs/`` with ``viz.load_run``; for a cell that plots the notebook's live results, its own
widget call on inputs rebuilt small, see ``WIDGET_INPUTS``); the notebooks' training cells are left
out, so the whole
test takes well under a minute and a half on two cores. The kernel's environment has no
``LABKIT_STATIC``, so the widgets are interactive, as on a learner's machine.

Chromium opens the notebook in a 1280 x 900 px window (the file browser open, so the notebook's
output column is about 850 px wide), runs all cells, then for each widget cell:

- the widget rendered (no "Error displaying widget", no traceback or other stderr output, no
  "Cannot draw this"), with a PNG figure below its controls;
- every slider's track is at least ``MIN_TRACK_PX`` wide (a long description must not eat it);
- the figure is shown at its own size (the notebook column does not shrink it);
- dragging a slider with the mouse (or, for a widget without sliders, choosing another entry of
  its first menu or editing its first text box) redraws the figure: the image's bytes change.

and, for the whole page, that the browser console logged no error. Skips (with the reason) where
playwright or a Chromium binary is missing: CI installs both (``.ci/run``, the ``dev`` extra).
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
VIEWPORT = {"width": 1280, "height": 900}
MIN_TRACK_PX = 150
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage"]
WIDGET_CALL = re.compile(r"\bwidgets\.(\w+_widget)\(")
DONE = "labkit-browser-test: all cells ran"


def chromium_path() -> str | None:
    """The Chromium binary to drive: $LABKIT_CHROMIUM, Debian's /usr/bin/chromium, or on PATH."""
    for candidate in (os.environ.get("LABKIT_CHROMIUM"), "/usr/bin/chromium",
                      shutil.which("chromium"), shutil.which("chromium-browser"),
                      shutil.which("google-chrome")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def widget_cells() -> list[dict]:
    """Every notebook cell that builds a labkit widget, with the cell that loads its runs.

    Returns dicts with ``notebook`` (stem), ``index`` (cell index in the notebook), ``builder``,
    ``source`` and ``setup`` (the source of the last earlier cell assigning ``runs =``, for
    ``runs_widget``, when it loads logs with ``load_run`` rather than training; None otherwise).
    """
    found = []
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        for index, cell in enumerate(cells):
            source = "".join(cell["source"])
            match = WIDGET_CALL.search(source)
            if cell["cell_type"] != "code" or not match:
                continue
            setup = None
            if match.group(1) == "runs_widget":
                setup = next(("".join(c["source"]) for c in reversed(cells[:index])
                              if c["cell_type"] == "code"
                              and re.search(r"^runs\s*=", "".join(c["source"]), re.MULTILINE)),
                             None)
                if setup is None or "load_run" not in setup:  # never a training cell
                    setup = DEFAULT_RUNS
            elif free_names(source) - PRELUDE_NAMES:  # needs the notebook's live results
                setup = WIDGET_INPUTS.get(match.group(1))
                assert setup, (f"{path.name} cell {index} builds {match.group(1)} from names the"
                               f" test cannot provide ({sorted(free_names(source))}): add a small"
                               " input for it to WIDGET_INPUTS")
                source = widget_call(source)
            found.append({"notebook": path.stem, "index": index, "builder": match.group(1),
                          "source": source, "setup": setup})
    return found


def free_names(source: str) -> set[str]:
    """Names a cell reads without assigning them itself (builtins aside)."""
    import builtins

    from labkit.commands.student_copy import cell_names

    assigned, read = cell_names(source)
    return read - assigned - set(dir(builtins))


def widget_call(source: str) -> str:
    """The cell's own statement that builds the widget (its last one naming ``widgets.*_widget``)."""
    statements = [s for s in ast.parse(source).body
                  if WIDGET_CALL.search(ast.get_source_segment(source, s) or "")]
    return ast.get_source_segment(source, statements[-1])


# Widget cells that plot the notebook's live results (sampled answers, pass@k of a trained model)
# keep their own widget call; its inputs are rebuilt here, small, by the same labkit functions on
# the shipped model, so the browser test stays well under a minute and a half.
_SAMPLED = """\
from labkit.evaluate import pass_at_k_curve, sample_answers
from labkit.models import load_policy
from labkit.tasks import load_split
base, tokenizer = load_policy("tiny", device="cpu")
votes = sample_answers(base, tokenizer, load_split("eval").select(range(4)), k=16, seed=0,
                       max_completion_length=64)
"""
# Notebook 10's episodes: the tool model on two hard problems and two games, as the notebook samples
# them (four episodes at least: the test drags a slider by a third of its track, which must move it).
_EPISODES = """\
from labkit.agents import CalculatorEnv, GuessingEnv, guessing_dataset
from labkit.agents.episodes import environments, run_episodes
from labkit.models import load_policy
from labkit.tasks import load_split
model, tokenizer = load_policy("tiny-tools", device="cpu")
rows = load_split("eval", families=["add", "mul"], difficulties=[3, 4]).select([0, 1])
episodes = run_episodes(model, tokenizer, rows["prompt"], environments(CalculatorEnv, rows[:], 4),
                        num_generations=4, max_completion_length=192,
                        max_tool_calling_iterations=2, generator=torch.Generator().manual_seed(0))
called = int(episodes.tool_calls.gt(0).nonzero()[0])
games = guessing_dataset(2, seed=1)  # four episodes: a third of the slider is one step
played = run_episodes(model, tokenizer, games["prompt"], environments(GuessingEnv, games[:], 2),
                      num_generations=2, max_completion_length=640,
                      max_tool_calling_iterations=6, generator=torch.Generator().manual_seed(0))
"""
WIDGET_INPUTS = {
    "episode_widget": _EPISODES,
    "majority_vote_widget": _SAMPLED,
    # notebook 11's cached log-probs of one batch per staleness: behaviour log-probs further from
    # the proximal ones as the staleness grows
    "staleness_widget": """\
_prox = -torch.rand(4, 8, generator=torch.Generator().manual_seed(0))
stale = {s: (_prox, _prox - 0.1 * s * torch.randn(4, 8, generator=torch.Generator().manual_seed(s)),
             torch.ones(4, 8, dtype=torch.bool)) for s in (0, 1, 2, 4, 8)}
""",
    "pass_at_k_widget": _SAMPLED + """\
curves = {"base, T=1": pass_at_k_curve(votes, ks=[1, 2, 4, 8, 16]),
          "base, T=1.5": pass_at_k_curve(
              sample_answers(base, tokenizer, load_split("eval").select(range(4)), k=16, seed=0,
                             temperature=1.5, max_completion_length=64), ks=[1, 2, 4, 8, 16])}
""",
}


DEFAULT_RUNS = 'runs = {"GRPO": viz.load_run(DATA_DIR / "runs" / "02_grpo" / "grpo.csv")}'
PRELUDE = """\
import os
from pathlib import Path

import pandas as pd
import torch

from labkit import viz, widgets
from labkit.models import DATA_DIR

assert os.environ.get("LABKIT_STATIC") is None, "the kernel must not have LABKIT_STATIC"
assert widgets.widgets_enabled()
ROOT = Path({root!r})
NOTEBOOKS = ROOT / "notebooks"
torch.set_num_threads(1)
"""
PRELUDE_NAMES = {"os", "Path", "pd", "torch", "viz", "widgets", "DATA_DIR", "ROOT", "NOTEBOOKS",
                 "RUNS", "runs"}


def build_notebook(path: Path) -> list[dict]:
    """Write the test notebook; returns the widget cells with their index in it."""
    import nbformat

    from labkit import widgets

    cells = widget_cells()
    builders = {name for name in widgets.__all__ if name.endswith("_widget")}
    missing = builders - {c["builder"] for c in cells}
    for name in sorted(missing - {"runs_widget"}):  # a builder no notebook uses: its defaults
        cells.append({"notebook": "defaults", "index": -1, "builder": name,
                      "source": f"widgets.{name}()", "setup": None})
    if "runs_widget" in missing:
        cells.append({"notebook": "defaults", "index": -1, "builder": "runs_widget",
                      "source": "widgets.runs_widget(runs)", "setup": DEFAULT_RUNS})
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells.append(nbformat.v4.new_code_cell(PRELUDE.format(root=str(ROOT))))
    for cell in cells:
        if cell["setup"]:
            nb.cells.append(nbformat.v4.new_code_cell(
                f'RUNS = DATA_DIR / "runs" / {cell["notebook"]!r}\n{cell["setup"]}'))
        cell["label"] = f"{cell['notebook']}[{cell['index']}] {cell['builder']}"
        cell["position"] = len(nb.cells)
        nb.cells.append(nbformat.v4.new_code_cell(f"# {cell['label']}\n{cell['source']}"))
    first, rest = DONE.split(" ", 1)  # printed, not in the source: the source is on the page
    nb.cells.append(nbformat.v4.new_code_cell(f"print({first!r}, {rest!r})"))
    nbformat.write(nb, path)
    return cells


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def jupyterlab(base: Path):
    """Run JupyterLab on localhost serving ``base / "notebooks"``; yields (url, token, dir).

    Its config, data, runtime, settings, workspace and IPython dirs are fresh ones under
    ``base``; the server's environment (and so the kernel's) has no ``LABKIT_STATIC`` and no
    ``MPLBACKEND``, as on a learner's machine.
    """
    serve = base / "notebooks"
    serve.mkdir()
    dirs = {name: base / name for name in ("config", "data", "runtime", "settings", "workspaces",
                                           "ipython")}
    for d in dirs.values():
        d.mkdir()
    # No news or update checks (no network), and every cell in the DOM (no windowing).
    for plugin, settings in {
        "@jupyterlab/apputils-extension/notification": {"fetchNews": "false",
                                                         "checkForUpdates": False},
        "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    }.items():
        target = dirs["settings"] / f"{plugin}.jupyterlab-settings"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(settings))
    env = {k: v for k, v in os.environ.items()
           if k not in ("LABKIT_STATIC", "MPLBACKEND") and not k.startswith("JUPYTER")}
    env.update(JUPYTER_CONFIG_DIR=str(dirs["config"]), JUPYTER_DATA_DIR=str(dirs["data"]),
               JUPYTER_RUNTIME_DIR=str(dirs["runtime"]), IPYTHONDIR=str(dirs["ipython"]),
               JUPYTERLAB_SETTINGS_DIR=str(dirs["settings"]),
               JUPYTERLAB_WORKSPACES_DIR=str(dirs["workspaces"]), PYTHONUNBUFFERED="1")
    port, token = free_port(), os.urandom(16).hex()
    log_path = base / "server.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
             f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={serve}",
             "--LabApp.expose_app_in_browser=True", "--ServerApp.open_browser=False",
             "--ServerApp.allow_root=True", "--ServerApp.terminals_enabled=False",
             f"--LabApp.user_settings_dir={dirs['settings']}",
             f"--LabApp.workspaces_dir={dirs['workspaces']}"],
            cwd=serve, env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                        break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        log.flush()
                        raise RuntimeError("JupyterLab did not start:\n"
                                           + log_path.read_text()) from None
                    time.sleep(0.3)
            yield {"url": url, "token": token, "dir": serve}
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server and the playwright module, or a skip saying what is missing."""
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="the python package playwright is not installed")
    if chromium_path() is None:
        pytest.skip("no Chromium binary (apt-get install chromium, or set LABKIT_CHROMIUM)")
    pytest.importorskip("jupyterlab", reason="jupyterlab is not installed")
    with jupyterlab(tmp_path_factory.mktemp("jupyterlab")) as server:
        yield {**server, "sync_api": sync_api}


JS_STATE = """(position) => {
  const cell = document.querySelectorAll('.jp-Notebook .jp-Cell')[position];
  const img = cell.querySelector('.jp-OutputArea-output .widget-output img, '
                                 + '.jp-OutputArea-output .jupyter-widgets-output-area img');
  const tracks = [...cell.querySelectorAll('.widget-slider .noUi-target, '
                                           + '.widget-hslider .noUi-target')];
  return {
    text: cell.querySelector('.jp-OutputArea') ? cell.querySelector('.jp-OutputArea').innerText
                                               : '',
    stderr: [...cell.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"]')]
              .map(e => e.innerText),
    src: img ? img.getAttribute('src') : null,
    shown: img ? img.getBoundingClientRect().width : 0,
    natural: img ? img.naturalWidth : 0,
    tracks: tracks.map(t => Math.round(t.getBoundingClientRect().width)),
    labels: tracks.map(t => {
      const w = t.closest('.widget-slider, .widget-hslider');
      const l = w && w.querySelector('.widget-label');
      return l ? l.innerText : '';
    }),
  };
}"""


JS_ERRORS = """() => {
  const notebook = window.jupyterapp.shell.currentWidget.content;
  const errors = [];
  notebook.widgets.forEach((cell, i) => {
    const outputs = cell.model.outputs ? cell.model.outputs.toJSON() : [];
    outputs.filter(o => o.output_type === 'error')
           .forEach(o => errors.push(`cell ${i}: ${o.ename}: ${o.evalue}`));
  });
  return errors;
}"""


def test_every_widget_runs_and_redraws_in_jupyterlab(lab, record_property):
    started = time.monotonic()
    cells = build_notebook(lab["dir"] / "widgets.ipynb")
    from labkit import widgets

    assert {c["builder"] for c in cells} == {n for n in widgets.__all__ if n.endswith("_widget")}
    console, problems = [], []
    with lab["sync_api"].sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS,
                                     headless=True)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: console.append(f"page error: {e}"))
            page.goto(f"{lab['url']}/lab/tree/widgets.ipynb?token={lab['token']}")
            assert waits(page, "() => { const w = window.jupyterapp"
                               " && window.jupyterapp.shell.currentWidget;"
                               " return w && w.sessionContext && w.sessionContext.session"
                               " && w.sessionContext.session.kernel; }", timeout_ms=60_000), \
                "JupyterLab did not open the notebook with a kernel"
            page.evaluate("() => { window.jupyterapp.commands.execute("
                          "'notebook:run-all-cells'); }")
            # Run-all stops at a cell that raises: wait for the last cell or for an error.
            finished = waits(page, f"() => document.body.innerText.includes({DONE!r})"
                                   f" || ({JS_ERRORS})().length > 0", timeout_ms=120_000)
            errors = page.evaluate(JS_ERRORS)
            assert finished and not errors, f"the widget cells raised: {errors}"
            for cell in cells:
                problems += check_cell(page, cell)
        finally:
            browser.close()
    wall = time.monotonic() - started
    record_property("wall_s", round(wall, 1))
    print(f"browser test: {len(cells)} widget cells in {wall:.1f} s")
    assert not problems, "\n".join(problems)
    assert not console, "browser console errors:\n" + "\n".join(console)


def waits(page, condition: str, arg=None, timeout_ms: int = 30_000) -> bool:
    """Wait until the JavaScript ``condition`` holds; False when it timed out."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(condition, arg=arg, timeout=timeout_ms)
    except PlaywrightTimeout:
        return False
    return True


def check_cell(page, cell) -> list[str]:
    """Problems with one widget cell (an empty list when all is well)."""
    label, position = cell["label"], cell["position"]
    locator = page.locator(".jp-Notebook .jp-Cell").nth(position)
    locator.scroll_into_view_if_needed()
    waits(page, f"() => ({JS_STATE})({position}).src")  # if not, reported below
    state = page.evaluate(JS_STATE, position)
    problems = []
    for bad in ("Error displaying widget", "Traceback", "Cannot draw this"):
        if bad in state["text"]:
            problems.append(f"{label}: {bad!r} in its output: {state['text'][:500]}")
    if state["stderr"]:
        problems.append(f"{label}: stderr output: {state['stderr']}")
    if not state["src"]:
        return problems + [f"{label}: no figure in the widget: {state['text'][:300]!r}"]
    narrow = [f"{name} {w} px" for name, w in zip(state["labels"], state["tracks"])
              if w < MIN_TRACK_PX]
    if narrow:
        problems.append(f"{label}: slider tracks narrower than {MIN_TRACK_PX} px: {narrow}")
    if state["shown"] < 0.98 * state["natural"]:
        problems.append(f"{label}: figure shrunk to {state['shown'] / state['natural']:.0%} "
                        f"({state['natural']} px wide)")
    before = state["src"]
    handles = locator.locator(".noUi-handle")
    if handles.count():
        handle = handles.first
        track = locator.locator(".noUi-target").first.bounding_box()
        box = handle.bounding_box()
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        # Drag a third of the track towards its emptier side.
        target = x + track["width"] / 3 if x < track["x"] + track["width"] / 2 else \
            x - track["width"] / 3
        page.mouse.move(x, y)
        page.mouse.down()
        page.mouse.move(target, y, steps=5)
        page.mouse.up()
        what = "dragging its first slider"
    elif locator.locator(".widget-dropdown select").count():
        menu = locator.locator(".widget-dropdown select").first
        menu.select_option(index=0 if menu.evaluate("m => m.selectedIndex") else 1)
        what = "choosing another entry of its first menu"
    else:
        box = locator.locator(".widget-text input").first
        values = box.input_value().split(",")
        box.fill(", ".join(["0.5"] + values[1:]))
        box.press("Enter")
        what = "editing its first text box"
    if not waits(page, f"([p, before]) => {{ const s = ({JS_STATE})(p); "
                       f"return s.src && s.src !== before; }}", [position, before]):
        after = page.evaluate(JS_STATE, position)
        problems.append(f"{label}: {what} did not redraw the figure; output: "
                        f"{after['text'][:300]!r}")
    return problems
