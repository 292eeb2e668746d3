"""TRL's agent path for real: GRPOTrainer(environment_factory=...) runs the lab's calculator on the
tiny tool model, on the CPU, and the tool mask TRL builds is labkit's action mask on the same
episodes (read back from the tokens with :func:`labkit.agents.episodes.action_mask_of`)."""

import pytest
import torch

from labkit.agents.calculator import CalculatorEnv
from labkit.agents.episodes import action_mask_of
from labkit.models import TOOL_MODEL_DIR, load_policy
from labkit.runtime.compat import installed_version, version_tuple
from labkit.tasks import load_split

trl = pytest.importorskip("trl")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(not TOOL_MODEL_DIR.exists(), reason="the tool model is missing "
                       "(python -m labkit build_tools)"),
    pytest.mark.skipif(version_tuple(installed_version("transformers")) < (5, 13),
                       reason="TRL parses tool calls with response templates from "
                              "transformers 5.13"),
]


def test_trl_runs_the_calculator_and_masks_exactly_what_labkit_masks():
    """Through the bridge (``train_with_trl(environment_factory=...)``), as notebook 10 hands a run to
    TRL: TRL's tool mask is labkit's action mask, and its tool metrics arrive under the lab's
    names."""
    from labkit.config import preset
    from labkit.trl_bridge import train_with_trl

    seen = []

    class Recording(trl.GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            seen.append({k: out[k].detach().cpu() for k in ("completion_ids", "completion_mask",
                                                             "tool_mask") if k in out})
            return out

    config = preset("grpo", model_name_or_path="tiny-tools", max_steps=2, prompts_per_step=8,
                    num_generations=4, max_completion_length=192, max_tool_calling_iterations=2,
                    seed=0, device="cpu", dtype="float32", progress=False)
    data = load_split("train", families=["add", "mul"], difficulties=[3, 4]).select(range(16))
    result = train_with_trl(config, train_dataset=data, environment_factory=CalculatorEnv,
                            trainer_class=Recording)
    assert len(result.history) == 2
    _, tokenizer = load_policy("tiny-tools", device="cpu")
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
    # TRL's tools/call_frequency is the lab's tool_calls (answered calls per episode)
    assert {"tool_calls", "tool_error_rate"} <= set(result.history.columns)
    assert result.history["tool_calls"].sum() > 0
    assert torch.isfinite(torch.tensor(result.history["loss"].to_numpy())).all()
