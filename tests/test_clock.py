"""A step's seconds split into its phases (labkit.training.clock): the history's phase columns add
up to the step, on the host clock here and with CUDA events on a GPU, with no sync in between."""

import pytest
import torch

from labkit.config import preset
from labkit.trainer import Trainer
from labkit.training.clock import PHASES, PhaseClock

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = {"prompts_per_step": 4, "num_generations": 4, "max_completion_length": 16,
         "max_steps": 2, "progress": False}


def test_the_phases_account_for_the_step(shipped_tiny):
    model, tokenizer = shipped_tiny
    trainer = Trainer(preset("grpo", **SMALL, eval_every=2, eval_max_prompts=4), model=model,
                      tokenizer=tokenizer)
    history = trainer.train().history
    columns = [f"{phase}_time" for phase in PHASES]
    for _, row in history.iterrows():
        phases = [row[c] for c in columns]
        assert all(seconds >= 0 for seconds in phases)
        assert sum(phases) == pytest.approx(row.step_time)  # the step is its phases
        assert row.generation_time <= row.sample_time
    assert all(row["eval_time"] > 0 for row in trainer.eval_rows)


def test_the_clock_names_each_phase_by_its_end():
    clock = PhaseClock("cpu")
    clock.mark("sample")
    clock.mark("update")
    seconds = clock.seconds()
    assert list(seconds) == ["sample_time", "update_time"]
    assert all(value >= 0 for value in seconds.values())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_the_clock_waits_only_when_read(monkeypatch):
    """On CUDA the marks are events on the stream: nothing waits for the GPU until the row is
    written."""
    waits = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: waits.append(1))
    x = torch.randn(2048, 2048, device="cuda")
    clock = PhaseClock("cuda")
    for phase in PHASES:
        x = x @ x
        clock.mark(phase)
    assert waits == []
    seconds = clock.seconds()
    assert list(seconds) == [f"{phase}_time" for phase in PHASES]
    assert all(value > 0 for value in seconds.values())
