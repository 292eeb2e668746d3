"""Surface 12: the classroom's own files. A learner saves a checkpoint into a folder that holds
their notes, beside their own ``<name>.old``, onto a file, into a folder with a symlink to their
data; resumes a checkpoint with other data, other rewards or another environment; points
``python -m labkit reference_runs`` at a spec named ``.csv`` or beside a CSV the lab did not write;
runs ``python -m labkit section_times`` with a kernel that is not installed, a device that is not
there, or an output file that is not a report. Whatever the lab refuses, the learner's files must
come out byte for byte as they went in.

Checkpoint runs are one step of the randomly initialised tiny Qwen of surface 7
(:mod:`fuzz.checkpoints`); the one section_times case that runs a kernel executes a two-cell
notebook.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import warnings
from pathlib import Path

import nbformat
import torch
from nbformat.v4 import new_code_cell, new_notebook

from fuzz.checkpoints import SMALL, _alternating, _base, _tokenizer_and_data
from fuzz.harness import Case
from fuzz.scratch import scratch, write
from fuzz.specs import TINY_RUN

SURFACE = 12
SAVE_REFUSALS = (FileExistsError, ValueError)


# ---- checkpoints: the learner's files ------------------------------------------------------------
def _trainer(data=None, rewards=None, environment=None, **overrides):
    from labkit.config import preset
    from labkit.trainer import Trainer

    tokenizer, default_data = _tokenizer_and_data()
    return Trainer(preset("grpo", **{**SMALL, **overrides}), model=copy.deepcopy(_base()),
                   tokenizer=tokenizer, train_dataset=default_data if data is None else data,
                   reward_funcs=[_alternating] if rewards is None else rewards,
                   environment_factory=environment)


def _trained():
    trainer = _trainer()
    trainer.train()
    return trainer


def _snapshot(folder: Path) -> dict:
    """Every file and link under ``folder`` (the folder itself included), with its bytes."""
    found = {}
    for path in [folder, *sorted(folder.rglob("*"))] if folder.exists() else []:
        key = path.relative_to(folder.parent).as_posix()
        if path.is_symlink():
            found[key] = ("link", os.readlink(path))
        elif path.is_file():
            found[key] = ("file", path.read_bytes())
        else:
            found[key] = ("dir", None)
    return found


def _guarded(prepare, act):
    """``prepare()`` returns the learner's paths; ``act(paths)`` saves. Returns (the error's text
    or None, whether every learner's path came out as it went in)."""
    def call():
        paths = prepare()
        before = {str(p): _snapshot(p) for p in paths}
        try:
            act(paths)
            error = None
        except SAVE_REFUSALS as refused:
            error = f"{type(refused).__name__}: {refused}"
        return error, {str(p): _snapshot(p) for p in paths} == before
    return call


def _refused_intact(*fragments):
    def check(result):
        error, intact = result
        assert intact, "a learner's file was deleted or changed"
        assert error is not None, "the save went ahead"
        missing = [f for f in fragments if f not in error]
        assert not missing, f"{error!r} does not name {missing}"
    return check


def _saved_intact(result):
    error, intact = result
    assert intact, "a learner's file was deleted or changed"
    assert error is None, f"refused: {error}"


def _results_folder():
    folder = scratch("results") / "results"
    folder.mkdir()
    (folder / "notes.txt").write_text("what I saw at step 40")
    (folder / "plots").mkdir()
    (folder / "plots" / "reward.png").write_bytes(b"\x89PNG fake")
    return [folder]


def _user_manifest():
    folder = scratch("manifest") / "site"
    folder.mkdir()
    (folder / "manifest.json").write_text('{"name": "my web app"}')
    return [folder]


def _lab_checkpoint_plus(extra):
    """A lab checkpoint into which the learner put ``extra`` (a relative path)."""
    def prepare():
        folder = _trained().save_checkpoint(scratch("own") / "checkpoint")
        path = folder / extra
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("mine")
        return [folder]
    return prepare


def _siblings(*names):
    def prepare():
        parent = scratch("siblings")
        made = []
        for name in names:
            (parent / name).mkdir()
            (parent / name / "keep.txt").write_text("the learner's")
            made.append(parent / name)
        return made
    return prepare


def _save_to(name):
    def act(paths):
        _trained().save_checkpoint(paths[0].parent / name)
    return act


def _save_into(paths):
    _trained().save_checkpoint(paths[0])


