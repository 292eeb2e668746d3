"""TRL in: a GRPOConfig translates back to the lab (the inverse of the bridge, round trip for every
preset), TrainConfig answers TRL's names with the lab's, and a TRL tutorial-shaped script runs on
both trainers with only its import line changed."""

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.config import PRESETS, TrainConfig, preset
from labkit.models import DATA_DIR
from labkit.trl_bridge import (
    TRL_DEFAULTS,
    from_grpo_config,
    to_grpo_config,
    trl_reward_funcs,
)

ROOT = Path(__file__).resolve().parent.parent
TUTORIAL = ROOT / "tests" / "fixtures" / "trl_tutorial.py"
trl = pytest.importorskip("trl")


def test_trl_defaults_are_the_installed_trls():
    declared = {f.name: f for f in dataclasses.fields(trl.GRPOConfig)}
    for name, value in TRL_DEFAULTS.items():
        if name not in declared:
            continue  # fields newer TRLs dropped or older ones lack (warmup_ratio)
        field = declared[name]
        default = (field.default if field.default is not dataclasses.MISSING
                   else field.default_factory())
        assert default == value, f"TRL's {name} defaults to {default!r}, the table says {value!r}"


def _settings(config):
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_comes_back_from_trl_unchanged(name, tmp_path):
    config = preset(name)
    dropped = ("dynamic_sampling",) if config.dynamic_sampling else ()
    try:
        args = to_grpo_config(config, output_dir=tmp_path, drop_unsupported=dropped)
    except ValueError as refused:  # PPO's critic, GFPO's filter: TRL cannot express them
        assert name in ("ppo", "gfpo") and "cannot be expressed" in str(refused)
        return
    back = from_grpo_config(args, reward_funcs=trl_reward_funcs(config))
    expected = _settings(config)
    # what the bridge chose for TRL on purpose: the resolved device, where TRL writes, and a
    # feature dropped on request
    expected.update(output_dir=str(tmp_path), device=back.device)
    expected.update({field: getattr(TrainConfig(), field) for field in dropped})
    assert _settings(back) == expected
    assert back.device in ("cpu", "auto")


def test_trl_geometry_becomes_prompts_mini_batches_and_micro_batches():
    config = from_grpo_config({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
                               "steps_per_generation": 4, "num_generations": 4, "max_steps": 6})
    # 16 completions per generation = 4 prompts x 4; 4 / 2 = 2 optimizer steps per batch
    assert (config.prompts_per_step, config.num_mini_batches) == (4, 2)
    assert config.micro_batch_size == 4 and config.gradient_accumulation_steps == 2
    assert config.max_steps == 3 and config.loss_type == "dapo"  # TRL's default, carried
    epochs = from_grpo_config({"num_generations": 4, "num_train_epochs": 2}, dataset_size=64)
    assert epochs.max_steps == 2 * 64 // epochs.prompts_per_step


GENERATION_SETTINGS = [
    {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
     "generation_batch_size": 16},
    {"generation_batch_size": 16},
    {"per_device_train_batch_size": 4, "num_generations": 8, "generation_batch_size": 32},
    {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
     "steps_per_generation": 4},
    {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2},
    {"scale_rewards": False},
    {"scale_rewards": True},
]


@pytest.mark.parametrize("settings", GENERATION_SETTINGS)
def test_a_dict_of_settings_is_read_as_trls_grpo_config_reads_it(settings, tmp_path):
    """TRL's GRPOConfig derives steps_per_generation from generation_batch_size (or the other way
    round) and reads scale_rewards=True/False as "group"/"none"; a dict must come out the same:
    generation_batch_size=16 over 4 x 2 is 4 micro-steps, 2 optimizer steps per generation."""
    settings = {"num_generations": 4, "max_steps": 8, "use_cpu": True,
                "output_dir": str(tmp_path), **settings}
    from_dict = from_grpo_config(settings)
    from_trl = from_grpo_config(trl.GRPOConfig(**settings))
    # TRL's unset bf16 becomes True (autocast over float32 weights); the lab reads it as
    # dtype='auto' (float32 on the CPU), its own choice of the weights' dtype
    assert (from_dict.dtype, from_trl.dtype) == ("auto", "bfloat16")
    assert _settings(from_dict) == {**_settings(from_trl), "dtype": "auto"}
    if settings.get("generation_batch_size") == 16 and "gradient_accumulation_steps" in settings:
        assert (from_dict.prompts_per_step, from_dict.num_mini_batches) == (4, 2)


