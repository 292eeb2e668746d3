"""Notebook 00's pass@k widget (labkit.widgets.pass_at_k_estimator_widget): headless and fast.

The widget draws :func:`labkit.viz.plot_pass_at_k_estimator` of
:func:`labkit.viz.pass_at_k_estimates`; these tests check that what it draws is
:func:`labkit.evaluate.pass_at_k`, that the unbiased estimate's mean over evaluations is the true
pass@k while the plug-in's falls below it, and that the widget's layout rules hold (c follows n).
"""

import math

import ipywidgets
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.figure import Figure
from widget_controls import COLUMN_PX, controls_of

from labkit import viz, widgets
from labkit.evaluate import pass_at_k


def test_estimates_are_labkits_pass_at_k_and_the_plug_in():
    table = viz.pass_at_k_estimates(8, 3)
    assert table["k"].tolist() == list(range(1, 9))
    assert np.allclose(table["unbiased"], [pass_at_k(8, 3, k) for k in range(1, 9)])
    assert np.allclose(table["plug_in"], [1 - (5 / 8) ** k for k in range(1, 9)])
    assert table.loc[0, "unbiased"] == pytest.approx(3 / 8)  # k = 1: both are c/n
    assert table.loc[0, "plug_in"] == pytest.approx(3 / 8)
    assert (table.loc[table["k"] > 5, "unbiased"] == 1.0).all()  # k > n - c: always a right one
    assert (table["plug_in"] < 1).all()


@pytest.mark.parametrize(("n", "c"), [(8, 3), (5, 1), (16, 15), (1, 0), (1, 1), (4, 0)])
def test_the_unbiased_mean_is_the_true_pass_at_k_and_the_plug_in_falls_below(n, c):
    table = viz.pass_at_k_estimates(n, c)
    p = c / n
    assert np.allclose(table["true"], [1 - (1 - p) ** k for k in range(1, n + 1)])
    assert np.allclose(table["unbiased_mean"], table["true"], atol=1e-12)
    gap = table["true"] - table["plug_in_mean"]
    assert (gap >= -1e-12).all() and gap.iloc[0] == pytest.approx(0, abs=1e-12)
    if 0 < c < n and n > 1:
        assert (gap.iloc[1:] > 0).all()  # below at every k > 1


def test_bad_counts_get_labkits_message():
    with pytest.raises(ValueError, match="need 0 <= num_correct <= num_samples"):
        viz.pass_at_k_estimates(3, 5)
    with pytest.raises(ValueError, match="num_samples must be at least 1"):
        viz.plot_pass_at_k_estimator(0, 0)


def test_figure_draws_the_table_with_titles_and_labels():
    fig = viz.plot_pass_at_k_estimator(8, 3)
    try:
        assert isinstance(fig, Figure) and fig.dpi == viz.FIGURE_DPI
        assert fig.get_figwidth() * fig.dpi <= COLUMN_PX
        assert len(fig.axes) == 2
        for ax in fig.axes:
            assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
        table = viz.pass_at_k_estimates(8, 3)
        one, mean = fig.axes
        drawn = {line.get_label(): line.get_ydata() for line in one.get_lines()}
        assert np.allclose(drawn["unbiased: 1 - C(n-c, k) / C(n, k)"], table["unbiased"])
        assert np.allclose(drawn["plug-in: 1 - (1 - c/n)^k"], table["plug_in"])
        drawn = {line.get_label(): line.get_ydata() for line in mean.get_lines()}
        assert np.allclose(drawn["true: 1 - (1 - p)^k"], table["true"])
        assert np.allclose(drawn["plug-in: 1 - (1 - c/n)^k"], table["plug_in_mean"])
        assert "3 of 8" in one.get_title() and "3/8" in mean.get_title()
    finally:
        plt.close(fig)


def test_widget_has_usable_sliders_or_a_static_figure(monkeypatch, capsys):
    monkeypatch.delenv("LABKIT_STATIC", raising=False)
    box = widgets.pass_at_k_estimator_widget()
    assert isinstance(box, ipywidgets.Widget)
    assert isinstance(box.children[-1], ipywidgets.Output)
    controls = controls_of(box)
    for slider in (controls["answers n"], controls["right c"]):
        assert slider.style.description_width == "initial"
        track = (int(slider.layout.width.removesuffix("px")) - widgets.controls._READOUT_PX
                 - widgets.controls._CHAR_PX * len(slider.description))
        assert track >= 200
    assert "Cannot draw" not in capsys.readouterr().out
    monkeypatch.setenv("LABKIT_STATIC", "1")
    fig = widgets.pass_at_k_estimator_widget(num_samples=5, num_correct=2)
    try:
        assert isinstance(fig, Figure) and len(fig.axes) == 2
    finally:
        plt.close(fig)


def test_c_follows_n(monkeypatch, capsys):
    monkeypatch.delenv("LABKIT_STATIC", raising=False)
    controls = controls_of(widgets.pass_at_k_estimator_widget(num_samples=8, num_correct=6))
    n, c = controls["answers n"], controls["right c"]
    assert (n.min, n.max, n.value) == (1, 64, 8)
    assert (c.min, c.max, c.value) == (0, 8, 6)
    n.value = 4
    assert (c.max, c.value) == (4, 4)  # clamped before the figure is drawn
    n.value = 32
    assert c.max == 32 and c.value == 4
    c.value = 32
    assert "Cannot draw" not in capsys.readouterr().out
    assert math.isclose(viz.pass_at_k_estimates(32, 32)["unbiased"].min(), 1.0)
