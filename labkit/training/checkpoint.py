"""Checkpoints of a training run: everything needed to continue it as if it had never stopped.

A checkpoint folder holds

==========================  ====================================================================
``model/``                  the policy and tokenizer, ``save_pretrained`` (loadable on its own
                            with :func:`labkit.models.load_policy`; LoRA runs save the adapter)
``value_model.pt``          PPO's critic (state dict), when there is one
``ref_model.pt``            the frozen reference (state dict), when there is a separate one: it is
                            the *initial* policy (or the last reset), which the saved policy is not
``trainer_state.pt``        optimizer, scheduler, RNG states (python, torch CPU, CUDA, the
                            sampling generator), the prompt order's position, the step counter,
                            the non-finite streak, the batches sampled ahead of the trainer and
                            the admission clock (:mod:`labkit.offpolicy`) and the configuration
``history.parquet``         the metrics rows so far (parquet keeps floats bit for bit)
``eval_history.parquet``    the evaluation rows so far
``manifest.json``           the SHA-256 of every file above, checked when the folder is loaded;
                            written last, it is also what marks the folder as the lab's
==========================  ====================================================================

Safety, since a checkpoint is the thing a crash must not take away:

* **No code runs on load.** Every ``.pt`` file is read with ``torch.load(weights_only=True)``,
  which only rebuilds tensors and plain Python containers; a crafted file cannot execute anything.
* **Atomic saves.** A checkpoint is written into a temporary folder beside its destination and
  renamed into place only when complete (an older checkpoint of the same name is moved aside
  first and deleted last), so a kill or a second Ctrl-C mid-save leaves the previous checkpoint
  readable.
* **Only the lab's files are deleted.** A save replaces an existing folder only when it is a
  labkit checkpoint holding nothing but the files its manifest lists (how ``save_every`` and an
  interrupt's save overwrite ``checkpoint-<step>``); a file, or a folder holding anything else
  (a learner's notes and plots, a symlink), is refused with :class:`FileExistsError` naming what
  it holds. The temporary folder is hidden and named after the destination,
  ``.<name>.labkit-save-<random>``, and carries a marker file; only folders with that marker are
  ever deleted, so a ``<name>.old`` or ``<name>.partial`` of the learner's is never touched.
  A save clears the marked leftovers of an earlier, killed save to the same folder (two runs
  must not save to one folder at the same time).
* **The same inputs.** The state records fingerprints of what the run trained on
  (:func:`run_fingerprints`: the training data's size and a hash of its ids and prompts, the
  reward functions' names and weights, the environment factory's qualified name); resuming with
  other ones is refused by name unless the resume allows that change (``allow_changes``).
* **Checked loads.** A flipped byte, a missing or a truncated file gives an error that names the
  checkpoint and the file, not a raw library traceback; so do weights that do not fit the model,
  a weight file added after saving (only the manifest's files are read) and a manifest entry
  outside the folder.
* **The same base.** A LoRA checkpoint holds the adapters only; the SHA-256 of each frozen base
  weight is saved with them, and resuming on another base model is refused.

On CPU, resuming from a checkpoint reproduces the uninterrupted run's metrics exactly.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import hashlib
import json
import math
import os
import shutil
import tempfile
import warnings
import weakref
from pathlib import Path

import pandas as pd
import torch

from labkit.models import quietly
from labkit.runtime.hashing import file_sha256

STATE_FILE = "trainer_state.pt"
MANIFEST_FILE = "manifest.json"
#: The file that marks a save's temporary folder as the lab's (the only folders a save deletes).
TEMPORARY_MARKER = ".labkit-temporary"
_TEMPORARY_INFIX = ".labkit-save-"


class CheckpointError(RuntimeError):
    """A checkpoint folder that cannot be loaded: corrupt, incomplete or from another run."""


def save_checkpoint(directory, *, model, tokenizer, state: dict, history: pd.DataFrame,
                    eval_history: pd.DataFrame, value_model=None, ref_model=None) -> Path:
    """Write a checkpoint folder (see the module docstring) atomically; return its path.

    ``directory`` may be new, empty, or an earlier checkpoint of the lab that holds only its own
    files; anything else raises :class:`FileExistsError` before a byte is written.
    """
    directory = Path(directory)
    # a symlinked folder is written where it points, so the link stays a link
    target = directory.resolve() if directory.is_symlink() else directory
    check_replaceable(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(target)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}{_TEMPORARY_INFIX}", dir=target.parent))
    try:
        (work / TEMPORARY_MARKER).write_text("a labkit checkpoint being saved; safe to delete\n")
        partial = work / "new"
        partial.mkdir()
        quietly(model.save_pretrained, partial / "model")  # no progress bar per checkpoint
        tokenizer.save_pretrained(partial / "model")
        if value_model is not None:
            torch.save(value_model.state_dict(), partial / "value_model.pt")
        if ref_model is not None:
            torch.save(ref_model.state_dict(), partial / "ref_model.pt")
        torch.save(state, partial / STATE_FILE)
        history.to_parquet(partial / "history.parquet")
        eval_history.to_parquet(partial / "eval_history.parquet")
        manifest = {path.relative_to(partial).as_posix(): file_sha256(path)
                    for path in sorted(partial.rglob("*")) if path.is_file()}
        (partial / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1) + "\n")
        _replace_folder(partial, target, work / "old")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return directory


def check_replaceable(folder: Path) -> None:
    """Raise :class:`FileExistsError` unless a save may put a checkpoint at ``folder``: it does
    not exist, is an empty folder, or is a labkit checkpoint holding only the files its manifest
    lists. The lab never deletes a file it did not write."""
    folder = Path(folder)
    if not folder.exists():
        return
    if not folder.is_dir():
        raise FileExistsError(f"{folder} is a file, not a checkpoint folder; the lab never "
                              f"overwrites a file it did not write: save the checkpoint to "
                              f"another path")
    is_checkpoint, foreign = _foreign_entries(folder)
    if not foreign:
        return
    shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
    if is_checkpoint:
        raise FileExistsError(f"{folder} is a labkit checkpoint, but it also holds {shown}, which "
                              f"the lab did not write (not in its {MANIFEST_FILE}); saving over "
                              f"it would delete them. Move them out of the folder, or save to "
                              f"another one")
    raise FileExistsError(f"{folder} is not empty and is not a labkit checkpoint (it holds "
                          f"{shown}); the lab never deletes files it did not write: save the "
                          f"checkpoint to a new or empty folder, e.g. {folder / 'checkpoint'}")


def _foreign_entries(folder: Path) -> tuple[bool, list[str]]:
    """``(is a labkit checkpoint, what in it the lab did not write)``. A checkpoint is a folder
    whose manifest lists the trainer state; its own entries are the manifest, the files it lists
    and their folders. Symlinks are never the lab's (a save writes none)."""
    manifest = _read_manifest(folder)
    if manifest is None or STATE_FILE not in manifest:
        return False, sorted(p.name for p in folder.iterdir())
    own = set(manifest) | {MANIFEST_FILE}
    own_folders = {parent.as_posix() for name in manifest for parent in Path(name).parents}
    foreign = []
    for root, folders, files in os.walk(folder):
        for name in folders + files:
            path = Path(root, name)
            relative = path.relative_to(folder).as_posix()
            if path.is_symlink() or relative not in (own_folders if name in folders else own):
                foreign.append(relative + ("/" if name in folders else ""))
        folders[:] = [f for f in folders if not Path(root, f).is_symlink()]
    return True, sorted(foreign)


