"""The one metric vocabulary of the lab: every column a run logs, and how a step averages them.

A training history (``train(...).history``) has one row per step and the flat column names of
:data:`METRICS`; :func:`labkit.losses.policy_loss` returns its diagnostics under the same names, so
a number read off a loss call in a notebook is the number the history logs. TRL logs the same
quantities under slash names (``clip_ratio/low_mean``, ``completions/mean_length``...):
:data:`labkit.trl_bridge.TRL_METRICS` translates them, and nothing else in the lab uses them.
"""

from __future__ import annotations

import math

import torch

#: Column -> meaning of every metric a run logs (one row per step).
METRICS = {
    "step": "training steps completed (one step = one generation batch)",
    "reward": "mean total reward of the sampled completions (weighted sum + overlong penalty)",
    "reward_std": "standard deviation of the total reward over the sampled completions",
    "reward_<name>": "mean reward of one reward function (e.g. reward_accuracy, reward_format)",
    "accuracy": "fraction of sampled completions whose answer is correct (accuracy_reward)",
    "accuracy_<family>": "accuracy of the step's completions of one task family (e.g. "
                         "accuracy_add), when the data has a family column",
    "eval_accuracy_<cell>": "eval accuracy of one (family, difficulty) cell, e.g. "
                            "eval_accuracy_add_d1, when the eval set has several cells",
    "completion_length": "mean completion length in tokens (end-of-turn included)",
    "completion_length_max": "longest completion of the step",
    "truncation_rate": "fraction of completions cut at max_completion_length",
    "frac_reward_zero_std": "fraction of sampled groups whose rewards are all equal (zero "
                            "advantage under GRPO; what dynamic sampling drops)",
    "groups_dropped": "groups dropped by dynamic sampling (all rounds)",
    "resample_rounds": "extra sampling rounds dynamic sampling needed to refill the batch",
    "completions_trained": "completions that went through the training forward (the others "
                           "had no gradient to give)",
    "temperature": "sampling temperature of the step (follows temperature_schedule)",
    "loss": "policy surrogate loss per optimizer step (about 0 on-policy even though the "
            "gradient is not; KL and entropy terms excluded)",
    "clip_low": "share of loss tokens clipped at 1 - epsilon (A < 0): zero gradient",
    "clip_high": "share of loss tokens clipped at 1 + epsilon_high (A > 0): zero gradient",
    "clip_region": "share of loss tokens in either clipped region",
    "clip_dual": "share of loss tokens past dual-clip's c (A < 0): zero gradient",
    "kl_old": "k3 estimate of KL(old policy || current policy) on the loss tokens",
    "kl_ref": "mean per-token KL estimate to the reference model (only when beta > 0)",
    "entropy": "mean per-token entropy (nats) of the policy on the completions that trained",
    "entropy_high_frac": "share of loss tokens whose entropy exceeds entropy_threshold nats",
    "tokens_masked": "share of loss tokens whose gradient a token filter removed "
                     "(top_entropy_quantile, Clip-Cov, KL-Cov, sampler importance masking)",
    "sampling_logp_diff": "mean |trainer - sampler| log-prob of the completion tokens "
                          "(vllm_importance_sampling_correction; TRL's "
                          "sampling/sampling_logp_difference/mean)",
    "sampling_logp_diff_max": "largest |trainer - sampler| log-prob of a completion token",
    "is_ratio_mean": "mean mismatch weight after its bound, over tokens (token_* modes) or "
                     "sequences (sequence_* modes) (TRL's sampling/importance_sampling_ratio/mean)",
    "is_corrected_frac": "share of tokens (token_* modes) or sequences (sequence_* modes) whose "
                         "mismatch ratio the bound truncated or masked",
    "staleness": "max_staleness > 0: steps between the weights that sampled the step's batch "
                 "and the weights it trains (labkit.offpolicy)",
    "queue_wait": "async_mode='overlapped': seconds the trainer waited for the sampling thread "
                  "(the queue starved)",
    "staleness_mean": "staleness_admission: mean staleness of the step's groups (staleness is "
                      "the largest)",
    "groups_discarded": "staleness_admission='discard': groups dropped in this step as more than "
                        "max_staleness steps old (the sampler refilled them)",
    "newer_version_frac": "partial_rollouts: share of the batch's sampled tokens written by a "
                          "newer policy version than their completion's first token",
    "admission_wait": "staleness_admission: time the trainer waited for its groups on the "
                      "simulated clock (one unit = one decoded token)",
    "offpolicy_ratio_mean": "max_staleness > 0: mean behaviour ratio pi_prox / pi_behav over the "
                            "loss tokens (the weights at the update / the weights that sampled)",
    "offpolicy_ratio_q<NN>": "quantiles 05, 25, 50, 75, 95 of the behaviour ratio over the loss "
                             "tokens (offpolicy_ratio_q05 ...)",
    "offpolicy_kl": "k3 estimate of KL(behaviour || proximal policy) per loss token: how far the "
                    "weights moved since the batch was sampled",
    "offpolicy_clip_frac": "share of loss tokens whose behaviour ratio lies outside [1 - epsilon, "
                           "1 + epsilon_high] (what a clip anchored on the sampler would silence)",
    "offpolicy_corrected_frac": "share of loss tokens whose behaviour weight offpolicy_correction "
                                "truncated (tis) or masked (icepop, decoupled)",
    "tool_call_rate": "episodes: share of episodes that called a tool at least once",
    "tool_calls": "episodes: mean tool calls answered per episode",
    "tool_error_rate": "episodes: share of tool calls answered with an error (malformed call, "
                       "bad argument, the tool's own refusal)",
    "turns": "episodes: mean assistant turns per episode",
    "turn_limit_rate": "episodes: share that stopped at a call past max_tool_calling_iterations",
    "policy_tokens": "episodes: mean tokens the policy wrote per episode (the loss's tokens; "
                     "completion_length counts the environment's too)",
    "environment_logp": "episodes: mean log-prob the policy gives the environment's tokens (it "
                        "did not write them; it climbs when they are wrongly trained on)",
    "eval_tool_call_rate": "episodes: share of eval episodes that called a tool",
    "eval_turns": "episodes: mean assistant turns of the eval episodes",
    "ptx_loss": "PTX: token-mean NLL (nats) of the step's warm-start examples (ptx_coef > 0), "
                "before the coefficient",
    "value_loss": "PPO critic loss (clipped squared error to the GAE returns)",
    "value_clipfrac": "share of tokens where the clipped value branch was used",
    "explained_variance": "PPO: 1 - Var(returns - values) / Var(returns) on the step's samples, "
                          "before the critic trains on them (0: no better than a constant)",
    "grad_norm": "global gradient norm of the policy before clipping (mean over optimizer steps)",
    "value_grad_norm": "global gradient norm of the critic before clipping",
    "skipped_nonfinite": "optimizer steps skipped because the loss, the gradient or the updated "
                         "weights were NaN/inf (the weights are then rolled back)",
    "ref_reset": "1 when the reference model was reset to the policy after this step (ProRL)",
    "ref_sync": "1 when the reference moved toward the policy after this step (TR-DPO)",
    "learning_rate": "learning rate of the step's first optimizer step",
    "step_time": "seconds for the whole step (evaluation excluded)",
    "generation_time": "seconds spent sampling completions",
    "sample_time": "seconds of steps 1-2: sampling and scoring the batch (generation_time "
                   "included), or waiting for the async producer (labkit.training.clock)",
    "score_time": "seconds of step 3: the no-grad forwards (old policy, reference, critic)",
    "advantage_time": "seconds of step 4: the off-policy correction and the advantages",
    "update_time": "seconds of step 5: training forwards and backwards, optimizer steps",
    "eval_time": "seconds of the evaluation (every eval_every; not in step_time)",
    "sampled_tokens": "completion tokens the sampler generated in the step, every dynamic-sampling "
                      "round included (the step's generation cost, counted the same on any machine)",
    "tokens_per_second": "completion tokens sampled per second of step time",
    "peak_memory_mb": "peak CUDA memory allocated in the step, else peak process RSS (MiB)",
    "eval_accuracy": "pass@1 on the eval split at the sampling temperature (every eval_every)",
    "eval_pass@k": "fraction of eval prompts solved by at least one of eval_k samples",
    "eval_length": "mean eval completion length",
    "eval_length_correct": "mean length of the right eval completions (NaN: none right)",
    "eval_length_wrong": "mean length of the wrong eval completions (NaN: none wrong)",
    "eval_format_rate": "fraction of eval completions in the answer format",
    "eval_truncation": "fraction of eval completions cut at max_completion_length",
}

