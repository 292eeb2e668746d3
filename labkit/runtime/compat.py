r"""labkit's dependencies: the versions it needs, and the one place it speaks two transformers dialects.

Two jobs, both about the environment rather than about RL:

* **Floors.** The oldest version of each dependency that the lab was tested with is declared once,
  in ``pyproject.toml``; installed, it is in the package metadata. :func:`check_versions` compares
  what is installed against it and :func:`require_compatible` turns a shortfall into one line
  that names the package, the version found, the version needed and the command that fixes it,
  instead of a traceback from deep inside transformers (transformers 4.57's tokenizer loader, for
  example, fails with ``Tokenizer class TokenizersBackend does not exist``). ``import labkit``
  runs it for the packages every notebook needs.
* **No deprecated calls.** :func:`escalate_dependency_warnings` turns a ``FutureWarning`` or
  ``DeprecationWarning`` that a dependency raises while labkit's code is on the call stack into
  an error. The test suite and the notebooks under test run with it, so a release that
  deprecates something labkit calls fails CI before a learner sees the warning; labkit's own
  warnings (inert clip-higher, GSPO's aggregation, ...) are ``UserWarning``\s and still show.
* **Renamed methods.** :func:`enable_activation_checkpointing` calls whichever name of the
  method the installed transformers has.
* **The cache keyword.** transformers 5.24 renamed the model forward's ``past_key_values`` argument
  to ``cache`` (the old name warns and is removed in 5.40). :func:`cache_kwargs` gives the
  keyword the installed version expects, so labkit's KV-cached sampler and shared-prompt forward
  run without a deprecation warning on both sides of the rename.
"""

from __future__ import annotations

import functools
import re
import sys
import warnings
from importlib import metadata
from pathlib import Path

#: The packages ``import labkit`` checks: those every notebook imports. The test and TRL extras
#: are checked where they are used (``labkit.commands.check`` lists everything).
CORE_PACKAGES = ("torch", "transformers", "tokenizers", "datasets", "peft", "pandas",
                 "matplotlib", "ipywidgets", "tqdm")

#: transformers release that renamed the forward's ``past_key_values`` to ``cache``.
CACHE_RENAME = (5, 24)


def version_tuple(text: str) -> tuple[int, ...]:
    """The numeric release of a version string: ``"2.13.0+cpu"`` -> (2, 13, 0), ``"5.0.0rc1"`` ->
    (5, 0, 0). Pre-release and local tags are ignored: a floor is about releases."""
    release = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    if release is None:
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(part) for part in release.group(1).split("."))


def declared_floors(extras: tuple[str, ...] = ()) -> dict[str, str]:
    """``{package: oldest supported version}`` from labkit's installed metadata (the ``>=`` bounds
    of ``pyproject.toml``), for the core dependencies and the named extras. Empty when labkit is
    imported from a source tree that was never installed."""
    try:
        requirements = metadata.requires("labkit") or []
    except metadata.PackageNotFoundError:
        return {}
    floors = {}
    for requirement in requirements:
        spec, _, marker = requirement.partition(";")
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
        if extra and extra.group(1) not in extras:
            continue
        found = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*(?:\[[^\]]*\])?\s*>=\s*([^,\s]+)", spec)
        if found:
            floors[_normalise(found.group(1))] = found.group(2)
    return floors


def installed_version(package: str) -> str | None:
    """The installed distribution's version, or None when it is not installed."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def check_versions(packages=None, extras: tuple[str, ...] = ()) -> list[str]:
    """One line per dependency that is missing or older than its declared floor; [] when all is
    well. ``packages`` limits the check (default: every declared dependency)."""
    floors = declared_floors(extras)
    names = floors if packages is None else [_normalise(p) for p in packages if
                                             _normalise(p) in floors]
    problems = []
    for name in names:
        found = installed_version(name)
        needed = floors[name]
        if found is None:
            problems.append(f"{name} is not installed; labkit needs {name}>={needed}: "
                            f"pip install '{name}>={needed}'")
        elif version_tuple(found) < version_tuple(needed):
            problems.append(f"{name} {found} is too old; labkit needs {name}>={needed}: "
                            f"pip install -U '{name}>={needed}'")
    return problems


class IncompatibleEnvironment(ImportError):
    """An installed dependency is older than labkit's declared floor (or missing)."""


def require_compatible(packages=CORE_PACKAGES) -> None:
    """Raise :class:`IncompatibleEnvironment` naming every package below its floor."""
    problems = check_versions(packages)
    if problems:
        raise IncompatibleEnvironment("labkit cannot run in this environment: "
                                      + "; ".join(problems))


def cache_kwargs(cache) -> dict:
    """Keyword arguments that hand a KV cache to a transformers model forward (``cache=None``:
    no cache), under the name the installed transformers expects."""
    return {_cache_keyword(): cache, "use_cache": cache is not None}


def escalate_dependency_warnings():
    """From now on, a ``FutureWarning``/``DeprecationWarning`` raised while a labkit function is
    on the call stack raises instead of printing; others print as before (a DeprecationWarning
    that a library raises outside labkit's calls stays hidden, as Python's default filters hide
    it from a learner). Returns a function that undoes it. Meant for tests and CI
    (``tests/conftest.py``, the notebooks' kernels under nbval), not for a learner's session."""
    previous_show = warnings.showwarning
    filters = list(warnings.filters)
    # Deprecations are ignored by default outside __main__: let them reach the check.
    warnings.filterwarnings("always", category=DeprecationWarning)
    warnings.filterwarnings("always", category=FutureWarning)

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, (FutureWarning, DeprecationWarning)):
            caller = _labkit_caller()
            if caller is not None:
                raise category(f"{message} [{category.__name__} from {filename}:{lineno}, "
                               f"inside labkit's call at {caller}: move labkit to the "
                               f"current API]")
            if issubclass(category, DeprecationWarning) and _in_a_module(filename):
                return  # hidden by Python's default filters too (shown for __main__ code only)
        previous_show(message, category, filename, lineno, file, line)

    warnings.showwarning = show

    def undo():
        warnings.showwarning = previous_show
        warnings.filters[:] = filters
        warnings._filters_mutated()

    return undo


_PACKAGE_DIR = str(Path(__file__).resolve().parents[1])  # labkit/, not labkit/runtime/


def _in_a_module(filename: str) -> bool:
    """Whether ``filename`` is the file of an imported module (not a script, a notebook cell or
    an interactive line, the code Python's default filters show DeprecationWarnings for)."""
    return any(getattr(module, "__file__", None) == filename for module in list(sys.modules.values()))


def _labkit_caller() -> str | None:
    """``file:line`` of the innermost labkit frame on the stack (this module excluded)."""
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(_PACKAGE_DIR) and filename != __file__:
            return f"{Path(filename).name}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def enable_activation_checkpointing(model) -> None:
    """Recompute activations in the backward pass, under the name the installed transformers
    uses (5.x renamed ``gradient_checkpointing_enable`` to ``activation_checkpointing_enable``
    and deprecated the old name); the KV cache is switched off, as checkpointing requires."""
    enable = (getattr(model, "activation_checkpointing_enable", None)
              or model.gradient_checkpointing_enable)
    enable()
    model.config.use_cache = False


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.cache
def _cache_keyword() -> str:
    import transformers  # here, not at import: `import labkit` must not pay for transformers

    return "cache" if version_tuple(transformers.__version__) >= CACHE_RENAME else \
        "past_key_values"