def _read_manifest(folder: Path) -> dict | None:
    """The manifest as ``{name: digest}``, or None when it is missing or is not one."""
    try:
        manifest = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # missing, unreadable, not UTF-8 or not JSON
        return None
    if not isinstance(manifest, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in manifest.items()):
        return None
    return manifest


def _remove_stale_temporaries(target: Path) -> None:
    """Delete the temporary folders a killed save to ``target`` left beside it; only those that
    carry the lab's marker."""
    pattern = f".{glob.escape(target.name)}{_TEMPORARY_INFIX}*"
    for path in target.parent.glob(pattern):
        if not path.is_symlink() and (path / TEMPORARY_MARKER).is_file():
            shutil.rmtree(path, ignore_errors=True)


def _replace_folder(source: Path, destination: Path, aside: Path) -> None:
    """Move ``source`` to ``destination``. An existing destination (checked again: still the
    lab's) is first moved to ``aside``, inside the save's temporary folder, which the caller
    deletes; ``os.replace`` cannot overwrite a non-empty folder on every platform. If the second
    move fails, the previous checkpoint goes back."""
    if destination.exists():
        check_replaceable(destination)
        os.replace(destination, aside)
    try:
        os.replace(source, destination)
    except BaseException:
        if aside.exists() and not destination.exists():
            os.replace(aside, destination)
        raise


