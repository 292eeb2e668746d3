"""The configuration of a run: every knob in one validated dataclass (``train_config``), the
method presets (``presets``), the field validators and ``Setting`` (``fields``), the combination
rules (``rules``) and the modules that register them (``methods``), and the generic name table the
method registries share (``registry``).

``from labkit.config import TrainConfig, preset`` gives what a notebook needs. Those names load on
first use (PEP 562 ``__getattr__``): ``fields``, ``rules`` and ``registry`` are imported by the
loss and estimator modules that ``train_config`` itself imports, so loading ``train_config``
whenever this package is entered would close an import circle.
"""

import importlib

#: What ``labkit.config`` offers, and the module of each name.
_EXPORTS = {"TrainConfig": "train_config", "FIELD_DOCS": "train_config",
            "preset": "presets", "preset_doc": "presets", "PRESETS": "presets"}

__all__ = ["FIELD_DOCS", "PRESETS", "TrainConfig", "preset", "preset_doc"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'labkit.config' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"labkit.config.{_EXPORTS[name]}"), name)
    globals()[name] = value   # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
