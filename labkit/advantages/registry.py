"""The table of advantage estimators: one entry per ``advantage_estimator``, written by the file
that implements it (the losses' pattern, :mod:`labkit.losses.registry`).

An estimator turns a batch's rewards into advantages: one per completion (the group estimators:
GRPO, RLOO, ReMax, OPO) or one per token (GAE with a critic). Its file registers an adapter that
reads :class:`AdvantageInputs` and returns :class:`Advantages`; the pure tensor function the
notebooks call (``group_advantages``, ``rloo_advantages``...) stays beside it. The trainer, the
config (allowed values, the estimator's own rules, which need groups or a critic), the TRL bridge
and the catalog read this table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from labkit.plugins import Registry

__all__ = ["ESTIMATOR_REGISTRY", "AdvantageInputs", "Advantages", "Estimator", "estimators",
           "get_estimator", "group_estimators", "register_advantage_estimator",
           "unregister_advantage_estimator"]


@dataclass(frozen=True)
class AdvantageInputs:
    """What the trainer hands an estimator.

    ======================  ==========  =======================================================
    field                   shape       meaning
    ======================  ==========  =======================================================
    ``rewards``             (B,)        total reward per completion (KL-in-reward already
                                        subtracted for sequence estimators; NaN = missing)
    ``num_generations``     int         G: completions per prompt, consecutive rows
    ``lengths``             (B,)        completion lengths in tokens
    ``mask``                (B, T)      loss mask
    ``config``              TrainConfig the run's settings (``scale_rewards``, ``gamma``...)
    ``reward_components``   (B, F)      one column per reward function (GDPO)
    ``values``              (B, T)      the critic's values at sampling time (GAE), or None
    ``token_kl``            (B, T)      per-token KL to the reference when it goes in the
                                        reward (GAE folds it in per token), or None
    ``greedy_rewards``      callable    ``() -> (P,)`` reward of one greedy completion per
                                        prompt (ReMax's baseline), sampled on demand
    ``action_mask``         (B, T)      multi-turn episodes: 1 on the policy's tokens, 0 on the
                                        environment's; None for single-turn completions
    ``turn_rewards``        (B, T)      multi-turn episodes: each policy turn's reward from the
                                        environment on the turn's last token, or None
    ======================  ==========  =======================================================
    """

    rewards: torch.Tensor
    num_generations: int
    lengths: torch.Tensor
    mask: torch.Tensor
    config: object
    reward_components: torch.Tensor | None = None
    values: torch.Tensor | None = None
    token_kl: torch.Tensor | None = None
    greedy_rewards: Callable[[], torch.Tensor] | None = None
    action_mask: torch.Tensor | None = None
    turn_rewards: torch.Tensor | None = None


@dataclass(frozen=True)
class Advantages:
    """An estimator's result: ``advantages`` (B,) or (B, T); ``returns`` (B, T), the critic's
    targets (GAE only); ``metrics`` for the step's history row."""

    advantages: torch.Tensor
    returns: torch.Tensor | None = None
    metrics: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Estimator:
    """One registered ``advantage_estimator``.

    Attributes:
        name: the ``advantage_estimator`` value.
        compute: ``compute(inputs: AdvantageInputs) -> Advantages``.
        groups: compares the completions of a prompt (needs ``num_generations >= 2``).
        per_token: one advantage per token (GAE), else one per completion.
        critic: needs the value model (the trainer builds it only then).
        missing_rewards: treats a NaN reward as missing (TRL's rule for GRPO); the others need
            every reward and the trainer refuses a batch with one missing.
        trl_refusal: why TRL's GRPOTrainer cannot run it, or None when it can.
        config_check: ``check(config)`` raising ``ValueError`` for combinations it cannot honour.
        paper: (title, arXiv id), for the catalog.
        summary: one line.
    """

    name: str
    compute: Callable[[AdvantageInputs], Advantages]
    groups: bool = True
    per_token: bool = False
    critic: bool = False
    missing_rewards: bool = False
    trl_refusal: str | None = None
    config_check: Callable[[object], None] | None = None
    paper: tuple[str, str | None] | None = None
    summary: str = ""

    @property
    def module(self) -> str:
        """The module that registered it."""
        return self.compute.__module__


_TABLE = Registry("advantage_estimator", "an estimator")
#: Read-only view of every registered estimator, by name, in registration order.
ESTIMATOR_REGISTRY: Mapping[str, Estimator] = _TABLE.view


class _TRLRefusals(Mapping):
    """``{estimator: why TRL's GRPOTrainer cannot run it}``, as each registered estimator
    declares it (``trl_refusal``), read at each use."""

    def __getitem__(self, name):
        reason = ESTIMATOR_REGISTRY[name].trl_refusal if name in ESTIMATOR_REGISTRY else None
        return reason or f"GRPOTrainer has no advantage estimator {name!r}"

    def __iter__(self):
        return iter(ESTIMATOR_REGISTRY)

    def __len__(self):
        return len(ESTIMATOR_REGISTRY)


#: Why TRL cannot run an estimator (the ``advantage_estimator`` field's TRL bridge).
TRL_REFUSALS: Mapping[str, str] = _TRLRefusals()


def register_advantage_estimator(name: str, *, groups: bool = True, per_token: bool = False,
                                 critic: bool = False, missing_rewards: bool = False,
                                 trl_refusal: str | None = None, config_check=None,
                                 paper: tuple[str, str | None] | None = None, summary: str = ""):
    """Decorator: register ``compute(inputs) -> Advantages`` as ``advantage_estimator=name``."""
    return _TABLE.decorator(name, lambda compute: Estimator(
        name=name, compute=compute, groups=groups, per_token=per_token, critic=critic,
        missing_rewards=missing_rewards, trl_refusal=trl_refusal, config_check=config_check,
        paper=paper, summary=summary))


#: Remove a registered estimator (for tests that register a toy one).
unregister_advantage_estimator = _TABLE.remove
#: ``get_estimator(name)``: the registered estimator, or ``ValueError`` listing the names.
get_estimator = _TABLE.entry
#: ``estimators()``: names of every registered estimator.
estimators = _TABLE.names


def group_estimators() -> tuple[str, ...]:
    """Names of the estimators that compare the completions of a group."""
    return _TABLE.names(lambda estimator: estimator.groups)