def verify_checkpoint(directory) -> None:
    """Check every file of a checkpoint folder against its manifest; raise
    :class:`CheckpointError` naming the first file that is missing or differs."""
    directory = Path(directory)
    manifest_path = directory / MANIFEST_FILE
    if not (directory / STATE_FILE).exists() and not manifest_path.exists():
        raise FileNotFoundError(f"{directory} is not a labkit checkpoint (no {STATE_FILE})")
    if not manifest_path.exists():
        raise CheckpointError(f"checkpoint {directory} has no {MANIFEST_FILE}: it was not "
                              f"written completely (or by an older labkit); use an earlier one")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"checkpoint {directory}: {MANIFEST_FILE} is corrupt "
                              f"({error})") from error
    if not isinstance(manifest, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in manifest.items()):
        raise CheckpointError(f"checkpoint {directory}: {MANIFEST_FILE} must map file names to "
                              f"SHA-256 digests, got a {type(manifest).__name__}")
    for name, expected in manifest.items():
        parts = Path(name).parts
        if not parts or Path(name).is_absolute() or ".." in parts or "\\" in name:
            raise CheckpointError(f"checkpoint {directory}: {MANIFEST_FILE} lists {name!r}, "
                                  f"which is not a file inside the checkpoint")
        path = directory / name
        if not path.is_file():
            raise CheckpointError(f"checkpoint {directory}: {name} is missing")
        if file_sha256(path) != expected:
            raise CheckpointError(f"checkpoint {directory}: {name} does not match its checksum "
                                  f"(the file was changed or damaged after saving)")


def load_state(directory) -> dict:
    """The verified trainer state of a checkpoint (tensors on the CPU), without touching any
    model: read it to compare a checkpoint's configuration before loading weights."""
    directory = Path(directory)
    verify_checkpoint(directory)
    return _torch_load(directory / STATE_FILE, directory)


def load_checkpoint(directory, *, model, value_model=None, ref_model=None, verify: bool = True):
    """Verify a checkpoint (skip with ``verify=False`` right after :func:`load_state`) and load
    its weights into the given modules (in place).

    Returns ``(state, history, eval_history)``: the trainer state dict of
    :func:`save_checkpoint` (tensors on the CPU) and the two metric tables.
    """
    directory = Path(directory)
    if verify:
        verify_checkpoint(directory)
    state = _torch_load(directory / STATE_FILE, directory)
    _load_pretrained_weights(model, directory / "model", directory)
    for module, name in ((value_model, "value_model.pt"), (ref_model, "ref_model.pt")):
        if module is None:
            continue
        if not (directory / name).exists():
            raise CheckpointError(f"{directory / name} is missing: the checkpoint was saved by "
                                  f"a run without this model (another advantage_estimator or "
                                  f"beta)")
        try:
            module.load_state_dict(_torch_load(directory / name, directory))
        except RuntimeError as error:
            raise CheckpointError(f"checkpoint {directory}: {name} does not fit this run's "
                                  f"model ({error})") from error
    try:
        history = pd.read_parquet(directory / "history.parquet")
        eval_history = pd.read_parquet(directory / "eval_history.parquet")
    except Exception as error:  # pyarrow raises several types for a damaged file
        raise CheckpointError(f"checkpoint {directory}: cannot read its history "
                              f"({type(error).__name__}: {error})") from error
    return state, history, eval_history


