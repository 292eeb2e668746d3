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
                 "labkit.trl_bridge.compat.GRPOConfig", "logging_steps: nothing"):
        assert part in message
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_field'"):
        TrainConfig(no_such_field=1)


def test_the_compat_trainer_refuses_what_it_lacks():
    from labkit.trl_bridge.compat import GRPOConfig, GRPOTrainer

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
    lab_import = "from labkit.trl_bridge.compat import GRPOConfig, GRPOTrainer"
    lab_script.write_text(text.replace(trl_import, lab_import))
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


# ---- GRPOTrainer's other arguments: peft_config, environment_factory, train(resume_...) --------
def _compat_trainer(model="tiny", data=None, reward_funcs=None, **kwargs):
    from labkit.tasks import load_split
    from labkit.trl_bridge.compat import GRPOConfig, GRPOTrainer

    def length(completions, **_):
        return [float(len(str(c))) for c in completions]

    args = kwargs.pop("args", None) or GRPOConfig(
        output_dir=kwargs.pop("output_dir", None), per_device_train_batch_size=4,
        num_generations=4, max_steps=kwargs.pop("max_steps", 1), max_completion_length=8,
        disable_tqdm=True, **kwargs.pop("settings", {}))
    data = data if data is not None else load_split("train", families="add",
                                                    difficulties=1).select(range(8))
    return GRPOTrainer(model, reward_funcs=[length] if reward_funcs is None else reward_funcs,
                       args=args, train_dataset=data, **kwargs)


def _scalings(model) -> set:
    return {float(s) for module in model.modules() if isinstance(getattr(module, "scaling", None),
                                                                  dict)
            for s in module.scaling.values()}


@pytest.mark.parametrize(("settings", "expected", "scaling"), [
    ({}, {"lora_r": 8, "lora_alpha": 8, "lora_dropout": 0.0, "lora_target_modules": None,
          "use_rslora": False, "use_dora": False}, 1.0),
    ({"r": 4, "lora_alpha": 8, "target_modules": ["v_proj", "q_proj"], "task_type": "CAUSAL_LM"},
     {"lora_r": 4, "lora_target_modules": ("q_proj", "v_proj")}, 2.0),
    ({"r": 4, "lora_alpha": 8, "use_rslora": True}, {"use_rslora": True}, 4.0),
    ({"r": 4, "lora_alpha": 8, "use_dora": True}, {"use_dora": True}, 2.0),
])
def test_a_lora_config_becomes_the_labs_lora(settings, expected, scaling):
    """Every LoraConfig setting the lab has is carried over: rank, alpha, dropout, targets, and
    rsLoRA's alpha / sqrt(r) scaling and DoRA's magnitude vectors through peft itself."""
    from peft import LoraConfig

    trainer = _compat_trainer(peft_config=LoraConfig(**settings))
    assert trainer.config.use_peft
    assert {k: getattr(trainer.config, k) for k in expected} == expected
    assert _scalings(trainer.model) == {scaling}
    names = [name for name, _ in trainer.model.named_parameters()]
    assert any("lora_magnitude_vector" in n for n in names) == settings.get("use_dora", False)


@pytest.mark.parametrize(("field", "value", "shown"), [
    ("bias", "all", "bias='all'"),
    ("modules_to_save", ["lm_head"], "modules_to_save=['lm_head']"),
    ("layers_to_transform", [0], "layers_to_transform=[0]"),
    ("exclude_modules", ["k_proj"], "exclude_modules={'k_proj'}"),
    ("rank_pattern", {"q_proj": 2}, "rank_pattern={'q_proj': 2}"),
    ("init_lora_weights", "gaussian", "init_lora_weights='gaussian'"),
    ("task_type", "SEQ_CLS", "task_type='SEQ_CLS'"),
    ("lora_bias", True, "lora_bias=True"),
])
def test_a_lora_setting_the_lab_lacks_is_refused_by_name(field, value, shown):
    from peft import LoraConfig

    with pytest.raises(ValueError, match=re.escape(f"peft_config sets {shown}, which the lab's "
                                                   f"LoRA")):
        _compat_trainer(peft_config=LoraConfig(r=4, **{field: value}))


def test_a_checkpoint_from_before_a_new_field_still_resumes():
    """use_rslora and use_dora are new TrainConfig fields: a checkpoint saved without them ran at
    their defaults, and resumes; one that differs from the run is still refused."""
    from labkit.training.checkpoint import check_same_run

    config = TrainConfig()
    saved = {k: v for k, v in config.to_dict().items() if k not in ("use_rslora", "use_dora")}
    check_same_run(saved, config, "old-checkpoint")
    with pytest.raises(ValueError, match="use_dora: None -> True"):
        check_same_run(saved, TrainConfig(use_dora=True), "old-checkpoint")


@pytest.mark.usefixtures("one_thread")
def test_train_resumes_as_trl_reads_resume_from_checkpoint(tmp_path):
    """True: the latest checkpoint-<step> of output_dir (refused when there is none), False or
    None: afresh; anything else is refused by name."""
    folder = str(tmp_path / "out")
    with pytest.raises(ValueError, match="resume_from_checkpoint=True resumes the latest "
                                         "checkpoint-<step> folder of output_dir, and there is "
                                         "no checkpoint in"):
        _compat_trainer(output_dir=folder).train(resume_from_checkpoint=True)
    with pytest.raises(TypeError, match="resume_from_checkpoint must be a checkpoint folder, "
                                        "True .* got 3"):
        _compat_trainer(output_dir=folder).train(resume_from_checkpoint=3)
    first = _compat_trainer(output_dir=folder, settings={"save_steps": 1})
    assert first.train(resume_from_checkpoint=False).global_step == 1
    assert (tmp_path / "out" / "checkpoint-1").is_dir()
    resumed = _compat_trainer(output_dir=folder, max_steps=2)
    output = resumed.train(resume_from_checkpoint=True)
    assert output.global_step == 2 and resumed.history["step"].tolist() == [1, 2]
    assert resumed.history.iloc[0]["loss"] == first.history.iloc[0]["loss"]  # restored, not rerun


def test_environment_factory_reaches_the_labs_trainer_with_trls_reward():
    """TRL hands environment_factory to its trainer and adds an environment's get_reward as one
    more reward function of weight 1; reward_funcs may then be left out."""
    from labkit.agents import CalculatorEnv, GuessingEnv, guessing_dataset
    from labkit.rewards.environment import environment_reward

    calculator = _compat_trainer("tiny-tools", environment_factory=CalculatorEnv)
    assert calculator.trainer.environment_factory is CalculatorEnv
    assert environment_reward not in calculator.trainer.reward_funcs  # no get_reward
    games = guessing_dataset(8, seed=0)
    only = _compat_trainer("tiny-tools", games, reward_funcs=(), environment_factory=GuessingEnv)
    assert only.trainer.reward_funcs == [environment_reward]
    weighted = _compat_trainer("tiny-tools", games, environment_factory=GuessingEnv,
                               settings={"reward_weights": [2.0]})
    assert weighted.trainer.reward_names == ["length", "environment"]
    assert weighted.config.reward_weights == (2.0, 1.0)
    with pytest.raises(TypeError, match="environment_factory\\(\\) returned NoneType None"):
        _compat_trainer("tiny-tools", environment_factory=lambda: None)
