"""labkit.scale.bench: the labkit-vs-TRL benchmark refuses a ratio that no training step stands behind,
reports each step's phases, and times the decode loops."""

import time

import pytest
import torch

from labkit.scale.bench import PHASES, PhaseClock, Timings, main, reward_problem


def timings(rewards, spreads) -> Timings:
    return Timings(reward=list(rewards), reward_std=list(spreads))


def test_a_ratio_needs_reward_and_spread_on_both_sides():
    kept = slice(1, None)
    assert reward_problem("labkit", timings([0.0, 1.2, 1.3], [0.0, 0.5, 0.4]), kept) is None
    zero = reward_problem("trl", timings([1.0, 0.0, 0.0], [0.3, 0.0, 0.0]), kept)
    assert "trl's mean reward is 0.000" in zero and "skip_special_tokens" in zero
    flat = reward_problem("trl", timings([1.0, 1.0, 1.0], [0.3, 0.0, 0.0]), kept)
    assert "reward spread is 0.000" in flat
    assert "logged no rewards" in reward_problem("trl", timings([], []), kept)


@pytest.fixture
def keep_threads():
    threads = torch.get_num_threads()  # main() sets --threads (default 1)
    yield
    torch.set_num_threads(threads)


def test_one_side_alone_on_the_cpu_reports_time_sampling_and_reward(capsys, keep_threads):
    assert main(["--only", "labkit", "--steps", "1", "--warmup", "1",
                 "--reward", "alternating"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("labkit:"))
    assert "s/step" in line and "completion tokens/s" in line
    assert "mean reward 0.500" in line  # half of every group gets 1
    assert "ratio" not in out  # one side: no ratio
    phases = out.splitlines()[out.splitlines().index(line) + 1]
    assert all(f"{name} " in phases for name in PHASES), phases
    assert float(phases.split("training forward+backward ")[1].split(",")[0]) > 0


def test_the_phase_clock_splits_a_step_and_nests_only_where_told():
    class Steps:
        def outer(self):
            time.sleep(0.03)
            self.inner()

        def inner(self):
            time.sleep(0.02)

        def loss(self):
            self.inner()  # not "inside" the loss's phase: counts toward the loss

    steps, clock = Steps(), PhaseClock("cpu")
    clock.wrap(steps, "outer", "other")
    clock.wrap(steps, "inner", "sampling", inside="other")
    clock.wrap(steps, "loss", "training forward+backward")
    steps.outer()
    steps.loss()
    phases = clock.lap(0.1)
    assert 0.02 <= phases["sampling"] < 0.035
    assert 0.02 <= phases["training forward+backward"] < 0.035
    assert abs(sum(phases.values()) - 0.1) < 1e-9  # other is the rest of the step
    assert clock.lap(1.0)["other"] == 1.0  # the clock starts over


def test_the_decode_benchmark_times_each_loop_of_the_device(capsys, keep_threads):
    assert main(["--decode", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "dynamic:" in out and "fixed, eager steps:" in out and "ms per step" in out
    assert "CUDA graph" not in out  # not on a CPU


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_cuda_without_a_gpu_is_refused_by_name():
    with pytest.raises(SystemExit, match="--device cuda needs a CUDA GPU"):
        main(["--device", "cuda"])
