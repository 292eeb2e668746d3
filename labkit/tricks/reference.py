"""Moving the reference model during a run: ProRL's hard reset (arXiv 2505.24864, section 2.3.1)
and TR-DPO's soft update (arXiv 2404.09656; TRL's ``sync_ref_model``)."""

from __future__ import annotations

import torch

from labkit.plugins import config_rule


@torch.no_grad()
def reset_reference(policy: torch.nn.Module, reference: torch.nn.Module,
                    optimizer: torch.optim.Optimizer | None = None) -> None:
    """ProRL's reset: copy the policy's weights into the reference and clear the optimizer state
    (Adam's moments and step counts), in place. The policy itself is unchanged, and right after
    a reset the KL to the reference is 0 (and so is its gradient)."""
    reference.load_state_dict(policy.state_dict())
    if optimizer is not None:
        optimizer.state.clear()


@torch.no_grad()
def mix_reference(policy: torch.nn.Module, reference: torch.nn.Module, alpha: float) -> None:
    """TR-DPO's soft update of the reference, in place: ``ref <- alpha * policy + (1 - alpha) *
    ref`` for every floating-point tensor (TRL: ``ref_model_mixup_alpha``, 0.6 by default)."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    policy_state = policy.state_dict()
    for name, tensor in reference.state_dict().items():
        if tensor.is_floating_point():
            tensor.mul_(1 - alpha).add_(policy_state[name].to(tensor.dtype), alpha=alpha)


class StallTrigger:
    """ProRL's reset trigger: fires after ``patience`` evaluations in a row without a new best
    ``eval_accuracy`` (0 = never); its state is saved with a checkpoint."""

    def __init__(self, patience: int):
        self.patience = patience
        self.best, self.since_best = -float("inf"), 0

    def stalled(self, accuracy: float) -> bool:
        """Record one evaluation; True when the reference should be reset now."""
        if not self.patience:
            return False
        if accuracy > self.best:
            self.best, self.since_best = accuracy, 0
            return False
        self.since_best += 1
        if self.since_best < self.patience:
            return False
        self.since_best = 0
        return True


def move_reference(config, step: int, optimizer_steps: int, policy: torch.nn.Module,
                   reference: torch.nn.Module | None,
                   optimizer: torch.optim.Optimizer) -> tuple[int, dict]:
    """After the update of step ``step`` (counted from 0): TR-DPO's soft sync every
    ``ref_model_sync_steps`` optimizer steps, and ProRL's periodic hard reset, each moving
    ``reference`` towards ``policy`` in place (a run without a separate reference, None, has no
    move: the config refuses one). ``optimizer_steps`` counts the run's optimizer steps before
    this update. Returns the count after it (the caller keeps it: a checkpoint
    saves it) and the ``ref_sync``/``ref_reset`` events of the step."""
    cfg = config
    events = {}
    if cfg.sync_ref_model:
        before = optimizer_steps
        optimizer_steps += cfg.num_iterations * cfg.num_mini_batches
        if optimizer_steps // cfg.ref_model_sync_steps > before // cfg.ref_model_sync_steps:
            mix_reference(policy, reference, cfg.ref_model_mixup_alpha)
            events["ref_sync"] = 1
    if cfg.ref_reset_every and (step + 1) % cfg.ref_reset_every == 0:
        reset_reference(policy, reference, optimizer)
        events["ref_reset"] = 1
    return optimizer_steps, events


@config_rule
def _check_reference_moves(config) -> None:
    if ((config.ref_reset_every or config.ref_reset_patience or config.sync_ref_model)
            and config.beta == 0):
        raise ValueError("ref_reset_every, ref_reset_patience and sync_ref_model move the "
                         "reference model, and beta = 0 has none: set beta > 0 (ProRL keeps the "
                         "KL term)")
    if config.ref_reset_patience and not config.eval_every:
        raise ValueError("ref_reset_patience watches eval_accuracy: set eval_every > 0")
