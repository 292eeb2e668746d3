"""Checkpoints of a training run: everything needed to continue it as if it had never stopped.

A checkpoint folder holds

==========================  ====================================================================
``model/``                  the policy and tokenizer, ``save_pretrained`` (loadable on its own
                            with :func:`labkit.models.load_policy`; LoRA runs save the adapter)
``value_model.pt``          PPO's critic (state dict), when there is one
``ref_model.pt``            the frozen reference (state dict), when there is a separate one: it is
                            the *initial* policy (or the last reset), which the saved policy is not
``trainer_state.pt``        optimizer, scheduler, RNG states (python, torch CPU, CUDA, the
                            sampling generator), the prompt sampler's position, the step counter,
                            the non-finite streak and the configuration
``history.parquet``         the metrics rows so far (parquet keeps floats bit for bit)
``eval_history.parquet``    the evaluation rows so far
``manifest.json``           the SHA-256 of every file above, checked when the folder is loaded
==========================  ====================================================================

Safety, since a checkpoint is the thing a crash must not take away:

* **No code runs on load.** Every ``.pt`` file is read with ``torch.load(weights_only=True)``,
  which only rebuilds tensors and plain Python containers; a crafted file cannot execute anything.
* **Atomic saves.** A checkpoint is written to a ``<name>.partial`` folder beside its destination
  and renamed into place only when complete (an older folder of the same name is moved aside
  first and deleted last), so a kill or a second Ctrl-C mid-save leaves the previous checkpoint
  readable.
* **Checked loads.** A flipped byte, a missing or a truncated file gives an error that names the
  checkpoint and the file, not a raw library traceback.

On CPU, resuming from a checkpoint reproduces the uninterrupted run's metrics exactly.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from pathlib import Path

import pandas as pd
import torch

from labkit.models import quietly

STATE_FILE = "trainer_state.pt"
MANIFEST_FILE = "manifest.json"


class CheckpointError(RuntimeError):
    """A checkpoint folder that cannot be loaded: corrupt, incomplete or from another run."""


def save_checkpoint(directory, *, model, tokenizer, state: dict, history: pd.DataFrame,
                    eval_history: pd.DataFrame, value_model=None, ref_model=None) -> Path:
    """Write a checkpoint folder (see the module docstring) atomically; return its path."""
    directory = Path(directory)
    partial = directory.with_name(directory.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    quietly(model.save_pretrained, partial / "model")  # no progress bar per checkpoint
    tokenizer.save_pretrained(partial / "model")
    if value_model is not None:
        torch.save(value_model.state_dict(), partial / "value_model.pt")
    if ref_model is not None:
        torch.save(ref_model.state_dict(), partial / "ref_model.pt")
    torch.save(state, partial / STATE_FILE)
    history.to_parquet(partial / "history.parquet")
    eval_history.to_parquet(partial / "eval_history.parquet")
    manifest = {path.relative_to(partial).as_posix(): _sha256(path)
                for path in sorted(partial.rglob("*")) if path.is_file()}
    (partial / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1) + "\n")
    _replace_folder(partial, directory)
    return directory


def _replace_folder(source: Path, destination: Path) -> None:
    """Move ``source`` to ``destination``; an existing destination is moved aside first and
    deleted only once the new folder is in place (``os.replace`` cannot overwrite a non-empty
    folder on every platform)."""
    old = destination.with_name(destination.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if destination.exists():
        os.replace(destination, old)
    os.replace(source, destination)
    if old.exists():
        shutil.rmtree(old, ignore_errors=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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
    for name, expected in manifest.items():
        path = directory / name
        if not path.is_file():
            raise CheckpointError(f"checkpoint {directory}: {name} is missing")
        if _sha256(path) != expected:
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

    Tied weights (the LM head of a model with tied embeddings) are not stored twice; they are
    accepted as missing as long as they share storage with a loaded parameter. A LoRA model
    (``peft``) loads its adapter weights only.
    """
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"checkpoint {directory}: no safetensors weights in {folder.name}/")
    state = {}
    try:
        for file in files:
            state.update(load_file(file))
    except Exception as error:
        raise CheckpointError(f"checkpoint {directory}: cannot read {folder.name}/ weights "
                              f"({type(error).__name__}: {error})") from error
    if hasattr(model, "peft_config"):
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(model, state)
        if result.unexpected_keys:
            raise CheckpointError(f"checkpoint {directory}: adapter weights do not match the "
                                  f"model: unexpected {result.unexpected_keys[:5]}")
        return
    missing, unexpected = model.load_state_dict(state, strict=False)
    current = model.state_dict()
    loaded = {current[name].data_ptr() for name in state if name in current}
    untied = [name for name in missing if current[name].data_ptr() not in loaded]
    if untied or unexpected:
        raise CheckpointError(f"checkpoint {directory}: weights do not match the model: "
                              f"missing {untied[:5]}, unexpected {unexpected[:5]}")


