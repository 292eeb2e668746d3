"""The learner's files and runs are safe from the lab: a checkpoint save deletes nothing the lab
did not write, and a resume refuses to mix a run with other data, rewards or environment.

Runs are one or two steps of the randomly initialised tiny Qwen (2 prompts x 2 completions of at
most 8 tokens).
"""

import copy
import functools
import json
import warnings

import pandas as pd
import pytest
import torch
from small_trainer import small_trainer
from text_rewards import length_reward

from labkit.config import preset
from labkit.runtime.hashing import file_sha256
from labkit.tasks import load_split
from labkit.trainer import train
from labkit.training.checkpoint import (
    STATE_FILE,
    TEMPORARY_MARKER,
    load_state,
    qualified_name,
)

SMALL = {"prompts_per_step": 2, "num_generations": 2, "max_completion_length": 8,
         "max_steps": 1, "progress": False}

pytestmark = pytest.mark.usefixtures("one_thread")


make_trainer = functools.partial(small_trainer, settings=SMALL, reward_funcs=(length_reward,))


@pytest.fixture(scope="module")
def trained(random_tiny):
    trainer = make_trainer(random_tiny)
    trainer.train()
    return trainer


def files(folder):
    """Every path under ``folder`` with its bytes (None for a folder)."""
    return {p.relative_to(folder).as_posix(): None if p.is_dir() else p.read_bytes()
            for p in sorted(folder.rglob("*"))}


# ---- 1. a save deletes nothing the lab did not write ---------------------------------------------
def test_a_save_into_a_results_folder_is_refused_and_deletes_nothing(trained, tmp_path):
    """save_checkpoint used to move the folder aside and rmtree it: the notes and plots went."""
    results = tmp_path / "results"
    (results / "plots").mkdir(parents=True)
    (results / "notes.txt").write_text("step 40: the reward went up")
    (results / "plots" / "reward.png").write_bytes(b"\x89PNG")
    before = files(tmp_path)
    with pytest.raises(FileExistsError, match=r"results is not empty and is not a labkit "
                                              r"checkpoint \(it holds notes.txt, plots\)"):
        trained.save_checkpoint(results)
    assert files(tmp_path) == before


def test_a_new_save_leaves_the_learners_old_and_partial_folders_alone(trained, tmp_path):
    """A save to a new folder used to delete <name>.old and <name>.partial, whatever they held."""
    for name in ("checkpoint.old", "checkpoint.partial"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "mine.txt").write_text("the learner's")
    before = files(tmp_path)
    trained.save_checkpoint(tmp_path / "checkpoint")
    after = files(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith("checkpoint/")} == (
        before | {"checkpoint": None})
    assert load_state(tmp_path / "checkpoint")["step"] == 1


def test_a_checkpoint_the_learner_added_a_file_to_is_not_saved_over(trained, tmp_path):
    folder = trained.save_checkpoint(tmp_path / "checkpoint")
    (folder / "model" / "notes.md").write_text("why I stopped here")
    before = files(tmp_path)
    with pytest.raises(FileExistsError, match=r"is a labkit checkpoint, but it also holds "
                                              r"model/notes.md"):
        trained.save_checkpoint(folder)
    assert files(tmp_path) == before


@pytest.mark.parametrize("what", ["file", "symlink"])
def test_a_file_or_a_symlink_in_the_way_is_refused(trained, tmp_path, what):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("{}\n")
    target = tmp_path / "checkpoint"
    if what == "file":
        target.write_text("not a folder")
    else:
        target.mkdir()
        (target / "data").symlink_to(data, target_is_directory=True)
    before = files(tmp_path)
    with pytest.raises(FileExistsError, match="checkpoint"):
        trained.save_checkpoint(target)
    assert files(tmp_path) == before


def test_saving_over_the_labs_own_checkpoint_replaces_it_and_leaves_nothing_beside(random_tiny,
                                                                                   tmp_path):
    """How save_every and an interrupt's save meet: the same checkpoint-<step> twice."""
    trainer = make_trainer(random_tiny, max_steps=2, save_every=1, output_dir=str(tmp_path))
    trainer.train()
    trainer.step = 1  # the folder of step 1 again, from a later state
    trainer.save_checkpoint()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-1", "checkpoint-2"]
    assert len(pd.read_parquet(tmp_path / "checkpoint-1" / "history.parquet")) == 2  # the new


def test_a_killed_saves_marked_temporary_is_cleared_and_an_unmarked_lookalike_kept(trained,
                                                                                   tmp_path):
    stale = tmp_path / ".checkpoint.labkit-save-k1ll3d"  # what a kill mid-save leaves
    (stale / "new" / "model").mkdir(parents=True)
    (stale / "new" / "model" / "model.safetensors").write_bytes(b"half")
    (stale / TEMPORARY_MARKER).write_text("")
    mine = tmp_path / ".checkpoint.labkit-save-mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("no marker: not the lab's")
    trained.save_checkpoint(tmp_path / "checkpoint")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".checkpoint.labkit-save-mine",
                                                          "checkpoint"]
    assert (mine / "keep.txt").read_text() == "no marker: not the lab's"


