"""What every widget shares: the static switch, the controls' sizes, text boxes of numbers, and the
redraw loop that puts a :mod:`labkit.viz` figure under its controls (see :mod:`labkit.widgets`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping, Sequence

from matplotlib.figure import Figure

from labkit.runtime.static import static_outputs

_STYLE = {"description_width": "initial"}
# Widths in px. A slider's description takes its natural width ("initial") and the slider's
# Layout width adds the track and the readout to it, so no label eats its slider's track
# (ipywidgets' default is 300 px for label, track and readout together).
_CHAR_PX = 8  # a generous average width of a character in JupyterLab's 13 px widget font
_TRACK_PX = 220
_READOUT_PX = 80
_TEXT_PX = 240  # a text box's input field


def widgets_enabled() -> bool:
    """True unless ``LABKIT_STATIC=1`` is set or ipywidgets is not installed."""
    if static_outputs():
        return False
    return importlib.util.find_spec("ipywidgets") is not None


def _numbers(text: str, name: str) -> list[float] | None:
    """Comma-separated numbers from a text box; None when it is empty."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        return [float(p) for p in parts] or None
    except ValueError:
        raise ValueError(f"{name}: write numbers separated by commas, got {text!r}") from None


def _text(value: Sequence[float] | None) -> str:
    return "" if value is None else ", ".join(f"{v:g}" for v in value)


def _interactive(draw: Callable[..., Figure], controls: Mapping, rows: Sequence | None = None):
    """Controls above an output area that ``draw`` redraws on every change.

    ``rows`` lays the controls out (a list of widgets stacked above the figure); by default they
    share one wrapping row.
    """
    import ipywidgets as widgets
    from IPython.display import display

    def redraw(**values):
        try:
            fig = draw(**values)
        except ValueError as err:
            print(f"Cannot draw this: {err}")
            return
        display(fig)

    output = widgets.interactive_output(redraw, dict(controls))
    if rows is None:
        rows = [widgets.HBox(list(controls.values()), layout=widgets.Layout(flex_flow="row wrap"))]
    return widgets.VBox([*rows, output])


def _slider(kind: str, value, low, high, step, description: str, track: int = _TRACK_PX,
            **extra):
    """A slider whose track keeps ``track`` px whatever its description's length."""
    import ipywidgets as widgets

    width = _CHAR_PX * len(description) + track + _READOUT_PX
    return getattr(widgets, kind)(value=value, min=low, max=high, step=step,
                                  description=description, continuous_update=False,
                                  style=_STYLE, layout=widgets.Layout(width=f"{width}px"),
                                  **extra)


def _textbox(value: str, description: str, placeholder: str = ""):
    import ipywidgets as widgets

    width = _CHAR_PX * len(description) + _TEXT_PX
    return widgets.Text(value=value, description=description, placeholder=placeholder,
                        continuous_update=False, style=_STYLE,
                        layout=widgets.Layout(width=f"{width}px"))


def _length_range(default: int) -> tuple[int, int]:
    """(step, max) of a token-length slider around ``default``: up to 4x it, ~128+ stops.

    The step is a power of two dividing ``default`` (so the default is a stop), at most
    max / 128: one drag pixel is a few tokens, not a few hundred.
    """
    high = max(64, 1 << (4 * max(int(default), 1) - 1).bit_length())
    step = 1
    while default % (2 * step) == 0 and 2 * step <= high // 128:
        step *= 2
    return step, high


def _checkboxes(options: Sequence[str], selected: Sequence[str], column_px: int,
                in_click_order: bool):
    """A grid of checkboxes, one per option, all visible, with a ``value``: the ticked options.

    The grid's ``value`` (a tuple, observable like a widget's) lists the ticked options in the
    order of ``options``, or, with ``in_click_order``, ``selected`` first and then in the order
    they were ticked.
    """
    import ipywidgets as widgets
    import traitlets

    boxes = [widgets.Checkbox(value=o in selected, description=str(o), indent=False,
                              layout=widgets.Layout(width="auto"))
             for o in options]
    grid = widgets.GridBox(boxes, layout=widgets.Layout(
        grid_template_columns=f"repeat(auto-fill, minmax({column_px}px, 1fr))", width="100%"))
    grid.add_traits(value=traitlets.Tuple())
    grid.value = tuple(o for o in selected if o in options)
    if not in_click_order:
        grid.value = tuple(o for o in options if o in grid.value)

    def toggled(change):
        option = options[boxes.index(change["owner"])]
        if not in_click_order:
            grid.value = tuple(o for o, box in zip(options, boxes) if box.value)
        elif change["new"]:
            grid.value = (*grid.value, option)
        else:
            grid.value = tuple(o for o in grid.value if o != option)

    for box in boxes:
        box.observe(toggled, "value")
    return grid
