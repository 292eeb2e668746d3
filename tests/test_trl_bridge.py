"""The TRL bridge (labkit.trl_bridge): a lab TrainConfig becomes TRL's GRPO run (needs TRL).

* every TrainConfig field is classified (shared, derived, lab-only, not carried), and every
  shared field reaches ``GRPOConfig`` with its value;
* each preset maps (grpo, dr_grpo, gspo; dapo once dynamic sampling is dropped on purpose) or is
  refused with a message naming the field (ppo: GAE; gfpo: the GFPO filter; dapo: dynamic
  sampling);
* the batch-size arithmetic gives the same completions per generation and optimizer steps per
  generation as the lab, on one process or two;
* the loss TRL computes with a bridge-built config equals :func:`labkit.losses.policy_loss` with
  the lab config's settings, on the fixed off-policy batch of ``tests/test_trl_crosscheck.py``
  (whose fixtures and helpers are reused, not copied);
* a seeded TRL run through :func:`~labkit.trl_bridge.train_with_trl` on the shipped tiny Qwen
  and the medium cells learns (slow).
"""

import dataclasses
import inspect
import math
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
trl = pytest.importorskip("trl")

from test_trl_crosscheck import L_MAX, labkit_loss, make_trainer, random_batch, tiny, trl_loss
from trl import GRPOConfig

from labkit.config import PRESETS, TrainConfig, preset
from labkit.losses import policy_loss
from labkit.trl_bridge import (
    DERIVED_FIELDS,
    LAB_ONLY,
    NOT_CARRIED,
    SHARED_FIELDS,
    TRL_PINNED,
    TRL_VALUES,
    check_supported,
    history_from_logs,
    to_grpo_config,
    to_trl,
    trl_batch_sizes,
)

__all__ = ["tiny"]  # the crosscheck's fixture, used by the loss tests below

TRL_FIELDS = {f.name for f in dataclasses.fields(GRPOConfig)}
#: preset -> the field its refusal names (None: it maps)
PRESET_OUTCOME = {"grpo": None, "dr_grpo": None, "gspo": None, "dapo": "dynamic_sampling",
                  "ppo": "advantage_estimator", "gfpo": "num_remains_in_group"}


def grpo_config(tmp_path, config, **kwargs):
    return to_grpo_config(config, output_dir=tmp_path, **kwargs)


# ---- the tables ----------------------------------------------------------------------------------
def test_every_trainconfig_field_is_classified_once():
    tables = {"SHARED_FIELDS": SHARED_FIELDS, "DERIVED_FIELDS": DERIVED_FIELDS,
              "LAB_ONLY": LAB_ONLY, "NOT_CARRIED": NOT_CARRIED}
    for f in dataclasses.fields(TrainConfig):
        homes = [name for name, table in tables.items() if f.name in table]
        assert len(homes) == 1, (f"TrainConfig.{f.name} is in {homes or 'no table'}: its "
                                 f"declaration's trl= (labkit.config.knobs.knob) says which")
    assert set(PRESET_OUTCOME) == set(PRESETS)


def test_shared_and_pinned_fields_exist_in_trl():
    assert set(SHARED_FIELDS.values()) <= TRL_FIELDS
    assert set(TRL_PINNED) <= TRL_FIELDS
    assert TRL_PINNED["use_bias_correction_kl"] is False  # TRL's default is True


# ---- presets -------------------------------------------------------------------------------------
def assert_carries(config: TrainConfig, args):
    """Every shared field equal (after TRL's renames), the pins in place, the sizes consistent."""
    values = config.to_dict()
    for lab, trl_name in SHARED_FIELDS.items():
        if lab not in values:
            continue
        expected = TRL_VALUES.get(lab, {}).get(values[lab], values[lab])
        expected = list(expected) if isinstance(expected, tuple) else expected
        assert getattr(args, trl_name) == expected, (lab, getattr(args, trl_name), expected)
    for name, value in TRL_PINNED.items():
        if name not in values:
            assert getattr(args, name) == value, name
    assert args.generation_batch_size == config.prompts_per_step * config.num_generations
    per_optimizer_step = args.per_device_train_batch_size * args.gradient_accumulation_steps
    assert per_optimizer_step * config.num_mini_batches == args.generation_batch_size
    assert args.steps_per_generation // args.gradient_accumulation_steps == config.num_mini_batches
    assert args.max_steps == config.max_steps * config.num_iterations * config.num_mini_batches
    assert args.warmup_steps == config.warmup_ratio
    if config.device == "cpu":
        assert args.use_cpu and not args.bf16 and not args.fp16
    assert args.logging_steps == 1 and args.save_strategy == "no"


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_maps_or_is_refused_naming_the_field(tmp_path, name):
    config = preset(name, device="cpu", dtype="float32")
    field = PRESET_OUTCOME[name]
    if field is None:
        assert_carries(config, grpo_config(tmp_path, config))
        return
    with pytest.raises(ValueError, match=f"^{field}=") as error:
        grpo_config(tmp_path, config)
    assert "TRL" in str(error.value)


