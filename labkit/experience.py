"""The experience of one step: sampled completions and everything the update reads about them.

An :class:`Experience` holds one row per completion, the ``G`` completions of a prompt in
consecutive rows (TRL's layout), as tensors of three kinds:

* prompt-aligned, left-padded: ``prompt_ids``, ``prompt_mask``;
* completion-aligned, right-padded: ``completion_ids``, ``completion_mask`` (sampled tokens,
  end-of-turn included), ``loss_mask`` (the tokens that enter the loss), ``sample_logp`` and
  ``sample_entropy`` (sampling log-probs and entropies), ``token_versions`` (which policy
  version sampled each token), and, when the update needs them,
  ``token_weights`` (a token filter's 0/1 weights), ``old_logp``, ``ref_logp``, ``values``,
  ``returns`` and ``token_advantages`` (GAE) and, for episodes, ``action_mask`` and
  ``turn_rewards`` (:mod:`labkit.agents.episodes`);
* per row: ``lengths``, ``truncated``, ``rewards`` (the weighted total), ``reward_components``
  (one column per reward function), ``sequence_advantages`` (the group estimators),
  ``prompt_index`` (the prompt's row in the train dataset) and ``demonstrations`` (RL-PLUS: rows
  that are external demonstrations).

An advantage is either one number per completion (``sequence_advantages``, shape (B,)) or one
per token (``token_advantages``, (B, L)); :meth:`Experience.advantages` gives the one that is set.

It can be concatenated (sampling rounds of DAPO's dynamic sampling), indexed by rows (keeping
groups, making mini-batches) and trimmed to the widest row, so a micro-batch of short completions
does not pay for the padding of a long one.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch

_PROMPT = ("prompt_ids", "prompt_mask")
_COMPLETION = ("completion_ids", "completion_mask", "action_mask", "loss_mask", "sample_logp",
               "sample_entropy", "token_weights", "old_logp", "ref_logp", "values", "returns",
               "token_advantages", "is_weights", "token_versions", "turn_rewards")


@dataclass
class Experience:
    """Completions of one step (see the module docstring). ``B`` rows, ``P`` prompt and ``L``
    completion columns."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    loss_mask: torch.Tensor
    sample_logp: torch.Tensor
    sample_entropy: torch.Tensor
    lengths: torch.Tensor
    truncated: torch.Tensor
    rewards: torch.Tensor | None = None
    reward_components: torch.Tensor | None = None
    sequence_advantages: torch.Tensor | None = None
    token_advantages: torch.Tensor | None = None
    old_logp: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None
    values: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    prompt_index: torch.Tensor | None = None
    demonstrations: torch.Tensor | None = None
    token_weights: torch.Tensor | None = None
    is_weights: torch.Tensor | None = None
    """(B, L) sampler/trainer mismatch weights (:mod:`labkit.tricks.mismatch`), when corrected"""
    action_mask: torch.Tensor | None = None
    """(B, L) multi-turn episodes: 1 on tokens the policy sampled, 0 on the environment's
    (:mod:`labkit.agents.episodes`); None when the policy wrote every completion token"""
    token_versions: torch.Tensor | None = None
    """(B, L) long: the policy version (trainer step) whose weights sampled each token, -1 on
    padding and on tokens no version sampled (an episode's environment tokens, demonstrations);
    stamped by the sampler
    (:mod:`labkit.offpolicy`). Partial rollouts mix two versions in a row"""
    turn_rewards: torch.Tensor | None = None
    """(B, L) multi-turn episodes whose environment keeps per-turn rewards: each policy turn's
    reward on its last token, 0 elsewhere (:mod:`labkit.agents.episodes`); None otherwise"""
    pad_token_id: int = 0

    @classmethod
    def from_rollout(cls, rollout, pad_token_id: int,
                     train_on_environment_tokens: bool = False) -> Experience:
        """Copy a :class:`labkit.sampling.Rollout` (inference-mode tensors, which autograd may not
        save) into ordinary tensors. For episodes the loss mask keeps the policy's tokens only
        (``completion_mask * action_mask``), unless ``train_on_environment_tokens`` (the masking
        bug, on purpose)."""
        mask = rollout.completion_mask.clone()
        actions = getattr(rollout, "action_mask", None)
        actions = None if actions is None else actions.clone()
        gains = getattr(rollout, "turn_rewards", None)
        loss_mask = mask.clone() if actions is None or train_on_environment_tokens \
            else mask * actions
        return cls(rollout.prompt_ids.clone(), rollout.prompt_mask.clone(),
                   rollout.completion_ids.clone(), mask, loss_mask, rollout.logprobs.clone(),
                   rollout.entropies.clone(), rollout.lengths.clone(), rollout.truncated.clone(),
                   action_mask=actions,
                   turn_rewards=None if gains is None else gains.clone(),
                   pad_token_id=pad_token_id)

    def __len__(self) -> int:
        return self.prompt_ids.size(0)

    @property
    def advantages(self) -> torch.Tensor | None:
        """The advantages the loss reads: per token (B, L) when set, else per sequence (B,)."""
        return self.token_advantages if self.token_advantages is not None \
            else self.sequence_advantages

    @property
    def input_ids(self) -> torch.Tensor:
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)

    @property
    def position_ids(self) -> torch.Tensor:
        """Positions counted from each row's first real token (prompts are left-padded)."""
        return (self.attention_mask.cumsum(-1) - 1).clamp(min=0)

    def _tensors(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor):
                yield f.name, value

    def _kind(self, name: str) -> str:
        if name in _PROMPT:
            return "prompt"
        if name in _COMPLETION:
            return "completion"
        return "row"

    def select(self, index) -> Experience:
        """Rows ``index`` (a bool mask or integer indices), every field alike."""
        return replace(self, **{name: value[index] for name, value in self._tensors()})

    def trimmed(self) -> Experience:
        """Drop prompt columns that are padding in every row (left) and completion columns past
        the longest completion (right)."""
        first = int(self.prompt_mask.any(0).int().argmax()) if len(self) else 0
        width = int(self.completion_mask.sum(-1).max()) if len(self) else 0
        changes = {}
        for name, value in self._tensors():
            kind = self._kind(name)
            if kind == "prompt":
                changes[name] = value[:, first:]
            elif kind == "completion":
                changes[name] = value[:, :width]
        return replace(self, **changes)

    @classmethod
    def cat(cls, parts: list[Experience]) -> Experience:
        """Stack experiences row-wise, padding prompts on the left and completions on the right."""
        if len(parts) == 1:
            return parts[0]
        first = parts[0]
        pad = first.pad_token_id
        prompt_width = max(p.prompt_ids.size(1) for p in parts)
        completion_width = max(p.completion_ids.size(1) for p in parts)
        merged = {}
        for name, value in first._tensors():
            kind = first._kind(name)
            fill = pad if name in ("prompt_ids", "completion_ids") else (
                -1 if name == "token_versions" else 0)
            pieces = []
            for part in parts:
                tensor = getattr(part, name)
                if tensor is None:
                    raise ValueError(f"cannot concatenate experiences: {name} is missing in one")
                if kind == "prompt":
                    tensor = _pad(tensor, prompt_width, fill, left=True)
                elif kind == "completion":
                    tensor = _pad(tensor, completion_width, fill, left=False)
                pieces.append(tensor)
            merged[name] = torch.cat(pieces)
        return replace(first, **merged)


def _pad(tensor: torch.Tensor, width: int, fill, left: bool) -> torch.Tensor:
    missing = width - tensor.size(1)
    if missing == 0:
        return tensor
    block = tensor.new_full((tensor.size(0), missing), fill)
    return torch.cat([block, tensor] if left else [tensor, block], dim=1)
