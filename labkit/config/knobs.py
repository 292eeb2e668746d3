"""One declaration per config field: :func:`knob`, and the facts every reader derives from it.

A field of :class:`~labkit.config.TrainConfig` is written once, as

.. code-block:: python

    epsilon: float = knob(0.2, between(0, 1, high_open=True), trl="epsilon")
    \"\"\"lower clip: ratio >= 1 - epsilon (TRL)\"\"\"

that is its default, its range, how the TRL bridge carries it, whether a resume may change it,
its kind, and its doc (the string under it). A loss type's own knob is a
:class:`labkit.plugins.Setting` in its registration, read the same way (:func:`setting_knob`).
Everything else is derived from these declarations (:data:`labkit.config.FIELDS`):

* the TRL bridge's tables (:mod:`labkit.trl_bridge.tables`: ``SHARED_FIELDS``,
  ``DERIVED_FIELDS``, ``LAB_ONLY``, ``DROPPABLE``, ``NOT_CARRIED``) from ``trl``;
* :data:`labkit.config.RESUMABLE_CHANGES` (what a resume may change) from ``resumable``;
* the catalog test's generic fields (no method's switch) from ``kind``;
* :data:`labkit.config.FIELD_DOCS` and ``help(TrainConfig)`` from the doc.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import itertools
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass

from labkit.plugins.settings import refuse

#: A field's kind: ``"generic"`` (the model, the machine, batch sizes, the optimiser, decoding,
#: evaluation, checkpoints: no method's switch) or ``"method"`` (a catalog method's switch or
#: knob; ``tests/test_catalog.py`` checks that each belongs to a catalog entry).
KINDS = ("generic", "method")
#: How the TRL bridge carries a field (:class:`Bridge`'s ``table``).
TABLES = ("shared", "derived", "lab_only", "not_carried")


@dataclass(frozen=True)
class Bridge:
    """How the TRL bridge carries one field.

    ``table`` is ``"shared"`` (``text`` is the ``GRPOConfig`` field of the same meaning, copied),
    ``"derived"`` (``text``: how it shapes TRL's config by another road), ``"lab_only"`` (TRL
    cannot express any value but the field's default; ``text`` says why: a string, or a mapping
    ``{value: why}``; ``droppable``: a user may drop it on purpose, back to the default) or
    ``"not_carried"`` (no effect on what TRL runs; ``text`` says why)."""

    table: str
    text: str | Mapping
    droppable: bool = False


def derived(how: str) -> Bridge:
    """The field shapes TRL's config by another road (``how``)."""
    return Bridge("derived", how)


def lab_only(why: str | Mapping, *, droppable: bool = False) -> Bridge:
    """TRL has no such setting: any value but the default is refused, saying ``why``."""
    return Bridge("lab_only", why, droppable)


def not_carried(why: str) -> Bridge:
    """The field has no effect on what TRL runs (``why``)."""
    return Bridge("not_carried", why)


