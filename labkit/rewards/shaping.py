"""Reward shaping terms that depend only on the completion, not on its correctness.

Currently DAPO's soft overlong punishment (arXiv 2503.14476, eq. 13). It is *added* to the task
reward before advantages are computed. Same ramp as verl's DAPO reward manager, OpenRLHF's
``--reward.overlong_*`` and TRL's ``trl.rewards.get_soft_overlong_punishment`` (which has no
``penalty_factor``).
"""

from __future__ import annotations

import torch

__all__ = ["overlong_penalty"]


def overlong_penalty(
    lengths: torch.Tensor,
    max_completion_length: int,
    overlong_buffer_len: int,
    penalty_factor: float = 1.0,
) -> torch.Tensor:
    r"""DAPO soft overlong punishment: a linear ramp over the last ``overlong_buffer_len`` tokens.

    .. math::
        R_{length}(y) = c\cdot\begin{cases}0, & |y| \le L_{max}-L_{cache}\\
        \dfrac{(L_{max}-L_{cache})-|y|}{L_{cache}}, & L_{max}-L_{cache} < |y| \le L_{max}\\
        -1, & L_{max} < |y|\end{cases}

    with :math:`L_{max}` = ``max_completion_length``, :math:`L_{cache}` = ``overlong_buffer_len``
    and :math:`c` = ``penalty_factor``.

    =========================  =====  ====================================================
    name                       shape  meaning
    =========================  =====  ====================================================
    ``lengths``                (N,)   completion lengths in tokens (any integer/float dtype)
    ``max_completion_length``  int    L_max > 0 (DAPO 20480)
    ``overlong_buffer_len``    int    L_cache in [0, L_max] (DAPO 4096)
    ``penalty_factor``         float  c >= 0 (verl ``penalty_factor``, DAPO 1.0)
    returns                    (N,)   penalty in [-c, 0], float32 (float64 for float64 lengths)
    =========================  =====  ====================================================

    Edge cases: with DAPO's values, 16384 -> 0, 18432 -> -0.5, 20480 -> -1. Since generation stops at
    L_max, the ``-1`` branch is only reached if lengths are measured beyond the cap; it keeps the
    function continuous at L_max. ``overlong_buffer_len = 0`` is a step: 0 up to L_max, ``-c``
    beyond (TRL's behaviour for ``soft_punish_cache=0``). Negative lengths raise ``ValueError``.
    verl's form has no ``-1`` floor beyond L_max; OpenRLHF caps the excess at the buffer as here.
    """
    if int(max_completion_length) != max_completion_length or max_completion_length <= 0:
        raise ValueError(
            f"max_completion_length must be a positive integer, got {max_completion_length}"
        )
    if not 0 <= overlong_buffer_len <= max_completion_length:
        raise ValueError(
            f"overlong_buffer_len must lie in [0, max_completion_length={max_completion_length}], "
            f"got {overlong_buffer_len}"
        )
    if penalty_factor < 0:
        raise ValueError(f"penalty_factor must be >= 0, got {penalty_factor}")
    lens = lengths if lengths.is_floating_point() else lengths.to(torch.float32)
    if (lens < 0).any():
        raise ValueError("lengths must be >= 0")
    if overlong_buffer_len == 0:
        frac = (lens > max_completion_length).to(lens.dtype)
    else:
        # clamp to [0, 1]: 0 before the buffer, the ramp inside it, 1 (the -c floor) past L_max.
        start = max_completion_length - overlong_buffer_len
        frac = ((lens - start) / overlong_buffer_len).clamp(0, 1)
    return -penalty_factor * frac
