"""Figures (labkit.viz) and their widgets (labkit.widgets): headless, fast, drawn from labkit."""

import math
import sys
from pathlib import Path

import ipywidgets
import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from widget_controls import COLUMN_PX, controls_of

from labkit import viz, widgets
from labkit.advantages import group_advantages, rloo_advantages
from labkit.rewards.shaping import overlong_penalty
from labkit.tricks.filters import gfpo_advantages, gfpo_filter

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def no_leaked_figures():
    """labkit's figures are not pyplot's: nothing may pile up in pyplot's figure manager."""
    yield
    assert plt.get_fignums() == []



def check_figure(fig, n_axes: int) -> None:
    """A Figure with ``n_axes`` panels, each titled and labelled (x label on its column), made at
    the lab's dpi and narrow enough for the notebook column."""
    try:
        assert isinstance(fig, Figure)
        assert len(fig.axes) == n_axes
        assert fig.dpi == viz.FIGURE_DPI
        assert fig.get_figwidth() * fig.dpi <= COLUMN_PX
        for ax in fig.axes:
            assert ax.get_title(), "every panel has a title"
            assert ax.get_ylabel(), f"panel {ax.get_title()!r} has a y label"
            siblings = ax.get_shared_x_axes().get_siblings(ax)
            assert any(a.get_xlabel() for a in siblings), f"{ax.get_title()!r}: no x label"
    finally:
        plt.close(fig)


def lines_by_label(ax) -> dict:
    return {line.get_label(): line for line in ax.get_lines()}


CASES = [
    (viz.plot_clip_region, {}, 2),
    (viz.plot_clip_region, {"epsilon_high": 0.28, "dual_clip": 3.0, "advantage": "both"}, 4),
    (viz.plot_clip_region, {"epsilon_low": 1.5, "epsilon_high": math.inf}, 2),
    (viz.plot_clip_region, {"advantage": 0.0, "delta": 1.5}, 2),
    (viz.plot_gae, {}, 2),
    (viz.plot_gae, {"rewards": [1.0], "values": [0.0], "gamma": 0.5, "lam": 0.0}, 2),
    (viz.plot_group_advantages, {}, 2),
    (viz.plot_group_advantages, {"rewards": [1, 1, 1, 1]}, 2),
    (viz.plot_group_advantages,
     {"rewards": [1, 0, 0.5, 1, 0, 0], "lengths": [5, 9, 7, 3, 1, 0], "greedy_reward": [1, 0],
      "num_generations": 3}, 2),
    (viz.plot_kl_estimators, {}, 4),
    (viz.plot_kl_estimators, {"shift": 0.01, "n_samples": 2, "vocab_size": 2}, 4),
    (viz.plot_aggregation_weights, {}, 2),
    (viz.plot_aggregation_weights, {"lengths": [0, 1, 1], "max_completion_length": 4}, 2),
    (viz.plot_overlong_penalty, {}, 1),
    (viz.plot_overlong_penalty, {"overlong_buffer_len": 0, "lengths": [0, 1024, 2000]}, 2),
    (viz.plot_ratio_spread, {}, 2),
    (viz.plot_ratio_spread, {"lengths": [1], "n_sequences": 2, "noise_std": 1e-3}, 2),
    (viz.plot_gfpo_filter, {}, 2),
    (viz.plot_gfpo_filter, {"num_remains_in_group": 8, "metric": "token_efficiency"}, 2),
    (viz.plot_gfpo_filter, {"rewards": [0, 0], "lengths": [0, 3], "num_remains_in_group": 1}, 2),
]


@pytest.mark.parametrize(("fn", "kwargs", "n_axes"), CASES,
                         ids=[f"{fn.__name__}-{i}" for i, (fn, _, _) in enumerate(CASES)])
def test_figure_runs_headless(fn, kwargs, n_axes):
    check_figure(fn(**kwargs), n_axes)


def test_draws_into_given_axes_and_checks_their_number():
    fig = Figure()
    axes = fig.subplots(2, 1)
    try:
        assert viz.plot_gae(axes=axes) is fig
        with pytest.raises(ValueError, match="needs 2 axes"):
            viz.plot_gae(axes=axes[0])
    finally:
        plt.close(fig)


def test_bad_inputs_get_labkit_errors():
    with pytest.raises(ValueError, match="values need one entry per reward"):
        viz.plot_gae([0, 1], [0.5])
    with pytest.raises(ValueError, match="num_remains_in_group"):
        viz.plot_gfpo_filter(num_remains_in_group=9)
    with pytest.raises(ValueError, match="must not be empty"):
        viz.plot_group_advantages([])


# --------------------------------------------------------------------------------------------
# the numbers drawn are labkit's
# --------------------------------------------------------------------------------------------


def test_clip_cases_table_has_the_four_known_sign_cases():
    table = viz.clip_cases_table(epsilon_low=0.2, epsilon_high=0.28)
    zero = {(row["advantage"] > 0, row["region"].split()[0]): row["zero gradient"]
            for _, row in table.iterrows()}
    assert zero == {(True, "above"): True, (True, "below"): False,
                    (False, "below"): True, (False, "above"): False}
    # Unclipped: J = r A, so dJ/dr = A; clipped: a constant.
    moving = table[~table["zero gradient"]]
    np.testing.assert_allclose(moving["gradient dJ/dr"], moving["advantage"])
    clipped = table[table["zero gradient"]]
    np.testing.assert_allclose(clipped["objective J"], [1.28, -0.8])


def test_clip_cases_with_dual_clip_stop_the_bad_token_beyond_c():
    table = viz.clip_cases_table(dual_clip=1.25, above=1.3)
    row = table[(table["advantage"] < 0) & table["region"].str.startswith("above")].iloc[0]
    assert row["zero gradient"] and "dual-clip" in row["meaning"]
    with pytest.raises(ValueError, match="above must be"):
        viz.clip_cases_table(above=1.1)


def test_clip_region_gradient_curve_is_zero_exactly_in_the_clipped_zone():
    fig = viz.plot_clip_region(epsilon_low=0.2, epsilon_high=0.28, advantage=1.0)
    try:
        grad_ax = next(ax for ax in fig.axes if "gradient" in ax.get_title())
        line = lines_by_label(grad_ax)["$dJ/dr$ (autograd)"]
        r, g = line.get_xdata(), line.get_ydata()
        assert np.all(g[r > 1.28 + 1e-9] == 0) and np.allclose(g[r < 1.28 - 1e-9], 1.0)
    finally:
        plt.close(fig)