def knob(default, range, *, trl: str | Bridge, resumable: bool = False,
         kind: str = "method") -> dataclasses.Field:
    """A :class:`~labkit.config.TrainConfig` field with its facts as metadata (the doc is the
    string written under the declaration).

    Args:
        default: the default value.
        range: its check (:func:`labkit.plugins.between`, :func:`~labkit.plugins.whole`...).
        trl: TRL's ``GRPOConfig`` field of the same meaning, or a :class:`Bridge`
            (:func:`derived`, :func:`lab_only`, :func:`not_carried`).
        resumable: a resumed run may change it (it does not change what the run computes).
        kind: ``"generic"`` or ``"method"`` (:data:`KINDS`).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    bridge = Bridge("shared", trl) if isinstance(trl, str) else trl
    return dataclasses.field(default=default, metadata={
        "range": range, "trl": bridge, "resumable": resumable, "kind": kind})


def setting_knob(setting, loss, where: str) -> dataclasses.Field:
    """The field a loss type's :class:`~labkit.plugins.Setting` declares: a method knob no resume
    may change, carried to TRL under ``setting.trl``; without one, refused off its default when
    TRL runs the loss (``setting.why``), else not carried (the loss itself is refused)."""
    if setting.trl is not None:
        bridge = Bridge("shared", setting.trl)
    elif loss.trl_name is not None:
        bridge = lab_only(setting.why or f"TRL's {loss.trl_name} loss has no such setting "
                                         f"(declared by loss_type={loss.name!r})")
    else:
        bridge = not_carried(f"loss_type={loss.name!r} only (refused)")
    return dataclasses.field(default=setting.default, metadata={
        "range": setting.range, "trl": bridge, "resumable": False, "kind": "method",
        "doc": setting.doc, "declared_by": where})


@dataclass(frozen=True)
class Knob:
    """Everything declared about one field (:data:`labkit.config.FIELDS`)."""

    name: str
    default: object
    range: object
    doc: str
    trl: Bridge
    resumable: bool
    kind: str


# ---- building the dataclass, once ---------------------------------------------------------------
def field_docs(cls) -> dict[str, str]:
    """Each field's doc: the string written under its declaration in ``cls``'s source."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    docs = {}
    for node, after in itertools.pairwise(body):
        if (isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def loss_settings(written, losses) -> dict[str, dataclasses.Field]:
    """The fields the loss types' :class:`~labkit.plugins.Setting` options declare
    (:func:`setting_knob`); ``ValueError`` naming the registration for an option no field holds,
    a setting that redeclares a ``written`` field, or two losses declaring one name
    differently."""
    declared: dict[str, tuple] = {}
    for loss in losses:
        where = f"loss_type {loss.name!r} (registered in {loss.module})"
        for name, setting in loss.settings.items():
            if name in written:
                refuse(f"{where} declares the setting {name!r}, which TrainConfig already has: "
                       f"give options={{{name!r}: <its default>}} to read the existing field")
            if name in declared and declared[name][0] != setting:
                refuse(f"{where} declares the setting {name!r} differently from "
                       f"{declared[name][2]}: declare it once and share that Setting")
            declared.setdefault(name, (setting, loss, where))
    for loss in losses:
        for name in loss.options:
            if name not in written and name not in declared:
                refuse(f"loss_type {loss.name!r} (registered in {loss.module}) reads option "
                       f"{name!r}, which is no TrainConfig field: declare it with "
                       f"options={{{name!r}: Setting(default, range, doc, trl)}} "
                       f"(labkit.plugins.Setting)")
    return {name: setting_knob(setting, loss, where)
            for name, (setting, loss, where) in declared.items()}


def build(cls, registry, refuse_names):
    """Make ``cls`` the dataclass of its written fields plus the settings of the loss types in
    ``registry`` (those registered when :mod:`labkit.config` is imported: every module that
    ``labkit/losses/__init__.py`` imports), once. ``refuse_names(kwargs, field_names)`` runs
    before the generated ``__init__`` (TRL's spellings get the lab's). Returns ``cls``,
    ``{field: Knob}`` and a listener for the loss registry that refuses a loss registered later
    whose settings would need new fields."""
    written = {name: value for name, value in vars(cls).items()
               if isinstance(value, dataclasses.Field)}
    docs = field_docs(cls)
    settings = loss_settings(written, list(registry.values()))
    for name, field in settings.items():
        cls.__annotations__[name] = getattr(field.metadata["range"], "annotation", "object")
        setattr(cls, name, field)
    dataclasses.dataclass(cls)
    names = frozenset(f.name for f in dataclasses.fields(cls))
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        refuse_names(kwargs, names)
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    facts = {f.name: Knob(f.name, f.default, f.metadata["range"],
                          f.metadata.get("doc", docs.get(f.name, "")), f.metadata["trl"],
                          f.metadata["resumable"], f.metadata["kind"])
             for f in dataclasses.fields(cls)}
    cls.__doc__ += "\n    Fields (default):\n\n" + "\n".join(
        f"    {k.name} ({k.default!r}): {k.doc}" for k in facts.values())

    def refuse_late_settings(name, loss):
        if loss is None:
            return  # a removal (tests): its fields stay, unread
        loss_settings(written, [*registry.values(), loss])  # the refusals above, for this one
        new = sorted(set(loss.settings) - names)
        if new:
            refuse(f"loss_type {name!r} (registered in {loss.module}) declares the setting(s) "
                   f"{', '.join(map(repr, new))} after TrainConfig was built: the config is built "
                   f"once, when labkit.config is imported, from the loss types registered by "
                   f"then. Import the loss's module from labkit/losses/__init__.py (its one "
                   f"import line) so its settings are fields from the start")

    return cls, facts, refuse_late_settings
