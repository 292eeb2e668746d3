"""TRL's agent path for real: GRPOTrainer(environment_factory=...) runs the lab's calculator on the
tiny tool model, on the CPU, and the tool mask TRL builds is labkit's action mask on the same
episodes (read back from the tokens with :func:`labkit.agents.episodes.action_mask_of`)."""

import pytest
import torch

from labkit.agents.calculator import CalculatorEnv
from labkit.agents.episodes import action_mask_of
from labkit.compat import installed_version, version_tuple
from labkit.models import TOOL_MODEL_DIR, load_policy
from labkit.rewards import accuracy_reward
from labkit.tasks import load_split

trl = pytest.importorskip("trl")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(not TOOL_MODEL_DIR.exists(), reason="the tool model is missing "
                       "(python -m labkit.build_tools)"),
    pytest.mark.skipif(version_tuple(installed_version("transformers")) < (5, 13),
                       reason="TRL parses tool calls with response templates from "
                              "transformers 5.13"),
]


def test_trl_runs_the_calculator_and_masks_exactly_what_labkit_masks(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    model, tokenizer = load_policy("tiny-tools", device="cpu", dtype="float32")
    data = load_split("train", families=["add", "mul"], difficulties=[3, 4]).select(range(8))
    args = trl.GRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4,
        max_completion_length=192, max_steps=2, max_tool_calling_iterations=2,
        learning_rate=1e-4, use_cpu=True, report_to=[], logging_steps=1,
        gradient_checkpointing=False, seed=0, save_strategy="no")
    trainer = trl.GRPOTrainer(model=model, processing_class=tokenizer,
                              reward_funcs=[accuracy_reward], args=args, train_dataset=data,
                              environment_factory=CalculatorEnv)
    seen = []
    generate = trainer._generate_and_score_completions

    def keep(inputs):
        out = generate(inputs)
        seen.append({k: out[k].detach().cpu() for k in ("completion_ids", "completion_mask",
                                                         "tool_mask") if k in out})
        return out

    monkeypatch.setattr(trainer, "_generate_and_score_completions", keep)
    result = trainer.train()
    assert result.global_step == 2
    with_tools = 0
    for batch in seen:
        assert "tool_mask" in batch, "TRL built no tool mask: did any episode call the tool?"
        for ids, mask, tool in zip(batch["completion_ids"], batch["completion_mask"],
                                   batch["tool_mask"]):
            length = int(mask.sum())
            trl_mask = (tool[:length] * mask[:length]).tolist()
            assert action_mask_of(tokenizer, ids[:length]) == trl_mask
            with_tools += 0 in trl_mask
    assert with_tools > 0, "no episode called the calculator in two steps"
    finite = [r for r in trainer.state.log_history if "loss" in r]
    assert finite and all(torch.isfinite(torch.tensor(float(r["loss"]))) for r in finite)