def test_aggregation_weights_equal_the_formula():
    lengths, l_max = [3, 5, 8, 13, 0], 20
    batch, total = len(lengths), sum(lengths)
    table = viz.aggregation_weights(lengths, l_max)
    valid = np.array(lengths) > 0
    expected = {
        "grpo": [1 / (batch * n) if n else 0.0 for n in lengths],
        "bnpo": [1 / total] * batch,
        "dr_grpo": [1 / (batch * l_max)] * batch,
        "sequence_sum": [1 / batch] * batch,
    }
    for loss_type, weights in expected.items():
        np.testing.assert_allclose(table[loss_type], np.where(valid, weights, 0.0), rtol=1e-12)
    fig = viz.plot_aggregation_weights(lengths, l_max)
    try:
        drawn = lines_by_label(fig.axes[0])
        for loss_type, weights in expected.items():
            line = next(v for k, v in drawn.items() if k.startswith(loss_type))
            np.testing.assert_allclose(line.get_xdata(), sorted(n for n in lengths if n))
            np.testing.assert_allclose(line.get_ydata(),
                                       [w for n, w in sorted(zip(lengths, weights)) if n])
    finally:
        plt.close(fig)


def test_sequence_ratio_spread_shrinks_with_length_and_token_spread_does_not():
    table = viz.ratio_spread(lengths=(4, 16, 64, 256), noise_std=0.1, n_sequences=256, seed=0)
    seq, tok = table["sequence_ratio_std"].to_numpy(), table["token_ratio_std"].to_numpy()
    assert np.all(np.diff(seq) < 0)
    # ~ sigma / sqrt(length): 64 times longer, 8 times steadier (within sampling noise).
    assert 6 < seq[0] / seq[-1] < 11
    assert tok.max() / tok.min() < 1.1 and abs(tok.mean() - 0.1) < 0.01


