"""Checkpoints of a training run: everything needed to continue it as if it had never stopped.

A checkpoint folder holds

==========================  ====================================================================
``model/``                  the policy and tokenizer, ``save_pretrained`` (loadable on its own
                            with :func:`labkit.models.load_policy`)
``value_model.pt``          PPO's critic (state dict), when there is one
``ref_model.pt``            the frozen reference (state dict), when ``beta != 0``: it is the
                            *initial* policy, which the saved policy no longer is
``trainer_state.pt``        optimizer, scheduler, RNG states (python, torch CPU, CUDA, the
                            sampling generator), the prompt sampler's position, the step counter,
                            the non-finite streak and the configuration
``history.parquet``         the metrics rows so far (parquet keeps floats bit for bit)
``eval_history.parquet``    the evaluation rows so far
==========================  ====================================================================

On CPU, resuming from a checkpoint reproduces the uninterrupted run's metrics exactly.
"""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd
import torch

STATE_FILE = "trainer_state.pt"


def capture_rng(generator: torch.Generator) -> dict:
    """The state of every random number generator a step draws from."""
    state = {"python": random.getstate(), "torch": torch.get_rng_state(),
             "generator": generator.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict, generator: torch.Generator) -> None:
    """Put back the states saved by :func:`capture_rng`."""
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    generator.set_state(state["generator"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(directory, *, model, tokenizer, state: dict, history: pd.DataFrame,
                    eval_history: pd.DataFrame, value_model=None, ref_model=None) -> Path:
    """Write a checkpoint folder (see the module docstring) and return its path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory / "model")
    tokenizer.save_pretrained(directory / "model")
    if value_model is not None:
        torch.save(value_model.state_dict(), directory / "value_model.pt")
    if ref_model is not None:
        torch.save(ref_model.state_dict(), directory / "ref_model.pt")
    torch.save(state, directory / STATE_FILE)
    history.to_parquet(directory / "history.parquet")
    eval_history.to_parquet(directory / "eval_history.parquet")
    return directory


def load_checkpoint(directory, *, model, value_model=None, ref_model=None):
    """Load the weights of a checkpoint into the given modules (in place).

    Returns ``(state, history, eval_history)``: the trainer state dict of
    :func:`save_checkpoint` (tensors on the CPU) and the two metric tables.
    """
    directory = Path(directory)
    if not (directory / STATE_FILE).exists():
        raise FileNotFoundError(f"{directory} is not a labkit checkpoint (no {STATE_FILE})")
    _load_pretrained_weights(model, directory / "model")
    for module, name in ((value_model, "value_model.pt"), (ref_model, "ref_model.pt")):
        if module is None:
            continue
        if not (directory / name).exists():
            raise FileNotFoundError(f"{directory / name} is missing: the checkpoint was saved by "
                                    f"a run without this model (another advantage_estimator or "
                                    f"beta)")
        module.load_state_dict(torch.load(directory / name, map_location="cpu", weights_only=True))
    state = torch.load(directory / STATE_FILE, map_location="cpu", weights_only=False)
    history = pd.read_parquet(directory / "history.parquet")
    eval_history = pd.read_parquet(directory / "eval_history.parquet")
    return state, history, eval_history


def _load_pretrained_weights(model, folder: Path) -> None:
    """Copy the ``save_pretrained`` safetensors of ``folder`` into ``model``.

    Tied weights (the LM head of a model with tied embeddings) are not stored twice; they are
    accepted as missing as long as they share storage with a loaded parameter.
    """
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no safetensors weights in {folder}")
    state = {}
    for file in files:
        state.update(load_file(file))
    missing, unexpected = model.load_state_dict(state, strict=False)
    current = model.state_dict()
    loaded = {current[name].data_ptr() for name in state if name in current}
    untied = [name for name in missing if current[name].data_ptr() not in loaded]
    if untied or unexpected:
        raise RuntimeError(f"checkpoint weights do not match the model: missing {untied}, "
                           f"unexpected {unexpected}")
