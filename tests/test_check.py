"""labkit.commands.check: the preflight check passes on this install and names what is broken when a
file, a package or the machine falls short."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from labkit.commands import check
from labkit.commands.check import machine
from labkit.runtime import compat, cpu
from labkit.runtime.hashing import file_sha256

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"
MODEL_FILE = "models/tiny-qwen/model.safetensors"


def _copy_data(tmp_path: Path) -> Path:
    """The shipped data folder (without the reference-run logs) under tmp_path."""
    copy = tmp_path / "data"
    for folder in check.MANIFEST_FOLDERS:
        shutil.copytree(DATA / folder, copy / folder)
    shutil.copy2(DATA / check.MANIFEST_NAME, copy / check.MANIFEST_NAME)
    return copy


def _run_check(*args: str, data_dir: Path | None = None):
    # One torch thread, as a classroom's kernels run (deploy/: thread variables = the CPU limit):
    # on a 2-core machine whose other core runs the rest of the suite, torch's default of two
    # threads made the timed step take 96 s instead of a few.
    env = {k: v for k, v in os.environ.items() if k != "LABKIT_DATA"} | {"LABKIT_THREADS": "1"}
    if data_dir is not None:
        env["LABKIT_DATA"] = str(data_dir)
    return subprocess.run([sys.executable, "-m", "labkit.commands.check", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def _row(checks, name):
    return next(c for c in checks if c.name == name)


# ---- the whole check, as a student runs it ----------------------------------------------------------


@pytest.mark.slow
def test_the_check_passes_on_this_install():
    done = _run_check()
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("READY: notebook 02's live GRPO run")
    assert re.search(r"should take about \d+(\.\d)? (s|min) here", lines[-1])
    # warn: a busy machine may make the estimate slow for a workshop; that is not a failure
    assert re.search(r"^(ok|warn) +speed +\d+\.\d\d s per GRPO step", done.stdout, re.MULTILINE)
    assert "\x1b[" not in done.stdout  # plain text: no colour codes in a notebook cell


def test_json_rows_without_timing():
    done = _run_check("--json", "--no-timing")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["ready"] is True
    names = [row["name"] for row in result["checks"]]
    assert names == ["python", "packages", "lock", "cpu", "memory", "data", "model", "speed"]
    statuses = {row["name"]: row["status"] for row in result["checks"]}
    assert statuses["data"] == statuses["model"] == "ok"
    assert statuses["speed"] == "skip"


def test_a_corrupted_model_file_fails_naming_it_and_how_to_restore_it(tmp_path):
    data = _copy_data(tmp_path)
    weights = bytearray((data / MODEL_FILE).read_bytes())
    weights[-1000:-990] = bytes(b ^ 0xFF for b in weights[-1000:-990])
    (data / MODEL_FILE).write_bytes(bytes(weights))
    done = _run_check(data_dir=data)
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"^fail +data +.*corrupted models/tiny-qwen/model\.safetensors", done.stdout,
                     re.MULTILINE)
    verdict = done.stdout[done.stdout.index("NOT READY"):]
    assert f"data/{MODEL_FILE} is corrupted" in verdict
    assert f"git checkout -- data/{MODEL_FILE}" in verdict
    assert "python -m labkit build_tiny" in verdict
    assert re.search(r"^skip +model +skipped: the data check failed", done.stdout, re.MULTILINE)


# ---- the manifest ------------------------------------------------------------------------------------


def test_the_committed_manifest_matches_the_shipped_data():
    row = check.check_data(DATA)
    assert row.status == "ok", row.detail
    listed = set(check.read_manifest(DATA / check.MANIFEST_NAME))
    assert {MODEL_FILE, "tasks/train.jsonl", "tasks/eval.jsonl",
            "models/tiny-judge/model.safetensors"} <= listed
    assert not any(rel.startswith("runs/") for rel in listed)


def test_the_data_row_names_the_lab_folder_without_the_machines_path(tmp_path):
    """Notebook 00 commits the check's output: the lab's data folder is printed relative to the
    repository, never as the absolute path of the machine that ran it; a folder elsewhere
    ($LABKIT_DATA) is printed as given."""
    row = check.check_data(DATA)
    assert "files in data/ match" in row.detail and str(ROOT) not in row.detail
    elsewhere = _copy_data(tmp_path)
    assert f"files in {elsewhere}/ match" in check.check_data(elsewhere).detail


def test_write_manifest_is_sha256sum_format_sorted_and_skips_runs_and_hidden_files(tmp_path):
    data = tmp_path / "data"
    (data / "models" / "m").mkdir(parents=True)
    (data / "tasks").mkdir()
    (data / "runs").mkdir()
    (data / "models" / "m" / "b.bin").write_bytes(b"\x00\x01")
    (data / "models" / "m" / "a.json").write_text("{}\n")
    (data / "models" / "m" / ".DS_Store").write_bytes(b"junk")
    (data / "tasks" / "eval.jsonl").write_text('{"x": 1}\n')
    (data / "runs" / "log.json").write_text("[]")
    out = check.write_manifest(data)
    text = out.read_bytes().decode()
    assert "\r" not in text
    lines = text.splitlines()
    assert [line.split("  ", 1)[1] for line in lines] == ["models/m/a.json", "models/m/b.bin",
                                                          "tasks/eval.jsonl"]
    assert all(re.fullmatch(r"[0-9a-f]{64}  \S+", line) for line in lines)
    assert lines[1].split()[0] == file_sha256(data / "models" / "m" / "b.bin")
    assert check.check_data(data).status == "ok"


def test_a_missing_file_is_named(tmp_path):
    data = _copy_data(tmp_path)
    (data / "tasks" / "eval.jsonl").unlink()
    row = check.check_data(data)
    assert row.status == "fail"
    assert "missing tasks/eval.jsonl" in row.detail
    expected = ("data/tasks/eval.jsonl is missing: git checkout -- data/tasks/eval.jsonl (or "
                "rebuild: python -m labkit tasks --out data/tasks, then python -m labkit check "
                "--write-manifest)")
    assert row.fixes == (expected,)


def test_a_missing_manifest_fails(tmp_path):
    data = _copy_data(tmp_path)
    (data / check.MANIFEST_NAME).unlink()
    row = check.check_data(data)
    assert row.status == "fail" and "MANIFEST.sha256" in row.fixes[0]


@pytest.mark.parametrize("line", ["not a manifest line", f"{'0' * 64}  ../../etc/passwd",
                                  f"{'0' * 64}  /etc/passwd", f"{'0' * 63}  models/x"])
def test_a_malformed_manifest_is_named(tmp_path, line):
    manifest = tmp_path / check.MANIFEST_NAME
    manifest.write_text(f"{'a' * 64}  tasks/eval.jsonl\n{line}\n")
    with pytest.raises(ValueError, match=r"MANIFEST\.sha256 line 2: .* is not"):
        check.read_manifest(manifest)
    row = check.check_data(tmp_path)
    assert row.status == "fail" and "line 2" in row.detail


def test_crlf_checkouts_of_text_files_still_match(tmp_path):
    # git on Windows with core.autocrlf rewrites text files; the bytes differ, the content not
    data = tmp_path / "data"
    (data / "tasks").mkdir(parents=True)
    (data / "tasks" / "eval.jsonl").write_bytes(b'{"a": 1}\n{"a": 2}\n')
    check.write_manifest(data)
    (data / "tasks" / "eval.jsonl").write_bytes(b'{"a": 1}\r\n{"a": 2}\r\n')
    assert check.check_data(data).status == "ok"
    (data / "tasks" / "eval.jsonl").write_bytes(b'{"a": 1}\r\n{"a": 3}\r\n')
    assert check.check_data(data).status == "fail"


# ---- packages ----------------------------------------------------------------------------------------


def test_a_package_below_its_floor_fails_naming_it(monkeypatch, tmp_path):
    real = compat.installed_version
    monkeypatch.setattr(compat, "installed_version",
                        lambda name: "4.40.0" if name == "transformers" else real(name))
    floor = compat.declared_floors()["transformers"]
    row = check.check_floors()
    assert row.status == "fail"
    assert "transformers 4.40.0 is too old" in row.detail
    assert f"transformers>={floor}" in row.detail
    checks = check.run_checks(DATA, lock_file=tmp_path / "absent.txt")
    assert _row(checks, "model").status == "skip"
    assert not check.ready(checks)
    verdict = check.report(checks).split("NOT READY", 1)[1]
    assert "transformers 4.40.0 is too old" in verdict and "pip install -U" in verdict


def test_a_missing_package_fails(monkeypatch):
    real = compat.installed_version
    monkeypatch.setattr(compat, "installed_version",
                        lambda name: None if name == "peft" else real(name))
    row = check.check_floors()
    assert row.status == "fail" and "peft is not installed" in row.detail


def test_lock_file_lines_markers_and_comments(tmp_path):
    lock = tmp_path / "requirements-lock.txt"
    lock.write_text("# known good\n"
                    "Torch==2.13.0\n"
                    "    # via labkit\n"
                    "typing_extensions==4.15.0 ; python_version >= '3.8'  # always here\n"
                    "appnope==1.0.0 ; sys_platform == 'no-such-platform'\n"
                    "\n")
    assert check.read_lock(lock) == {"torch": "2.13.0", "typing-extensions": "4.15.0"}
    lock.write_text("torch==2.13.0\ntransformers>=5\n")
    with pytest.raises(ValueError, match=r"line 2: 'transformers>=5' is not 'name==version'"):
        check.read_lock(lock)


def _site(tmp_path: Path, dists: dict[str, tuple[str, list[str]]]) -> Path:
    """A site-packages folder with only these distributions' metadata, as pip writes it:
    ``{name: (version, [Requires-Dist lines])}``."""
    site = tmp_path / "site-packages"
    for name, (version, requires) in dists.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text("\n".join(
            ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
             *(f"Requires-Dist: {line}" for line in requires)]) + "\n")
    return site


# A lock as .ci/lock writes it: universal, so it holds the libraries of torch's CUDA build. The
# names are made up so that no real install on the test machine has them.
CUDA_LOCK = ("torch==2.13.0\nlabkit-test-dep==3.0\nnvidia-labkit-test-cublas==13.1.1.3\n"
             "labkit-test-devtool==1.0\n")


def test_a_cpu_install_without_the_locks_cuda_packages_does_not_warn(tmp_path, monkeypatch):
    lock = tmp_path / "requirements-lock.txt"
    lock.write_text(CUDA_LOCK)
    # a CPU build of torch requires no CUDA library; nothing installed needs the dev tool
    monkeypatch.syspath_prepend(str(_site(tmp_path, {
        "torch": ("2.13.0+cpu", ["labkit-test-dep>=2", "pyyaml ; extra == 'pyyaml'"]),
        "labkit-test-dep": ("3.0", [])})))
    row = check.check_lock(lock)
    assert row.status == "ok", row.detail
    assert row.detail.startswith("2 packages as in requirements-lock.txt; 2 other locked "
                                 "packages not used by this install")


def test_a_cuda_install_missing_its_cuda_package_or_another_version_warns(tmp_path, monkeypatch):
    lock = tmp_path / "requirements-lock.txt"
    lock.write_text(CUDA_LOCK)
    monkeypatch.syspath_prepend(str(_site(tmp_path, {
        "torch": ("2.13.0", ["labkit-test-dep>=2", "nvidia-labkit-test-cublas==13.1.1.3"]),
        "labkit-test-dep": ("2.5", [])})))
    row = check.check_lock(lock)
    assert row.status == "warn"
    assert "2 of 3 packages differ" in row.detail
    assert "labkit-test-dep (tested with 3.0, found 2.5)" in row.detail
    assert ("nvidia-labkit-test-cublas (tested with 13.1.1.3, not installed; torch requires it)"
            in row.detail)
    assert "labkit-test-devtool" not in row.detail  # locked, but nothing here requires it
    assert "torch (" not in row.detail  # 2.13.0 is what the lock pins


def test_requirements_follow_markers_and_extras(tmp_path):
    from importlib.metadata import PathDistribution

    def dist(name, requires):
        info = tmp_path / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n" +
                                       "".join(f"Requires-Dist: {r}\n" for r in requires))
        return PathDistribution(info)

    installed = {
        "app": dist("app", ["lib[fast]", "never ; sys_platform == 'no-such-platform'",
                            "tests-only ; extra == 'test'", "not a requirement!"]),
        "lib": dist("lib", ["speedup ; extra == 'fast'", "docs ; extra == 'docs'"])}
    # lib's "fast" extra is asked for, its "docs" extra and app's "test" extra are not
    assert check.required_here(installed, ["app"]) == {"lib": "app", "speedup": "lib"}


def test_this_install_is_not_warned_about_the_cuda_packages_it_does_not_use():
    """On a torch without CUDA (CI, a laptop) the lock row names none of the lock's CUDA
    libraries: it used to warn about 19 of them on every correct CPU install on Linux."""
    row = check.check_lock()
    if torch.version.cuda is None:
        assert not re.search(r"nvidia-|cuda-|triton", row.detail), row.detail


def test_lock_differences_warn_naming_versions(tmp_path, monkeypatch):
    lock = tmp_path / "requirements-lock.txt"
    lock.write_text("torch==2.13.0\nlabkit-test-dep==5.24.0\n")
    site = _site(tmp_path, {"torch": ("2.13.0+cpu", ["labkit-test-dep"]),
                            "labkit-test-dep": ("5.17.0", [])})
    monkeypatch.syspath_prepend(str(site))
    row = check.check_lock(lock)
    assert row.status == "warn"
    assert "1 of 2 packages differ" in row.detail
    assert "labkit-test-dep (tested with 5.24.0, found 5.17.0)" in row.detail
    assert "torch (" not in row.detail  # a local build (+cpu) of the pinned release is that release
    lock.write_text("torch==2.13.0\nlabkit-test-dep==5.17\n")
    assert check.check_lock(lock).status == "ok"
    assert check.check_lock(tmp_path / "absent.txt").status == "skip"


# ---- Python, CPU and memory ----------------------------------------------------------------------------


def test_python_version_floor():
    assert check.check_python((3, 9, 18)).status == "fail"
    assert "3.10 or newer" in check.check_python((3, 9, 18)).detail
    assert check.check_python((3, 12, 1)).detail == "Python 3.12.1 (the lab is tested on 3.11)"
    assert check.check_python((3, 11, 7)).status == "ok"


def test_more_torch_threads_than_usable_cpus_warns(monkeypatch):
    threads = torch.get_num_threads()
    monkeypatch.setattr(cpu, "usable_cpus", lambda root=None: 1)
    try:
        torch.set_num_threads(3)
        row = check.check_cpu()
    finally:
        torch.set_num_threads(threads)
    assert row.status == "warn" and "torch uses 3 threads" in row.detail
    assert "LABKIT_THREADS=1" in row.detail


def _memory_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_container_memory_headroom_v2_and_v1(tmp_path):
    gib = check.GIB
    self_v2 = _memory_tree(tmp_path, {"self_v2": "0::/pod\n"}) / "self_v2"
    v2 = _memory_tree(tmp_path / "v2", {"pod/memory.max": str(2 * gib),
                                        "pod/memory.current": str(int(1.5 * gib)),
                                        "pod/memory.stat": f"anon 1\ninactive_file {gib // 2}\n",
                                        "memory.max": "max", "memory.current": str(5 * gib)})
    assert check.container_memory_headroom(v2, self_v2) == gib
    self_v1 = _memory_tree(tmp_path, {"self_v1": "5:memory:/\n"}) / "self_v1"
    v1 = _memory_tree(tmp_path / "v1", {"memory/memory.limit_in_bytes": str(3 * gib),
                                        "memory/memory.usage_in_bytes": str(gib),
                                        "memory/memory.stat": "total_inactive_file 0\n"})
    assert check.container_memory_headroom(v1, self_v1) == 2 * gib
    unlimited = _memory_tree(tmp_path / "none", {"memory/memory.limit_in_bytes":
                                                 "9223372036854771712",
                                                 "memory/memory.usage_in_bytes": "1"})
    assert check.container_memory_headroom(unlimited, self_v1) is None


@pytest.mark.parametrize(("gib", "status"), [(8.0, "ok"), (1.5, "warn"), (0.5, "fail")])
def test_memory_thresholds(monkeypatch, gib, status):
    monkeypatch.setattr(machine, "_system_available", lambda: (int(gib * check.GIB), "test"))
    monkeypatch.setattr(machine, "container_memory_headroom", lambda: None)
    row = check.check_memory()
    assert row.status == status and row.value == gib
    assert bool(row.fixes) == (status == "fail")


def test_a_container_limit_below_the_hosts_free_memory_wins(monkeypatch):
    monkeypatch.setattr(machine, "_system_available", lambda: (64 * check.GIB, "psutil"))
    monkeypatch.setattr(machine, "container_memory_headroom", lambda: check.GIB // 2)
    row = check.check_memory()
    assert row.status == "fail" and "container's memory limit" in row.detail


# ---- the model and the timed step --------------------------------------------------------------------


def test_a_model_that_does_not_load_is_a_fail_with_its_message(tmp_path):
    data = _copy_data(tmp_path)
    (data / MODEL_FILE).write_bytes(b"not a safetensors file")
    row, loaded = check.check_model(data)
    assert loaded is None
    assert row.status == "fail" and row.detail.startswith("loading or sampling the tiny Qwen")
    assert "git checkout -- data/models/tiny-qwen" in row.fixes[0]


@pytest.mark.slow
def test_timed_step_reports_an_estimate_and_leaves_the_random_state_alone():
    row, loaded = check.check_model(DATA)
    assert row.status == "ok", row.detail
    assert re.search(r"greedy on \d+[+-]\d+=\? .+ \(correct: -?\d+\)$", row.detail)
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    speed = check.check_speed(*loaded)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert speed.status in ("ok", "warn") and speed.value > 0
    seconds_per_step = float(speed.detail.split(" s per GRPO step")[0])
    estimate = check.estimate_live_run(seconds_per_step * check.TIMED_STEPS)
    assert speed.value == pytest.approx(estimate, rel=0.02, abs=0.2)


def test_ready_verdict_quotes_the_estimate_and_warnings_do_not_block():
    rows = [check.Check("python", "ok", "Python 3.11.7"),
            check.Check("lock", "warn", "1 of 2 packages differ"),
            check.Check("speed", "ok", "0.50 s per GRPO step", value=31.0)]
    text = check.report(rows)
    assert check.ready(rows)
    assert text.splitlines()[-1] == ("READY: notebook 02's live GRPO run (30 steps, two "
                                     "evaluations) should take about 31 s here.")
    rows.append(check.Check("memory", "fail", "0.5 GiB available", ("free memory is 0.5 GiB",)))
    assert check.report(rows).splitlines()[-1] == "  - free memory is 0.5 GiB"
    with pytest.raises(ValueError, match="status must be one of"):
        check.Check("x", "fine", "?")
