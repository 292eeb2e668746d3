"""Static figures of the lab's key ideas, each drawn by the labkit functions that training uses.

Every number on these pictures comes from the same code the trainer runs: the clip region from
:func:`labkit.losses.clipped_surrogate` with its gradient from torch autograd, the advantages from
:mod:`labkit.advantages`, the aggregation weights from autograd through
:func:`labkit.losses.aggregate`, and so on. Nothing is re-derived here, so a picture can never
disagree with a training run.

=============================  =================================================================
function                       what it draws
=============================  =================================================================
``plot_clip_region``           PPO objective and gradient against the ratio; zero-gradient zones
``clip_cases_table``           the four sign cases of (A, ratio outside the band), as a table
``plot_gae``                   a toy token sequence: rewards, values, GAE advantages and returns
``plot_group_advantages``      one group's rewards and six advantage estimators side by side
``group_advantages_table``     the same numbers as a table
``group_push_table``           per group of a batch: reward spread and each estimator's total push
``plot_kl_estimators``         k1/k2/k3 and their gradients; bias and spread from samples
``plot_aggregation_weights``   per-token gradient weight against length for each ``loss_type``
``aggregation_weights``        the same weights as a table
``plot_overlong_penalty``      DAPO's soft overlong penalty and a batch's lengths on it
``plot_ratio_spread``          token vs GSPO sequence ratio spread against response length
``ratio_spread``               the same simulation as a table
``measured_ratio_spread``      the same spreads measured on real responses, by length
``plot_gfpo_filter``           a group's lengths and rewards, GFPO's kept set, its advantages
``plot_runs``, ``load_run``    training curves from logged runs, with the regenerating command
``runs_summary``               a table of logged runs: start, end and best eval accuracy, length...
``summary_values``             the same table's numbers (mean, min and max over seeds)
``summary_records``            one run's summary numbers as the keys a notebook records
``per_seed``                   one row per seed of a log (default: eval before and after, EVAL_CHANGE)
``live_beside_log``            a live run's row above the per-seed rows of its committed log
``LivePlot``                   a trainer callback that redraws ``plot_runs`` in place while training
``plot_token_temperature``     a model's next-token distribution and entropy at several temperatures
``temperature_tokens``         the same numbers: top tokens, probabilities, entropy at T
``fork_logits``                the tiny Qwen's next-token logits at three places of its own answer
``plot_temperature_schedules`` sampling temperature over training (constant, linear, cosine)
``plot_surrogate_weights``     each surrogate's gradient weight against the ratio; focal weight
``surrogate_weights``          the same weights as a table
``plot_majority_vote``         a prompt's sampled answers and TTRL's vote; maj@G against G
``majority_vote_groups``       the same vote per prompt, as a table
``plot_sampling_weights``      curriculum / prioritized shares per difficulty; MT-GRPO weights
``multitask_weight_paths``     the same weights per step (``difficulty_sampling_weights``: shares)
``plot_pass_at_k``             pass@k against k for several models, and the gain over the first
``plot_pass_at_k_estimator``   one prompt's pass@k, unbiased and plug-in, and each one's mean
``pass_at_k_estimates``        the same numbers as a table
``plot_memory_plan``           the memory planner's bill per phase of a step against GPU sizes
``plot_episode``               an agent episode's tokens coloured by author, the trained ones marked
``plot_offpolicy_ratio``       a stale batch's behaviour ratios, PPO's clip band, a correction's bounds
``staleness_table``            the same batch per staleness: ratio quantiles, clip and corrected shares
``stale_logprobs``             one batch scored by later checkpoints of a run (the table's input)
``plot_staleness_schedule``    which policy version sampled the batch each step trains on
``plot_admission``             the share of groups discard or slow-down trains, by length
=============================  =================================================================

One module per notebook family (``tour`` 00, ``policy_gradient`` 01, ``grpo`` 02-03, ``dapo``
04, ``gspo`` 05, ``gfpo`` 06, ``exploration`` 07, ``rewards_data`` 08, ``scaling`` 09, ``agents``
10, ``offpolicy`` 11), ``runs`` for training curves and ``style`` for what they share; every
public name is importable from ``labkit.viz`` itself.

Each ``plot_*`` function returns a :class:`matplotlib.figure.Figure`. Figures are created with
the object-oriented API (not ``pyplot``), so they are never shown twice in a notebook and need no
closing; pass ``axes=`` to draw into axes of your own instead. The interactive versions are in
:mod:`labkit.widgets`.

Sizes are chosen for JupyterLab's notebook column: figures are made at :data:`FIGURE_DPI` (90) and
are at most about 840 px wide, so even a three-panel figure shows at full size (not shrunk, its
10-point text 12.5 px tall) beside the file browser in a 1280 px window (an 848 px column), and a
committed notebook stays small. Legends sit outside the data: beside the axes, or one legend above
the panels.
"""

