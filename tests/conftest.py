"""Test-wide settings: everything runs offline and on the CPU's deterministic path, and a
deprecation that labkit's own calls trigger in a dependency fails the test that triggered it."""

import os

import pytest

from labkit.compat import escalate_dependency_warnings

# Nothing in the tests may reach a model hub; fail fast instead of hanging on a download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(autouse=True)
def _no_deprecated_calls():
    """The whole suite runs as if with ``-W error::FutureWarning -W error::DeprecationWarning``,
    restricted to warnings raised while labkit is on the call stack (labkit.compat)."""
    undo = escalate_dependency_warnings()
    yield
    undo()
