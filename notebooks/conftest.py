"""Settings for executing the notebooks under nbval (inherited by each notebook's kernel)."""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

# No hub downloads from a notebook run by the tests.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Headless: widgets draw their static figure with default settings (labkit.widgets).
os.environ.setdefault("LABKIT_STATIC", "1")
# A notebook's record() calls compare each value its prose quotes with the committed
# notebooks/results/NN_name.json and fail the cell, naming the stale quotes (labkit.quotes).
os.environ.setdefault("LABKIT_RESULTS", "check")
# Each check writes a line here (the kernels inherit the folder from the process that started
# the test run, before pytest-xdist starts its workers); the summary below counts them.
if not os.environ.get("LABKIT_RESULTS_LOG"):
    _log = tempfile.mkdtemp(prefix="labkit-checks-")
    os.environ["LABKIT_RESULTS_LOG"] = _log
    atexit.register(shutil.rmtree, _log, ignore_errors=True)

# Each kernel starts with the suite's deprecation check (labkit.runtime.compat): a FutureWarning or
# DeprecationWarning that a dependency raises inside a labkit call fails the cell, so no
# notebook shows a learner such a warning. IPython runs the profile's startup files first.
_ipython_dir = Path(tempfile.mkdtemp(prefix="labkit-ipython-"))
(_ipython_dir / "profile_default" / "startup").mkdir(parents=True)
(_ipython_dir / "profile_default" / "startup" / "00-labkit-deprecations.py").write_text(
    "from labkit.runtime.compat import escalate_dependency_warnings\nescalate_dependency_warnings()\n")
os.environ["IPYTHONDIR"] = str(_ipython_dir)
atexit.register(shutil.rmtree, _ipython_dir, ignore_errors=True)


def pytest_terminal_summary(terminalreporter):
    """How many recorded values were checked exactly, how many within their portable bands, and
    on what platform (labkit.quotes.check_summary)."""
    from labkit.quotes import check_summary

    text = check_summary(Path(os.environ["LABKIT_RESULTS_LOG"]))
    if text:
        terminalreporter.write_sep("-", "recorded values")
        terminalreporter.write_line(text)
