"""labkit.runtime.compat: version floors with one clear line, the cache keyword of the installed
transformers, and the suite's check that labkit calls no deprecated dependency API."""

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from labkit.models import TINY_MODEL_DIR
from labkit.runtime import compat

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("text, expected", [("2.13.0+cpu", (2, 13, 0)), ("5.0.0rc1", (5, 0, 0)),
                                            ("0.22.1", (0, 22, 1)), ("v1.2", (1, 2))])
def test_version_tuple(text, expected):
    assert compat.version_tuple(text) == expected


def test_version_tuple_refuses_garbage():
    with pytest.raises(ValueError, match="not a version"):
        compat.version_tuple("latest")


def _pyproject_floors():
    import re

    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {re.match(r"[\w.-]+", r).group(0).lower(): r.split(">=")[1]
            for r in project["dependencies"]}


FLOORS = _pyproject_floors()


def test_floors_come_from_pyproject():
    assert compat.declared_floors() == FLOORS
    assert "trl" not in FLOORS  # an extra, not a core dependency
    assert compat.declared_floors(extras=("dev",))["trl"]


def test_a_package_below_its_floor_is_named(monkeypatch):
    real = compat.installed_version
    monkeypatch.setattr(compat, "installed_version",
                        lambda name: "4.57.6" if name == "transformers" else real(name))
    problems = compat.check_versions()
    need = FLOORS["transformers"]
    assert problems == [(f"transformers 4.57.6 is too old; labkit needs transformers>={need}: "
                         f"pip install -U 'transformers>={need}'")]
    with pytest.raises(compat.IncompatibleEnvironment, match="transformers 4.57.6 is too old"):
        compat.require_compatible()


def test_a_missing_package_is_named(monkeypatch):
    real = compat.installed_version
    monkeypatch.setattr(compat, "installed_version",
                        lambda name: None if name == "peft" else real(name))
    need = FLOORS["peft"]
    assert compat.check_versions(["peft", "torch"]) == [
        f"peft is not installed; labkit needs peft>={need}: pip install 'peft>={need}'"]


def test_import_labkit_in_an_old_environment_fails_with_one_line(tmp_path):
    """A real interpreter that finds transformers 4.57.6's metadata first (as in an image that
    carries it) gets one line at `import labkit`, not a traceback from the tokenizer loader."""
    info = tmp_path / "transformers-4.57.6.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: transformers\nVersion: 4.57.6\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", "import labkit"], capture_output=True,
                          text=True, env=env, timeout=120, check=False)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("labkit.runtime.compat.IncompatibleEnvironment: labkit cannot run")
    assert f"transformers 4.57.6 is too old; labkit needs transformers>={FLOORS['transformers']}" \
        in last


@pytest.mark.skipif(not TINY_MODEL_DIR.exists(), reason="the shipped tiny model is missing")
def test_cache_kwargs_is_the_installed_transformers_keyword():
    from transformers import DynamicCache

    from labkit.models import load_policy

    model, _ = load_policy("tiny", device="cpu")
    ids = torch.tensor([[1, 2, 3]])
    cache = DynamicCache()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model(input_ids=ids, **compat.cache_kwargs(cache))
    assert cache.get_seq_length() == 3  # the model wrote into the cache it was given
    assert compat.cache_kwargs(None)["use_cache"] is False


def _labkit_frame(fn):
    """Run ``fn`` from a frame whose file lies inside the labkit package (as a labkit call)."""
    code = compile("result = fn()", str(Path(compat.__file__).parent / "_probe.py"), "exec")
    scope = {"fn": fn}
    exec(code, scope)  # noqa: S102 - a fixed string of this test, to fake a labkit frame
    return scope["result"]


def test_deprecations_inside_labkit_calls_raise_and_others_show():
    def deprecated():
        warnings.warn("old API", FutureWarning, stacklevel=2)
        return "ran"

    shown = []
    previous = warnings.showwarning
    warnings.showwarning = lambda message, *rest, **kw: shown.append(str(message))
    undo = compat.escalate_dependency_warnings()  # on top of the recorder
    try:
        with pytest.raises(FutureWarning, match="inside labkit's call at _probe.py"):
            _labkit_frame(deprecated)
        assert deprecated() == "ran"  # a chain that starts outside labkit prints as before
        # labkit's own warnings are UserWarnings and still show from inside labkit
        _labkit_frame(lambda: warnings.warn("inert clip-higher", UserWarning))
    finally:
        undo()
        warnings.showwarning = previous
    assert shown == ["old API", "inert clip-higher"]


def test_a_library_deprecation_outside_labkit_stays_hidden_as_python_hides_it():
    """Python shows a DeprecationWarning only for __main__ code (a script, a notebook cell); the
    check must not print what a learner would not see (pandas assigning a torch column, numpy 2)."""
    import json as library  # any imported module's file stands for "a library"

    shown = []
    previous = warnings.showwarning
    warnings.showwarning = lambda message, *rest, **kw: shown.append(str(message))
    undo = compat.escalate_dependency_warnings()
    try:
        warnings.warn_explicit("library deprecation", DeprecationWarning, library.__file__, 1)
        warnings.warn_explicit("cell deprecation", DeprecationWarning, "/tmp/ipykernel_1/2.py", 1)
        warnings.warn_explicit("library future", FutureWarning, library.__file__, 1)
    finally:
        undo()
        warnings.showwarning = previous
    assert shown == ["cell deprecation", "library future"]
