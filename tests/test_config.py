"""TrainConfig validation and the method presets."""

import dataclasses
import warnings

import pytest

from labkit.config import FIELD_DOCS, PRESETS, TrainConfig, preset, preset_doc


@pytest.mark.parametrize(
    ("field", "value", "fragments"),
    [
        ("epsilon", -0.1, ["epsilon", "[0, 1)", "-0.1"]),
        ("epsilon", 1.0, ["epsilon", "[0, 1)"]),
        ("temperature", 0.0, ["temperature", "(0, inf)"]),
        ("top_p", 1.5, ["top_p", "(0, 1]"]),
        ("num_generations", 0, ["num_generations", ">= 1"]),
        ("num_iterations", 1.5, ["num_iterations", "integer"]),
        ("prompts_per_step", True, ["prompts_per_step", "integer"]),
        ("beta", -1.0, ["beta", "[0, inf)"]),
        ("learning_rate", 0.0, ["learning_rate", "(0, inf)"]),
        ("warmup_ratio", 1.0, ["warmup_ratio", "[0, 1)"]),
        ("gamma", 1.1, ["gamma", "[0, 1]"]),
        ("delta", 0.9, ["delta", "(1, inf)"]),
        ("dual_clip", 1.0, ["dual_clip", "(1, inf)"]),
        ("loss_type", "ppo", ["loss_type", "'dapo'", "'ppo'"]),
        ("advantage_estimator", "vtrace", ["advantage_estimator", "'gae'"]),
        ("scale_rewards", True, ["scale_rewards", "'group'"]),
        ("importance_sampling_level", "seq", ["importance_sampling_level", "'sequence'"]),
        ("kl_estimator", "k4", ["kl_estimator", "'k3'"]),
        ("gfpo_metric", "short", ["gfpo_metric", "'length'"]),
        ("lr_scheduler_type", "step", ["lr_scheduler_type", "'cosine'"]),
        ("dtype", "int8", ["dtype", "'bfloat16'"]),
        ("max_grad_norm", float("nan"), ["max_grad_norm"]),
        ("num_remains_in_group", 1, ["num_remains_in_group", "[2, 8]"]),
        ("num_remains_in_group", 9, ["num_remains_in_group", "[2, 8]"]),
        ("overlong_buffer_len", 128, ["overlong_buffer_len", "[0, 128)"]),
        ("micro_batch_size", 0, ["micro_batch_size", ">= 1"]),
        ("reward_weights", (1.0, float("inf")), ["reward_weights", "finite"]),
    ],
)
def test_bad_values_name_field_and_range(field, value, fragments):
    with pytest.raises(ValueError) as info:
        TrainConfig(**{field: value})
    for fragment in fragments:
        assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("overrides", "fragments"),
    [
        ({"num_generations": 1}, ["num_generations >= 2", "advantage_estimator='gae'"]),
        ({"advantage_estimator": "rloo", "num_generations": 1}, ["num_generations >= 2"]),
        ({"advantage_estimator": "gae", "dynamic_sampling": True}, ["dynamic_sampling=False"]),
        ({"advantage_estimator": "rloo", "num_remains_in_group": 4},
         ["advantage_estimator='grpo'"]),
        ({"advantage_estimator": "gae", "importance_sampling_level": "sequence"},
         ["importance_sampling_level='token'"]),
        ({"kl_in_reward": True}, ["beta > 0"]),
        ({"lr_scheduler_type": "constant", "warmup_ratio": 0.1}, ["constant_with_warmup"]),
        ({"num_mini_batches": 200}, ["num_mini_batches", "prompts_per_step"]),
        ({"micro_batch_size": 500}, ["micro_batch_size", "mini-batch"]),
        ({"save_every": 5}, ["output_dir"]),
    ],
)
def test_impossible_combinations_say_how_to_fix(overrides, fragments):
    with pytest.raises(ValueError) as info:
        TrainConfig(**overrides)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_gae_allows_single_completion_and_remax_needs_no_group():
    assert TrainConfig(advantage_estimator="gae", num_generations=1).generation_batch_size == 16
    assert TrainConfig(advantage_estimator="remax", num_generations=1).num_generations == 1


def test_sequence_ratio_with_token_sum_loss_warns_like_trl():
    with pytest.warns(UserWarning, match="loss_type='grpo'"):
        TrainConfig(importance_sampling_level="sequence", loss_type="dapo")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TrainConfig(importance_sampling_level="sequence", loss_type="grpo")



def test_clip_higher_on_policy_warns_and_splitting_the_batch_silences_it():
    """DAPO's clip-higher acts only on off-policy mini-batches; on-policy it must not be silent."""
    with pytest.warns(UserWarning, match="clip-higher changes nothing"):
        inert = preset("dapo")
    assert inert.clip_higher_inert
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for acting in (preset("dapo", num_mini_batches=4), preset("dapo", num_iterations=2),
                       TrainConfig(loss_type="cispo", epsilon_high=5.0), TrainConfig()):
            assert not acting.clip_higher_inert
    with pytest.warns(UserWarning, match="epsilon_high = 0.28"):
        preset("dapo", num_mini_batches=4).num_mini_batches = 1  # assignment is checked too

def test_derived_sizes():
    cfg = TrainConfig(prompts_per_step=8, num_generations=4, num_mini_batches=2,
                      micro_batch_size=5)
    assert cfg.generation_batch_size == 32
    assert cfg.mini_batch_size == 16
    assert cfg.gradient_accumulation_steps == 4  # ceil(16 / 5)
    assert cfg.off_policy
    assert not TrainConfig().off_policy
    assert TrainConfig(num_iterations=2).off_policy
    gfpo = preset("gfpo")
    assert gfpo.train_batch_size == gfpo.prompts_per_step * gfpo.num_remains_in_group