def test_dapo_runs_once_dynamic_sampling_is_dropped_and_says_so(tmp_path):
    from trl.rewards import get_soft_overlong_punishment

    config = preset("dapo", device="cpu")
    with pytest.warns(UserWarning, match="dynamic_sampling"):
        run = to_trl(config, output_dir=tmp_path, drop_unsupported=("dynamic_sampling",))
    assert list(run.dropped) == ["dynamic_sampling"]
    assert_carries(config, run.args)
    # DAPO's soft overlong punishment: TRL's own function, weighted by the penalty factor
    names = [getattr(f, "__name__", "") for f in run.reward_funcs]
    assert names == ["accuracy_reward", "format_reward", "soft_overlong_punishment_reward"]
    assert run.args.reward_weights == [1.0, 1.0, config.overlong_penalty_factor]
    reference = get_soft_overlong_punishment(config.max_completion_length,
                                             config.overlong_buffer_len)
    ids = [[0] * n for n in (10, 110, 120, 128)]
    assert run.reward_funcs[-1](completion_ids=ids) == reference(completion_ids=ids)
    assert run.args.epsilon_high == 0.28 and run.args.mask_truncated_completions


def test_only_droppable_features_can_be_dropped(tmp_path):
    with pytest.raises(ValueError, match="cannot be dropped"):
        check_supported(preset("gfpo"), drop_unsupported=("num_remains_in_group",))


# ---- every shared field --------------------------------------------------------------------------
#: A non-default value for each shared field (with what else it needs to be valid).
NON_DEFAULT = {
    "num_generations": {"num_generations": 4},
    "max_completion_length": {"max_completion_length": 32},
    "temperature": {"temperature": 0.7},
    "top_p": {"top_p": 0.9},
    "top_k": {"top_k": 5},
    "scale_rewards": {"scale_rewards": "batch"},
    "mask_truncated_completions": {"mask_truncated_completions": True},
    "loss_type": {"loss_type": "bnpo"},
    "importance_sampling_level": {"importance_sampling_level": "sequence"},
    "epsilon": {"epsilon": 0.1},
    "epsilon_high": {"epsilon_high": 0.3},
    "delta": {"delta": 1.5},
    "beta": {"beta": 0.04},
    "entropy_coef": {"entropy_coef": 0.01},
    "num_iterations": {"num_iterations": 2},
    "learning_rate": {"learning_rate": 1e-5},
    "lr_scheduler_type": {"lr_scheduler_type": "cosine"},
    "weight_decay": {"weight_decay": 0.01},
    "adam_beta1": {"adam_beta1": 0.8},
    "adam_beta2": {"adam_beta2": 0.99},
    "max_grad_norm": {"max_grad_norm": 0.5},
    "seed": {"seed": 7},
    "gradient_checkpointing": {"gradient_checkpointing": True},
    "multi_objective_aggregation": {"multi_objective_aggregation": "normalize_then_sum"},
    "use_bias_correction_kl": {"use_bias_correction_kl": True, "beta": 0.04},
    "sapo_temperature_pos": {"sapo_temperature_pos": 0.9, "loss_type": "sapo"},
    "max_tool_calling_iterations": {"max_tool_calling_iterations": 3},
    "sapo_temperature_neg": {"sapo_temperature_neg": 1.2, "loss_type": "sapo"},
    "vespo_k_pos": {"vespo_k_pos": 1.5, "loss_type": "vespo"},
    "vespo_lambda_pos": {"vespo_lambda_pos": 2.5, "loss_type": "vespo"},
    "vespo_k_neg": {"vespo_k_neg": 2.5, "loss_type": "vespo"},
    "vespo_lambda_neg": {"vespo_lambda_neg": 1.5, "loss_type": "vespo"},
    "sync_ref_model": {"sync_ref_model": True, "beta": 0.04},
    "ref_model_mixup_alpha": {"ref_model_mixup_alpha": 0.5, "sync_ref_model": True, "beta": 0.04},
    "ref_model_sync_steps": {"ref_model_sync_steps": 64, "sync_ref_model": True, "beta": 0.04},
    "top_entropy_quantile": {"top_entropy_quantile": 0.2},
}