from labkit.viz.agents import AUTHOR_COLORS, plot_episode
from labkit.viz.dapo import aggregation_weights, plot_aggregation_weights, plot_overlong_penalty
from labkit.viz.exploration import (
    SURROGATES,
    fork_logits,
    plot_surrogate_weights,
    plot_temperature_schedules,
    plot_token_temperature,
    surrogate_weights,
    temperature_tokens,
)
from labkit.viz.gfpo import plot_gfpo_filter
from labkit.viz.grpo import (
    group_advantages_table,
    group_push_table,
    plot_group_advantages,
    plot_kl_estimators,
)
from labkit.viz.gspo import measured_ratio_spread, plot_ratio_spread, ratio_spread
from labkit.viz.offpolicy import (
    BEHAVIOUR_RATIO_LABEL,
    plot_admission,
    plot_offpolicy_ratio,
    plot_staleness_schedule,
    stale_logprobs,
    staleness_table,
)
from labkit.viz.policy_gradient import clip_cases_table, plot_clip_region, plot_gae
from labkit.viz.rewards_data import (
    difficulty_sampling_weights,
    majority_vote_groups,
    multitask_weight_paths,
    plot_majority_vote,
    plot_pass_at_k,
    plot_sampling_weights,
)
from labkit.viz.runs import (
    EVAL_CHANGE,
    LivePlot,
    live_beside_log,
    load_run,
    per_seed,
    plot_runs,
    runs_summary,
    summary_records,
    summary_values,
)
from labkit.viz.scaling import plot_memory_plan
from labkit.viz.style import FIGURE_DPI, LENGTH_LABEL, RATIO_LABEL, enable_notebook_display
from labkit.viz.tour import pass_at_k_estimates, plot_pass_at_k_estimator

__all__ = [
    "AUTHOR_COLORS",
    "BEHAVIOUR_RATIO_LABEL",
    "EVAL_CHANGE",
    "FIGURE_DPI",
    "LENGTH_LABEL",
    "RATIO_LABEL",
    "SURROGATES",
    "LivePlot",
    "aggregation_weights",
    "clip_cases_table",
    "difficulty_sampling_weights",
    "enable_notebook_display",
    "fork_logits",
    "group_advantages_table",
    "group_push_table",
    "live_beside_log",
    "load_run",
    "majority_vote_groups",
    "measured_ratio_spread",
    "multitask_weight_paths",
    "pass_at_k_estimates",
    "per_seed",
    "plot_admission",
    "plot_aggregation_weights",
    "plot_clip_region",
    "plot_episode",
    "plot_gae",
    "plot_gfpo_filter",
    "plot_group_advantages",
    "plot_kl_estimators",
    "plot_majority_vote",
    "plot_memory_plan",
    "plot_offpolicy_ratio",
    "plot_overlong_penalty",
    "plot_pass_at_k",
    "plot_pass_at_k_estimator",
    "plot_ratio_spread",
    "plot_runs",
    "plot_sampling_weights",
    "plot_staleness_schedule",
    "plot_surrogate_weights",
    "plot_temperature_schedules",
    "plot_token_temperature",
    "ratio_spread",
    "runs_summary",
    "stale_logprobs",
    "staleness_table",
    "summary_records",
    "summary_values",
    "surrogate_weights",
    "temperature_tokens",
]