def test_measured_spread_tells_independent_tokens_from_tokens_that_move_together():
    """The law's ratio is about 1 when the tokens' log-ratios are independent and grows with
    length when a whole response moves together; a response's tokens count as outside the band
    with their response."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 101, (512,), generator=g)
    mask = torch.arange(100)[None, :] < lengths[:, None]
    old = -3 * torch.rand(mask.shape, generator=g)
    independent = viz.measured_ratio_spread(old + 0.01 * torch.randn(mask.shape, generator=g),
                                            old, mask)
    assert independent["measured/law"].between(0.85, 1.15).all()
    together = viz.measured_ratio_spread(old + 0.01 * torch.randn(512, 1, generator=g), old, mask)
    assert together["measured/law"].is_monotonic_increasing and together["measured/law"].iloc[-1] > 3
    one_token = torch.zeros(2, 4)
    one_token[0, 0] = 0.01   # one token of the first response moved, past the band
    table = viz.measured_ratio_spread(one_token, torch.zeros(2, 4), torch.ones(2, 4), bins=(1,))
    assert table.loc[0, "outside_token"] == 1 / 8 and table.loc[0, "outside_sequence"] == 4 / 8
    with pytest.raises(ValueError, match="one .B, T. shape"):
        viz.measured_ratio_spread(one_token, torch.zeros(2, 5), torch.ones(2, 4))


def test_group_advantages_table_is_labkit_estimators():
    rewards = [1.0, 0.0, 0.0, 1.0, 0.5, 0.5]
    table = viz.group_advantages_table(rewards, num_generations=3)
    assert list(table.columns) == ["reward", "GRPO", "Dr. GRPO", "RLOO", "batch-scaled"]
    r = torch.tensor(rewards, dtype=torch.float64)
    np.testing.assert_allclose(table["GRPO"], group_advantages(r, 3))
    np.testing.assert_allclose(table["RLOO"], rloo_advantages(r, 3))
    full = viz.group_advantages_table(rewards, [1, 2, 3, 4, 5, 6], greedy_reward=1.0,
                                      num_generations=3)
    assert {"length", "OPO", "ReMax"} <= set(full.columns)
    np.testing.assert_allclose(full["ReMax"], r - 1)


def test_group_push_table_sums_labkit_advantages_per_group():
    rewards = [1, 0, 0, 0, 0, 0, 0, 0,  0.5, 0.52, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5,  1, 1, 1, 1, 1, 1, 1, 1]
    lengths = list(range(1, 25))
    table = viz.group_push_table(rewards, 8, lengths)
    assert list(table.columns) == ["reward", "std", "GRPO", "Dr. GRPO", "RLOO", "OPO"]
    r = torch.tensor(rewards, dtype=torch.float64)
    np.testing.assert_allclose(table["GRPO"], group_advantages(r, 8).abs().view(3, 8).sum(-1))
    np.testing.assert_allclose(table["RLOO"], table["Dr. GRPO"] * 8 / 7)
    np.testing.assert_allclose(table["std"], r.view(3, 8).std(-1))
    # a near-tie (std 0.007) gets about GRPO's push of a one-right-in-eight group, Dr. GRPO's ~nothing
    assert table.loc[1, "GRPO"] > 0.9 * table.loc[0, "GRPO"]
    assert table.loc[1, "Dr. GRPO"] < 0.05 * table.loc[0, "Dr. GRPO"]
    assert (table.loc[2, ["GRPO", "Dr. GRPO", "RLOO", "OPO"]] == 0).all()  # no spread, no push
    share = viz.group_push_table(rewards, 8, share=True)
    np.testing.assert_allclose(share[["GRPO", "Dr. GRPO", "RLOO"]].sum(), 1.0)
    np.testing.assert_allclose(share["RLOO"], share["Dr. GRPO"])  # a constant factor: same shares
    assert (viz.group_push_table([1.0] * 8, 8, share=True)[["GRPO", "RLOO"]] == 0).all(axis=None)
    with pytest.raises(ValueError, match="divide"):
        viz.group_push_table(rewards, 5)


def test_gfpo_figure_draws_labkit_filter_and_advantages():
    rewards, lengths = [1, 1, 0, 1, 0, 1, 1, 0], [120, 340, 410, 95, 150, 210, 380, 60]
    fig = viz.plot_gfpo_filter(rewards, lengths, num_remains_in_group=3)
    try:
        r, lens = torch.tensor(rewards, dtype=torch.float64), torch.tensor(lengths)
        keep = gfpo_filter(r, lens, 8, 3)
        expected = gfpo_advantages(r, keep, 8).numpy()
        bars = fig.axes[1].containers[1]
        np.testing.assert_allclose([b.get_height() for b in bars], expected)
        (legend,) = fig.legends  # one legend above both panels
        assert "kept (3)" in [t.get_text() for t in legend.get_texts()]
    finally:
        plt.close(fig)


def test_overlong_points_sit_on_labkit_penalty():
    lengths = [100, 800, 900, 1024]
    fig = viz.plot_overlong_penalty(1024, 256, 0.5, lengths=lengths)
    try:
        points = next(v for k, v in lines_by_label(fig.axes[0]).items() if k.startswith("batch"))
        expected = overlong_penalty(torch.tensor(lengths, dtype=torch.float64), 1024, 256, 0.5)
        np.testing.assert_allclose(points.get_ydata(), expected)
        assert points.get_label() == "batch (3 of 4 penalised)"
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------------------------
# training curves
# --------------------------------------------------------------------------------------------


def write_log(path, command=None, **columns):
    header = f"# command: {command}\n" if command else ""
    path.write_text(header + pd.DataFrame(columns).to_csv(index=False))
    return path


def test_load_run_reads_the_command_header(tmp_path):
    cmd = "python -m labkit trl_train --preset grpo --max-steps 3"
    df = viz.load_run(write_log(tmp_path / "a.csv", cmd, step=[0, 1, 2], reward=[0.1, 0.2, 0.4]))
    assert df.attrs["command"] == cmd
    assert list(df.columns) == ["step", "reward"] and len(df) == 3
    plain = viz.load_run(write_log(tmp_path / "b.csv", step=[0], reward=[1.0]))
    assert "command" not in plain.attrs and len(plain) == 1


def test_plot_runs_skips_missing_columns_smooths_and_says_how_to_regenerate(tmp_path):
    cmd = "python -m labkit trl_train --preset dapo"
    a = viz.load_run(write_log(tmp_path / "a.csv", cmd, step=range(10), reward=np.arange(10.0),
                               accuracy=np.linspace(0, 1, 10)))
    b = pd.DataFrame({"reward": np.ones(5)})  # no accuracy, no step column: index on x
    fig = viz.plot_runs({"dapo": a, "mine": b}, metrics=("reward", "accuracy"), smooth=3)
    try:
        assert len(fig.axes) == 2
        assert "not logged by: mine" in fig.axes[1].get_title()
        (legend,) = fig.legends  # one legend for the figure, none in the panels
        assert all(ax.get_legend() is None for ax in fig.axes)
        assert [t.get_text() for t in legend.get_texts()] == ["dapo", "mine"]
        assert "moving average of 3" in legend.get_title().get_text()
        smoothed = lines_by_label(fig.axes[0])["dapo"].get_ydata()
        np.testing.assert_allclose(smoothed[:3], [0.0, 0.5, 1.0])
        assert fig.get_supxlabel() == f"regenerate: {cmd}"
        assert fig.axes[0].get_xlabel() == "training step"
    finally:
        plt.close(fig)
    fig = viz.plot_runs({"mine": b})
    try:
        assert fig.get_supxlabel() == "" and len(fig.axes) == 3
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="smooth"):
        viz.plot_runs({"mine": b}, smooth=0)


# --------------------------------------------------------------------------------------------
# widgets
# --------------------------------------------------------------------------------------------

RUNS = {"grpo": pd.DataFrame({"step": [0, 1, 2], "reward": [0.1, 0.3, 0.2]})}
BUILDERS = [
    (widgets.clip_region_widget, {}, 4),
    (widgets.gae_widget, {}, 2),
    (widgets.group_advantages_widget, {}, 2),
    (widgets.kl_estimators_widget, {"n_samples": 100}, 4),
    (widgets.aggregation_widget, {}, 2),
    (widgets.overlong_widget, {}, 2),
    (widgets.ratio_spread_widget, {"n_sequences": 16}, 2),
    (widgets.gfpo_widget, {}, 2),
    (widgets.runs_widget, {"runs": RUNS}, 3),
]


@pytest.mark.parametrize(("builder", "kwargs", "n_axes"), BUILDERS,
                         ids=[b.__name__ for b, _, _ in BUILDERS])
def test_widget_builder_returns_controls_or_static_figure(builder, kwargs, n_axes, monkeypatch,
                                                          capsys):
    monkeypatch.delenv("LABKIT_STATIC", raising=False)
    box = builder(**kwargs)
    assert isinstance(box, ipywidgets.Widget)
    assert isinstance(box.children[-1], ipywidgets.Output)
    assert "Cannot draw" not in capsys.readouterr().out
    monkeypatch.setenv("LABKIT_STATIC", "1")
    check_figure(builder(**kwargs), n_axes)


def test_widgets_disabled_without_ipywidgets(monkeypatch):
    monkeypatch.delenv("LABKIT_STATIC", raising=False)
    assert widgets.widgets_enabled()
    monkeypatch.setitem(sys.modules, "ipywidgets", None)
    assert not widgets.widgets_enabled()
    fig = widgets.gae_widget()
    check_figure(fig, 2)


def test_widget_text_box_errors_are_shown_not_raised(monkeypatch, capsys):
    monkeypatch.delenv("LABKIT_STATIC", raising=False)
    box = widgets.group_advantages_widget()
    rewards = box.children[0].children[0]
    rewards.value = "1, x, 0"
    assert "rewards: write numbers separated by commas" in capsys.readouterr().out
    rewards.value = "1, 0"  # two rewards but eight lengths: labkit's own message
    assert "Cannot draw this: lengths must" in capsys.readouterr().out
    rewards.value = ""
    assert "Cannot draw this: rewards must not be empty" in capsys.readouterr().out


def test_figures_render_as_png_in_ipython():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        viz.enable_notebook_display()
        fig = viz.plot_overlong_penalty()
        data, _ = shell.display_formatter.format(fig)
        assert data["image/png"][:8] == b"\x89PNG\r\n\x1a\n"
        plt.close(fig)
        # A six-panel run figure (notebook 02) as the notebook stores it: at FIGURE_DPI, as wide
        # as the notebook column, not 1271 px and 300 kB as at matplotlib's default 100 dpi.
        runs = {name: viz.load_run(Path(__file__).parent.parent / "data" / "runs" / "02_grpo"
                                   / f"{name}.csv") for name in ("grpo", "ppo")}
        fig = viz.plot_runs(runs, ("accuracy", "completion_length", "entropy", "kl_old",
                                   "frac_reward_zero_std", "clip_region"), smooth=10)
        png = shell.display_formatter.format(fig)[0]["image/png"]
        width = int.from_bytes(png[16:20], "big")
        assert width <= COLUMN_PX and len(png) < 250_000, (width, len(png))
    finally:
        InteractiveShell.clear_instance()


def test_runs_summary_reads_start_end_and_best_from_a_reference_log(tmp_path):
    log = tmp_path / "run.csv"
    log.write_text("# command: python -m labkit reference_runs run.json\n"
                   "step,reward,completions_trained,step_time,eval_accuracy,eval_length\n"
                   "0,,,,0.25,20\n1,1.0,64,2.0,,\n2,1.5,32,4.0,0.5,30\n3,1.2,48,3.0,0.4,28\n")
    table = viz.runs_summary({"a": viz.load_run(log)})
    column = table["a"]
    assert column["steps"] == 3 and column["completions with a gradient per step"] == 48
    assert column["seconds per step (wall)"] == 3.0
    assert (column["eval accuracy, start"], column["eval accuracy, end"]) == (0.25, 0.4)
    assert column["best eval accuracy"] == 0.5
    assert (column["eval length, start"], column["eval length, end"]) == (20, 28)
    with pytest.raises(ValueError, match="'b' has no"):
        viz.runs_summary({"b": pd.DataFrame({"step": [1], "reward": [0.0]})})


def test_live_plot_checks_its_period_and_is_silent_outside_ipython():
    with pytest.raises(ValueError, match="every"):
        viz.LivePlot(every=0)
    plot = viz.LivePlot(("reward",), every=2)
    trainer = type("T", (), {"config": type("C", (), {"max_steps": 3})(), "history": None})()
    plot(trainer, {"step": 2})  # no IPython shell under pytest: nothing is drawn, nothing raises
    assert plot.handle is None


def test_plot_runs_of_many_logs_stays_within_its_own_width(tmp_path):
    """Sixteen logs, most without one metric, each with its own regenerate command: the panel
    titles and the footer must not stretch the saved figure past its width (a notebook column
    would shrink it)."""
    import io

    from PIL import Image

    runs = {}
    for k in range(16):
        columns = {"step": range(10), "reward": np.arange(10.0) + k}
        if k < 3:
            columns["kl_ref"] = np.linspace(0, 0.1, 10)
        runs[f"variant_number_{k}"] = viz.load_run(write_log(
            tmp_path / f"variant_number_{k}.csv",
            f"python -m labkit reference_runs data/runs/07_exploration/variant_number_{k}.json",
            **columns))
    fig = viz.plot_runs(runs, metrics=("reward", "kl_ref"))
    try:
        assert "13 of 16 runs lack it" in fig.axes[1].get_title()
        assert " ".join(fig.texts[0].get_text().split()) == (
            "regenerate: python -m labkit reference_runs data/runs/07_exploration/<name>.json")
        FigureCanvasAgg(fig)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", bbox_inches="tight", pad_inches=0)
        buffer.seek(0)
        width = Image.open(buffer).size[0]
        assert width <= fig.get_figwidth() * fig.dpi + 1
    finally:
        plt.close(fig)


def test_plot_runs_labels_units_and_leaves_no_empty_panel():
    history = pd.DataFrame({"step": [1, 2], "accuracy": [0.1, 0.2], "entropy": [0.3, 0.2],
                            "completion_length": [10, 12], "value_loss": [0.5, 0.1]})
    fig = viz.plot_runs({"run": history},
                        ("accuracy", "entropy", "completion_length", "value_loss"))
    assert len(fig.axes) == 4  # a 3 + 1 grid keeps no empty frames
    assert [ax.get_title() for ax in fig.axes] == list(history.columns[1:])
    labels = [ax.get_ylabel() for ax in fig.axes]  # the unit; the title names the metric
    assert labels == ["fraction", "nats per token", "tokens", "value_loss"]


# --------------------------------------------------------------------------------------------
# what a learner meets in the browser (tests/test_browser.py drives the same widgets there)
# --------------------------------------------------------------------------------------------


def overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


@pytest.mark.parametrize("draw", [
    lambda: viz.plot_group_advantages((1, 0, 0, 1, 0, 0, 0, 1),
                                      (40, 120, 95, 60, 150, 80, 130, 55), 1.0),
    lambda: viz.plot_gae(),
    lambda: viz.plot_gfpo_filter(),
    lambda: viz.plot_runs({"a": RUNS["grpo"], "b": RUNS["grpo"] * 2}, ("reward", "step")),
], ids=["group_advantages", "gae", "gfpo", "runs"])
def test_legends_sit_outside_the_data_and_inside_the_figure(draw):
    fig = draw()
    try:
        FigureCanvasAgg(fig).draw()
        renderer = fig.canvas.get_renderer()
        legends = fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
        assert legends
        page = fig.bbox
        for legend in legends:
            box = legend.get_window_extent(renderer)
            assert page.x0 - 1 <= box.x0 and box.x1 <= page.x1 + 1 and box.y1 <= page.y1 + 1
            for ax in fig.axes:
                assert not overlaps(box, ax.get_window_extent(renderer)), ax.get_title()
    finally:
        plt.close(fig)


def test_plot_runs_joins_a_metric_logged_every_few_rows():
    history = pd.DataFrame({"step": range(6), "eval_accuracy": [0.1, None, None, 0.4, None, 0.5]})
    fig = viz.plot_runs({"run": history}, ("eval_accuracy",))
    try:
        line = lines_by_label(fig.axes[0])["run"]
        np.testing.assert_allclose(line.get_xdata(), [0, 3, 5])
        np.testing.assert_allclose(line.get_ydata(), [0.1, 0.4, 0.5])
    finally:
        plt.close(fig)


def sliders(box) -> list:
    """Every slider in a widget's box, depth first."""
    found = []
    for child in getattr(box, "children", ()):
        if isinstance(child, ipywidgets.IntSlider | ipywidgets.FloatSlider
                      | ipywidgets.FloatLogSlider):
            found.append(child)
        found += sliders(child)
    return found