def _a_file():
    path = scratch("file") / "checkpoint"
    path.write_text("a file named like a folder")
    return [path]


def _folder_with_link():
    data = scratch("data") / "gsm8k"
    data.mkdir()
    (data / "train.jsonl").write_text('{"question": "1+1"}\n')
    folder = scratch("linked") / "checkpoint"
    folder.mkdir()
    os.symlink(data, folder / "data", target_is_directory=True)
    return [folder, data]


def _saved_twice():
    trainer = _trained()
    folder = trainer.save_checkpoint(scratch("twice") / "checkpoint")
    trainer.save_checkpoint(folder)
    from labkit.training.checkpoint import load_state

    return load_state(folder)["step"], sorted(p.name for p in folder.parent.iterdir())


def _one_clean_checkpoint(result):
    step, names = result
    assert step == 1, f"step {step}"
    assert names == ["checkpoint"], f"left beside the checkpoint: {names}"


def _empty_folder():
    folder = scratch("empty") / "checkpoint"
    folder.mkdir()
    _trained().save_checkpoint(folder)
    from labkit.training.checkpoint import load_state

    return load_state(folder)["step"], sorted(p.name for p in folder.parent.iterdir())


# ---- resumes that would mix runs -----------------------------------------------------------------
def _checkpoint():
    return _trained().save_checkpoint(scratch("resume") / "checkpoint")


def _other_data():
    from labkit.tasks import load_split

    return load_split("train").select(range(16, 32))


def _shuffled_data():
    _, data = _tokenizer_and_data()
    return data.select(list(reversed(range(len(data)))))


def _format_only(prompts, completions, **columns):
    return [0.5] * len(completions)


class _Env:
    def reset(self, **row):
        return None


def _resume(**kwargs):
    allow = kwargs.pop("allow_changes", None)

    def call():
        folder = _checkpoint()
        trainer = _trainer(max_steps=2, **kwargs)
        if allow is None:
            trainer.load_checkpoint(folder)
        else:
            trainer.load_checkpoint(folder, allow_changes=allow)
        return trainer
    return call


def _resumed_to(step):
    def check(trainer):
        assert trainer.step == step, f"step {trainer.step}, expected {step}"
    return check


def _same_data_as_rows():
    _, data = _tokenizer_and_data()
    return _resume(data=[dict(row) for row in data])


def _without_fingerprints():
    """A checkpoint as labkit wrote it before fingerprints: no 'fingerprints' in its state."""
    from labkit.training.checkpoint import STATE_FILE

    folder = _checkpoint()
    state = torch.load(folder / STATE_FILE, weights_only=True)
    state.pop("fingerprints", None)
    torch.save(state, folder / STATE_FILE)
    manifest = json.loads((folder / "manifest.json").read_text())
    from labkit.runtime.hashing import file_sha256

    manifest[STATE_FILE] = file_sha256(folder / STATE_FILE)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = _trainer(max_steps=2, data=_other_data())
        trainer.load_checkpoint(folder)
    return trainer.step, [str(w.message) for w in caught]


def _old_checkpoint_resumes_with_a_warning(result):
    step, messages = result
    assert step == 1, f"step {step}"
    assert any("fingerprint" in m for m in messages), f"no warning: {messages}"


# ---- reference runs ------------------------------------------------------------------------------
TINY_SPEC = json.dumps({"preset": "grpo", "overrides": TINY_RUN})


def _spec_named(name: str):
    path = write(name, TINY_SPEC)
    return lambda: _reference_runs_main([str(path)])


def _reference_runs_main(argv):
    from labkit.commands.reference_runs import main

    return main(argv)


def _beside(csv_content: str | None, csv_folder: bool = False):
    """A spec whose ``<spec>.csv`` is already there: a learner's CSV, or a folder."""
    def call():
        spec = write("grades.json", TINY_SPEC)
        out = spec.with_suffix(".csv")
        if csv_folder:
            out.mkdir()
        else:
            out.write_text(csv_content)
        before = _snapshot(out)
        try:
            _reference_runs_main([str(spec)])
        except ValueError:
            if _snapshot(out) != before:
                raise AssertionError(f"{out} changed") from None
            raise
        return "trained"
    return call


# ---- section_times -------------------------------------------------------------------------------
class CommandRefused(ValueError):
    """The command exited with a non-zero status before timing anything: its message."""


