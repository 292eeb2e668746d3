"""labkit.catalog stays honest: ids complete and unique, functions import, tests exist, notebooks
(once written) mention their ids, config switches are real TrainConfig fields."""

import importlib
import re
import warnings
from pathlib import Path

import pytest

from labkit.catalog import (
    CATALOG,
    CHANGES,
    CORE_IDS,
    EXTRA_IDS,
    TRICK_IDS,
    all_methods,
    catalog_frame,
    get,
    registered_methods,
)

ROOT = Path(__file__).resolve().parents[1]

# The lab's method ids, in the catalog's fixed order.
LAB_CORE = [
    "ppo",
    "ppo-dual-clip",
    "gae",
    "grpo",
    "dapo-dynamic-sampling",
    "dapo-overlong-filter",
    "gspo-token",
    "gfpo-token-efficiency",
    "gfpo-adaptive",
]
LAB_TRICKS = [
    "dapo-no-kl",
    "dapo-clip-higher",
    "kimi-temperature-decay",
    "dler-higher-clip",
    "prorl-ref-reset",
    "rlplus-no-clip-exploration",
    "kl-estimators",
    "opo-baseline",
    "gdpo-reward-decoupled-norm",
    "remax-greedy-baseline",
    "rloo-baseline",
    "drgrpo-no-std",
    "gspo-sequence",
    "batch-reward-norm",
    "prorl-high-temperature",
    "curriculum-difficulty",
    "gfpo-length-filter",
    "dra-diversity",
    "dapo-overlong-penalty",
    "dapo-token-loss",
    "kimi-budget-control",
    "laser-length-reward",
    "dler-difficulty-truncation",
    "rft-rejection-sampling",
    "rlvr-rules",
    "ttrl-majority-vote",
    "generative-judge",
    "multitask-weights",
    "kimi-ptx-loss",
]
NOTEBOOKS = {
    f"notebooks/{n}.ipynb" for n in ("00_tour", "01_ppo", "02_grpo", "03_baselines", "04_dapo")
} | {
    "notebooks/05_gspo.ipynb",
    "notebooks/06_gfpo_length.ipynb",
    "notebooks/07_exploration.ipynb",
    "notebooks/08_rewards_data.ipynb",
    "notebooks/09_scaling_up.ipynb",
    "notebooks/10_agents.ipynb",
    "notebooks/11_async.ipynb",
}


def test_ids_are_unique_and_cover_the_brief_in_order():
    ids = [m.id for m in CATALOG]
    assert len(ids) == len(set(ids))
    assert list(CORE_IDS) == LAB_CORE and list(TRICK_IDS) == LAB_TRICKS and len(LAB_TRICKS) == 29
    assert ids == LAB_CORE + LAB_TRICKS + list(EXTRA_IDS)
    assert get("grpo").id == "grpo"
    with pytest.raises(KeyError, match="unknown method id"):
        get("ppo2")


@pytest.mark.parametrize("method", CATALOG, ids=lambda m: m.id)
def test_entry_fields_are_well_formed(method):
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", method.id)
    assert method.changes in CHANGES
    assert method.status in ("implemented", "planned")
    assert method.title
    assert method.arxiv is None or re.fullmatch(r"\d{4}\.\d{4,5}", method.arxiv)
    assert method.notebook is None or method.notebook in NOTEBOOKS
    if method.status == "implemented":
        assert method.tests, "an implemented method names the tests that check it"


#: TrainConfig fields that are not a method's switch: the model, the machine, batch sizes,
#: the optimiser, the sampler's decode loop, evaluation and checkpoints. Every other field must switch a catalog method.
GENERIC_FIELDS = {
    "model_name_or_path", "device", "dtype", "gradient_checkpointing", "seed", "prompts_per_step",
    "num_generations", "max_completion_length", "top_p", "top_k", "reward_weights",
    "learning_rate", "lr_scheduler_type", "warmup_ratio", "weight_decay", "adam_beta1",
    "adam_beta2", "max_grad_norm", "num_iterations", "num_mini_batches", "micro_batch_size",
    "max_steps", "eval_every", "eval_k", "eval_max_prompts", "output_dir", "save_every",
    "save_on_interrupt", "resume_from", "max_nonfinite_steps", "rollback_nonfinite_weights",
    "progress", "max_resample_rounds", "overlong_penalty_factor", "length_reward_weight",
    "length_target", "length_target_easy", "sapo_temperature_pos", "sapo_temperature_neg",
    "cispo_min_weight",
    "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg", "gfpo_metric",
    "kl_estimator", "entropy_coef", "vf_coef", "clip_range_value", "value_learning_rate",
    "gamma", "lam", "delta", "use_bias_correction_kl", "kl_in_reward", "entropy_threshold",
    "eval_temperature", "temperature_final", "clip_cov_lb", "clip_cov_ub", "clip_cov_ratio",
    "kl_cov_ratio", "kl_cov_coef", "ref_model_mixup_alpha", "ref_model_sync_steps",
    "exploration_gamma", "ref_reset_patience", "curriculum_ratio", "prioritized_floor",
    "multitask_lambda", "multitask_lr",
    "use_peft", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "use_rslora",
    "use_dora", "decode_path", "cuda_graphs",
}