@pytest.mark.parametrize(("builder", "kwargs", "n_axes"), BUILDERS,
                         ids=[b.__name__ for b, _, _ in BUILDERS])
def test_no_slider_label_eats_its_track(builder, kwargs, n_axes, monkeypatch):
    monkeypatch.delenv("LABKIT_STATIC", raising=False)
    for slider in sliders(builder(**kwargs)):
        assert slider.style.description_width == "initial"
        track = int(slider.layout.width.removesuffix("px")) - widgets.controls._READOUT_PX \
            - widgets.controls._CHAR_PX * len(slider.description)
        assert track >= 200, (slider.description, slider.layout.width)
        assert len(slider.description) <= 21, slider.description


def test_gfpo_kept_k_follows_the_group_size(monkeypatch, capsys):
    monkeypatch.delenv("LABKIT_STATIC", raising=False)
    controls = controls_of(widgets.gfpo_widget(num_remains_in_group=6))
    kept, rewards, lengths = controls["kept k"], controls["rewards"], controls["lengths"]
    assert (kept.min, kept.max, kept.value) == (1, 8, 6)  # G = 8 rewards, not 16
    lengths.value = "10, 20, 30, 40"
    rewards.value = "1, 0, 1, 0"
    assert (kept.max, kept.value) == (4, 4)  # clamped to G before the figure is drawn
    assert capsys.readouterr().out.count("Cannot draw") == 1  # only the 4 lengths vs 8 rewards
    rewards.value = "1, x"  # unreadable: k stays, the figure shows the message
    assert kept.max == 4 and "write numbers" in capsys.readouterr().out