def test_replace_revalidates():
    cfg = TrainConfig()
    with pytest.raises(ValueError, match="epsilon"):
        dataclasses.replace(cfg, epsilon=2.0)


def test_default_config_is_the_grpo_preset():
    assert TrainConfig() == preset("grpo")


def test_presets_carry_the_papers_choices():
    ppo = preset("ppo")
    assert ppo.advantage_estimator == "gae" and ppo.off_policy and ppo.epsilon == 0.2
    assert ppo.vf_coef > 0 and ppo.clip_range_value is not None

    grpo = preset("grpo")
    assert (grpo.advantage_estimator, grpo.loss_type) == ("grpo", "grpo")
    assert grpo.scale_rewards == "group"
    assert grpo.num_iterations == 1 and not grpo.needs_reference

    dapo = preset("dapo")
    assert (dapo.epsilon, dapo.epsilon_high) == (0.2, 0.28)
    assert dapo.loss_type == "dapo" and dapo.dynamic_sampling and dapo.beta == 0
    assert dapo.overlong_buffer_len > 0 and dapo.mask_truncated_completions

    dr = preset("dr_grpo")
    assert (dr.scale_rewards, dr.loss_type, dr.beta) == ("none", "dr_grpo", 0.0)

    gspo = preset("gspo")
    assert gspo.importance_sampling_level == "sequence" and gspo.loss_type == "grpo"
    assert (gspo.epsilon, gspo.epsilon_high) == (3e-4, 4e-4) and gspo.off_policy

    gfpo = preset("gfpo")
    assert gfpo.num_remains_in_group < gfpo.num_generations and gfpo.loss_type == "dapo"


def test_preset_overrides_and_errors():
    assert preset("dapo", num_generations=4).num_generations == 4
    assert preset("dapo", num_generations=4).epsilon_high == 0.28
    with pytest.raises(ValueError, match="preset must be one of"):
        preset("trpo")
    with pytest.raises(ValueError, match="unknown TrainConfig field"):
        preset("grpo", num_generation=4)
    with pytest.raises(ValueError, match="epsilon"):
        preset("gspo", epsilon=-1.0)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_documents_its_paper_and_deviations(name):
    doc = preset_doc(name)
    assert "arXiv" in doc and "deviation" in doc.lower()


def test_every_field_has_a_comment():
    assert set(FIELD_DOCS) == {f.name for f in dataclasses.fields(TrainConfig)}
    assert all(len(doc) > 10 for doc in FIELD_DOCS.values())
    assert "TRL" in FIELD_DOCS["epsilon"]


def test_every_field_has_its_range_beside_it():
    """Validation is one loop over the fields: a field without a range would go unchecked."""
    for f in dataclasses.fields(TrainConfig):
        assert callable(f.metadata.get("range")), f"TrainConfig.{f.name} declares no range"
    config = TrainConfig()
    for name, bad in (("epsilon", 1.0), ("num_generations", 0), ("top_p", 0.0),
                      ("kl_estimator", "k4"), ("sapo_temperature_pos", 0.0)):
        with pytest.raises(ValueError, match=f"^{name} must be"):
            setattr(config, name, bad)


def test_every_field_is_one_declaration_and_its_readers_derive_from_it():
    """Range, doc, TRL bridge, resumable and kind live in the field's declaration; the bridge's
    tables, RESUMABLE_CHANGES and the generic fields are read from it, not kept beside it."""
    from labkit.config import FIELDS, GENERIC_FIELDS, RESUMABLE_CHANGES
    from labkit.config.knobs import KINDS, TABLES
    from labkit.trl_bridge import DERIVED_FIELDS, LAB_ONLY, NOT_CARRIED, SHARED_FIELDS

    assert list(FIELDS) == [f.name for f in dataclasses.fields(TrainConfig)]
    for name, k in FIELDS.items():
        assert k.trl.table in TABLES and k.kind in KINDS and k.doc == FIELD_DOCS[name]
    tables = {"shared": SHARED_FIELDS, "derived": DERIVED_FIELDS, "lab_only": LAB_ONLY,
              "not_carried": NOT_CARRIED}
    for table, derived in tables.items():
        assert set(derived) == {n for n, k in FIELDS.items() if k.trl.table == table}
    assert SHARED_FIELDS["epsilon_high"] == "epsilon_high"
    assert {"max_steps", "device", "micro_batch_size"} <= RESUMABLE_CHANGES
    assert "seed" not in RESUMABLE_CHANGES and "seed" in GENERIC_FIELDS
    assert "loss_type" not in GENERIC_FIELDS


def test_epsilon_high_none_is_resolved_once():
    """TRL's rule "epsilon_high=None means epsilon" is written once (labkit.losses.upper_clip)
    and a config resolves it as ``upper_clip``; the field keeps TRL's None."""
    import re
    from pathlib import Path

    assert TrainConfig().epsilon_high is None and TrainConfig().upper_clip == 0.2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert preset("dapo").upper_clip == 0.28
    cispo = TrainConfig(loss_type="cispo", epsilon_high=5.0)  # TRL's meaning: the weight's cap
    assert cispo.upper_clip == cispo.epsilon_high == 5.0
    rule = re.compile(r"epsilon\w* if \w*\.?epsilon_high is None")
    root = Path(__file__).resolve().parents[1] / "labkit"
    copies = [str(p.relative_to(root)) for p in root.rglob("*.py") if rule.search(p.read_text())]
    assert copies == ["losses/clipped.py"]