#: Fields that may differ between a checkpoint and the run resuming it (they do not change what
#: the run computes); any other difference is refused by :func:`check_same_run`.
RESUMABLE_CHANGES = frozenset({
    "max_steps", "eval_every", "eval_k", "eval_max_prompts", "output_dir", "save_every",
    "save_on_interrupt", "resume_from", "progress", "max_nonfinite_steps", "device",
    "micro_batch_size", "gradient_checkpointing", "rollback_nonfinite_weights"})


def check_same_run(saved: dict, config, directory) -> None:
    """Refuse to resume a checkpoint whose run had another configuration (``saved``, the
    checkpoint's ``config`` dict) in any field outside :data:`RESUMABLE_CHANGES`: resuming would
    silently mix two runs."""
    current = config.to_dict()
    changed = sorted(name for name in set(saved) | set(current)
                     if name not in RESUMABLE_CHANGES
                     and _as_tuple(saved.get(name)) != _as_tuple(current.get(name)))
    if changed:
        details = ", ".join(f"{n}: {saved.get(n)!r} -> {current.get(n)!r}" for n in changed[:6])
        raise ValueError(f"checkpoint {directory} was saved by a run with another configuration "
                         f"({details}); resuming would silently mix two runs. Resume with the "
                         f"saved configuration (labkit.engine.checkpoint.load_state(path)['config']) or "
                         f"start a new run")


def _as_tuple(value):
    # a list read back from the saved state equals the config's tuple
    return tuple(value) if isinstance(value, list) else value


__all__ = ["RESUMABLE_CHANGES", "CheckpointError", "check_same_run", "load_checkpoint",
           "load_state", "save_checkpoint", "verify_checkpoint"]


def save_trainer(trainer, directory) -> Path:
    """Save everything a :class:`labkit.trainer.Trainer` needs to resume, atomically."""
    from labkit.engine.run_control import capture_rng

    state = {"step": trainer.step, "optimizer": trainer.optimizer.state_dict(),
             "scheduler": trainer.scheduler.state_dict(), "rng": capture_rng(trainer.generator),
             "sampler": trainer.sampler.state_dict(),
             "nonfinite_streak": trainer.nonfinite_streak,
             "gfpo_mean_rewards": (list(trainer.adaptive_gfpo.mean_rewards)
                                   if trainer.adaptive_gfpo else []),
             "optimizer_steps": trainer.optimizer_steps,
             "best_eval": [trainer.stall.best, trainer.stall.since_best],
             "config": trainer.config.to_dict()}
    return save_checkpoint(directory, model=trainer.model, tokenizer=trainer.tokenizer,
                           state=state, history=trainer.history,
                           eval_history=trainer.eval_history, value_model=trainer.value_model,
                           ref_model=trainer.ref_model)


def restore_trainer(trainer, directory) -> None:
    """Restore a :func:`save_trainer` folder into ``trainer`` (weights, optimizer, scheduler,
    random states, data position, history); refuses a checkpoint whose run had a different
    configuration in any field outside :data:`RESUMABLE_CHANGES`."""
    from labkit.engine.run_control import restore_rng

    check_same_run(load_state(directory).get("config", {}), trainer.config, directory)
    state, history, eval_history = load_checkpoint(
        directory, model=trainer.model, value_model=trainer.value_model,
        ref_model=trainer.ref_model, verify=False)
    trainer.optimizer.load_state_dict(state["optimizer"])
    trainer.scheduler.load_state_dict(state["scheduler"])
    restore_rng(state["rng"], trainer.generator)
    trainer.sampler.load_state_dict(state["sampler"])
    trainer.step = state["step"]
    trainer.nonfinite_streak = state["nonfinite_streak"]
    if trainer.adaptive_gfpo is not None:
        trainer.adaptive_gfpo.mean_rewards = list(state.get("gfpo_mean_rewards", []))
    trainer.optimizer_steps = state.get("optimizer_steps", 0)
    trainer.stall.best, trainer.stall.since_best = state.get("best_eval", [-math.inf, 0])
    trainer.rows = history.to_dict("records")
    trainer.eval_rows = eval_history.to_dict("records")