def _torch_load(path: Path, directory: Path):
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # UnpicklingError, RuntimeError, EOFError...
        raise CheckpointError(f"checkpoint {directory}: cannot load {path.name} as plain tensors "
                              f"and containers ({type(error).__name__}: {error}); labkit never "
                              f"loads pickled code from a checkpoint") from error


def _load_pretrained_weights(model, folder: Path, directory: Path) -> None:
    """Copy the ``save_pretrained`` safetensors of ``folder`` into ``model``.

    Only the weight files the checkpoint's manifest lists are read: a ``.safetensors`` file put
    beside them later is refused by name, not loaded over the saved weights. Tied weights (the
    LM head of a model with tied embeddings) are not stored twice; they are accepted as missing
    as long as they share storage with a loaded parameter. A LoRA model (``peft``) loads its
    adapter weights only. A file that cannot be read or does not fit the model names itself.
    """
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"checkpoint {directory}: no safetensors weights in {folder.name}/")
    listed = _read_manifest(directory)  # verified before, or verify=False by choice
    unlisted = [f.name for f in files if listed is not None
                and f.relative_to(directory).as_posix() not in listed]
    if unlisted:
        raise CheckpointError(f"checkpoint {directory}: {folder.name}/{unlisted[0]} is not in "
                              f"its manifest ({MANIFEST_FILE}): it was added after saving; move "
                              f"it out of the checkpoint")
    state = {}
    for file in files:
        try:
            state.update(load_file(file))
        except Exception as error:  # safetensors raises its own error types
            raise CheckpointError(f"checkpoint {directory}: cannot read {folder.name}/{file.name} "
                                  f"({type(error).__name__}: {error})") from error
    names = ", ".join(f"{folder.name}/{f.name}" for f in files)
    try:
        _copy_weights(model, state, directory, names)
    except RuntimeError as error:  # a size mismatch: another architecture
        first = str(error).strip().splitlines()
        raise CheckpointError(f"checkpoint {directory}: {names} do not fit this run's model "
                              f"({' '.join(first[:2])[:300]})") from error


def _copy_weights(model, state: dict, directory: Path, names: str) -> None:
    if hasattr(model, "peft_config"):
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(model, state)
        if result.unexpected_keys:
            raise CheckpointError(f"checkpoint {directory}: {names} do not match the model's "
                                  f"adapters: unexpected {result.unexpected_keys[:5]}")
        return
    missing, unexpected = model.load_state_dict(state, strict=False)
    current = model.state_dict()
    loaded = {current[name].data_ptr() for name in state if name in current}
    untied = [name for name in missing if current[name].data_ptr() not in loaded]
    if untied or unexpected:
        raise CheckpointError(f"checkpoint {directory}: {names} do not match the model: "
                              f"missing {untied[:5]}, unexpected {unexpected[:5]}")


def base_fingerprint(model) -> dict[str, str] | None:
    """SHA-256 of every frozen weight of a LoRA model (its base; None for any other model),
    by name. A LoRA checkpoint saves the adapters only, so the base they were trained on is
    recorded this way and checked on resume. Computed once per model: the base never trains."""
    if not hasattr(model, "peft_config"):
        return None
    if model not in _FINGERPRINTS:
        _FINGERPRINTS[model] = {
            name: hashlib.sha256(p.detach().to("cpu").contiguous().reshape(-1)
                                 .view(torch.uint8).numpy().tobytes()).hexdigest()
            for name, p in model.named_parameters() if not p.requires_grad}
    return _FINGERPRINTS[model]


_FINGERPRINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def check_same_base(saved: dict | None, model, directory) -> None:
    """Refuse to resume LoRA adapters on a base model other than the one they were trained on."""
    current = base_fingerprint(model)
    if saved is None or current is None:
        return  # not a LoRA run, or a checkpoint from before the fingerprint
    changed = sorted(name for name in set(saved) | set(current)
                     if saved.get(name) != current.get(name))
    if changed:
        raise CheckpointError(f"checkpoint {directory}: its LoRA adapters were trained on another "
                              f"base model ({len(changed)} frozen weight(s) differ, e.g. "
                              f"{changed[0]}); resume with the base model the run started from")


def resumable_changes(config) -> frozenset[str]:
    """The fields of ``config`` that may differ between a checkpoint and the run resuming it
    (they do not change what the run computes): those declared ``resumable=True``
    (:func:`labkit.config.knobs.knob`; the set is :data:`labkit.config.RESUMABLE_CHANGES`)."""
    return frozenset(f.name for f in dataclasses.fields(config) if f.metadata.get("resumable"))


def check_same_run(saved: dict, config, directory) -> None:
    """Refuse to resume a checkpoint whose run had another configuration (``saved``, the
    checkpoint's ``config`` dict) in any field outside :func:`resumable_changes`: resuming would
    silently mix two runs."""
    current = config.to_dict()
    resumable = resumable_changes(config)
    # a field added to TrainConfig after the checkpoint was written ran at its default then
    defaults = type(config)().to_dict()
    changed = sorted(name for name in set(saved) | set(current)
                     if name not in resumable
                     and _as_tuple(saved.get(name, defaults.get(name)))
                     != _as_tuple(current.get(name)))
    if changed:
        details = ", ".join(f"{n}: {saved.get(n)!r} -> {current.get(n)!r}" for n in changed[:6])
        raise ValueError(f"checkpoint {directory} was saved by a run with another configuration "
                         f"({details}); resuming would silently mix two runs. Resume with the "
                         f"saved configuration (labkit.training.checkpoint.load_state(path)['config']) or "
                         f"start a new run")


def _as_tuple(value):
    # a list read back from the saved state equals the config's tuple
    return tuple(value) if isinstance(value, list) else value


#: What a resume may be allowed to change, by name (``allow_changes``): the inputs of the run
#: that its configuration does not hold, fingerprinted by :func:`run_fingerprints`.
INPUT_CHANGES = ("data", "rewards", "environment")


def run_fingerprints(train_dataset, reward_names, reward_weights, environment_factory) -> dict:
    """What a run trains on, in a form a checkpoint can store and compare:

    * ``data``: the training set's row count and the SHA-256 of its rows' ``id`` (where the
      column exists) and ``prompt``, in order (the prompt order's position is an index into
      this order);
    * ``rewards``: the reward functions' names (as the history's ``reward_<name>`` columns) and
      weights (all 1.0 when ``reward_weights`` is None);
    * ``environment``: the environment factory's qualified name, or None without episodes.

    Names, not code: a reward function edited under the same name passes, as TRL's checkpoints
    would let it.
    """
    names = list(reward_names)
    return {"data": data_fingerprint(train_dataset),
            "rewards": {"names": names, "weights": [float(w) for w in reward_weights]
                        if reward_weights is not None else [1.0] * len(names)},
            "environment": qualified_name(environment_factory)}


