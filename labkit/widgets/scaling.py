"""Notebook 09's widget: the memory planner's bill for a model and a batch."""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from labkit import viz
from labkit.scale.memory.gpus import MARGIN_GIB, gpu_table
from labkit.widgets.controls import (
    _STYLE,
    _interactive,
    _slider,
    widgets_enabled,
)

MEMORY_PLAN_MODELS = ("tiny", "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen3-0.6B",
                      "Qwen/Qwen2.5-1.5B-Instruct")


def fit_verdict(plan, gpus: Sequence[float], margin_gib: float = MARGIN_GIB) -> str:
    """The sizes a plan fits with ``margin_gib`` to spare, and those it is tight on, in words:
    "fits 40, 80 GiB; tight on 24 GiB (under 1 GiB spare)"."""
    table = gpu_table(plan, gpus, margin_gib)
    fits = [f"{g:g}" for g in table.loc[table["verdict"] == "fits", "gpu_GiB"]]
    tight = [f"{g:g}" for g in table.loc[table["verdict"] == "tight", "gpu_GiB"]]
    words = f"fits {', '.join(fits)} GiB" if fits else f"fits none of {tuple(gpus)} GiB"
    if tight:
        words += f"; tight on {', '.join(tight)} GiB (under {margin_gib:g} GiB spare)"
    return words


def memory_plan_figure(model: str = "Qwen/Qwen2.5-0.5B-Instruct", num_generations: int = 8,
                       prompts_per_step: int = 16, prompt_length: int = 256,
                       max_completion_length: int = 1024, micro_batch_size: int = 8,
                       dtype: str = "bfloat16", use_peft: bool = False, lora_r: int = 16,
                       lora_dropout: float = 0.05, gradient_checkpointing: bool = False,
                       beta: float = 0.0, gpus: Sequence[float] = (16, 24, 40, 80),
                       margin_gib: float = MARGIN_GIB) -> Figure:
    """The memory bill of one GRPO step on a GPU (``labkit.scale.memory.memory_plan`` with
    ``device="cuda"``), drawn by ``labkit.viz.plot_memory_plan`` with the GPU sizes marked.

    The run is ``preset("grpo")`` with these fields; a ``micro_batch_size`` above the step's
    completions (``num_generations x prompts_per_step``) is lowered to it. With ``use_peft`` the
    adapters are rank ``lora_r`` on every linear layer (``lora_target_modules="all-linear"``);
    a ``lora_dropout`` above 0 makes peft keep a dropped copy of each adapted layer's input for
    the backward pass, which the planner counts. The title says which sizes the plan fits with
    ``margin_gib`` to spare (:func:`labkit.scale.memory.gpu_table`) and on which it is tight.
    """
    from labkit.config import preset
    from labkit.scale.memory import memory_plan
    from labkit.viz import plot_memory_plan

    completions = num_generations * prompts_per_step
    config = preset("grpo", num_generations=num_generations, prompts_per_step=prompts_per_step,
                    max_completion_length=max_completion_length,
                    micro_batch_size=min(micro_batch_size, completions), dtype=dtype,
                    use_peft=use_peft, lora_r=lora_r, lora_dropout=lora_dropout,
                    lora_target_modules="all-linear",
                    gradient_checkpointing=gradient_checkpointing, beta=beta)
    plan = memory_plan(model, config, prompt_length=prompt_length, device="cuda")
    # a figure as wide as the notebook column, so the legend beside the bars has room
    fig = Figure(figsize=(8.6, 3.8), dpi=viz.FIGURE_DPI, layout="constrained")
    ax = fig.subplots()
    plot_memory_plan(plan, gpus, axes=ax)
    top = ax.get_ylim()[1]
    for label in list(ax.texts):  # a GPU size far above the bars: its label would sit off the
        if label.xy[1] > top:     # axes and collapse the layout, so it goes into the title
            label.remove()
    # the verdict on a line of its own: with a tight size named, one line is wider than the figure
    ax.set_title(f"{model}: {ax.get_title()}\n{fit_verdict(plan, gpus, margin_gib)}",
                 fontsize="medium")
    ax.set_xlabel(f"phase of one step (G = {num_generations} x {prompts_per_step} prompts, "
                  f"{prompt_length} + {max_completion_length} tokens)")
    return fig


