"""labkit.runtime.cpu: the container's CPU quota read from fake cgroup trees, and torch's thread count
set from it in a fresh process."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.runtime import cpu

ROOT = Path(__file__).resolve().parent.parent


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _self_cgroup(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "self_cgroup"
    path.write_text(text)
    return path


def test_v2_quota_in_cpus(tmp_path):
    root = _tree(tmp_path / "cg", {"cpu.max": "150000 100000\n"})
    assert cpu.cpu_quota(root, _self_cgroup(tmp_path, "0::/\n")) == 1.5


def test_v2_max_is_no_quota(tmp_path):
    root = _tree(tmp_path / "cg", {"cpu.max": "max 100000\n"})
    assert cpu.cpu_quota(root, _self_cgroup(tmp_path, "0::/\n")) is None


def test_v2_nested_path_takes_the_smallest_limit_of_every_level(tmp_path):
    root = _tree(tmp_path / "cg", {"cpu.max": "400000 100000",
                                   "kubepods/cpu.max": "max 100000",
                                   "kubepods/pod1/cpu.max": "50000 100000",
                                   "kubepods/pod1/box/cpu.max": "200000 100000",
                                   "other/cpu.max": "10000 100000"})  # not this process's cgroup
    self_cgroup = _self_cgroup(tmp_path, "0::/kubepods/pod1/box\n")
    assert cpu.cpu_quota(root, self_cgroup) == 0.5
    # the same tree seen from a sibling cgroup: only the ancestors' limits apply
    assert cpu.cpu_quota(root, _self_cgroup(tmp_path, "0::/kubepods/pod2\n")) == 4.0


def test_container_sees_its_cgroup_as_the_root(tmp_path):
    # /proc/self/cgroup names the host's path, which the container does not mount
    root = _tree(tmp_path / "cg", {"cpu.max": "200000 100000"})
    assert cpu.cpu_quota(root, _self_cgroup(tmp_path, "0::/docker/0123abcd\n")) == 2.0


def test_v1_quota_and_period(tmp_path):
    root = _tree(tmp_path / "cg", {"cpu,cpuacct/cpu.cfs_quota_us": "-1",
                                   "cpu,cpuacct/cpu.cfs_period_us": "100000",
                                   "cpu,cpuacct/job/cpu.cfs_quota_us": "250000",
                                   "cpu,cpuacct/job/cpu.cfs_period_us": "100000"})
    self_cgroup = _self_cgroup(tmp_path, "4:memory:/job\n3:cpu,cpuacct:/job\n0::/\n")
    assert cpu.cpu_quota(root, self_cgroup) == 2.5


def test_v1_minus_one_is_no_quota(tmp_path):
    root = _tree(tmp_path / "cg", {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"})
    assert cpu.cpu_quota(root, _self_cgroup(tmp_path, "1:cpu:/\n")) is None


@pytest.mark.parametrize("text", ["", "garbage", "150000", "1.5 100000", "150000 0", "-5 100000",
                                  "150000 100000 7", "max", "\x00\x01\x02", "150000 abc"])
def test_v2_garbage_gives_none_not_an_exception(tmp_path, text):
    root = _tree(tmp_path / "cg", {"cpu.max": text})
    assert cpu.cpu_quota(root, _self_cgroup(tmp_path, text)) is None


@pytest.mark.parametrize(("quota", "period"), [("", "100000"), ("lots", "100000"),
                                               ("1.5", "100000"), ("0", "100000"),
                                               ("150000", "0"), ("150000", "-1"),
                                               ("150000", "x"), ("150000 1", "100000")])
def test_v1_garbage_gives_none_not_an_exception(tmp_path, quota, period):
    root = _tree(tmp_path / "cg", {"cpu/cpu.cfs_quota_us": quota,
                                   "cpu/cpu.cfs_period_us": period})
    assert cpu.cpu_quota(root, _self_cgroup(tmp_path, "1:cpu:/\n")) is None


def test_undecodable_bytes_and_a_folder_in_place_of_a_file_give_none(tmp_path):
    root = tmp_path / "cg"
    (root / "cpu.max").mkdir(parents=True)
    (root / "cpu").mkdir()
    (root / "cpu" / "cpu.cfs_quota_us").write_bytes(b"\xff\xfe1\x00")
    (root / "cpu" / "cpu.cfs_period_us").write_text("100000")
    garbage_membership = tmp_path / "self_cgroup"
    garbage_membership.write_bytes(b"\xff::/../..\n0::relative\n")
    assert cpu.cpu_quota(root, garbage_membership) is None


def test_no_cgroup_tree_at_all_gives_none(tmp_path):
    # Windows and macOS: neither the mount nor /proc/self/cgroup exists
    assert cpu.cpu_quota(tmp_path / "absent", tmp_path / "absent_self") is None


def test_usable_cpus_rounds_the_quota_up_and_caps_by_affinity(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu, "affinity_cpus", lambda: 8)
    half = _tree(tmp_path / "half", {"cpu.max": "50000 100000"})
    one_and_half = _tree(tmp_path / "one_and_half", {"cpu.max": "150000 100000"})
    plenty = _tree(tmp_path / "plenty", {"cpu.max": "6400000 100000"})
    assert cpu.usable_cpus(half) == 1
    assert cpu.usable_cpus(one_and_half) == 2
    assert cpu.usable_cpus(plenty) == 8
    assert cpu.usable_cpus(tmp_path / "none") == 8


def test_forced_threads_rejects_what_is_not_a_positive_integer(monkeypatch):
    monkeypatch.setenv("LABKIT_THREADS", "3")
    assert cpu.forced_threads() == 3
    for bad in ("0", "-2", "two", "1.5"):
        monkeypatch.setenv("LABKIT_THREADS", bad)
        with pytest.raises(ValueError, match=rf"LABKIT_THREADS.*positive integer.*'{bad}'"):
            cpu.forced_threads()
    monkeypatch.setenv("LABKIT_THREADS", "")
    assert cpu.forced_threads() is None


def _fresh_threads(env: dict, code: str = "import labkit, torch; print(torch.get_num_threads())"):
    clean = {k: v for k, v in os.environ.items()
             if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "LABKIT_THREADS",
                          "LABKIT_CGROUP_ROOT")}
    return subprocess.run([sys.executable, "-c", code], env={**clean, **env}, cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def test_labkit_threads_forces_the_count_in_a_fresh_process():
    done = _fresh_threads({"LABKIT_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1"]


def test_an_invalid_labkit_threads_fails_the_import_naming_it():
    done = _fresh_threads({"LABKIT_THREADS": "lots"})
    assert done.returncode != 0
    assert "LABKIT_THREADS must be a positive integer" in done.stderr and "'lots'" in done.stderr


@pytest.mark.skipif(cpu.affinity_cpus() < 2, reason="needs 2+ CPUs for a quota to lower torch")
def test_a_one_cpu_quota_gives_torch_one_thread_in_a_fresh_process(tmp_path):
    root = _tree(tmp_path / "cg", {"cpu.max": "100000 100000"})
    code = ("import torch; before = torch.get_num_threads(); import labkit.runtime.cpu; "
            "print(before, torch.get_num_threads(), labkit.runtime.cpu.usable_cpus())")
    done = _fresh_threads({"LABKIT_CGROUP_ROOT": str(root)}, code)
    assert done.returncode == 0, done.stderr
    before, after, usable = map(int, done.stdout.split())
    assert before >= 2, "torch should start with one thread per CPU it sees"
    assert (after, usable) == (1, 1)


def test_the_users_omp_num_threads_is_left_alone(tmp_path):
    root = _tree(tmp_path / "cg", {"cpu.max": "100000 100000"})
    done = _fresh_threads({"LABKIT_CGROUP_ROOT": str(root), "OMP_NUM_THREADS": "2"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2"]
