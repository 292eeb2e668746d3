"""Notebook 09's memory-planner widget (labkit.widgets.memory_plan_widget): headless and fast.

The widget draws :func:`labkit.viz.plot_memory_plan` of :func:`labkit.scale.memory.memory_plan`;
these tests check that what it draws is that plan (the tallest bar is the planned total), that
its controls move the bill the way the planner says they should, and that its layout rules hold
(a control that does not apply is disabled, a range that depends on another follows it).
"""

import warnings

import ipywidgets
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.figure import Figure

from labkit import viz, widgets
from labkit.config import preset
from labkit.scale.memory import memory_plan

QWEN = "Qwen/Qwen2.5-0.5B-Instruct"


def bar_tops(fig: Figure) -> np.ndarray:
    """Height of each stacked bar (one per phase of a step), in GiB."""
    ax = fig.axes[0]
    tops = {}
    for patch in ax.patches:
        x = round(patch.get_x(), 6)
        tops[x] = max(tops.get(x, 0.0), patch.get_y() + patch.get_height())
    return np.array([tops[x] for x in sorted(tops)])


def static_figure(monkeypatch, **kwargs) -> Figure:
    monkeypatch.setenv("LABKIT_STATIC", "1")
    return widgets.memory_plan_widget(**kwargs)


def test_static_figure_is_the_plan_with_the_gpu_sizes(monkeypatch):
    fig = static_figure(monkeypatch)
    try:
        assert isinstance(fig, Figure) and fig.dpi == viz.FIGURE_DPI
        assert fig.get_figwidth() * fig.dpi <= 848  # the notebook column (tests/test_viz.py)
        config = preset("grpo", num_generations=8, prompts_per_step=16,
                        max_completion_length=1024, micro_batch_size=8, dtype="bfloat16",
                        use_peft=False, lora_target_modules="all-linear")
        plan = memory_plan(QWEN, config, prompt_length=256, device="cuda")
        tops = bar_tops(fig)
        assert len(tops) == 3  # sampling, train, optimizer step
        assert tops.max() == pytest.approx(plan.loc["total", "GiB"], rel=1e-9)
        ax = fig.axes[0]
        gpu_lines = sorted(line.get_ydata()[0] for line in ax.lines)
        assert gpu_lines == [16, 24, 40, 80]
        assert ax.get_ylabel() and ax.get_xlabel() and QWEN in ax.get_title()
        # 23.79 GiB planned leaves 0.21 GiB of a 24 GiB card: within the 1 GiB margin the plan
        # leaves out (CUDA context, allocator cache), so the title calls it tight, not a fit
        assert "fits 40, 80 GiB; tight on 24 GiB (under 1 GiB spare)" in ax.get_title()
        fig.canvas.draw()  # the layout holds: no GPU label far above the bars collapses it
    finally:
        plt.close(fig)


def test_the_title_applies_the_margin_it_is_given(monkeypatch):
    fig = static_figure(monkeypatch, margin_gib=0.0)
    try:
        assert fig.axes[0].get_title().endswith("\nfits 24, 40, 80 GiB")
    finally:
        plt.close(fig)
    fig = static_figure(monkeypatch, gpus=(16,))
    try:
        assert fig.axes[0].get_title().endswith("fits none of (16,) GiB")
    finally:
        plt.close(fig)


def test_lora_checkpointing_and_bf16_lower_the_bill(monkeypatch):
    def peak(**kwargs):
        fig = static_figure(monkeypatch, **kwargs)
        try:
            return bar_tops(fig).max()
        finally:
            plt.close(fig)

    full = peak()
    assert peak(use_peft=True, lora_dropout=0.0) < full  # no adapter gradients or moments
    # peft's dropout keeps a dropped copy of each adapted input: at 8 x 1280 tokens per
    # micro-batch that outweighs the 2.8 GiB of gradients and moments LoRA saves
    assert peak(use_peft=True, lora_dropout=0.05) > peak(use_peft=True, lora_dropout=0.0)
    assert peak(gradient_checkpointing=True) < full
    assert peak(dtype="float32") > full
    assert peak(beta=0.04) > full  # a frozen reference copy
    assert peak(model="Qwen/Qwen2.5-1.5B-Instruct") > full > peak(model="tiny")
    assert peak(max_completion_length=2048) > full


def test_micro_batch_above_the_step_is_lowered_not_refused(monkeypatch):
    fig = static_figure(monkeypatch, num_generations=2, prompts_per_step=2, micro_batch_size=64)
    plt.close(fig)


def test_interactive_widget_redraws_and_keeps_its_rules(monkeypatch, capsys):
    monkeypatch.delenv("LABKIT_STATIC", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a collapsed layout warns; it must not
        box = widgets.memory_plan_widget()
    assert isinstance(box, ipywidgets.VBox) and isinstance(box.children[-1], ipywidgets.Output)
    controls = {}

    def collect(widget):
        for child in getattr(widget, "children", ()):
            if getattr(child, "description", ""):
                controls[child.description] = child
            collect(child)

    collect(box)
    rank, lora = controls["LoRA rank r"], controls["LoRA (all-linear)"]
    dropout = controls["LoRA dropout"]
    assert rank.disabled and dropout.disabled and not lora.value
    lora.value = True
    assert not rank.disabled and not dropout.disabled
    dropout.value = 0.0
    micro = controls["micro-batch"]
    assert micro.max == 8 * 16
    controls["G (num_generations)"].value = 2
    controls["prompts per step"].value = 2
    assert (micro.max, micro.value) == (4, 4)  # clamped before the figure is drawn
    controls["model"].value = "tiny"
    assert "Cannot draw" not in capsys.readouterr().out
    for slider in (rank, micro, controls["completion tokens"]):
        track = int(slider.layout.width.removesuffix("px")) - widgets.controls._READOUT_PX \
            - widgets.controls._CHAR_PX * len(slider.description)
        assert track >= 200, slider.description