@pytest.mark.parametrize("lab_field", sorted(SHARED_FIELDS))
def test_each_shared_field_reaches_grpo_config(tmp_path, lab_field):
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    if lab_field not in names:
        pytest.skip(f"this TrainConfig has no {lab_field}")
    overrides = NON_DEFAULT[lab_field]
    default = getattr(TrainConfig(), lab_field)
    config = preset("grpo", device="cpu", **overrides)
    assert getattr(config, lab_field) != default
    args = grpo_config(tmp_path, config)
    assert getattr(args, SHARED_FIELDS[lab_field]) == getattr(config, lab_field)
    assert_carries(config, args)


def test_sequence_sum_is_trl_luspo(tmp_path):
    args = grpo_config(tmp_path, preset("grpo", loss_type="sequence_sum",
                                        importance_sampling_level="sequence"))
    assert args.loss_type == "luspo"


def test_overrides_may_not_contradict_the_lab_config(tmp_path):
    with pytest.raises(ValueError, match="beta"):
        grpo_config(tmp_path, preset("grpo"), beta=0.1)
    with pytest.raises(ValueError, match="per_device_train_batch_size"):
        grpo_config(tmp_path, preset("grpo"), per_device_train_batch_size=4)
    args = grpo_config(tmp_path, preset("grpo"), logging_steps=5, report_to=["none"])
    assert args.logging_steps == 5


# ---- batch sizes ---------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, processes, expected", [
    # one process: the whole step in one micro-batch, or capped micro-batches
    ({}, 1, (128, 1, 1, 60)),
    ({"micro_batch_size": 32}, 1, (32, 4, 4, 60)),
    ({"micro_batch_size": 24}, 1, (16, 8, 8, 60)),  # the largest divisor of 128 below the cap
    # GSPO: 4 mini-batches of 32, each an optimizer step
    ({"num_mini_batches": 4}, 1, (32, 1, 4, 240)),
    ({"num_mini_batches": 4, "micro_batch_size": 8}, 1, (8, 4, 16, 240)),
    # PPO-style reuse: 2 epochs x 2 mini-batches = 4 optimizer steps per generation
    ({"num_mini_batches": 2, "num_iterations": 2}, 1, (64, 1, 2, 240)),
    # two processes share each mini-batch
    ({}, 2, (64, 1, 1, 60)),
    ({"micro_batch_size": 16}, 2, (16, 4, 4, 60)),
    ({"num_mini_batches": 4, "micro_batch_size": 8}, 2, (8, 2, 8, 240)),
    ({"prompts_per_step": 1, "num_generations": 8, "max_steps": 2}, 2, (4, 1, 1, 2)),
    ({"prompts_per_step": 12, "num_mini_batches": 3}, 8, (4, 1, 3, 180)),
])
def test_batch_sizes_keep_completions_and_optimizer_steps_per_generation(overrides, processes,
                                                                         expected):
    config = preset("grpo", **overrides)
    sizes = trl_batch_sizes(config, processes)
    got = tuple(sizes[k] for k in ("per_device_train_batch_size", "gradient_accumulation_steps",
                                   "steps_per_generation", "max_steps"))
    assert got == expected
    micro, accumulation, per_generation, _ = got
    generation = config.prompts_per_step * config.num_generations
    assert micro * processes * per_generation == generation == sizes["generation_batch_size"]
    assert per_generation // accumulation == config.num_mini_batches
    if config.micro_batch_size:
        assert micro <= config.micro_batch_size


def test_batch_sizes_reach_grpo_config_for_two_processes(tmp_path):
    config = preset("gspo", micro_batch_size=8)
    args = grpo_config(tmp_path, config, num_processes=2)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps,
            args.steps_per_generation) == (8, 2, 8)
    # this test runs in one process, so TRL derives its generation batch for one; under a launch
    # with two, it is 8 x 2 x 8 = 128 = prompts_per_step x num_generations
    assert args.generation_batch_size * 2 == config.generation_batch_size