def memory_plan_widget(model: str = "Qwen/Qwen2.5-0.5B-Instruct", num_generations: int = 8,
                       prompts_per_step: int = 16, prompt_length: int = 256,
                       max_completion_length: int = 1024, micro_batch_size: int = 8,
                       dtype: str = "bfloat16", use_peft: bool = False, lora_r: int = 16,
                       lora_dropout: float = 0.05, gradient_checkpointing: bool = False,
                       beta: float = 0.0, gpus: Sequence[float] = (16, 24, 40, 80),
                       margin_gib: float = MARGIN_GIB):
    """The memory planner: pick a model, G, lengths, LoRA and checkpointing; see the bill.

    Redraws :func:`memory_plan_figure` (a stacked bar per phase of a step, the GPU sizes as
    lines). The LoRA controls are greyed out while LoRA is off; the micro-batch slider runs to
    the step's completions and follows G and the prompts per step.
    """
    if not widgets_enabled():
        return memory_plan_figure(model, num_generations, prompts_per_step, prompt_length,
                                  max_completion_length, micro_batch_size, dtype, use_peft,
                                  lora_r, lora_dropout, gradient_checkpointing, beta, gpus,
                                  margin_gib)
    import ipywidgets as widgets

    def checkbox(value, description):
        return widgets.Checkbox(value=value, description=description, indent=False,
                                layout=widgets.Layout(width="auto"))

    generations = _slider("IntSlider", num_generations, 2, 64, 1, "G (num_generations)")
    prompts = _slider("IntSlider", prompts_per_step, 1, 64, 1, "prompts per step")
    micro = _slider("IntSlider", min(micro_batch_size, num_generations * prompts_per_step), 1,
                    num_generations * prompts_per_step, 1, "micro-batch",
                    tooltip="micro_batch_size: completions per forward/backward")
    lora = checkbox(use_peft, "LoRA (all-linear)")
    rank = _slider("IntSlider", lora_r, 1, 256, 1, "LoRA rank r", disabled=not use_peft)
    dropout = widgets.Dropdown(options=sorted({0.0, 0.05, float(lora_dropout)}),
                               value=float(lora_dropout), description="LoRA dropout",
                               style=_STYLE, disabled=not use_peft)

    def follow_batch(change):  # observed before the figure is: the micro-batch is clamped first
        micro.max = generations.value * prompts.value

    def toggle_rank(change):
        rank.disabled = dropout.disabled = not change["new"]

    generations.observe(follow_batch, "value")
    prompts.observe(follow_batch, "value")
    lora.observe(toggle_rank, "value")
    controls = {
        "model": widgets.Dropdown(options=list(MEMORY_PLAN_MODELS), value=model,
                                  description="model", style=_STYLE),
        "num_generations": generations,
        "prompts_per_step": prompts,
        "prompt_length": _slider("IntSlider", prompt_length, 16, 4096, 16, "prompt tokens"),
        "max_completion_length": _slider("IntSlider", max_completion_length, 16, 16384, 16,
                                         "completion tokens"),
        "micro_batch_size": micro,
        "dtype": widgets.Dropdown(options=["bfloat16", "float32"], value=dtype,
                                  description="dtype", style=_STYLE),
        "use_peft": lora,
        "lora_r": rank,
        "lora_dropout": dropout,
        "gradient_checkpointing": checkbox(gradient_checkpointing, "gradient checkpointing"),
        "beta": widgets.Dropdown(options=[("beta = 0 (no reference)", 0.0),
                                          ("beta = 0.04 (reference model)", 0.04)],
                                 value=beta, description="KL", style=_STYLE),
    }

    def draw(**values):
        return memory_plan_figure(**values, gpus=gpus, margin_gib=margin_gib)

    return _interactive(draw, controls)