#: Columns that measure the machine, not the algorithm (they differ between identical runs).
TIMING_COLUMNS = ("step_time", "generation_time", "sample_time", "score_time", "advantage_time",
                  "update_time", "eval_time", "tokens_per_second", "peak_memory_mb", "queue_wait")

#: Columns every step has, NaN when nothing trained (so tables line up across steps).
ALWAYS_LOGGED = ("loss", "clip_low", "clip_high", "clip_region", "kl_old", "entropy")


def describe(column: str) -> str:
    """The meaning of a history column (``reward_accuracy`` resolves to ``reward_<name>``)."""
    if column in METRICS:
        return METRICS[column]
    if column.startswith("reward_"):
        return f"{METRICS['reward_<name>']}: here {column.removeprefix('reward_')}"
    if column.startswith("eval_accuracy_"):
        return f"{METRICS['eval_accuracy_<cell>']}: here {column.removeprefix('eval_accuracy_')}"
    if column.startswith("accuracy_"):
        return f"{METRICS['accuracy_<family>']}: here {column.removeprefix('accuracy_')}"
    raise KeyError(f"{column!r} is not a metric the lab logs; see labkit.metrics.METRICS")


class StepStats:
    """Weighted means of per-micro-batch metrics over one step, kept as tensors until the end
    (one device sync per step instead of one per metric and micro-batch)."""

    def __init__(self):
        self.sums, self.weights, self.counts = {}, {}, {}
        self.optimizer_steps = 0

    def add(self, name: str, value, weight) -> None:
        """Add ``value`` with ``weight`` (e.g. its token count). ``weight=None``: a sum per
        optimizer step (the loss of the micro-batches), averaged over optimizer steps."""
        value = value.detach().float() if isinstance(value, torch.Tensor) else float(value)
        w = 1.0 if weight is None else weight
        self.sums[name] = self.sums.get(name, 0.0) + value * w
        self.weights[name] = None if weight is None else self.weights.get(name, 0.0) + w

    def count(self, name: str, value: int) -> None:
        self.counts[name] = self.counts.get(name, 0) + value

    def result(self) -> dict:
        row = dict(self.counts)
        pending = {}  # the means and their denominators, read from the device together
        for name, total in self.sums.items():
            weight = self.weights[name]
            denominator = self.optimizer_steps if weight is None else weight
            pending["denominator", name] = denominator
            if (isinstance(total, torch.Tensor) or isinstance(denominator, torch.Tensor)
                    or denominator > 0):
                pending["mean", name] = total / denominator  # on the device for tensors
        read = _read_all(pending)
        for name in self.sums:
            row[name] = float(read["mean", name]) if read["denominator", name] > 0 else math.nan
        for name in ALWAYS_LOGGED:
            row.setdefault(name, math.nan)
        return row


def _read_all(values: dict) -> dict:
    """``values`` with every tensor among them read to a Python number in one transfer (exact:
    float32 and integer values are carried in float64)."""
    tensors = {name: v for name, v in values.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        return values
    numbers = torch.stack([v.detach().reshape(()).double() for v in tensors.values()]).tolist()
    return {**values, **dict(zip(tensors, numbers))}


__all__ = ["ALWAYS_LOGGED", "METRICS", "TIMING_COLUMNS", "StepStats", "describe"]