def data_fingerprint(dataset) -> dict:
    """``{"rows": n, "sha256": hex}`` of a prompt dataset's ``id`` and ``prompt`` columns.
    Computed once per dataset (a ``datasets.Dataset`` does not change; 0.2 s for the task
    suite's 2,000 rows, which every save would otherwise pay again)."""
    if dataset not in _DATA_FINGERPRINTS:
        ids = dataset["id"] if "id" in dataset.column_names else [None] * len(dataset)
        digest = hashlib.sha256()
        for row_id, prompt in zip(ids, dataset["prompt"]):
            digest.update(json.dumps([row_id, prompt], sort_keys=True, ensure_ascii=False,
                                     default=str).encode("utf-8") + b"\n")
        _DATA_FINGERPRINTS[dataset] = {"rows": len(dataset), "sha256": digest.hexdigest()}
    return dict(_DATA_FINGERPRINTS[dataset])


_DATA_FINGERPRINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def qualified_name(factory) -> str | None:
    """``module.QualifiedName`` of a callable (the wrapped function of a ``functools.partial``,
    the class of a callable instance); None for None."""
    if factory is None:
        return None
    target = factory.func if isinstance(factory, functools.partial) else factory
    if not hasattr(target, "__qualname__"):
        target = type(target)
    return f"{getattr(target, '__module__', None) or '?'}.{target.__qualname__}"


def allowed_changes(allow_changes) -> frozenset:
    """Check ``allow_changes`` (a name of :data:`INPUT_CHANGES`, or a tuple of them)."""
    names = (allow_changes,) if isinstance(allow_changes, str) else allow_changes
    allowed = ", ".join(map(repr, INPUT_CHANGES))
    try:
        names = tuple(names)
    except TypeError:
        raise TypeError(f"allow_changes must be a tuple of names from {allowed}, got "
                        f"{allow_changes!r}") from None
    unknown = [n for n in names if not isinstance(n, str) or n not in INPUT_CHANGES]
    if unknown:
        raise ValueError(f"allow_changes names {unknown[0]!r}; a resume may be allowed to change "
                         f"{allowed} (the configuration is compared field by field instead: "
                         f"labkit.config.RESUMABLE_CHANGES)")
    return frozenset(names)


def check_same_inputs(saved: dict | None, current: dict, directory, allow=frozenset()) -> None:
    """Refuse to resume a checkpoint whose run had other inputs (:func:`run_fingerprints`),
    except the changes ``allow`` names. A checkpoint from before the fingerprints resumes with
    a warning that nothing was compared."""
    if saved is None:
        warnings.warn(f"checkpoint {directory} holds no fingerprints of its training data, "
                      f"rewards and environment (saved by an older labkit): this resume cannot "
                      f"check that they are the ones this run uses", UserWarning, stacklevel=3)
        return
    changed = [name for name in INPUT_CHANGES
               if name in saved and name not in allow and saved[name] != current[name]]
    if not changed:
        return
    details = "; ".join(f"{name} {_describe(name, saved[name])} -> "
                        f"{_describe(name, current[name])}" for name in changed)
    example = "(" + ", ".join(map(repr, changed)) + ",)"
    raise ValueError(f"checkpoint {directory} was saved by a run with other inputs ({details}); "
                     f"resuming would silently mix two runs. Resume with the run's own "
                     f"{', '.join(changed)}, or, to continue on purpose with the change, pass "
                     f"allow_changes={example} to Trainer.load_checkpoint(path, ...) or to "
                     f"train(..., resume_from=path, ...)")


def _describe(name: str, value) -> str:
    if name == "data":
        return f"{value['rows']} rows, sha256 {value['sha256'][:12]}"
    if name == "rewards":
        return "[" + ", ".join(f"{n} x {w:g}" for n, w in zip(value["names"],
                                                             value["weights"])) + "]"
    return "none" if value is None else value


__all__ = ["INPUT_CHANGES", "CheckpointError", "allowed_changes",
           "base_fingerprint", "check_replaceable", "check_same_base", "check_same_inputs",
           "check_same_run", "data_fingerprint", "load_checkpoint", "load_state",
           "qualified_name", "resumable_changes", "run_fingerprints", "save_checkpoint", "verify_checkpoint"]