def test_overlong_sliders_are_usable_and_the_buffer_stays_below_the_cap(monkeypatch):
    monkeypatch.delenv("LABKIT_STATIC", raising=False)
    controls = controls_of(widgets.overlong_widget(max_completion_length=128,
                                                   overlong_buffer_len=25))
    cap, buffer = controls["max_completion_length"], controls["overlong_buffer_len"]
    assert (cap.value, buffer.value, buffer.max) == (128, 25, 127)
    assert cap.max == 512 and 64 <= (cap.max - cap.min) / cap.step <= 256 and 128 % cap.step == 0
    cap.value = 20
    assert (buffer.max, buffer.value) == (19, 19)
    cap.value = 256
    assert buffer.max == 255 and buffer.value == 19
    big = controls_of(widgets.overlong_widget())["max_completion_length"]
    assert (big.max, big.step) == (4096, 32) and 1024 % big.step == 0


def test_dual_clip_slider_is_disabled_while_dual_clip_is_off(monkeypatch):
    monkeypatch.delenv("LABKIT_STATIC", raising=False)
    controls = controls_of(widgets.clip_region_widget())
    switch, c = controls["dual-clip"], controls["c"]
    assert not switch.value and c.disabled
    switch.value = True
    assert not c.disabled
    switch.value = False
    assert c.disabled
    assert not controls_of(widgets.clip_region_widget(dual_clip=3.0))["c"].disabled


def test_runs_widget_shows_every_metric_and_offers_only_step_like_x(monkeypatch):
    monkeypatch.delenv("LABKIT_STATIC", raising=False)
    runs = {"a": pd.DataFrame({"step": [1, 2, 3], "reward": [0.1, 0.3, 0.2],
                               "tokens_total": [10, 25, 40], "entropy": [0.3, 0.2, 0.1]}),
            "b": pd.DataFrame({"step": [1, 2], "reward": [0.2, 0.4], "kl_old": [0.0, 0.1]})}
    box = widgets.runs_widget(runs, metrics=("reward", "entropy"), smooth=2)
    controls = controls_of(box)
    assert controls["x axis"].options == ("step", "tokens_total")  # no metric as x
    grids = [c for c in box.children if isinstance(c, ipywidgets.GridBox)]
    names, metrics = grids
    assert names.value == ("a", "b")
    assert metrics.value == ("reward", "entropy")
    assert [c.description for c in metrics.children] == ["entropy", "kl_old", "reward",
                                                         "tokens_total"]  # all in view
    controls["kl_old"].value = True  # a panel added last
    assert metrics.value == ("reward", "entropy", "kl_old")
    controls["reward"].value = False
    controls["a"].value = False
    assert metrics.value == ("entropy", "kl_old") and names.value == ("b",)
    assert widgets.runs_widget(runs, x="reward").children[-2].children[1].value == "reward"


# --------------------------------------------------------------------------------------------
# notebook 07: temperature, surrogate weights, runs over seeds
# --------------------------------------------------------------------------------------------

LOGITS = torch.tensor([[3.0, 1.0, 0.5, -1.0, 0.0], [0.2, 0.1, 0.0, 2.5, -0.3]])


def test_temperature_tokens_are_the_tempered_softmax_and_its_entropy():
    for t in (0.5, 1.0, 1.7):
        ids, probs, entropy = viz.temperature_tokens(LOGITS, t, top_k=3)
        p_all = torch.softmax(LOGITS.double() / t, -1)
        assert ids.tolist() == [[0, 1, 2], [3, 0, 1]]  # the order does not move with T
        torch.testing.assert_close(probs.double(), p_all.gather(-1, ids), atol=1e-6, rtol=0)
        torch.testing.assert_close(entropy.double(), -(p_all * p_all.log()).sum(-1),
                                   atol=1e-5, rtol=0)
    hot, cold = viz.temperature_tokens(LOGITS, 1.5)[2], viz.temperature_tokens(LOGITS, 0.6)[2]
    assert (hot > cold).all(), "a higher temperature flattens the distribution"
    with pytest.raises(ValueError, match="temperature"):
        viz.temperature_tokens(LOGITS, 0.0)
    with pytest.raises(ValueError, match=r"\(P, V\)"):
        viz.temperature_tokens(LOGITS[0])


def test_token_temperature_figure_draws_labkit_probabilities_and_entropy_curve():
    fig = viz.plot_token_temperature(LOGITS, (0.6, 1.2), token_labels=lambda i: f"tok{i}",
                                     contexts=["2+3=", "the answer is"], top_k=4)
    try:
        heights = [patch.get_height() for patch in fig.axes[0].patches]
        expected = [viz.temperature_tokens(LOGITS[:1], t, 4)[1][0] for t in (0.6, 1.2)]
        np.testing.assert_allclose(heights, torch.cat(expected).numpy(), atol=1e-6)
        assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == [
            "tok0", "tok1", "tok2", "tok4"]
        legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        h06 = float(viz.temperature_tokens(LOGITS[:1], 0.6)[2][0])
        assert legend[0] == f"T = 0.6: H = {h06:.2f} nats"
        curve = fig.axes[-1].get_lines()[1].get_ydata()  # position 2's entropy against T
        assert np.all(np.diff(curve) >= 0) and curve[-1] > curve[0] + 1  # rises with T
    finally:
        plt.close(fig)
    check_figure(viz.plot_token_temperature(LOGITS), 3)
    with pytest.raises(ValueError, match="contexts"):
        viz.plot_token_temperature(LOGITS, contexts=["one"])


