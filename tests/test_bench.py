"""labkit.bench: the labkit-vs-TRL benchmark refuses a ratio that no training step stands behind."""

import pytest
import torch

from labkit.bench import Timings, main, reward_problem


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


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_cuda_without_a_gpu_is_refused_by_name():
    with pytest.raises(SystemExit, match="--device cuda needs a CUDA GPU"):
        main(["--device", "cuda"])