def _section_times(*argv, notebook_kernel: str | None = "python3"):
    """``python -m labkit section_times`` on a two-cell notebook in a scratch folder."""
    def call():
        from labkit.commands.section_times import main

        folder = scratch("notebooks")
        metadata = {} if notebook_kernel is None else {"kernelspec": {
            "name": notebook_kernel, "display_name": notebook_kernel, "language": "python"}}
        nbformat.write(new_notebook(cells=[new_code_cell("x = 6 * 7")], metadata=metadata),
                       folder / "01_small.ipynb")
        args = [a.replace("{dir}", str(folder)) for a in argv]
        if "--out-json" not in args:
            args += ["--out-json", str(folder / "t.json")]
        if "--out-md" not in args:
            args += ["--out-md", str(folder / "t.md")]
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
                status = main(["01", "--notebooks-dir", str(folder), "--cell-timeout", "60",
                               *args])
        except SystemExit as stopped:
            if stopped.code:
                raise CommandRefused(stderr.getvalue().strip()) from None
            status = 0
        return status, folder
    return call


def _untouched_refusal(path_text: str, content: str, flag: str):
    """An output path that holds a learner's file: refused, and the file is not changed."""
    def call():
        path = write(path_text, content)
        before = path.read_bytes()
        try:
            result = _section_times(flag, str(path))()
        except CommandRefused:
            _unchanged(path, before)
            raise
        _unchanged(path, before)
        return result
    return call


def _unchanged(path: Path, before: bytes) -> None:
    if path.read_bytes() != before:
        raise AssertionError(f"{path} was overwritten")


def _merged_report():
    """A committed-style report (the old one-machine format) with two notebooks; timing one
    notebook keeps the other's record."""
    def call():
        folder = scratch("report")
        old = {"command": "python -m labkit section_times", "cell_timeout_s": 900,
               "machine": {"cpu": "Old CPU", "logical_cores": 2, "threads_per_kernel": 1,
                           "memory_gib": 8.0, "os": "Linux", "python": "3.11.7",
                           "torch": "2.13.0", "transformers": "5.24.0",
                           "date": "2026-11-26 00:48 UTC", "load_average_before": None},
               "notebooks": [_record("00_tour.ipynb", 22.0), _record("01_small.ipynb", 99.0)]}
        out = folder / "times.json"
        out.write_text(json.dumps(old))
        status, _ = _section_times("--out-json", str(out))()
        report = json.loads(out.read_text())
        return status, report
    return call


def _record(name, wall):
    return {"notebook": name, "status": "ok", "error": None, "wall_s": wall, "cpu_s": wall,
            "sections": [{"title": "setup", "first_cell": 0, "code_cells": 1, "timed_cells": 1,
                          "wall_s": wall, "cpu_s": wall}],
            "cells": [{"index": 0, "wall_s": wall, "cpu_s": wall}]}


def _kept_the_other_notebook(result):
    status, report = result
    assert status == 0, f"status {status}"
    records = report["notebooks"]
    names = sorted(r["notebook"] for r in records)
    assert names == ["00_tour.ipynb", "01_small.ipynb"], f"records {names}"
    tour = next(r for r in records if r["notebook"] == "00_tour.ipynb")
    small = next(r for r in records if r["notebook"] == "01_small.ipynb")
    assert tour["wall_s"] == 22.0, "the untimed notebook's record changed"
    assert small["wall_s"] < 99.0, "the timed notebook kept its old record"


def _no_cuda():
    return not torch.cuda.is_available()