def test_every_method_switch_of_the_config_belongs_to_an_implemented_entry():
    """A switch the trainer acts on cannot exist while the catalog calls its method planned."""
    import dataclasses

    from labkit.config import TrainConfig

    switched = {name for m in CATALOG for name in m.config}
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    orphans = sorted(fields - GENERIC_FIELDS - switched)
    assert not orphans, f"TrainConfig switches with no catalog entry: {orphans}"
    assert not (GENERIC_FIELDS - fields), "GENERIC_FIELDS names fields that do not exist"


@pytest.mark.parametrize("method", [m for m in CATALOG if m.functions], ids=lambda m: m.id)
def test_every_named_function_imports(method):
    for path in method.functions:
        module, _, name = path.rpartition(".")
        assert callable(getattr(importlib.import_module(module), name)), path


@pytest.mark.parametrize("method", [m for m in CATALOG if m.tests], ids=lambda m: m.id)
def test_every_named_test_exists(method):
    for node in method.tests:
        file, _, name = node.partition("::")
        source = (ROOT / file).read_text()
        assert re.search(rf"^def {re.escape(name)}\(", source, re.MULTILINE), node


@pytest.mark.parametrize("method", [m for m in CATALOG if m.config], ids=lambda m: m.id)
def test_config_switches_are_accepted_by_train_config(method):
    config = pytest.importorskip("labkit.config")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config.TrainConfig(**method.config)


@pytest.mark.parametrize("method", [m for m in CATALOG if m.notebook], ids=lambda m: m.id)
def test_notebook_mentions_the_id_once_it_exists(method):
    path = ROOT / method.notebook
    if not path.exists():
        pytest.skip(f"{method.notebook} is not written yet")
    assert method.id in path.read_text(), f"{method.notebook} does not mention {method.id}"


def test_every_registered_loss_and_estimator_is_listed():
    """A method the trainer can run is in the catalog: by its entry, or derived from its
    registration (bnpo and sequence_sum have no entry of their own). A derived row stands only
    for a registration no entry covers, and says where it was registered."""
    from labkit.advantages import ESTIMATOR_REGISTRY
    from labkit.losses import LOSS_REGISTRY

    switches = {(k, v) for m in all_methods() for k, v in m.config.items()}
    for name in LOSS_REGISTRY:
        assert ("loss_type", name) in switches
    for name in ESTIMATOR_REGISTRY:
        assert ("advantage_estimator", name) in switches
    written = {(k, v) for m in CATALOG for k, v in m.config.items()}
    registries = {"loss_type": LOSS_REGISTRY, "advantage_estimator": ESTIMATOR_REGISTRY}
    for method in registered_methods():
        ((switch, name),) = method.config.items()
        assert (switch, name) not in written, method.id
        assert f"registered in {registries[switch][name].module}" in method.note


def test_catalog_frame_has_one_row_per_method():
    frame = catalog_frame()
    assert list(frame["id"]) == [m.id for m in all_methods()]
    assert list(frame["id"][:len(CATALOG)]) == [m.id for m in CATALOG]
    assert set(frame["kind"]) == {"core", "trick", "extra"}
    assert set(frame["status"]) == {"implemented"}  # derived per row, never missing
    assert {"status", "changes", "arxiv", "switch", "notebook", "tests"} <= set(frame.columns)
    assert (
        frame.loc[frame["id"] == "dapo-token-loss", "switch"].item()
        == "loss_type='dapo'; labkit.losses.aggregate"
    )