def test_temperature_schedules_draw_labkit_temperature_at():
    from labkit.tricks.temperature import temperature_at

    fig = viz.plot_temperature_schedules(total_steps=50, start=1.2, final=0.8)
    try:
        lines = lines_by_label(fig.axes[0])
        assert set(lines) == {"constant", "linear", "cosine"}
        np.testing.assert_allclose(
            lines["cosine"].get_ydata(),
            [temperature_at(s, 50, 1.2, 0.8, "cosine") for s in range(50)])
        assert lines["linear"].get_ydata()[[0, -1]].tolist() == pytest.approx([1.2, 0.8])
    finally:
        plt.close(fig)
    check_figure(viz.plot_temperature_schedules(), 1)


def test_surrogate_weights_are_each_losss_gradient_relative_to_reinforce():
    ratio = [0.5, 0.79, 1.0, 1.2, 1.29, 3.0]
    pos = viz.surrogate_weights(ratio, 1.0, epsilon_low=0.2, epsilon_high=0.28,
                                cispo_max_weight=2.0)
    neg = viz.surrogate_weights(ratio, -2.0, epsilon_low=0.2, epsilon_high=0.28)
    r = np.array(ratio)
    for table in (pos, neg):
        assert (table.loc[table.ratio == 1.0, list(viz.SURROGATES)] == 1).all(axis=None)
        np.testing.assert_allclose(table.no_clip, r)
    # PPO: zero beyond the band on the side where moving further helps, w = r elsewhere
    np.testing.assert_allclose(pos.ppo_clip, np.where(r > 1.28, 0, r))
    np.testing.assert_allclose(neg.ppo_clip, np.where(r < 0.8, 0, r))
    np.testing.assert_allclose(pos.cispo, np.minimum(r, 2.0))  # capped, never zero
    sig = 1 / (1 + np.exp(-(r - 1)))
    np.testing.assert_allclose(pos.sapo, r * 4 * sig * (1 - sig))
    np.testing.assert_allclose(pos.vespo, np.exp(3) * r ** 2 * np.exp(-3 * r))  # phi(r), k=2
    with pytest.raises(ValueError, match="advantage"):
        viz.surrogate_weights(ratio, 0.0)


def test_surrogate_weights_figure_and_focal_panel():
    from labkit.losses import focal_weight

    fig = viz.plot_surrogate_weights(epsilon_high=0.5, gamma=1.0)
    try:
        check_figure(fig, 3)
        ppo = fig.axes[0].get_lines()[0]
        x, y = ppo.get_xdata(), ppo.get_ydata()
        assert np.all(y[x > 1.5] == 0) and np.all(y[x < 1.5] > 0)
        focal = lines_by_label(fig.axes[2])[r"$\gamma$ = 1"]
        p = torch.as_tensor(focal.get_xdata())
        np.testing.assert_allclose(focal.get_ydata(), focal_weight(p.clamp(min=1e-12).log(), 1.0))
    finally:
        plt.close(fig)


def seeded_log(tmp_path):
    """Two seeds of three steps, the second seed's values 2 higher, and evaluations at 0 and 2."""
    frame = pd.DataFrame({"seed": [0, 0, 0, 1, 1, 1], "step": [0, 1, 2] * 2,
                          "reward": [np.nan, 1.0, 2.0, np.nan, 3.0, 4.0],
                          "completions_trained": [np.nan, 10, 20, np.nan, 30, 40],
                          "step_time": [np.nan, 1, 1, np.nan, 2, 2],
                          "eval_accuracy": [0.2, np.nan, 0.5, 0.4, np.nan, 0.6],
                          "eval_length": [10, np.nan, 12, 10, np.nan, 16]})
    return viz.load_run(write_log(tmp_path / "s.csv", "python -m labkit reference_runs s.json",
                                  **frame.to_dict("list")))


def test_plot_runs_draws_the_mean_over_seeds_with_a_min_max_band(tmp_path):
    log = seeded_log(tmp_path)
    one = pd.DataFrame({"step": [1, 2], "reward": [0.0, 0.5]})
    fig = viz.plot_runs({"two": log, "one": one}, metrics=("reward",), smooth=2)
    try:
        ax = fig.axes[0]
        lines = lines_by_label(ax)
        # each seed smoothed first (1, 1.5 and 3, 3.5), then averaged
        np.testing.assert_allclose(lines["two (2 seeds)"].get_ydata(), [2.0, 2.5])
        (band,) = ax.collections
        low_high = band.get_paths()[0].vertices[:, 1]
        assert low_high.min() == pytest.approx(1.0) and low_high.max() == pytest.approx(3.5)
        legend = fig.legends[0]
        assert [t.get_text() for t in legend.get_texts()] == ["two (2 seeds)", "one"]
        assert "band: min-max over seeds" in legend.get_title().get_text()
    finally:
        plt.close(fig)


def test_runs_summary_gives_the_mean_and_the_range_over_seeds(tmp_path):
    table = viz.runs_summary({"two": seeded_log(tmp_path)},
                             extra={"reward, last step": lambda d: d["reward"].iloc[-1]})
    column = table["two"]
    assert column["seeds"] == 2 and column["steps"] == 2
    assert column["eval accuracy, end"] == "0.550 (0.500–0.600)"
    assert column["eval length, end"] == "14.0 (12.0–16.0)"
    assert column["reward, last step"] == "3.000 (2.000–4.000)"
    # averaged over the evaluations from step 0 on: seed 0 (0.2 + 0.5) / 2, seed 1 (0.4 + 0.6) / 2
    late = viz.runs_summary({"two": seeded_log(tmp_path)}, late_from=0)["two"]
    assert late["eval accuracy, steps 0+"] == "0.425 (0.350–0.500)"
    assert late["eval length, steps 0+"] == "12.0 (11.0–13.0)"
    assert viz.runs_summary({"two": seeded_log(tmp_path)}, late_from=2)["two"][
        "eval accuracy, steps 2+"] == "0.550 (0.500–0.600)"


