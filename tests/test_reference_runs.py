"""Reference runs: a spec trains, and its CSV holds one column per metric with the command on top."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from labkit.commands.reference_runs import (
    COMMAND_LINE,
    OLDER_COMMAND_LINES,
    load_spec,
    run_history,
    run_spec,
)
from labkit.models import TINY_MODEL_DIR
from labkit.viz import load_run

ROOT = Path(__file__).resolve().parent.parent


def test_run_history_keeps_one_copy_of_each_eval_column_and_step_zero():
    # the trainer's history repeats the eval metrics at the steps that evaluated
    history = pd.DataFrame({"step": [1, 2], "reward": [0.1, 0.2], "eval_accuracy": [None, 0.5]})
    evals = pd.DataFrame({"step": [0, 2], "eval_accuracy": [0.25, 0.5], "length": [10.0, 12.0]})
    merged = run_history(SimpleNamespace(history=history, eval_history=evals))
    assert list(merged["step"]) == [0, 1, 2]
    assert not [c for c in merged if c.endswith(("_x", "_y"))]
    assert merged["eval_accuracy"].tolist()[0] == 0.25 and merged["eval_accuracy"].tolist()[2] == 0.5
    assert merged["eval_length"].tolist()[2] == 12.0


def test_a_spec_needs_a_preset(tmp_path):
    spec = tmp_path / "bad.json"
    spec.write_text(json.dumps({"overrides": {"max_steps": 1}}))
    with pytest.raises(ValueError, match="'preset'"):
        load_spec(spec)


@pytest.mark.skipif(not TINY_MODEL_DIR.exists(), reason="the shipped tiny model is missing")
def test_run_spec_writes_a_log_that_load_run_reads_back(tmp_path):
    spec = tmp_path / "tiny_grpo.json"
    spec.write_text(json.dumps({"preset": "grpo", "overrides": {
        "max_steps": 2, "eval_every": 2, "eval_max_prompts": 4, "eval_k": 1,
        "prompts_per_step": 2, "num_generations": 2, "max_completion_length": 16},
        "seeds": [0, 1], "data": {"families": ["sub"], "difficulties": [3]}}))
    out = run_spec(spec, threads=1)
    df = load_run(out)
    assert df.attrs["command"] == f"python -m labkit reference_runs {spec.as_posix()}"
    assert list(df["seed"]) == [0, 0, 0, 1, 1, 1] and list(df["step"]) == [0, 1, 2] * 2
    assert df["eval_accuracy"].notna().tolist() == [True, False, True] * 2
    assert not [c for c in df if c.endswith(("_x", "_y"))]
    first, second = (df[df["seed"] == seed].reset_index(drop=True) for seed in (0, 1))
    columns = ["completion_length", "reward", "entropy", "grad_norm"]
    assert not first[columns].equals(second[columns])  # the seeds differ


def test_a_spec_cannot_resume_or_set_its_seed_in_the_overrides(tmp_path):
    spec = tmp_path / "bad.json"
    for key in ("seed", "resume_from", "output_dir"):
        spec.write_text(json.dumps({"preset": "grpo", "overrides": {key: 0}}))
        with pytest.raises(ValueError, match=key):
            load_spec(spec)


@pytest.mark.skipif(not TINY_MODEL_DIR.exists(), reason="the shipped tiny model is missing")
def test_a_spec_names_its_rewards_and_its_eval_cells(tmp_path):
    spec = tmp_path / "lax.json"
    spec.write_text(json.dumps({"preset": "grpo", "overrides": {
        "max_steps": 1, "eval_every": 1, "eval_k": 1, "prompts_per_step": 2,
        "num_generations": 2, "max_completion_length": 16},
        "data": {"families": ["add"], "difficulties": [3]},
        "eval_data": {"families": ["add"], "difficulties": [1, 3]},
        "reward_funcs": ["format_only"]}))
    df = load_run(run_spec(spec, threads=1))
    assert "reward_format_only" in df and "reward_accuracy" not in df
    assert {"eval_accuracy_add_d1", "eval_accuracy_add_d3"} <= set(df.columns)


def test_a_reward_outside_the_named_ones_is_refused_with_the_list(tmp_path):
    from labkit.commands.reference_runs import reward_funcs
    from labkit.rewards import REWARD_REGISTRY

    with pytest.raises(ValueError, match="is not one of the lab's named rewards") as refused:
        reward_funcs({"reward_funcs": ["labkit.rewards.verifiers.no_such_reward"]}, "spec.json")
    assert all(name in str(refused.value) for name in REWARD_REGISTRY)
    with pytest.raises(ValueError, match="non-empty list"):
        reward_funcs({"reward_funcs": "accuracy"}, "spec.json")


def test_a_spec_cannot_import_or_run_code(tmp_path):
    """A shared spec once imported any dotted name (``"this.s"`` printed the Zen of Python, and a
    ``helpers.py`` beside the spec ran). Now a name is a key: nothing is imported, nothing runs."""
    marker = tmp_path / "ran.txt"
    (tmp_path / "helpers.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\nx = 1\n")
    for name in ("this.s", "helpers.x", "os.system", "labkit.rewards.accuracy_reward"):
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({"preset": "grpo", "overrides": {"max_steps": 1},
                                    "reward_funcs": [name]}))
        done = subprocess.run([sys.executable, "-m", "labkit.commands.reference_runs", str(spec)],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
        assert done.returncode != 0
        assert "is not one of the lab's named rewards" in done.stderr
        assert "Beautiful is better than ugly" not in done.stdout + done.stderr
        assert not marker.exists()



# ---- the committed log is never lost -------------------------------------------------------------
TINY_OVERRIDES = {"max_steps": 3, "prompts_per_step": 1, "num_generations": 2,
                  "max_completion_length": 4, "eval_every": 0}


def test_a_spec_named_csv_is_refused_before_its_log_overwrites_it(tmp_path):
    for name in ("run.csv", "run.CSV"):
        spec = tmp_path / name
        spec.write_text(json.dumps({"preset": "grpo", "overrides": TINY_OVERRIDES}))
        before = spec.read_bytes()
        with pytest.raises(ValueError, match=rf"{name}.*own log.*run\.json"):
            load_spec(spec)
        assert spec.read_bytes() == before


@pytest.mark.parametrize("first", [COMMAND_LINE, *OLDER_COMMAND_LINES])  # a learner's older log
def test_a_log_this_command_wrote_may_be_replaced(tmp_path, first):
    spec = tmp_path / "run.json"
    spec.write_text(json.dumps({"preset": "grpo", "overrides": TINY_OVERRIDES}))
    (tmp_path / "run.csv").write_text(f"{first}{spec.as_posix()}\nseed,step\n9,9\n")
    assert load_spec(spec)["preset"] == "grpo"


@pytest.mark.parametrize(("content", "kind"), [
    (b"name,grade\nada,A\n", "did not write"), (None, "a folder")])
def test_a_csv_beside_the_spec_that_the_lab_did_not_write_is_refused(tmp_path, content, kind):
    spec = tmp_path / "grades.json"
    spec.write_text(json.dumps({"preset": "grpo", "overrides": TINY_OVERRIDES}))
    out = tmp_path / "grades.csv"
    if content is None:
        out.mkdir()
    else:
        out.write_bytes(content)
    with pytest.raises(ValueError, match=f"grades.csv.*{kind}"):
        load_spec(spec)
    assert (out.read_bytes() == content) if content is not None else out.is_dir()


#: Runs ``python -m labkit reference_runs`` (through runpy, as ``-m`` does) with two hooks into
#: the trainer: each seed's start is logged, and the first step of the first seed writes a marker
#: and then waits, so that the parent's signal lands inside a seed, between two steps (the other
#: steps do not wait: a command that goes on after the signal finishes quickly).
DRIVER = """
import runpy, signal, sys, time
from pathlib import Path