@pytest.mark.parametrize(("settings", "named"), [
    ({"generation_batch_size": 16, "steps_per_generation": 2},
     "generation_batch_size=16 and steps_per_generation=2 are both set"),
    ({"generation_batch_size": 12},
     ("generation_batch_size=12 is not a multiple of the global batch "
      "(per_device_train_batch_size x processes = 8 x 1 = 8)")),
])
def test_a_dict_is_refused_where_trl_refuses_it(settings, named, tmp_path):
    settings = {"num_generations": 4, "max_steps": 8, "output_dir": str(tmp_path), **settings}
    with pytest.raises(ValueError):
        trl.GRPOConfig(**settings)
    with pytest.raises(ValueError, match=re.escape(named)):
        from_grpo_config(settings)


@pytest.mark.parametrize(("settings", "named"), [
    ({"use_vllm": True}, "use_vllm=True"),
    ({"adam_epsilon": 1e-6}, "adam_epsilon=1e-06"),
    ({"fp16": True}, "fp16=True"),
    ({"repetition_penalty": 1.1}, "repetition_penalty=1.1"),
    ({"loss_type": "luspo", "no_such_setting": 3}, "no_such_setting=3"),
    ({"loss_type": "not_a_loss"}, "loss_type='not_a_loss' has no lab equivalent"),
    ({"num_generations": 3, "per_device_train_batch_size": 4}, "not a multiple of"),
    ({"steps_per_generation": 3, "gradient_accumulation_steps": 2}, "not a multiple of"),
    ({"max_steps": 5, "gradient_accumulation_steps": 1, "steps_per_generation": 2,
      "num_generations": 4}, "max_steps=5 optimizer steps"),
    ({}, "max_steps=-1"),
])
def test_what_the_lab_lacks_is_refused_by_name(settings, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
        from_grpo_config({"max_steps": 8, **settings} if settings else settings)


def test_housekeeping_is_ignored_and_luspo_is_sequence_sum():
    config = from_grpo_config({"logging_steps": 2, "report_to": "none", "run_name": "x",
                               "max_steps": 4, "loss_type": "luspo", "bf16": True})
    assert config.loss_type == "sequence_sum" and config.dtype == "bfloat16"


def test_trainconfig_answers_trl_names_with_the_labs():
    with pytest.raises(TypeError) as refused:
        TrainConfig(output_dir="out", per_device_train_batch_size=4,
                    gradient_accumulation_steps=2, logging_steps=2)
    message = str(refused.value)
    for part in ("per_device_train_batch_size: micro_batch_size", "from_grpo_config",
                 "labkit.trl_compat.GRPOConfig", "logging_steps: nothing"):
        assert part in message
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_field'"):
        TrainConfig(no_such_field=1)


def test_the_compat_trainer_refuses_what_it_lacks():
    from labkit.trl_compat import GRPOConfig, GRPOTrainer

    data = [{"prompt": "1+1=?"}] * 4
    with pytest.raises(TypeError, match="optimizers"):
        GRPOTrainer("tiny", reward_funcs=len, args=GRPOConfig(max_steps=1), train_dataset=data,
                    optimizers=(None, None))
    with pytest.raises(TypeError, match="a reward model by name"):
        GRPOTrainer("tiny", reward_funcs="some/reward-model", args=GRPOConfig(max_steps=1),
                    train_dataset=data)
    assert GRPOConfig(max_steps=3).num_generations == 8  # TRL's default shows through


@pytest.mark.slow
def test_a_trl_tutorial_script_runs_on_both_trainers_with_only_its_import_changed(tmp_path):
    text = TUTORIAL.read_text()
    trl_import = "from trl import GRPOConfig, GRPOTrainer"
    assert text.count(trl_import) == 1
    lab_script = tmp_path / "lab_tutorial.py"
    lab_script.write_text(text.replace(trl_import,
                                       "from labkit.trl_compat import GRPOConfig, GRPOTrainer"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRL_EXPERIMENTAL_SILENCE": "1"}
    printed = {}
    for name, script in (("trl", TUTORIAL), ("lab", lab_script)):
        done = subprocess.run([sys.executable, str(script), str(DATA_DIR), str(tmp_path / name)],
                              capture_output=True, text=True, env=env, timeout=600, check=False)
        assert done.returncode == 0, f"{name}: {done.stderr[-2000:]}"
        printed[name] = done.stdout.strip().splitlines()[-1]
    # both ran the same 4 optimizer steps of the same geometry and logged finite rewards
    assert printed["trl"].startswith("global_step=4 reward=")
    assert printed["lab"].startswith("global_step=4 reward=")
