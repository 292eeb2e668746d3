"""Interactive controls for the lab's figures: sliders and text boxes redrawing a labkit.viz figure.

Each builder returns an ipywidgets box (controls above, figure below), so a notebook cell can end
with ``clip_region_widget()``. The figure is redrawn by the static function of
:mod:`labkit.viz` with the controls' values, so what moves on screen is computed by the code
training uses. Text boxes take comma-separated numbers (``1, 0, 0, 1``); a value a labkit function
rejects shows its error message in place of the figure.

Layout: every slider keeps a track of 220 px or more whatever its description's length, so it can
be dragged in JupyterLab's notebook column; a range that depends on another control follows it
(GFPO's k runs to the group size, the overlong buffer stays below the length cap); a control that
does not apply is disabled (dual-clip's c while dual-clip is off); the runs and metrics of
``runs_widget`` are checkboxes, all in view. ``tests/test_browser.py`` checks these in Chromium.

Static fallback: when ``LABKIT_STATIC=1`` is set (CI, ``nbconvert``, nbval) or ipywidgets is not
installed, :func:`widgets_enabled` is False and every builder returns the static figure drawn with
its defaults instead, which Jupyter shows when it ends the cell. Builders take the same keyword
defaults as their figure function, so a notebook can preset the controls.

One module per notebook family, as in :mod:`labkit.viz` (``tour`` 00, ``policy_gradient`` 01,
``grpo`` 02-03, ``dapo`` 04, ``gspo`` 05, ``gfpo`` 06, ``exploration`` 07, ``rewards_data`` 08,
``scaling`` 09, ``agents`` 10, ``offpolicy`` 11), ``runs`` for training curves and ``controls``
for what they share; every public name is importable from ``labkit.widgets`` itself.

================================  ======================================================
builder                           figure (in :mod:`labkit.viz`)
================================  ======================================================
``clip_region_widget``            ``plot_clip_region``
``gae_widget``                    ``plot_gae``
``group_advantages_widget``       ``plot_group_advantages``
``kl_estimators_widget``          ``plot_kl_estimators``
``aggregation_widget``            ``plot_aggregation_weights``
``overlong_widget``               ``plot_overlong_penalty``
``ratio_spread_widget``           ``plot_ratio_spread``
``gfpo_widget``                   ``plot_gfpo_filter``
``runs_widget``                   ``plot_runs``
``temperature_widget``            ``plot_token_temperature``
``surrogate_weights_widget``      ``plot_surrogate_weights``
``memory_plan_widget``            ``labkit.viz.plot_memory_plan``
``majority_vote_widget``          ``plot_majority_vote``
``sampling_weights_widget``       ``plot_sampling_weights``
``pass_at_k_widget``              ``plot_pass_at_k``
``pass_at_k_estimator_widget``   ``plot_pass_at_k_estimator``
``episode_widget``                ``plot_episode``
``staleness_widget``              ``plot_offpolicy_ratio``
================================  ======================================================
"""

from labkit.widgets.agents import episode_widget
from labkit.widgets.controls import widgets_enabled
from labkit.widgets.dapo import aggregation_widget, overlong_widget
from labkit.widgets.exploration import surrogate_weights_widget, temperature_widget
from labkit.widgets.gfpo import gfpo_widget
from labkit.widgets.grpo import group_advantages_widget, kl_estimators_widget
from labkit.widgets.gspo import ratio_spread_widget
from labkit.widgets.offpolicy import staleness_widget
from labkit.widgets.policy_gradient import clip_region_widget, gae_widget
from labkit.widgets.rewards_data import (
    majority_vote_widget,
    pass_at_k_widget,
    sampling_weights_widget,
)
from labkit.widgets.runs import runs_widget
from labkit.widgets.scaling import memory_plan_figure, memory_plan_widget
from labkit.widgets.tour import pass_at_k_estimator_widget

__all__ = [
    "aggregation_widget",
    "clip_region_widget",
    "episode_widget",
    "gae_widget",
    "gfpo_widget",
    "group_advantages_widget",
    "kl_estimators_widget",
    "majority_vote_widget",
    "memory_plan_figure",
    "memory_plan_widget",
    "overlong_widget",
    "pass_at_k_estimator_widget",
    "pass_at_k_widget",
    "ratio_spread_widget",
    "runs_widget",
    "sampling_weights_widget",
    "staleness_widget",
    "surrogate_weights_widget",
    "temperature_widget",
    "widgets_enabled",
]