def test_a_save_that_dies_keeps_the_previous_checkpoint_and_no_temporary(trained, tmp_path):
    folder = trained.save_checkpoint(tmp_path / "checkpoint")
    before = files(tmp_path)
    save = trained.tokenizer.save_pretrained
    trained.tokenizer.save_pretrained = lambda *a, **k: (_ for _ in ()).throw(OSError("disk"))
    try:
        with pytest.raises(OSError, match="disk"):
            trained.save_checkpoint(folder)
    finally:
        trained.tokenizer.save_pretrained = save
    assert files(tmp_path) == before


# ---- 2. a resume does not mix two runs -----------------------------------------------------------
def other_rows():
    return load_split("train").select(range(100, 164))


def format_only_reward(prompts, completions, **columns):
    return [0.5] * len(completions)


class Counter:
    """An environment factory whose one tool counts."""

    def reset(self, **row):
        self.n = 0

    def count(self) -> str:
        """Add one."""
        self.n += 1
        return str(self.n)


@pytest.fixture(scope="module")
def checkpoint(trained, tmp_path_factory):
    return trained.save_checkpoint(tmp_path_factory.mktemp("resume") / "checkpoint")


@pytest.mark.parametrize(("change", "kwargs", "named"), [
    ("data", {"data": "other"}, r"data 64 rows, sha256 \w{12} -> 64 rows, sha256 \w{12}"),
    ("data", {"data": "reordered"}, r"data 64 rows, sha256 \w{12} -> 64 rows, sha256 \w{12}"),
    ("rewards", {"reward_funcs": (format_only_reward,)},
     r"rewards \[length x 1\] -> \[format_only x 1\]"),
    ("environment", {"environment_factory": Counter},
     r"environment none -> test_data_safety.Counter"),
])
def test_resuming_with_other_inputs_is_refused_naming_the_change_and_the_override(
        random_tiny, checkpoint, change, kwargs, named):
    """Another training set, other rewards or an environment used to resume silently."""
    if kwargs.get("data") == "other":
        kwargs = {"data": other_rows()}
    elif kwargs.get("data") == "reordered":
        kwargs = {"data": random_tiny[2].select(range(63, -1, -1))}
    trainer = make_trainer(random_tiny, max_steps=2, **kwargs)
    with pytest.raises(ValueError, match=rf"other inputs \({named}\); resuming would silently "
                                         rf"mix two runs.*allow_changes=\('{change}',\)"):
        trainer.load_checkpoint(checkpoint)
    assert trainer.step == 0
    trainer.load_checkpoint(checkpoint, allow_changes=(change,))  # the explicit override
    assert trainer.step == 1


def test_the_override_goes_through_train_and_through_resume_from(random_tiny, checkpoint):
    config = preset("grpo", **{**SMALL, "max_steps": 2})
    model, tokenizer, _ = random_tiny
    result = train(config, model=copy.deepcopy(model), tokenizer=tokenizer,
                   train_dataset=other_rows(), reward_funcs=[length_reward],
                   resume_from=checkpoint, allow_changes="data")
    assert list(result.history["step"]) == [1, 2]
    with pytest.raises(ValueError, match="allow_changes"):
        make_trainer(random_tiny, data=other_rows(), max_steps=2, resume_from=str(checkpoint))


def test_the_same_data_in_another_container_resumes(random_tiny, checkpoint):
    rows = [dict(row) for row in random_tiny[2]]
    trainer = make_trainer(random_tiny, data=rows, max_steps=2)
    trainer.load_checkpoint(checkpoint)
    assert trainer.step == 1


@pytest.mark.parametrize(("value", "error", "message"), [
    (("everything",), ValueError,
     r"allow_changes names 'everything'; a resume may be allowed to change 'data', 'rewards'"),
    (("data", 3), ValueError, r"allow_changes names 3"),
    (3, TypeError, r"allow_changes must be a tuple of names .* got 3")])
def test_a_bad_allow_changes_is_refused_before_anything_loads(random_tiny, checkpoint, value,
                                                              error, message):
    trainer = make_trainer(random_tiny, max_steps=2)
    with pytest.raises(error, match=message):
        trainer.load_checkpoint(checkpoint, allow_changes=value)
    assert trainer.step == 0


def test_a_checkpoint_from_before_the_fingerprints_resumes_with_a_warning(random_tiny, trained,
                                                                          tmp_path):
    folder = trained.save_checkpoint(tmp_path / "checkpoint")
    state = torch.load(folder / STATE_FILE, weights_only=True)
    del state["fingerprints"]
    torch.save(state, folder / STATE_FILE)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest[STATE_FILE] = file_sha256(folder / STATE_FILE)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    trainer = make_trainer(random_tiny, max_steps=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.load_checkpoint(folder)
    assert trainer.step == 1
    assert any("holds no fingerprints" in str(w.message) for w in caught)


def test_the_fingerprints_record_what_the_run_trained_on(trained, checkpoint):
    saved = load_state(checkpoint)["fingerprints"]
    assert saved["data"]["rows"] == 64 and len(saved["data"]["sha256"]) == 64
    assert saved["rewards"] == {"names": ["length"], "weights": [1.0]}
    assert saved["environment"] is None
    assert qualified_name(Counter) == "test_data_safety.Counter"
