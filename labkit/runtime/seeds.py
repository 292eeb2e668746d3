"""The same notebook under other seeds: ``LABKIT_SEED_OFFSET`` shifts every training run's seed.

A live run's result is one draw: another seed, or another CPU whose float32 kernels round a last
bit differently, takes another trajectory within a few steps. To measure how far a notebook's
run outcomes spread (``python -m labkit bands``), the lab executes each notebook again with
every training seed shifted by an offset, without editing the notebook: the variable reaches the
seed of :class:`labkit.trainer.Trainer` (``train()``), of rejection-sampling fine-tuning
(:func:`labkit.finetune.rft.rft`) and of runs handed to TRL
(:func:`labkit.trl_bridge.train_with_trl`). A computation on fixed inputs (a forward pass of
the shipped model, a formula) does not move with it, which is how the lab tells the two apart.

Unset or ``0`` changes nothing. The platform record of every recorded value names the variable
when it is set (:mod:`labkit.runtime.platform_record`), so results computed under an offset are
never taken for the lab's own.
"""

from __future__ import annotations

import os

SEED_OFFSET_VARIABLE = "LABKIT_SEED_OFFSET"


def seed_offset() -> int:
    """The offset in ``LABKIT_SEED_OFFSET`` (0 when unset or empty)."""
    text = os.environ.get(SEED_OFFSET_VARIABLE, "").strip()
    if not text:
        return 0
    try:
        offset = int(text)
    except ValueError:
        offset = -1
    if offset < 0:
        raise ValueError(f"{SEED_OFFSET_VARIABLE}={text!r}: allowed values are unset or an "
                         f"integer >= 0 added to every training run's seed")
    return offset


def shifted_seed(seed: int) -> int:
    """``seed`` plus :func:`seed_offset`."""
    return seed + seed_offset()
