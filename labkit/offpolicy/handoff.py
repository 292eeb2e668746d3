"""The hand-off: labkit's asynchronous settings under the names of TRL, prime-rl, verl and AReaL.

One table, shown by notebook 11 (section 10) and rendered into ``docs/conventions.md`` by
``tests/conventions_measure.py``, so the two cannot disagree. TRL's names are read from TRL 1.16's
``trl.experimental.async_grpo`` (``AsyncGRPOConfig``: ``max_staleness`` defaults to 4 and older
samples are dropped; the loss takes the vLLM server's log-probs as the old policy). The other
frameworks' names are their configuration keys as their documentation gives them (prime-rl's
asynchronous-training page, verl's fully async recipe, AReaL's asynchronous RL guide and
arXiv 2505.24298); where a framework has no such setting the cell says so. Settings that need an
inference server have no lab equivalent and are refused by name (:data:`SERVER_ONLY`).
"""

from __future__ import annotations

#: Column names of :data:`HANDOFF`, in order.
COLUMNS = ("labkit", "TRL AsyncGRPOTrainer", "prime-rl", "verl (fully async)", "AReaL")

#: One row per lab setting: what the other trainers call it.
HANDOFF = (
    ("`max_staleness=k`", "`max_staleness` (default 4)", "`max_async_level`; `max_off_policy_steps`",
     ("`async_training.staleness_threshold` (a share of stale samples, not steps), "
      "`async_training.trigger_parameter_sync_step`"), "`rollout.max_head_offpolicyness`"),
    ("`async_mode='deterministic'`", "none: sampling overlaps for real", "none", "none", "none"),
    ("`async_mode='overlapped'`", "the rollout worker on a vLLM server (refused)",
     "the inference server beside the trainer", "the Rollouter on its own GPUs",
     "rollout workers on their own GPUs"),
    ("`offpolicy_correction='coupled'`", "the only loss: the server's log-probs are the old policy",
     "its loss, with the inference log-probs as the old policy", "-", "-"),
    ("`offpolicy_correction='decoupled'`, `offpolicy_weight_cap=5`", "none", "none", "-",
     "decoupled PPO (`use_decoupled_loss`), weight cap `behav_imp_weight_cap`"),
    ("`offpolicy_correction='tis'` / `'icepop'`", ("none for stale samples (its "
     "`vllm_importance_sampling_*` correct the engines' mismatch in `GRPOTrainer`)"), "-",
     "rollout correction, token-level truncate or mask", "-"),
    ("`staleness_admission='discard'`", "what `max_staleness` does: older samples dropped",
     "`max_off_policy_steps`: older rollouts dropped", "-", "-"),
    ("`staleness_admission='slow_down'`", "none", "`max_async_level` bounds how far inference runs",
     "-", "admission by `max_head_offpolicyness`: (k + v + 1) x batch samples may have started"),
    ("`partial_rollouts=True`", "none", "in-flight rollouts keep decoding across weight updates",
     "`async_training.partial_rollout`", ("interruptible generation: rollouts continue with the "
                                           "new weights")),
)

#: Settings of the inference-server trainers that the lab refuses by name: nothing on one device
#: stands for them.
SERVER_ONLY = ("TRL `vllm_server_base_url`, `max_inflight_tasks`, `weight_sync_steps`",
               "verl's Rollouter resources and `async_training.require_batches`",
               "AReaL's weight-update transport and rollout-worker allocation")


def handoff_markdown() -> str:
    """:data:`HANDOFF` as a markdown table."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in HANDOFF]
    return "\n".join(lines)


__all__ = ["COLUMNS", "HANDOFF", "SERVER_ONLY", "handoff_markdown"]
