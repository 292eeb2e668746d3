"""Whether this kernel writes a static copy of a notebook: ``LABKIT_STATIC=1``, which CI, the
notebook tests and ``python -m labkit section_times`` set. A static copy keeps no widget state, so
a slider would show as a bare label and a progress bar frozen at 0%: the widgets draw their
default figure instead (:mod:`labkit.widgets`), and training shows no progress bar (its history,
and a :class:`labkit.viz.LivePlot`, say how far it went)."""

from __future__ import annotations

import os

VARIABLE = "LABKIT_STATIC"


def static_outputs() -> bool:
    """True when ``LABKIT_STATIC=1`` is set."""
    return os.environ.get(VARIABLE) == "1"


__all__ = ["VARIABLE", "static_outputs"]
