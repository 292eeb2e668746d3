"""Settings for executing the notebooks under nbval (inherited by each notebook's kernel)."""

import os

# No hub downloads from a notebook run by the tests.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Headless: widgets draw their static figure with default settings (labkit.widgets).
os.environ.setdefault("LABKIT_STATIC", "1")