@pytest.mark.parametrize("overrides, processes, message", [
    ({"num_mini_batches": 3}, 1, "num_mini_batches=3 does not divide the generation batch"),
    ({"prompts_per_step": 3, "num_generations": 2}, 4, "does not split evenly over 4 processes"),
    ({"loss_type": "bnpo", "micro_batch_size": 24}, 1, "loss_type='bnpo' normalises per"),
])
def test_batch_sizes_that_do_not_divide_are_refused(overrides, processes, message):
    with pytest.raises(ValueError, match=message):
        trl_batch_sizes(preset("grpo", **overrides), processes)


# ---- refusals ------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, field", [
    ({"advantage_estimator": "gae"}, "advantage_estimator"),
    ({"advantage_estimator": "rloo"}, "advantage_estimator"),
    ({"advantage_estimator": "remax"}, "advantage_estimator"),
    ({"advantage_estimator": "opo"}, "advantage_estimator"),
    ({"dual_clip": 3.0}, "dual_clip"),
    ({"beta": 0.05, "kl_in_reward": True}, "kl_in_reward"),
    ({"beta": 0.05, "kl_estimator": "k1"}, "kl_estimator"),
    ({"num_remains_in_group": 4}, "num_remains_in_group"),
    ({"gfpo_adaptive_k": (8, 6, 4, 2)}, "gfpo_adaptive_k"),
    ({"dynamic_sampling": True}, "dynamic_sampling"),
    ({"length_reward": "kimi"}, "length_reward"),
    ({"importance_sampling_level": "sequence_token"}, "importance_sampling_level"),
    ({"eval_every": 5}, "eval_every"),
    ({"temperature_schedule": "cosine", "temperature_final": 0.6}, "temperature_schedule"),
    ({"diversity_adjustment": "ngram"}, "diversity_adjustment"),
    ({"beta": 0.04, "ref_reset_every": 10}, "ref_reset_every"),
    ({"cov_penalty": "clip_cov"}, "cov_penalty"),
    ({"loss_type": "rlplus", "rlplus_demonstrations": True}, "rlplus_demonstrations"),
    ({"loss_type": "rlplus"}, "loss_type"),
    ({"resume_from": "checkpoints/step-10"}, "resume_from"),
])
def test_lab_only_settings_are_refused_with_field_value_and_reason(tmp_path, overrides, field):
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    if not set(overrides) <= names:
        pytest.skip(f"this TrainConfig lacks {set(overrides) - names}")
    try:
        config = preset("grpo", **overrides)
    except ValueError as error:
        pytest.skip(f"the lab refuses this combination itself: {error}")
    with pytest.raises(ValueError) as error:
        grpo_config(tmp_path, config)
    message = str(error.value)
    assert message.startswith(f"{field}={getattr(config, field)!r}"), message
    assert "TRL" in message


def test_top_entropy_quantile_needs_one_micro_batch_per_generation(tmp_path):
    grpo_config(tmp_path, preset("grpo", top_entropy_quantile=0.2))
    grpo_config(tmp_path, preset("grpo", top_entropy_quantile=0.2), num_processes=2)
    with pytest.raises(ValueError, match="^top_entropy_quantile=0.2 with several"):
        grpo_config(tmp_path, preset("grpo", top_entropy_quantile=0.2, num_mini_batches=2))


def test_k1_without_a_kl_term_is_fine(tmp_path):
    grpo_config(tmp_path, preset("grpo", kl_estimator="k1", beta=0.0))


def test_float16_is_refused_with_a_way_out(tmp_path):
    config = preset("grpo")
    object.__setattr__(config, "dtype", "float16")  # the lab itself refuses it on construction
    with pytest.raises(ValueError, match="dtype='float16'"):
        grpo_config(tmp_path, config)