def test_summary_values_are_the_numbers_the_summary_prints(tmp_path):
    values = viz.summary_values({"two": seeded_log(tmp_path)})["two"]
    assert values.loc["eval accuracy, end", "mean"] == pytest.approx(0.55)
    assert values.loc["eval accuracy, end", "min"] == pytest.approx(0.5)
    assert values.loc["eval length, end", "max"] == pytest.approx(16.0)
    assert (values["seeds"] == 2).all()
    one_seed = seeded_log(tmp_path).query("seed == 0")
    single = viz.summary_values({"one": one_seed})["one"]
    assert (single["min"] == single["max"]).all() and (single["mean"] == single["max"]).all()
    assert single["mean"].to_dict() == viz.runs_summary({"one": one_seed})["one"].to_dict()


NOTEBOOK_07_BUILDERS = [
    (widgets.temperature_widget, {"logits": LOGITS}, 3),
    (widgets.surrogate_weights_widget, {}, 3),
]


@pytest.mark.parametrize(("builder", "kwargs", "n_axes"), NOTEBOOK_07_BUILDERS,
                         ids=[b.__name__ for b, _, _ in NOTEBOOK_07_BUILDERS])
def test_notebook_07_widgets_have_usable_sliders_or_a_static_figure(builder, kwargs, n_axes,
                                                                    monkeypatch, capsys):
    test_widget_builder_returns_controls_or_static_figure(builder, kwargs, n_axes, monkeypatch,
                                                          capsys)
    test_no_slider_label_eats_its_track(builder, kwargs, n_axes, monkeypatch)


# --------------------------------------------------------------------------------------------
# notebook 08: majority vote, prompt sampling weights, pass@k
# --------------------------------------------------------------------------------------------


def _voted_samples():
    """Two add prompts of 5 samples: the first's vote is right (58 with "+58", 3 of 5), the
    second's wrong (121 beats the true 120, 2 to 1, two samples unanswered)."""
    answers = [("58", "58", "57", "+58", None), ("121", "120", "121", None, "oops")]
    truth = ("58", "120")
    rows = []
    for i, group in enumerate(answers):
        for a in group:
            text = "<think>t</think>" + ("" if a is None else f"<answer>{a}</answer>")
            right = a is not None and a.lstrip("+").isdigit() and int(a) == int(truth[i])
            rows.append({"id": f"p{i}", "family": "add", "difficulty": 2, "text": text,
                         "correct": float(right), "question": f"question {i}"})
    return pd.DataFrame(rows)


def test_majority_vote_groups_votes_like_the_ttrl_reward():
    from labkit.rewards.ttrl import ttrl_reward

    samples = _voted_samples()
    votes = viz.majority_vote_groups(samples)
    assert votes["majority"].tolist() == ["58", "121"]
    assert votes["share"].tolist() == [0.6, 0.4]  # None answers count in the share
    assert votes["majority_right"].tolist() == [1.0, 0.0]
    assert votes["accuracy"].tolist() == [0.6, 0.2]
    assert votes["any_right"].tolist() == [1.0, 1.0]
    # the samples that agree with the vote are exactly those ttrl_reward pays
    paid = ttrl_reward(samples["id"].tolist(), samples["text"].tolist(),
                       family=samples["family"].tolist())
    assert paid == [1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0]
    first_two = viz.majority_vote_groups(samples, group_size=2)
    assert first_two["group_size"].tolist() == [2, 2]
    assert first_two["majority"].tolist() == ["58", "121"]  # a 1-1 tie goes to the first seen
    with pytest.raises(ValueError, match="group_size"):
        viz.majority_vote_groups(samples, group_size=0)
    with pytest.raises(ValueError, match="correct"):
        viz.majority_vote_groups(samples.drop(columns="correct"))


def test_majority_vote_figure_marks_the_vote_and_draws_maj_at_g():
    samples = _voted_samples()
    fig = viz.plot_majority_vote(samples, prompt=1, group_size=5)
    bars_ax, curve_ax = fig.axes
    assert "majority 121 (40%): wrong" in bars_ax.get_title()
    heights = sorted(p.get_height() for p in bars_ax.patches)
    assert heights == [1, 2, 2]  # 121 twice, 120 once; "oops" and no answer do not vote
    maj = lines_by_label(curve_ax)["majority vote right (maj@G)"].get_ydata()
    assert list(maj) == [viz.majority_vote_groups(samples, g)["majority_right"].mean()
                         for g in range(1, 6)]
    check_figure(fig, 2)
    with pytest.raises(ValueError, match="prompt must lie in 0..1"):
        viz.plot_majority_vote(samples, prompt=2)
    with pytest.raises(ValueError, match="group_size must lie in 1..5"):
        viz.plot_majority_vote(samples, group_size=6)


def test_difficulty_sampling_weights_are_the_samplers_weights():
    start = viz.difficulty_sampling_weights(progress=0.0)
    assert start["curriculum"].tolist() == [1.0, 0.0, 0.0, 0.0]  # only the easiest at first
    done = viz.difficulty_sampling_weights(progress=0.5, curriculum_ratio=0.5)
    assert done["curriculum"].tolist() == [0.25] * 4  # uniform once the ramp is over
    rates = np.array([0.9, 0.6, 0.3, 0.1])
    expected = (1 - rates + 0.05) / (1 - rates + 0.05).sum()
    assert np.allclose(done["prioritized"], expected)
    assert np.allclose(done[["uniform", "curriculum", "prioritized"]].sum(), 1.0)
    with pytest.raises(ValueError, match="solve_rates"):
        viz.difficulty_sampling_weights(solve_rates=(0.5, 1.5, 0.0, 0.0))
    with pytest.raises(ValueError, match="progress"):
        viz.difficulty_sampling_weights(progress=1.5)


def test_multitask_weights_move_toward_the_worst_family_and_stay_put_when_equal():
    paths = viz.multitask_weight_paths({"add": 0.6, "sub": 0.45, "mul": 0.1}, steps=100)
    assert len(paths) == 101 and paths["weight_mul"].iloc[0] == pytest.approx(1 / 3)
    assert paths["weight_mul"].is_monotonic_increasing
    assert paths["weight_add"].is_monotonic_decreasing
    assert np.allclose(paths.filter(like="weight_").sum(axis=1), 1.0)
    equal = viz.multitask_weight_paths({"add": 0.5, "sub": 0.5}, steps=20)
    assert np.allclose(equal[["weight_add", "weight_sub"]], 0.5)
    faster = viz.multitask_weight_paths({"add": 0.6, "sub": 0.45, "mul": 0.1}, steps=100, lr=1.0)
    assert faster["weight_mul"].iloc[-1] > paths["weight_mul"].iloc[-1] + 0.1
    fig = viz.plot_sampling_weights()
    check_figure(fig, 2)


