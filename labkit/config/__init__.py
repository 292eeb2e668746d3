"""The configuration of a run: every knob in one validated dataclass (``train_config``), each
field declared once with its facts (``knobs``) and checked (``checks``), the method presets
(``presets``), the modules that register the methods' rules (``methods``) and the TRL spellings
the config refuses with the lab's (``trl_names``).

``from labkit.config import TrainConfig, preset`` gives what a notebook needs. The configuration
stands above the methods: it imports the method folders to read their menus and rules, and they
declare their settings and rules through :mod:`labkit.plugins`, never through this package.
"""

from labkit.config.presets import PRESETS, preset, preset_doc
from labkit.config.train_config import (
    FIELD_DOCS,
    FIELDS,
    GENERIC_FIELDS,
    RESUMABLE_CHANGES,
    TrainConfig,
)

__all__ = ["FIELDS", "FIELD_DOCS", "GENERIC_FIELDS", "PRESETS", "RESUMABLE_CHANGES", "TrainConfig",
           "preset", "preset_doc"]
