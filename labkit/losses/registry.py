"""The table of loss types: one entry per ``loss_type``, written by the file that implements it.

A loss type is a surrogate (the per-token loss) plus an aggregation (how tokens become a scalar).
Its file registers it with :func:`register_policy_loss`, the way verl's ``core_algos.py`` registers
``@register_policy_loss("...")``; everything that needs to know the loss types reads this table
instead of comparing ``loss_type`` strings: :func:`labkit.losses.policy_loss` (dispatch, options,
clip metrics), :class:`labkit.config.TrainConfig` (allowed values, the loss's own config rules),
the trainer (which config fields to pass), the TRL bridge (TRL's name, or a refusal) and the
catalog (a registered loss without a catalog entry is listed from its registration).

Adding a loss is one new file in this package that calls :func:`register_policy_loss`, plus its
import line in ``labkit/losses/__init__.py``. A knob of its own is declared there too, as a
:class:`~labkit.plugins.Setting` (default, range, doc, TRL's name): the config gets a field of that
name, the TRL bridge copies or refuses it, the catalog lists it. ``tests/test_registries.py``
registers a loss with a setting from a module written to a temporary folder and trains it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import torch

from labkit.losses.aggregation import AGGREGATIONS
from labkit.plugins import Registry, Setting


@dataclass(frozen=True)
class SurrogateInputs:
    """What :func:`labkit.losses.policy_loss` hands every surrogate (masked positions are 0).

    ==================  ==========  ===========================================================
    field               shape       meaning
    ==================  ==========  ===========================================================
    ``logp``            (B, T)      current log-probs, differentiable
    ``old_logp``        (B, T)      behaviour log-probs (``logp.detach()`` on-policy)
    ``log_w``           (B, T) or   log importance weight at ``importance_sampling_level``
                        (B, 1)
    ``token_log_ratio`` (B, T)      per-token log-ratio (VESPO's sequence weight needs it)
    ``advantages``      (B, 1) or   advantages, in ``logp``'s dtype
                        (B, T)
    ``mask``            (B, T) bool response mask
    ``epsilon``         float       lower clip half-width (TRL ``epsilon``)
    ``epsilon_high``    float|None  upper clip half-width as given (None = ``epsilon``)
    ``importance_sampling_level``   ``"token"``, ``"sequence"`` or ``"sequence_token"``
    ==================  ==========  ===========================================================
    """

    logp: torch.Tensor
    old_logp: torch.Tensor
    log_w: torch.Tensor
    token_log_ratio: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    epsilon: float
    epsilon_high: float | None
    importance_sampling_level: str


#: ``clip_flags(w, advantages, epsilon, epsilon_high) -> (low, high)``: bool tensors marking the
#: tokens whose gradient the loss's hard clip removed (the ``clip_low``/``clip_high`` metrics).
ClipFlags = Callable[[torch.Tensor, torch.Tensor, float, float], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class LossType:
    """One registered ``loss_type``.

    Attributes:
        name: the ``loss_type`` value (TRL's name where TRL has the loss).
        surrogate: ``surrogate(inputs: SurrogateInputs, **options) -> (B, T) or (B, 1)`` per-token
            loss to minimise; raises ``ValueError`` for inputs it cannot take.
        aggregation: key of :data:`labkit.losses.aggregation.AGGREGATIONS`.
        clipped: True for PPO's clipped ratio (clip-higher, ``delta``, dual-clip and the
            Clip-Cov/KL-Cov penalties act on it).
        options: the loss's own keywords with their defaults, each a
            :class:`~labkit.config.TrainConfig` field of the same name; ``policy_loss`` accepts
            these beside the shared parameters (a missing one takes its default), and the
            trainer passes them from the config.
        settings: the options this loss declares (:class:`~labkit.plugins.Setting`): the config
            fields it adds. An option given as a bare default names a field declared elsewhere.
        batch_inputs: keywords the loss takes from the batch (attributes of
            :class:`labkit.experience.Experience`, e.g. RL-PLUS's ``demonstrations``); the trainer
            passes them from each micro-batch.
        trl_name: TRL's ``loss_type`` for it, or None when TRL lacks it (the bridge refuses).
        clip_flags: which tokens its hard clip silenced; None when nothing is hard-clipped.
        config_check: ``check(config)`` raising ``ValueError`` for combinations the loss cannot
            honour; :class:`~labkit.config.TrainConfig` calls it when the loss is selected.
        paper: (title, arXiv id) of the paper that introduced it, for the catalog.
        summary: one line saying what it is.
    """

    name: str
    surrogate: Callable[..., torch.Tensor]
    aggregation: str
    clipped: bool = False
    options: Mapping[str, object] = field(default_factory=dict)
    settings: Mapping[str, Setting] = field(default_factory=dict)
    batch_inputs: tuple[str, ...] = ()
    trl_name: str | None = None
    clip_flags: ClipFlags | None = None
    config_check: Callable[[object], None] | None = None
    paper: tuple[str, str | None] | None = None
    summary: str = ""

    @property
    def module(self) -> str:
        """The module that registered it."""
        return self.surrogate.__module__

    def options_from(self, config) -> dict:
        """This loss's options, read from a config (the trainer's call)."""
        return {name: getattr(config, name) for name in self.options}

    def inputs_from(self, batch) -> dict:
        """This loss's batch inputs, read from a (micro-)batch (the trainer's call)."""
        return {name: getattr(batch, name) for name in self.batch_inputs}

    @property
    def keywords(self) -> tuple[str, ...]:
        """Every keyword :func:`labkit.losses.policy_loss` accepts for this loss beyond the
        shared ones."""
        return (*self.options, *self.batch_inputs)


_TABLE = Registry("loss_type", "a loss type")
#: Read-only view of every registered loss type, by name, in registration order.
LOSS_REGISTRY: Mapping[str, LossType] = _TABLE.view


def register_policy_loss(name: str, *, aggregation: str, clipped: bool = False,
                         options: Mapping[str, Setting | object] | None = None,
                         batch_inputs: tuple[str, ...] = (), trl_name: str | None = None,
                         clip_flags: ClipFlags | None = None, config_check=None,
                         paper: tuple[str, str | None] | None = None, summary: str = ""):
    """Decorator: register the decorated surrogate as ``loss_type=name`` (returns it unchanged).

    ``options`` maps each of the surrogate's own keywords to a :class:`~labkit.plugins.Setting`
    (a config field this loss declares) or to a bare default (a field declared elsewhere, e.g. by
    another loss). Registering a name twice raises, so two files cannot silently fight over one
    loss type; a test that registers a toy loss removes it with :func:`unregister_policy_loss`.
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {tuple(AGGREGATIONS)}, got {aggregation!r}")
    options = dict(options or {})
    settings = {key: value for key, value in options.items() if isinstance(value, Setting)}
    defaults = {key: getattr(value, "default", value) for key, value in options.items()}
    return _TABLE.decorator(name, lambda surrogate: LossType(
        name=name, surrogate=surrogate, aggregation=aggregation, clipped=clipped,
        options=MappingProxyType(defaults), settings=MappingProxyType(settings),
        batch_inputs=tuple(batch_inputs), trl_name=trl_name, clip_flags=clip_flags,
        config_check=config_check, paper=paper, summary=summary))


#: Remove a registered loss type (for tests that register a toy one).
unregister_policy_loss = _TABLE.remove
#: ``get_loss_type(name)``: the registered loss type, or ``ValueError`` listing the names.
get_loss_type = _TABLE.entry
#: ``loss_types()``: names of every registered loss type.
loss_types = _TABLE.names
#: ``listen(listener)``: ``listener(name, loss_type)`` before every registration (raising refuses
#: it), ``listener(name, None)`` after every removal (:class:`labkit.config.TrainConfig` follows
#: the losses' settings this way).
listen = _TABLE.listen


def clipped_loss_types() -> tuple[str, ...]:
    """Names of the loss types that use PPO's clipped ratio."""
    return _TABLE.names(lambda loss: loss.clipped)


def option_owners(option: str) -> tuple[str, ...]:
    """The loss types that take ``option`` (a config field or a batch input)."""
    return _TABLE.names(lambda loss: option in loss.keywords)


def all_options() -> dict[str, object]:
    """Every loss type's options with their defaults (the config fields the table reads)."""
    merged: dict[str, object] = {}
    for loss in LOSS_REGISTRY.values():
        merged.update(loss.options)
    return merged