# ---- the log -------------------------------------------------------------------------------------
def test_history_from_logs_uses_the_lab_names_one_row_per_optimizer_step():
    logs = [
        {"step": 1, "loss": 0.1, "grad_norm": 0.5, "learning_rate": 1e-4, "reward": 1.2,
         "reward_std": 0.4, "rewards/accuracy_reward/mean": 0.25,
         "rewards/format_reward/mean": 0.95, "rewards/soft_overlong_punishment_reward/mean": -0.05,
         "completions/mean_length": 14.0, "completions/max_length": 40.0,
         "completions/clipped_ratio": 0.0, "frac_reward_zero_std": 0.25, "kl": 0.01,
         "entropy": 0.3, "clip_ratio/low_mean": 0.0, "clip_ratio/high_mean": 0.02,
         "clip_ratio/region_mean": 0.02, "step_time": 1.5, "num_tokens": 2650.0, "epoch": 0.02},
        {"step": 2, "loss": 0.3, "policy_loss": 0.2, "grad_norm": 0.4, "learning_rate": 1e-4},
        {"step": 2, "train_runtime": 3.0, "train_loss": 0.2},
    ]
    history = history_from_logs(logs, steps_per_lab_step=2)
    assert len(history) == 2
    first = history.iloc[0]
    assert first["step"] == 1 and first["optimizer_step"] == 1
    assert first["accuracy"] == first["reward_accuracy"] == 0.25
    assert first["reward_format"] == 0.95 and first["reward_overlong"] == -0.05
    assert first["completion_length"] == 14 and first["truncation_rate"] == 0
    assert first["kl_ref"] == 0.01 and first["clip_high"] == 0.02
    second = history.iloc[1]
    assert second["step"] == 1 and second["optimizer_step"] == 2  # same generation batch
    assert second["loss"] == 0.2  # the surrogate, not the total
    assert math.isnan(second["reward"])
    assert "num_tokens" not in history and "epoch" not in history


# ---- the loss TRL computes with a bridge-built config --------------------------------------------
#: TRL fields a crosscheck trainer keeps from its fixture (its batch is 2 prompts x 2 completions).
FIXTURE_FIELDS = {"num_generations"}
LOSS_CASES = [(name, extra) for name in ("grpo", "dr_grpo", "gspo", "dapo")
              for extra in ({}, {"beta": 0.04}, {"beta": 0.04, "entropy_coef": 0.01})]


def bridge_trainer(tiny, tmp_path, config, **trl_overrides):
    """A crosscheck trainer whose algorithm settings all come from the bridge's GRPOConfig."""
    args = to_grpo_config(config, output_dir=tmp_path, drop_unsupported=("dynamic_sampling",))
    settings = {name: getattr(args, name) for name in {*SHARED_FIELDS.values(), *TRL_PINNED}
                if name not in FIXTURE_FIELDS}
    return make_trainer(tiny, tmp_path, **(settings | trl_overrides))


def lab_settings(config):
    """The TrainConfig fields policy_loss takes, as the lab's trainer passes them."""
    accepted = inspect.signature(policy_loss).parameters
    return {k: v for k, v in config.to_dict().items() if k in accepted}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name, extra", LOSS_CASES)
def test_trl_loss_with_bridge_config_equals_policy_loss(tiny, tmp_path, name, extra):
    config = preset(name, max_completion_length=L_MAX, **extra)
    trainer = bridge_trainer(tiny, tmp_path, config)
    # the first crosscheck batch whose gradient is not all clipped away (GSPO clips at 3e-4)
    for seed in range(50):
        batch = random_batch(seed=seed)
        items = int(batch[4].sum())
        got = labkit_loss(*batch, **lab_settings(config), num_items_in_batch=items)
        if got[1].abs().sum() > 0:
            break
    else:
        pytest.fail("no crosscheck batch gives this config a gradient")
    expected = trl_loss(trainer, *batch, num_items=items)
    torch.testing.assert_close(got[0], expected[0], rtol=1e-6, atol=1e-12)
    torch.testing.assert_close(got[1], expected[1], rtol=1e-6, atol=1e-12)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_without_the_pin_trl_default_kl_would_differ(tiny, tmp_path):
    """Control: TRL's default use_bias_correction_kl=True gives another gradient with beta > 0,
    so the bridge's explicit False is what makes the two agree."""
    config = preset("grpo", max_completion_length=L_MAX, beta=0.04)
    trainer = bridge_trainer(tiny, tmp_path, config, use_bias_correction_kl=True)
    batch = random_batch(seed=11)
    items = int(batch[4].sum())
    expected = trl_loss(trainer, *batch, num_items=items)
    got = labkit_loss(*batch, **lab_settings(config), num_items_in_batch=items)
    assert not torch.allclose(got[1], expected[1], rtol=1e-4, atol=1e-8)


# ---- a TRL run that learns -----------------------------------------------------------------------
# GRPO through train_with_trl learning on the medium cells (training accuracy +8 points in 15 steps;
# measured 0.145 -> 0.427) is asserted live by notebooks/09_scaling_up.ipynb, which the suite runs
# under nbval; a copy here would only double CI's time.