def test_pass_at_k_figure_draws_the_curves_and_the_gain_in_points():
    from labkit.evaluate import pass_at_k_curve

    before = _voted_samples()
    after = before.assign(correct=1.0 - before["correct"])
    curves = {"before": pass_at_k_curve(before), "after": pass_at_k_curve(after)}
    fig = viz.plot_pass_at_k(curves)
    curve_ax, gain_ax = fig.axes
    ks = [1, 2, 3, 4, 5]
    lines = lines_by_label(curve_ax)
    assert list(lines["before"].get_xdata()) == ks
    assert np.allclose(lines["before"].get_ydata(),
                       [curves["before"].iloc[-1][f"pass@{k}"] for k in ks])
    gain = lines_by_label(gain_ax)["after - before"].get_ydata()
    assert np.allclose(gain, [100 * (curves["after"].iloc[-1][f"pass@{k}"]
                                     - curves["before"].iloc[-1][f"pass@{k}"]) for k in ks])
    check_figure(fig, 2)
    check_figure(viz.plot_pass_at_k(curves, cell="add d2"), 2)
    with pytest.raises(ValueError, match=r"one of \['add d2'\]"):
        viz.plot_pass_at_k(curves, cell="mul d4")


NOTEBOOK_08_BUILDERS = [
    (widgets.majority_vote_widget, {"samples": _voted_samples()}, 2),
    (widgets.sampling_weights_widget, {}, 2),
    (widgets.pass_at_k_widget, {"curves": {"base": pd.DataFrame(
        {"family": ["add", "all"], "difficulty": [2, "all"], "prompts": [2, 2],
         "pass@1": [0.2, 0.2], "pass@2": [0.5, 0.5]})}}, 2),
]


@pytest.mark.parametrize(("builder", "kwargs", "n_axes"), NOTEBOOK_08_BUILDERS,
                         ids=[b.__name__ for b, _, _ in NOTEBOOK_08_BUILDERS])
def test_notebook_08_widgets_have_usable_sliders_or_a_static_figure(builder, kwargs, n_axes,
                                                                    monkeypatch, capsys):
    test_widget_builder_returns_controls_or_static_figure(builder, kwargs, n_axes, monkeypatch,
                                                          capsys)
    test_no_slider_label_eats_its_track(builder, kwargs, n_axes, monkeypatch)


def test_sampling_weights_widget_redraws_from_its_sliders(monkeypatch, capsys):
    monkeypatch.delenv("LABKIT_STATIC", raising=False)
    controls = controls_of(widgets.sampling_weights_widget())
    controls["d4 solve rate"].value = 0.9
    controls["MT-GRPO lr"].value = 1.0
    assert "Cannot draw" not in capsys.readouterr().out


def test_fork_logits_reads_the_tiny_qwen_at_three_places_of_its_own_worked_answer():
    fork = viz.fork_logits("347+285=?", seed=0)
    think, answer = fork["text"].split("</think>")
    assert think.startswith("<think>") and len(think) > len("<think>") and "<answer>" in answer
    assert fork["logits"].shape[0] == 3 and fork["logits"].dtype == torch.float32
    first, digit, final = fork["contexts"]
    assert first == "<think>" and digit.endswith("=") and final.endswith("<answer>")
    assert fork["text"].startswith(digit) and fork["text"].startswith(final)
    # the token the sample wrote at each place is one the model gave a non-zero probability
    written = fork["text"][len(digit)], fork["text"][len(final)]
    probs = torch.softmax(fork["logits"], -1)
    for row, char in zip((1, 2), written):
        token = fork["decode"](int(probs[row].argmax()))
        assert token.isdigit() and char.isdigit()


def test_per_seed_reads_each_seeds_first_and_last_evaluation():
    rows = []
    for seed, (start, end) in enumerate([(0.25, 0.5), (0.3, 0.35)]):
        rows += [{"seed": seed, "step": 0, "reward": None, "eval_accuracy": start,
                  "eval_pass@k": 0.7, "eval_length": 16.0},
                 {"seed": seed, "step": 1, "reward": 1.0, "eval_accuracy": None,
                  "eval_pass@k": None, "eval_length": None},
                 {"seed": seed, "step": 2, "reward": 1.0, "eval_accuracy": end,
                  "eval_pass@k": 0.6 + seed / 10, "eval_length": 20.0 + seed}]
    table = viz.per_seed(pd.DataFrame(rows))
    assert list(table.index) == [0, 1]
    assert table.loc[0, "pass1_after"] == 0.5 and table.loc[1, "pass1_before"] == 0.3
    assert table.loc[1, "passk_after"] == pytest.approx(0.7)
    assert table.loc[1, "length_after"] == 21.0
    one = viz.per_seed(pd.DataFrame(rows[:3]).drop(columns="seed"),
                       {"steps": lambda d: d["reward"].count()})
    assert one.shape == (1, 1) and one.iloc[0, 0] == 2  # seed 0's two training rows


def test_a_live_run_sits_above_the_seeds_of_its_log():
    """live_beside_log: this kernel's run first, then each logged seed, the same figures for both."""
    import pandas as pd

    from labkit import viz

    def run(pass1):
        return pd.DataFrame({"step": [0, 10], "eval_accuracy": pass1, "eval_pass@k": [0.5, 0.6],
                             "eval_length": [20.0, 25.0]})

    # the trainer's history repeats the last evaluation on its last step: it must not read as "before"
    history = pd.DataFrame({"step": [1, 10], "reward": [1.0, 1.5], "eval_accuracy": [None, 0.4]})
    result = type("Result", (), {"history": history, "eval_history": run([0.3, 0.4])})()
    logged = viz.per_seed(pd.concat([run([0.3, 0.41]).assign(seed=0), run([0.2, 0.5]).assign(seed=1)]))
    table = viz.live_beside_log(result, logged)
    assert list(table.index) == ["this kernel (seed 0)", "log, seed 0", "log, seed 1"]
    assert table.loc["this kernel (seed 0)", ["pass1_before", "pass1_after"]].tolist() == [0.3, 0.4]
    assert table.loc["log, seed 1", "pass1_before"] == 0.2
    assert list(table.columns) == list(logged.columns)
