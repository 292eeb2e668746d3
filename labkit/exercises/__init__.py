"""Self-checking notebook exercises: your function against labkit's reference, spinningup style.

A notebook exercise gives a stub to fill in and one line to check it::

    from functools import partial
    from labkit.exercises import check_function, random_policy_batch
    from labkit.losses import clipped_surrogate

    def my_clipped_surrogate(log_ratio, advantages):
        raise NotImplementedError  # your code here: the per-token PPO loss, epsilon = 0.2

    check_function(my_clipped_surrogate, clipped_surrogate,
                   partial(random_policy_batch, keys=("log_ratio", "advantages")))

:func:`check_function` calls both functions on the same random inputs and compares the output's
shape, then its values, then (through autograd) its gradient with respect to every floating input.
It prints either ``Correct! ...`` or the first thing that differs, with where and by how much, and
returns a bool. A wrong answer never raises; a learner function that itself raises is re-raised
as :class:`LearnerError` with a hint (the original error is chained below it).

Input makers take a ``torch.Generator`` and return the keyword arguments of one call:
:func:`random_policy_batch` (an off-policy batch of responses of varied lengths),
:func:`random_group_rewards` (groups of sampled rewards), :func:`random_pass_counts` (the
counts of one pass@k problem) and :func:`random_stale_batch` (a batch sampled by an older policy:
behaviour, proximal and current log-probs).

:func:`check_liftable_cells` checks a prediction read off an evaluation: which (family,
difficulty) cells give GRPO a gradient (:func:`cell_signal` counts them).

:func:`check_grpo_gradient` checks a whole GRPO step built from a learner's two functions (the
group advantage and the clipped token loss of :mod:`labkit.grpo_minimal`) against the Trainer's
gradient on one real batch of the tiny model.

One module per job: :mod:`~labkit.exercises.inputs` (the input makers),
:mod:`~labkit.exercises.checker` (:func:`check_function`), :mod:`~labkit.exercises.prediction`
(:func:`check_prediction`), :mod:`~labkit.exercises.cells` (:func:`cell_signal`,
:func:`check_liftable_cells`) and :mod:`~labkit.exercises.grpo_step` (:func:`check_grpo_gradient`).
"""

from labkit.exercises.cells import cell_signal, check_liftable_cells
from labkit.exercises.checker import LearnerError, check_function
from labkit.exercises.grpo_step import check_grpo_gradient
from labkit.exercises.inputs import (
    STALE_CORRECTIONS,
    random_group_rewards,
    random_pass_counts,
    random_policy_batch,
    random_stale_batch,
)
from labkit.exercises.prediction import check_prediction

__all__ = ["STALE_CORRECTIONS", "LearnerError", "cell_signal", "check_function",
           "check_grpo_gradient", "check_liftable_cells", "check_prediction",
           "random_group_rewards", "random_pass_counts", "random_policy_batch",
           "random_stale_batch"]