import labkit.trainer as trainer

signal.signal(signal.SIGINT, signal.default_int_handler)  # a shell's Ctrl-C, not pytest's
marker, seeds = Path(sys.argv[1]), Path(sys.argv[2])
make, step = trainer.Trainer.__init__, trainer.Trainer.training_step

def logged_init(self, *args, **kwargs):
    with seeds.open("a") as f:
        f.write("seed started\\n")
    make(self, *args, **kwargs)

def waiting_step(self):
    row = step(self)
    if not marker.exists():
        marker.write_text("step done")
        time.sleep(300)
    return row

trainer.Trainer.__init__, trainer.Trainer.training_step = logged_init, waiting_step
sys.argv = ["labkit.commands.reference_runs", *sys.argv[3:]]
runpy.run_module("labkit.commands.reference_runs", run_name="__main__", alter_sys=True)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="sends POSIX signals to the command")
@pytest.mark.skipif(not TINY_MODEL_DIR.exists(), reason="the shipped tiny model is missing")
@pytest.mark.parametrize(("signum", "status"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_an_interrupt_stops_the_command_and_keeps_the_committed_log(tmp_path, signum, status):
    """Ctrl-C in the first of two seeds used to start the second seed, overwrite the committed
    CSV with the cut-short log and exit 0."""
    import signal
    import time

    spec = tmp_path / "run.json"
    spec.write_text(json.dumps({"preset": "grpo", "overrides": TINY_OVERRIDES, "seeds": [0, 1]}))
    committed = (f"# command: python -m labkit reference_runs {spec.as_posix()}\n"
                 f"seed,step,reward\n0,1,0.5\n").encode()
    (tmp_path / "run.csv").write_bytes(committed)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    marker, seeds = tmp_path / "stepped", tmp_path / "seeds.txt"
    command = subprocess.Popen(
        [sys.executable, str(driver), str(marker), str(seeds), str(spec), "--threads", "1"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not marker.exists() and command.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.exists(), f"the first step never finished: {command.poll()}"
        command.send_signal(getattr(signal, signum))
        _, stderr = command.communicate(timeout=120)
    finally:
        if command.poll() is None:
            command.kill()
            command.communicate()
    assert command.returncode == status, stderr[-2000:]
    assert f"stopped by {signum}" in stderr and "seed 0 was interrupted" in stderr
    assert (tmp_path / "run.csv").read_bytes() == committed
    assert seeds.read_text() == "seed started\n"  # the second seed never started
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "driver.py", "run.csv", "run.json", "seeds.txt", "stepped"]  # no temporary left


@pytest.mark.skipif(not TINY_MODEL_DIR.exists(), reason="the shipped tiny model is missing")
def test_a_finished_run_replaces_its_own_log(tmp_path):
    spec = tmp_path / "run.json"
    spec.write_text(json.dumps({"preset": "grpo", "overrides": {**TINY_OVERRIDES,
                                                                 "max_steps": 1}}))
    (tmp_path / "run.csv").write_text(f"{OLDER_COMMAND_LINES[0]}{spec.as_posix()}\nseed,step\n9,9\n")
    df = load_run(run_spec(spec, threads=1))
    assert list(df["seed"]) == [0] and list(df["step"]) == [1]
    assert df.attrs["command"] == f"python -m labkit reference_runs {spec.as_posix()}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.csv", "run.json"]