def cases() -> list[Case]:
    c = []

    def refuse(name, call, *fragments, errors=(ValueError, TypeError), seconds=30.0):
        c.append(Case(SURFACE, name, call, tuple(fragments), errors=errors, seconds=seconds,
                      prepare=_tokenizer_and_data))

    def accept(name, call, check, seconds=30.0):
        c.append(Case(SURFACE, name, call, None, check=check, seconds=seconds,
                      prepare=_tokenizer_and_data))

    # checkpoint folders: nothing of the learner's is deleted
    accept("save-into-a-results-folder", _guarded(_results_folder, _save_into),
           _refused_intact("results", "notes.txt"))
    accept("save-into-a-folder-with-its-own-manifest", _guarded(_user_manifest, _save_into),
           _refused_intact("site", "manifest.json"))
    accept("save-over-a-checkpoint-holding-a-note", _guarded(
        _lab_checkpoint_plus("notes.txt"), _save_into), _refused_intact("notes.txt"))
    accept("save-over-a-checkpoint-holding-a-plot-in-model", _guarded(
        _lab_checkpoint_plus("model/plot.png"), _save_into), _refused_intact("model/plot.png"))
    accept("save-new-beside-the-learners-old", _guarded(
        _siblings("checkpoint.old"), _save_to("checkpoint")), _saved_intact)
    accept("save-new-beside-the-learners-partial", _guarded(
        _siblings("checkpoint.partial"), _save_to("checkpoint")), _saved_intact)
    accept("save-beside-a-hidden-folder-named-like-a-temporary", _guarded(
        _siblings(".checkpoint.labkit-save-mine"), _save_to("checkpoint")), _saved_intact)
    accept("save-onto-a-file", _guarded(_a_file, _save_into),
           _refused_intact("checkpoint", "file"))
    accept("save-into-a-folder-with-a-symlink-to-data", _guarded(_folder_with_link, _save_into),
           _refused_intact("checkpoint", "data"))
    accept("save-twice-to-one-folder", _saved_twice, _one_clean_checkpoint)
    accept("save-into-an-empty-folder", _empty_folder, _one_clean_checkpoint)
    # resumes that would mix two runs
    refuse("resume-with-other-data", _resume(data=_other_data()), "data", "allow_changes")
    refuse("resume-with-the-data-reordered", _resume(data=_shuffled_data()), "data",
           "allow_changes")
    refuse("resume-with-other-rewards", _resume(rewards=[_format_only]), "rewards",
           "alternating", "format_only", "allow_changes")
    refuse("resume-with-an-environment-added", _resume(environment=_Env), "environment",
           "_Env", "allow_changes")
    accept("resume-with-other-data-allowed", _resume(data=_other_data(),
                                                     allow_changes=("data",)), _resumed_to(1))
    accept("resume-with-one-change-allowed-as-a-string", _resume(
        rewards=[_format_only], allow_changes="rewards"), _resumed_to(1))
    refuse("resume-allowing-the-wrong-change", _resume(data=_other_data(),
                                                       allow_changes=("rewards",)), "data")
    refuse("allow-changes-unknown-name", _resume(allow_changes=("everything",)),
           "allow_changes", "'everything'", "data", "rewards", "environment")
    refuse("allow-changes-a-number", _resume(allow_changes=3), "allow_changes", "3")
    accept("resume-with-the-same-data-as-a-list-of-rows", _same_data_as_rows(), _resumed_to(1))
    accept("resume-an-old-checkpoint-without-fingerprints", _without_fingerprints,
           _old_checkpoint_resumes_with_a_warning)
    # reference runs
    refuse("spec-named-csv", _spec_named("run.csv"), "run.csv", ".json")
    refuse("spec-named-upper-csv", _spec_named("run.CSV"), "run.CSV", ".json")
    refuse("csv-beside-the-spec-is-the-learners", _beside("name,grade\nada,A\n"), "grades.csv",
           "reference_runs")
    refuse("csv-beside-the-spec-is-a-folder", _beside(None, csv_folder=True), "grades.csv",
           "folder")
    # section_times
    refuse("kernel-not-installed", _section_times("--kernel", "julia-1.9"), "julia-1.9",
           "python3", errors=(CommandRefused,), seconds=60.0)
    refuse("notebook-kernelspec-not-installed", _section_times(notebook_kernel="ir"), "'ir'",
           "01_small.ipynb", "python3", errors=(CommandRefused,), seconds=60.0)
    refuse("device-unknown", _section_times("--device", "tpu"), "--device", "tpu", "cuda",
           errors=(CommandRefused,), seconds=60.0)
    if _no_cuda():
        refuse("device-cuda-without-a-gpu", _section_times("--device", "cuda"), "cuda",
               "torch.cuda", errors=(CommandRefused,), seconds=60.0)
    refuse("out-json-is-the-learners-json", _untouched_refusal(
        "grades.json", '{"ada": "A"}', "--out-json"), "grades.json", "section_times",
        errors=(CommandRefused,), seconds=60.0)
    refuse("out-json-is-not-json", _untouched_refusal("times.json", "not json", "--out-json"),
           "times.json", errors=(CommandRefused,), seconds=60.0)
    refuse("out-md-is-the-learners-notes", _untouched_refusal(
        "notes.md", "# My notes\n", "--out-md"), "notes.md", "section_times",
        errors=(CommandRefused,), seconds=60.0)
    accept("one-notebook-merges-into-the-report", _merged_report(), _kept_the_other_notebook,
           seconds=60.0)
    return c
