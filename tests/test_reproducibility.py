"""A seeded run with mini-batches gives the same numbers, bit for bit, each time it is executed in
one environment (docs/reproducibility.md says what changes them: another release of torch
or transformers, another machine's kernels).

Each execution is a fresh interpreter with its own hash seed, as a re-executed notebook is, so a
random draw outside the run's seed (Python's hash order, a generator seeded from the clock) would
show here; the run is DAPO with 4 mini-batches, where every optimizer step after a batch's first
sees a policy that has moved and the ratio, the clip and the shuffle of completions all count.
"""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

RUN = """
import json
import torch
from labkit.config import preset
from labkit.metrics import TIMING_COLUMNS
from labkit.tasks import medium_cells
from labkit.trainer import train

config = preset("dapo", max_steps=2, prompts_per_step=4, num_generations=4, num_mini_batches=4,
                max_completion_length=32, seed=3, progress=False)
history = train(config, train_dataset=medium_cells("train")).history
history = history.drop(columns=[c for c in TIMING_COLUMNS if c in history])
print(json.dumps({"threads": torch.get_num_threads(), "history": history.to_dict("list")}))
"""


def execute(hash_seed: str) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "LABKIT_THREADS": "1",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", RUN], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_two_executions_of_a_mini_batched_seeded_run_agree_bit_for_bit():
    first, second = execute("1"), execute("2")
    assert first["threads"] == second["threads"] == 1
    assert len(first["history"]["step"]) == 2
    # json keeps every float's shortest repr, so equal text means equal bits
    for column, values in first["history"].items():
        assert json.dumps(values) == json.dumps(second["history"][column]), column
