"""labkit.catalog stays honest: ids complete and unique, functions import, tests exist, notebooks
(once written) mention their ids, config switches are real TrainConfig fields."""

import importlib
import re
import warnings
from pathlib import Path

import pytest

import labkit.config
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
    """The core path, then the 29 tricks, then the extras, each list read from the catalog (no
    id is written twice: a new entry is one edit, in ``CATALOG``)."""
    ids = [m.id for m in all_methods()]
    assert len(ids) == len(set(ids))
    assert len(TRICK_IDS) == 29
    assert [m.id for m in CATALOG] == [*CORE_IDS, *TRICK_IDS, *EXTRA_IDS]
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
#: the optimiser, the sampler's decode loop, evaluation and checkpoints, as each field's
#: declaration says (``kind="generic"``). Every other field must switch a catalog method, or be
#: a setting that a registered loss declares (its method's).
GENERIC_FIELDS = labkit.config.GENERIC_FIELDS


def unlisted_switches() -> list[str]:
    """TrainConfig fields that switch no method of the catalog: not generic, not switched by an
    entry (written or derived from a registration), not declared by a registered loss."""
    import dataclasses

    from labkit.config import TrainConfig
    from labkit.losses import LOSS_REGISTRY

    switched = {name for m in all_methods() for name in m.config}
    declared = {name for loss in LOSS_REGISTRY.values() for name in loss.settings}
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    return sorted(fields - GENERIC_FIELDS - switched - declared)


def test_every_method_switch_of_the_config_belongs_to_an_implemented_entry():
    """A switch the trainer acts on cannot exist while the catalog calls its method planned. A
    loss's own setting belongs to its loss, which the catalog lists from its registration."""
    import dataclasses

    from labkit.config import TrainConfig

    orphans = unlisted_switches()
    assert not orphans, f"TrainConfig switches with no catalog entry: {orphans}"
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    assert GENERIC_FIELDS <= fields


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


def test_every_registered_method_is_listed():
    """A method the trainer can run is in the catalog: by its entry, or derived from its
    registration (bnpo and sequence_sum have no entry of their own). Loss types and estimators
    are listed by their switch, named rewards by their code. A derived row stands only for a
    registration no entry covers, and says where it was registered."""
    from labkit.advantages import ESTIMATOR_REGISTRY
    from labkit.losses import LOSS_REGISTRY
    from labkit.rewards import REWARD_REGISTRY

    switches = {(k, v) for m in all_methods() for k, v in m.config.items()}
    for name in LOSS_REGISTRY:
        assert ("loss_type", name) in switches
    for name in ESTIMATOR_REGISTRY:
        assert ("advantage_estimator", name) in switches
    listed = {getattr(importlib.import_module(module), name)
              for m in all_methods() for module, _, name in (f.rpartition(".") for f in m.functions)}
    for name, reward in REWARD_REGISTRY.items():
        assert reward.code in listed, name
    written = {(k, v) for m in CATALOG for k, v in m.config.items()}
    registries = {"loss_type": LOSS_REGISTRY, "advantage_estimator": ESTIMATOR_REGISTRY}
    for method in registered_methods():
        if method.changes == "reward":
            module = REWARD_REGISTRY[method.id.replace("-", "_")].module
        else:
            ((switch, name),) = method.config.items()
            assert (switch, name) not in written, method.id
            module = registries[switch][name].module
        assert f"registered in {module}" in method.note


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