def save_trainer(trainer, directory) -> Path:
    """Save everything a :class:`labkit.trainer.Trainer` needs to resume, atomically. It takes the
    whole trainer on purpose: a checkpoint is the trainer's whole state (models, optimizer,
    counters, histories), and every piece of it read here is one a resume must restore."""
    from labkit.training.run_control import capture_rng

    state = {"step": trainer.step, "optimizer": trainer.optimizer.state_dict(),
             "scheduler": trainer.scheduler.state_dict(), "rng": capture_rng(trainer.generator),
             "prompt_order": trainer.prompt_order.state_dict(),
             "nonfinite_streak": trainer.nonfinite_streak,
             "gfpo_mean_rewards": (list(trainer.adaptive_gfpo.mean_rewards)
                                   if trainer.adaptive_gfpo else []),
             "optimizer_steps": trainer.optimizer_steps,
             "best_eval": [trainer.stall.best, trainer.stall.since_best],
             "base_fingerprint": base_fingerprint(trainer.model),
             "fingerprints": _fingerprints_of(trainer),
             # the batches sampled ahead (max_staleness > 0) and the admission clock; None
             # for the synchronous trainer, which has no producer
             "producer": (trainer.producer.state_dict() if trainer.producer is not None
                          else None),
             "config": trainer.config.to_dict()}
    return save_checkpoint(directory, model=trainer.model, tokenizer=trainer.tokenizer,
                           state=state, history=trainer.history,
                           eval_history=trainer.eval_history, value_model=trainer.value_model,
                           ref_model=trainer.ref_model)


def restore_trainer(trainer, directory, allow_changes=()) -> None:
    """Restore a :func:`save_trainer` folder into ``trainer`` (weights, optimizer, scheduler,
    random states, data position, history); refuses a checkpoint whose run had a different
    configuration in any field outside :data:`labkit.config.RESUMABLE_CHANGES`, or other inputs
    (:func:`run_fingerprints`) than the ones ``allow_changes`` names. Like :func:`save_trainer`
    it takes the whole trainer: it writes back every piece of state that one saved."""
    from labkit.training.run_control import restore_rng

    allow = allowed_changes(allow_changes)
    saved = load_state(directory)
    check_same_run(saved.get("config", {}), trainer.config, directory)
    check_same_base(saved.get("base_fingerprint"), trainer.model, directory)
    check_same_inputs(saved.get("fingerprints"), _fingerprints_of(trainer), directory, allow)
    state, history, eval_history = load_checkpoint(
        directory, model=trainer.model, value_model=trainer.value_model,
        ref_model=trainer.ref_model, verify=False)
    trainer.optimizer.load_state_dict(state["optimizer"])
    trainer.scheduler.load_state_dict(state["scheduler"])
    restore_rng(state["rng"], trainer.generator)
    # "sampler": the key's name in checkpoints written before the prompt order was renamed
    trainer.prompt_order.load_state_dict(state["prompt_order" if "prompt_order" in state
                                               else "sampler"])
    trainer.step = state["step"]
    trainer.nonfinite_streak = state["nonfinite_streak"]
    if trainer.adaptive_gfpo is not None:
        trainer.adaptive_gfpo.mean_rewards = list(state.get("gfpo_mean_rewards", []))
    trainer.optimizer_steps = state.get("optimizer_steps", 0)
    trainer.stall.best, trainer.stall.since_best = state.get("best_eval", [-math.inf, 0])
    # None: an overlapped run, never saved; no producer: a synchronous run (whose older
    # checkpoints hold the k = 0 queue, always empty between steps)
    if state.get("producer") is not None and trainer.producer is not None:
        trainer.producer.load_state_dict(state["producer"])
    trainer.rows = history.to_dict("records")
    trainer.eval_rows = eval_history.to_dict("records")


def _fingerprints_of(trainer) -> dict:
    return run_fingerprints(trainer.train_dataset, trainer.reward_names,
                            trainer.config.reward_weights, trainer.environment_factory)
