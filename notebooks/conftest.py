"""Settings for executing the notebooks under nbval (inherited by each notebook's kernel)."""

import os

# No hub downloads from a notebook run by the tests.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Headless: widgets draw their static figure with default settings (labkit.widgets).
os.environ.setdefault("LABKIT_STATIC", "1")

# Notebooks still being written: their math, widgets and exercises are in, but their live runs and
# reference logs are not yet measured against the current presets, so CI does not execute them
# yet. Remove a name from this list when its notebook is finished and passes `pytest <notebook>`.
collect_ignore = [
    "05_gspo.ipynb",
    "06_gfpo_length.ipynb",
]
