"""The run doctor's rules for asynchronous runs (labkit.offpolicy): staleness that grows, a
behaviour KL that explodes, a trainer that starves waiting for its sampler; each fires from the
step its failure starts and stays quiet on a healthy async run."""

import numpy as np
import pandas as pd
import pytest

from labkit.doctor import diagnose


def healthy_async(steps: int = 40) -> pd.DataFrame:
    """A k = 2 run as the lab logs it: staleness 0, 1, then 2; a small behaviour KL; the
    trainer waits for the sampler a tenth of its step."""
    t = np.arange(1, steps + 1)
    return pd.DataFrame({
        "step": t, "reward": 1.2 + 0.3 * t / steps, "accuracy": 0.2 + 0.3 * t / steps,
        "staleness": np.minimum(t - 1, 2).astype(float), "offpolicy_kl": 0.005,
        "queue_wait": 0.3, "step_time": 3.0})


@pytest.mark.parametrize(("check", "column", "value"), [
    ("staleness_grows", "staleness", 8.0),
    ("offpolicy_kl_explodes", "offpolicy_kl", 0.4),
    ("queue_starves", "queue_wait", 2.4),  # 80% of the 3 s step
])
def test_each_async_check_fires_from_the_step_it_starts(check, column, value):
    assert diagnose(healthy_async(), window=5) == []
    history = healthy_async()
    history.loc[history["step"] > 20, column] = value
    found = [f for f in diagnose(history, window=5) if f.check == check]
    assert len(found) == 1
    assert 21 <= found[0].step <= 25
    assert found[0].notebook == "11_async" and found[0].cause and found[0].fix
    assert [f.check for f in diagnose(history, window=5)] == [check]


def test_queue_starvation_reads_the_share_of_the_step_not_the_seconds():
    """A long wait in a longer step is no starvation: 2.4 s of a 30 s step."""
    history = healthy_async()
    history["queue_wait"], history["step_time"] = 2.4, 30.0
    assert diagnose(history, window=5) == []
