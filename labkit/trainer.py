"""The training loop: sample, score, compute advantages, update; one row of metrics per step.

One step (:meth:`Trainer.training_step`) reads like the papers' algorithm boxes:

1. **sample** ``prompts_per_step`` prompts (shuffled passes over the train split) and
   ``num_generations`` completions of each with the KV-cached sampler (:mod:`labkit.rollout`);
2. **score** them with the weighted reward functions
   (:func:`labkit.rewards.combine_rewards_by_weight`; default accuracy + format) plus DAPO's soft
   overlong penalty (:mod:`labkit.shaping`). With DAPO's dynamic sampling, groups whose rewards
   are all equal are dropped and new prompts are sampled until the batch is full again, for at
   most ``max_resample_rounds`` extra rounds;
3. **score forwards** without gradient, only those the configuration needs: the behaviour
   policy's log-probs when the update is off-policy (``num_iterations > 1`` or several
   mini-batches), the frozen reference's when ``beta != 0``, the critic's values for PPO;
4. **advantages**: a group estimator (:mod:`labkit.advantages`: GRPO, RLOO, ReMax, OPO), GFPO's
   filtered groups (:mod:`labkit.filters`), or GAE with the critic (whitened, as TRL and verl do);
5. **update**: ``num_iterations`` passes, each split into ``num_mini_batches`` optimizer steps,
   each accumulated over micro-batches of ``micro_batch_size`` completions. The loss is
   :func:`labkit.losses.policy_loss` (plus ``vf_coef`` times :func:`labkit.losses.value_loss` for
   PPO) with its normalisers counted over the whole mini-batch, so micro-batching does not
   change the gradient. Log-probs and entropies come from one forward, in float32, on completion
   positions only (:func:`labkit.logprobs.logprobs_and_entropy`). Gradients are clipped; a NaN or
   inf loss or gradient skips the optimizer step instead of poisoning the weights.

Where this departs from TRL's ``GRPOTrainer`` (and why):

* three savings that leave the gradient unchanged (up to float rounding): completions that
  cannot contribute (zero advantage with ``beta = 0`` and no entropy bonus, or nothing left in
  their loss mask) skip the training forward, while the normalisers still count them; the
  completions of one prompt share one forward of the prompt (its keys and values are repeated);
  micro-batches gather completions of similar length, so little compute goes to padding. The
  ``entropy`` and clip metrics are therefore averaged over the completions that trained;
* the ``dapo`` normaliser is TRL's: loss tokens of the whole generation batch divided by the
  number of mini-batches;
* dynamic sampling keeps groups whose *total* reward varies (verl's ``seq_reward`` metric; the
  DAPO paper uses accuracy) and, when the batch is still short after ``max_resample_rounds``,
  trains on what it has (verl raises);
* GFPO's rejected completions get advantage 0 and stay in the normaliser (the paper's eq. 2; TRL's
  removed trainer dropped them);
* KL in the reward (``kl_in_reward``) is the per-token estimate between the sampling and the
  reference log-probs: per token for GAE (InstructGPT), summed over the completion for the group
  estimators (TRL's RLOO);
* KeyboardInterrupt (the notebook's stop button) never leaves a half-applied step: Ctrl-C during
  an update is held until the update ends, and an interrupt while sampling rolls the random state
  back to the last completed step.
"""

from __future__ import annotations

import math
import random
import resource
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from labkit.advantages import (
    batch_normalize,
    explained_variance,
    gae,
    group_advantages,
    kl_penalized_rewards,
    kl_penalized_token_rewards,
    opo_advantages,
    outcome_to_token_rewards,
    remax_advantages,
    rloo_advantages,
)
from labkit.checkpoint import capture_rng, load_checkpoint, restore_rng, save_checkpoint
from labkit.config import TrainConfig
from labkit.evaluate import evaluate
from labkit.experience import Experience
from labkit.filters import dynamic_sampling_mask, gfpo_advantages, gfpo_filter
from labkit.logprobs import logprobs_and_entropy, token_logprobs
from labkit.losses import kl_estimate, policy_loss, value_loss
from labkit.models import ValueModel, load_policy
from labkit.rewards import (
    accuracy_reward,
    combine_rewards_by_weight,
    format_reward,
    per_completion,
)
from labkit.rollout import generate
from labkit.shaping import overlong_penalty
from labkit.tasks import load_split

#: Column -> meaning of every metric the trainer logs (one row per step).
METRICS = {
    "step": "training steps completed (one step = one generation batch)",
    "reward": "mean total reward of the sampled completions (weighted sum + overlong penalty)",
    "reward_std": "standard deviation of the total reward over the sampled completions",
    "reward_<name>": "mean reward of one reward function (e.g. reward_accuracy, reward_format)",
    "accuracy": "fraction of sampled completions whose answer is correct (accuracy_reward)",
    "completion_length": "mean completion length in tokens (end-of-turn included)",
    "completion_length_max": "longest completion of the step",
    "truncation_rate": "fraction of completions cut at max_completion_length",
    "frac_reward_zero_std": "fraction of sampled groups whose rewards are all equal (zero "
                            "advantage under GRPO; what dynamic sampling drops)",
    "groups_dropped": "groups dropped by dynamic sampling (all rounds)",
    "resample_rounds": "extra sampling rounds dynamic sampling needed to refill the batch",
    "completions_trained": "completions that went through the training forward (the others "
                           "had no gradient to give)",
    "loss": "policy loss per optimizer step (about 0 on-policy even though the gradient is not)",
    "clip_low": "share of loss tokens clipped at 1 - epsilon (A < 0): zero gradient",
    "clip_high": "share of loss tokens clipped at 1 + epsilon_high (A > 0): zero gradient",
    "clip_region": "share of loss tokens in either clipped region",
    "kl_old": "k3 estimate of KL(old policy || current policy) on the loss tokens",
    "kl_ref": "mean per-token KL estimate to the reference model (only when beta > 0)",
    "entropy": "mean per-token entropy (nats) of the policy on the completions that trained",
    "value_loss": "PPO critic loss (clipped squared error to the GAE returns)",
    "value_clipfrac": "share of tokens where the clipped value branch was used",
    "explained_variance": "PPO: 1 - Var(returns - values) / Var(returns) on the step's samples, "
                          "before the critic trains on them (0: no better than a constant)",
    "grad_norm": "global gradient norm of the policy before clipping (mean over optimizer steps)",
    "value_grad_norm": "global gradient norm of the critic before clipping",
    "skipped_nonfinite": "optimizer steps skipped because the loss or gradient was NaN/inf",
    "learning_rate": "learning rate of the step's first optimizer step",
    "step_time": "seconds for the whole step (evaluation excluded)",
    "generation_time": "seconds spent sampling completions",
    "tokens_per_second": "completion tokens sampled per second of step time",
    "peak_memory_mb": "peak CUDA memory allocated in the step, else peak process RSS (MiB)",
    "eval_accuracy": "pass@1 on the eval split at the sampling temperature (every eval_every)",
    "eval_pass@k": "fraction of eval prompts solved by at least one of eval_k samples",
    "eval_length": "mean eval completion length",
    "eval_format_rate": "fraction of eval completions in the answer format",
    "eval_truncation": "fraction of eval completions cut at max_completion_length",
}
# What one extra forward + backward costs, in padded tokens' worth of compute: on a CPU the tiny
# model's per-call overhead is small next to its per-token cost; on a GPU launches dominate.
_FORWARD_COST_IN_TOKENS = {"cpu": 256, "cuda": 8192}
TIMING_COLUMNS = ("step_time", "generation_time", "tokens_per_second", "peak_memory_mb")
_LOSS_METRICS = {"clip_ratio/low_mean": "clip_low", "clip_ratio/high_mean": "clip_high",
                 "clip_ratio/region_mean": "clip_region", "approx_kl_old/k3": "kl_old",
                 "kl": "kl_ref", "entropy": "entropy", "vf_clipfrac": "value_clipfrac"}


@dataclass
class TrainResult:
    """What :func:`train` returns."""

    model: torch.nn.Module
    tokenizer: object
    history: pd.DataFrame
    """one row per step, columns described in :data:`METRICS`"""
    eval_history: pd.DataFrame
    """one row per evaluation (step 0 = before training)"""
    interrupted: bool
    """True when training stopped on KeyboardInterrupt"""
    trainer: Trainer


class PromptSampler:
    """Shuffled passes over ``n`` prompts; the order depends only on ``(seed, epoch)``, so the
    position ``(epoch, offset)`` is the whole state."""

    def __init__(self, n: int, seed: int):
        if n < 1:
            raise ValueError("the train dataset is empty")
        self.n, self.seed, self.epoch, self.offset = n, seed, 0, 0
        self._order = self._permutation()

    def _permutation(self) -> list[int]:
        order = list(range(self.n))
        random.Random(self.seed * 1_000_003 + self.epoch).shuffle(order)
        return order

    def take(self, count: int) -> list[int]:
        indices = []
        while len(indices) < count:
            if self.offset == self.n:
                self.epoch, self.offset = self.epoch + 1, 0
                self._order = self._permutation()
            chunk = min(count - len(indices), self.n - self.offset)
            indices += self._order[self.offset:self.offset + chunk]
            self.offset += chunk
        return indices

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "offset": self.offset}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.offset = state["epoch"], state["offset"]
        self._order = self._permutation()


class Trainer:
    """RL post-training of a causal LM with the algorithm a :class:`TrainConfig` describes.

    ``model``/``tokenizer`` default to ``load_policy(config.model_name_or_path)``; datasets to
    the task suite's train and eval splits; ``reward_funcs`` to ``[accuracy_reward,
    format_reward]`` (TRL's signature ``fn(prompts, completions, **columns)``), weighted by
    ``config.reward_weights``. Each callback is called as ``callback(trainer, row)`` after every
    step (notebooks draw live plots with it).
    """

    def __init__(self, config: TrainConfig | None = None, model=None, tokenizer=None,
                 train_dataset=None, eval_dataset=None, reward_funcs=None, callbacks=()):
        from transformers import get_scheduler

        self.config = cfg = config if config is not None else TrainConfig()
        random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        if model is None:
            model, tokenizer = load_policy(cfg.model_name_or_path, device=cfg.device,
                                           dtype=cfg.dtype,
                                           gradient_checkpointing=cfg.gradient_checkpointing)
        elif tokenizer is None:
            raise ValueError("pass the model's tokenizer along with the model")
        elif cfg.gradient_checkpointing:  # transformers 5 renamed it; 4.x has only the old name
            enable = (getattr(model, "activation_checkpointing_enable", None)
                      or model.gradient_checkpointing_enable)
            enable()
            model.config.use_cache = False
        self.model, self.tokenizer = model, tokenizer
        self.device = next(model.parameters()).device
        self.train_dataset = load_split("train") if train_dataset is None else train_dataset
        if eval_dataset is None and cfg.eval_every:
            eval_dataset = load_split("eval")
        if eval_dataset is not None and cfg.eval_max_prompts is not None:
            eval_dataset = eval_dataset.select(range(min(cfg.eval_max_prompts, len(eval_dataset))))
        self.eval_dataset = eval_dataset
        self.reward_funcs = [accuracy_reward, format_reward] if reward_funcs is None \
            else list(reward_funcs)
        self.reward_names = _reward_names(self.reward_funcs)
        if cfg.reward_weights is not None and len(cfg.reward_weights) != len(self.reward_funcs):
            raise ValueError(f"reward_weights has {len(cfg.reward_weights)} weights for "
                             f"{len(self.reward_funcs)} reward functions "
                             f"({', '.join(self.reward_names)}): give one weight per function")
        self.callbacks = list(callbacks)

        # Only the models the configuration needs: a frozen reference only when beta != 0.
        self.ref_model = _frozen_copy(model) if cfg.needs_reference else None
        self.value_model = ValueModel(model) if cfg.advantage_estimator == "gae" else None
        groups = [{"params": [p for p in model.parameters() if p.requires_grad]}]
        if self.value_model is not None:
            groups.append({"params": list(self.value_model.parameters()),
                           "lr": cfg.value_learning_rate or cfg.learning_rate})
        self.optimizer = torch.optim.AdamW(groups, lr=cfg.learning_rate,
                                           betas=(cfg.adam_beta1, cfg.adam_beta2),
                                           weight_decay=cfg.weight_decay)
        optimizer_steps = cfg.max_steps * cfg.num_iterations * cfg.num_mini_batches
        self.scheduler = get_scheduler(cfg.lr_scheduler_type, self.optimizer,
                                       num_warmup_steps=math.ceil(cfg.warmup_ratio
                                                                  * optimizer_steps),
                                       num_training_steps=optimizer_steps)
        self.sampler = PromptSampler(len(self.train_dataset), cfg.seed)
        self.generator = torch.Generator(device=self.device).manual_seed(cfg.seed)
        self.step = 0
        self.rows: list[dict] = []
        self.eval_rows: list[dict] = []
        self._nonfinite_streak = 0
        self._stop_requested = self._update_started = False
        if cfg.resume_from:
            self.load_checkpoint(cfg.resume_from)

    # ---- tables ----------------------------------------------------------------------------------
    @property
    def history(self) -> pd.DataFrame:
        """One row per completed step (columns: :data:`METRICS`)."""
        return pd.DataFrame(self.rows)

    @property
    def eval_history(self) -> pd.DataFrame:
        """One row per evaluation, step 0 being the model before training."""
        return pd.DataFrame(self.eval_rows)

    # ---- the loop --------------------------------------------------------------------------------
    def train(self, resume_from=None) -> TrainResult:
        """Run steps until ``max_steps``; returns a :class:`TrainResult`, also when interrupted."""
        from tqdm.auto import tqdm

        cfg = self.config
        if resume_from is not None:
            self.load_checkpoint(resume_from)
        bar = tqdm(total=cfg.max_steps, initial=self.step, disable=not cfg.progress,
                   desc=f"{cfg.advantage_estimator}/{cfg.loss_type}")
        interrupted = False
        try:
            if cfg.eval_every and not self.eval_rows:
                self.eval_rows.append({"step": self.step, **self.evaluate()})
            while self.step < cfg.max_steps:
                row = self._run_step()
                bar.update(1)
                bar.set_postfix(reward=f"{row['reward']:.3f}", acc=f"{row['accuracy']:.2f}",
                                len=f"{row['completion_length']:.0f}")
                for callback in self.callbacks:
                    callback(self, row)
                if cfg.save_every and self.step % cfg.save_every == 0:
                    self.save_checkpoint()
        except KeyboardInterrupt:
            interrupted = True
            self.optimizer.zero_grad(set_to_none=True)
            where = ""
            if cfg.save_on_interrupt and cfg.output_dir:
                where = f"; checkpoint saved to {self.save_checkpoint()}"
            print(f"Training interrupted at step {self.step}: history and weights of step "
                  f"{self.step} kept{where}.")
        finally:
            bar.close()
            self.model.eval()
        return TrainResult(self.model, self.tokenizer, self.history, self.eval_history,
                           interrupted, self)

    def _run_step(self) -> dict:
        """One step with its bookkeeping: roll back on an interrupt before the update, evaluate,
        and stop after the step if Ctrl-C arrived during the update."""
        cfg = self.config
        snapshot = (capture_rng(self.generator), self.sampler.state_dict())
        self._update_started = False
        try:
            row = self.training_step()
        except KeyboardInterrupt:
            if not self._update_started:  # nothing applied yet: forget the partial step
                restore_rng(snapshot[0], self.generator)
                self.sampler.load_state_dict(snapshot[1])
            raise
        self.rows.append(row)
        if self._nonfinite_streak >= cfg.max_nonfinite_steps:
            raise FloatingPointError(
                f"the loss or the gradients were NaN/inf in {self._nonfinite_streak} consecutive "
                f"steps (up to step {self.step}); those optimizer steps were skipped, so the "
                f"weights are still finite. Try a lower learning_rate, a max_grad_norm, "
                f"dtype='float32', or check the reward functions and the data.")
        if cfg.eval_every and (self.step % cfg.eval_every == 0 or self.step == cfg.max_steps):
            metrics = self.evaluate()
            self.eval_rows.append({"step": self.step, **metrics})
            row.update(metrics)
        if self._stop_requested:
            self._stop_requested = False
            raise KeyboardInterrupt
        return row

    def training_step(self) -> dict:
        """Sample, score, compute advantages and update once; returns the step's metrics row."""
        start = time.perf_counter()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        exp, row = self._sample_batch()
        self._score_forwards(exp)
        row.update(self._compute_advantages(exp))
        learning_rate = self.optimizer.param_groups[0]["lr"]
        with self._hold_interrupts():
            self._update_started = True
            row.update(self._update(exp))
        self.step += 1
        step_time = time.perf_counter() - start
        row.update(step=self.step, learning_rate=learning_rate, step_time=step_time,
                   tokens_per_second=row.pop("sampled_tokens") / step_time,
                   peak_memory_mb=_peak_memory_mb(self.device))
        first = ["step", "reward", "accuracy", "completion_length"]
        return {**{k: row[k] for k in first}, **{k: v for k, v in row.items() if k not in first}}

    # ---- 1-2. sample and score -------------------------------------------------------------------
    def _sample_batch(self) -> tuple[Experience, dict]:
        """Sample prompts_per_step groups (refilled by dynamic sampling) and their rewards."""
        cfg = self.config
        group = cfg.num_generations
        kept, sampled = [], []
        needed, rounds, dropped, gen_time = cfg.prompts_per_step, 0, 0, 0.0
        while True:
            indices = self.sampler.take(needed)
            data = self.train_dataset[indices]
            tic = time.perf_counter()
            rollout = generate(self.model, self.tokenizer, data["prompt"], num_generations=group,
                               max_completion_length=cfg.max_completion_length,
                               temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
                               generator=self.generator)
            gen_time += time.perf_counter() - tic
            exp = Experience.from_rollout(rollout, self.tokenizer.pad_token_id)
            exp.prompt_index = torch.tensor(indices, device=self.device).repeat_interleave(group)
            per_function, exp.rewards, accuracy = self._rewards(data, rollout, group)
            sampled.append((per_function, exp.rewards, accuracy, exp.lengths, exp.truncated))
            if not cfg.dynamic_sampling:
                kept.append(exp)
                break
            keep = dynamic_sampling_mask(exp.rewards, group)
            kept.append(exp.select(keep.repeat_interleave(group)))
            dropped += int((~keep).sum())
            needed -= int(keep.sum())
            if needed <= 0 or rounds == cfg.max_resample_rounds:
                break
            rounds += 1
        exp = Experience.cat(kept).select(slice(0, cfg.prompts_per_step * group))
        if cfg.mask_truncated_completions:
            exp.loss_mask = exp.loss_mask * ~exp.truncated[:, None]
        row = self._sampling_metrics(sampled)
        row.update(groups_dropped=dropped, resample_rounds=rounds, generation_time=gen_time)
        return exp, row

    def _rewards(self, data: dict, rollout, group: int):
        """Per-function rewards (N, K), the weighted total with the overlong penalty (N,) and
        correctness (N,) of the completions of the prompts in ``data`` (dataset columns),
        ``group`` consecutive completions per prompt."""
        cfg = self.config
        prompts, columns = per_completion(data, group)
        completions = rollout.texts
        if prompts and not isinstance(prompts[0], str):  # conversational, as TRL passes them
            completions = [[{"role": "assistant", "content": text}] for text in completions]
        per_function, totals = combine_rewards_by_weight(
            self.reward_funcs, cfg.reward_weights, prompts, completions, **columns)
        if accuracy_reward in self.reward_funcs:
            correct = per_function[self.reward_funcs.index(accuracy_reward)]
        else:
            correct = [math.nan if r is None else r
                       for r in accuracy_reward(prompts, completions, **columns)]
        totals = torch.tensor(totals, dtype=torch.float32, device=self.device)
        if cfg.overlong_buffer_len:
            totals = totals + overlong_penalty(rollout.lengths.clone(), cfg.max_completion_length,
                                               cfg.overlong_buffer_len,
                                               cfg.overlong_penalty_factor).to(totals.device)
        per_function = torch.tensor(per_function, dtype=torch.float32).T
        return per_function, totals, torch.tensor(correct, dtype=torch.float32)

    def _sampling_metrics(self, sampled) -> dict:
        """Reward, accuracy and length statistics over every completion sampled in the step."""
        per_function, totals, accuracy, lengths, truncated = (
            torch.cat([s[i].cpu() for s in sampled]) for i in range(5))
        groups = torch.cat([dynamic_sampling_mask(s[1].cpu(), self.config.num_generations)
                            for s in sampled])
        row = {"reward": _nanmean(totals), "reward_std": _nanstd(totals)}
        for k, name in enumerate(self.reward_names):
            row[f"reward_{name}"] = _nanmean(per_function[:, k])
        lengths = lengths.float()
        row.update(accuracy=_nanmean(accuracy), completion_length=lengths.mean().item(),
                   completion_length_max=int(lengths.max()),
                   truncation_rate=truncated.float().mean().item(),
                   frac_reward_zero_std=(~groups).float().mean().item() if groups.numel() else 0.0,
                   sampled_tokens=int(lengths.sum()))
        return row

    # ---- 3. score forwards -----------------------------------------------------------------------
    def _score_forwards(self, exp: Experience) -> None:
        """No-grad forwards the update needs, and only those."""
        cfg = self.config
        if len(exp) == 0:
            return
        if cfg.off_policy:
            exp.old_logp = self._scored(exp, lambda mb: self._logprobs(self.model, mb))
        if self.ref_model is not None:
            exp.ref_logp = self._scored(exp, lambda mb: self._logprobs(self.ref_model, mb))
        if self.value_model is not None:
            exp.values = self._scored(exp, self._values)

    def _scored(self, exp: Experience, forward) -> torch.Tensor:
        """Run ``forward`` on micro-batches under inference mode; (B, L) result, 0 on padding."""
        everything = torch.arange(len(exp), device=self.device)
        with torch.inference_mode():
            pieces = [(rows, forward(exp.select(rows).trimmed()))
                      for rows in self._micro_batches(exp, everything)]
        out = exp.sample_logp.new_zeros(exp.completion_ids.shape)
        for rows, piece in pieces:
            out[rows, :piece.size(1)] = piece
        return out

    def _micro_batches(self, exp: Experience, rows: torch.Tensor) -> list[torch.Tensor]:
        """Split ``rows`` into micro-batches of similar lengths, so little compute goes to padding.

        Rows are sorted by length; a new micro-batch starts at ``micro_batch_size`` rows, or when
        widening the current one would add more padding than one more forward costs (a
        per-device constant in tokens). Only bnpo, whose token mean is per micro-batch, keeps
        plain micro-batches of ``micro_batch_size`` (in TRL's order).
        """
        cfg = self.config
        cap = cfg.micro_batch_size or max(len(rows), 1)
        if cfg.loss_type == "bnpo":
            return list(rows.split(cap)) if len(rows) else []
        prompt = exp.prompt_mask.sum(-1)[rows]
        completion = exp.completion_mask.sum(-1)[rows]
        order = (prompt + completion).argsort(stable=True)
        overhead = _FORWARD_COST_IN_TOKENS.get(self.device.type, _FORWARD_COST_IN_TOKENS["cuda"])
        batches, current, width = [], [], (0, 0)
        for i in order.tolist():
            p, c = int(prompt[i]), int(completion[i])
            wider = (max(width[0], p), max(width[1], c))
            padding = len(current) * (sum(wider) - sum(width))
            if current and (len(current) == cap or padding > overhead):
                batches.append(current)
                current, wider = [], (p, c)
            current.append(i)
            width = wider
        if current:
            batches.append(current)
        return [rows[torch.tensor(batch, device=rows.device)] for batch in batches]

    def _completion_logits(self, model, mb: Experience) -> torch.Tensor:
        """Logits predicting each completion token: (b, l, V)."""
        def forward(ids, mask, positions, cache, keep):
            return model(input_ids=ids, attention_mask=mask, position_ids=positions,
                         past_key_values=cache, use_cache=cache is not None,
                         logits_to_keep=keep).logits

        return self._before_each_completion_token(forward, mb)

    def _logprobs(self, model, mb: Experience) -> torch.Tensor:
        return token_logprobs(self._completion_logits(model, mb), mb.completion_ids,
                              self.config.temperature)

    def _values(self, mb: Experience) -> torch.Tensor:
        """Critic values V(s_t) of the state before each completion token: (b, l)."""
        critic = self.value_model

        def forward(ids, mask, positions, cache, keep):
            hidden = critic.trunk(input_ids=ids, attention_mask=mask, position_ids=positions,
                                  past_key_values=cache, use_cache=cache is not None)
            return critic.head(hidden.last_hidden_state[:, -keep:]).squeeze(-1)

        return self._before_each_completion_token(forward, mb).float()

    def _before_each_completion_token(self, forward, mb: Experience) -> torch.Tensor:
        """Outputs of ``forward`` at the positions that predict each completion token: (b, l, ...).

        ``forward(ids, mask, positions, cache, keep)`` runs a model and returns its outputs at
        the last ``keep`` positions. Completions of the same prompt (a group) share its forward:
        the prompt runs once, its keys and values are repeated for each completion (a
        differentiable copy, so the gradient is unchanged), and the completions run on top. A
        plain batched forward would repeat the prompt's work G times, and prompts are about as
        long as completions here.
        """
        prompt, width = mb.prompt_ids.size(1), mb.completion_ids.size(1)
        unique, inverse = torch.unique(mb.prompt_index, return_inverse=True)
        if len(unique) == len(mb) or self.config.gradient_checkpointing:
            outputs = forward(mb.input_ids, mb.attention_mask, mb.position_ids, None, width + 1)
            return outputs[:, :-1]
        from transformers import DynamicCache

        first = torch.empty_like(unique).scatter_(0, inverse, torch.arange(len(mb),
                                                                          device=self.device))
        prompt_mask, cache = mb.prompt_mask[first], DynamicCache()
        head = forward(mb.prompt_ids[first], prompt_mask,
                       (prompt_mask.cumsum(-1) - 1).clamp(min=0), cache, 1)[inverse]
        if width == 1:
            return head
        cache.batch_select_indices(inverse)
        tail = forward(mb.completion_ids[:, :-1], mb.attention_mask[:, :-1],
                       mb.position_ids[:, prompt:-1], cache, width - 1)
        return torch.cat([head, tail], dim=1)

    # ---- 4. advantages ---------------------------------------------------------------------------
    def _compute_advantages(self, exp: Experience) -> dict:
        """Set ``exp.advantages`` (and ``exp.returns`` for GAE); returns KL-in-reward metrics."""
        cfg = self.config
        group, rewards, mask = cfg.num_generations, exp.rewards, exp.loss_mask
        if len(exp) == 0:
            exp.advantages = rewards
            return {}
        if cfg.advantage_estimator != "grpo" and torch.isnan(rewards).any():
            raise ValueError(f"some completions got no reward (every reward function returned "
                             f"None); advantage_estimator={cfg.advantage_estimator!r} needs one "
                             f"for every completion (only 'grpo' treats them as missing)")
        kl, metrics = None, {}
        if cfg.kl_in_reward:
            kl = kl_estimate(exp.sample_logp, exp.ref_logp, cfg.kl_estimator)
            kl_sum = torch.where(mask.bool(), kl, 0).sum()
            metrics["kl_ref"] = float(kl_sum / mask.sum().clamp(min=1))
        if cfg.advantage_estimator == "gae":
            token_rewards = outcome_to_token_rewards(rewards, mask)
            if kl is not None:
                token_rewards = kl_penalized_token_rewards(token_rewards, kl, cfg.beta, mask)
            advantages, exp.returns = gae(token_rewards, exp.values, mask, cfg.gamma, cfg.lam)
            metrics["explained_variance"] = explained_variance(exp.values, exp.returns, mask)
            exp.advantages = batch_normalize(advantages, mask)
            return metrics
        if kl is not None:
            rewards = kl_penalized_rewards(rewards, kl, cfg.beta, mask)
        if cfg.num_remains_in_group is not None:
            keep = gfpo_filter(rewards, exp.lengths, group, cfg.num_remains_in_group,
                               cfg.gfpo_metric)
            exp.advantages = gfpo_advantages(rewards, keep, group, cfg.scale_rewards)
        elif cfg.advantage_estimator == "grpo":
            exp.advantages = group_advantages(rewards, group, cfg.scale_rewards)
        elif cfg.advantage_estimator == "rloo":
            exp.advantages = rloo_advantages(rewards, group)
        elif cfg.advantage_estimator == "opo":
            exp.advantages = opo_advantages(rewards, exp.lengths, group)
        else:
            exp.advantages = remax_advantages(rewards, self._greedy_rewards(exp), group)
        return metrics

    def _greedy_rewards(self, exp: Experience) -> torch.Tensor:
        """ReMax's baseline: the reward of one greedy completion per prompt."""
        cfg = self.config
        data = self.train_dataset[exp.prompt_index[::cfg.num_generations].tolist()]
        rollout = generate(self.model, self.tokenizer, data["prompt"], num_generations=1,
                           max_completion_length=cfg.max_completion_length,
                           temperature=cfg.temperature, greedy=True)
        return self._rewards(data, rollout, 1)[1]

    # ---- 5. update -------------------------------------------------------------------------------
    def _update(self, exp: Experience) -> dict:
        """num_iterations passes of num_mini_batches optimizer steps over the batch."""
        cfg = self.config
        self.model.train()
        if self.value_model is not None:
            self.value_model.train()
        stats = _Accumulator()
        # dapo normaliser (TRL): loss tokens of the generation batch per optimizer step
        num_items = exp.loss_mask.sum() / cfg.num_mini_batches
        trains = self._rows_with_gradient(exp)
        for iteration in range(cfg.num_iterations):
            order = torch.arange(len(exp), device=self.device)
            if cfg.num_mini_batches > 1:  # TRL shuffles the generation batch before splitting
                shuffle = torch.Generator().manual_seed(
                    cfg.seed * 1_000_003 + self.step * 1_009 + iteration)
                order = order[torch.randperm(len(exp), generator=shuffle).to(self.device)]
            for rows in order.tensor_split(cfg.num_mini_batches):
                self._optimizer_step(exp.select(rows), trains[rows], num_items, stats)
        self.model.eval()
        row = stats.result()
        row["completions_trained"] = int(trains.sum())
        self._nonfinite_streak = self._nonfinite_streak + 1 if row["skipped_nonfinite"] else 0
        return row

    def _rows_with_gradient(self, exp: Experience) -> torch.Tensor:
        """Bool (B,): the rows whose loss terms can be non-zero.

        A row with an empty loss mask contributes nothing; a row with zero advantage contributes
        nothing unless a KL-in-loss, an entropy bonus or a critic gives it a term. The other
        rows still count in the global normalisers, so leaving them out changes no gradient;
        only bnpo's per-micro-batch token mean depends on which rows share a micro-batch.
        """
        cfg = self.config
        if cfg.loss_type == "bnpo":
            return torch.ones(len(exp), dtype=torch.bool, device=self.device)
        has_tokens = exp.loss_mask.any(-1)
        if (self.value_model is not None or cfg.entropy_coef != 0
                or (cfg.beta != 0 and not cfg.kl_in_reward)):
            return has_tokens
        return has_tokens & (exp.advantages != 0)

    def _optimizer_step(self, mini: Experience, trains: torch.Tensor, num_items, stats) -> None:
        """Accumulate gradients over micro-batches of one mini-batch, clip, step."""
        cfg = self.config
        tokens = mini.loss_mask.sum().clamp(min=1)
        finite = True
        for micro_rows in self._micro_batches(mini, trains.nonzero().squeeze(-1)):
            mb = mini.select(micro_rows).trimmed()
            logits = self._completion_logits(self.model, mb)
            logp, entropy = logprobs_and_entropy(logits, mb.completion_ids, cfg.temperature)
            if not _finite_where(mb.loss_mask, logp, mb.old_logp, mb.ref_logp):
                finite = False
                break
            loss, metrics = policy_loss(
                logp, mb.old_logp, mb.advantages, mb.loss_mask, loss_type=cfg.loss_type,
                importance_sampling_level=cfg.importance_sampling_level, epsilon=cfg.epsilon,
                epsilon_high=cfg.epsilon_high, delta=cfg.delta, dual_clip=cfg.dual_clip,
                beta=0.0 if cfg.kl_in_reward else cfg.beta, ref_logp=mb.ref_logp,
                kl_estimator=cfg.kl_estimator, max_completion_length=cfg.max_completion_length,
                num_items_in_batch=num_items, num_sequences_in_batch=len(mini),
                entropy=entropy if cfg.entropy_coef else entropy.detach(),
                entropy_coef=cfg.entropy_coef)
            stats.add("loss", metrics.pop("policy_loss"), weight=None)
            weight = mb.loss_mask.sum()
            if self.value_model is not None:
                v_loss, v_metrics = value_loss(self._values(mb), mb.values, mb.returns,
                                               mb.loss_mask, cfg.clip_range_value)
                # value_loss is a token mean of the micro-batch: weigh it into the mini-batch's
                loss = loss + cfg.vf_coef * v_loss * (weight / tokens)
                stats.add("value_loss", v_loss.detach(), weight)
                metrics.update(v_metrics)
            for key, value in metrics.items():
                if key in _LOSS_METRICS:
                    stats.add(_LOSS_METRICS[key], value, weight)
            loss.backward()
        self._apply_gradients(finite, stats)

    def _apply_gradients(self, finite: bool, stats) -> None:
        """Clip and step, unless a loss or gradient was not finite: then drop the gradients."""
        cfg = self.config
        max_norm = cfg.max_grad_norm or math.inf
        groups = [("grad_norm", self.optimizer.param_groups[0]["params"])]
        if self.value_model is not None:
            groups.append(("value_grad_norm", self.optimizer.param_groups[1]["params"]))
        for name, params in groups:
            for p in params:  # a mini-batch with nothing to learn still steps Adam, as TRL does
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
            finite = finite and bool(torch.isfinite(norm))
            stats.add(name, norm, weight=1)
        if finite:  # a skipped step does not advance the schedule either (transformers' rule)
            self.optimizer.step()
            self.scheduler.step()
        stats.add_count("skipped_nonfinite", int(not finite))
        stats.optimizer_steps += 1
        self.optimizer.zero_grad(set_to_none=True)

    # ---- evaluation and checkpoints --------------------------------------------------------------
    def evaluate(self) -> dict:
        """Sample eval_k answers per eval prompt; the ``eval_*`` columns (see :data:`METRICS`)."""
        cfg = self.config
        if self.eval_dataset is None:
            raise ValueError("no eval dataset: pass eval_dataset or set eval_every > 0")
        table = evaluate(self.model, self.tokenizer, self.eval_dataset, k=cfg.eval_k,
                         temperature=cfg.temperature,
                         max_completion_length=cfg.max_completion_length, seed=cfg.seed)
        overall = table[table["family"] == "all"].iloc[0]
        return {"eval_accuracy": float(overall["accuracy"]),
                "eval_pass@k": float(overall["pass@k"]), "eval_length": float(overall["length"]),
                "eval_format_rate": float(overall["format_rate"]),
                "eval_truncation": float(overall["truncation"])}

    def save_checkpoint(self, directory=None) -> Path:
        """Save everything needed to resume; default folder ``output_dir/checkpoint-<step>``."""
        if directory is None:
            if self.config.output_dir is None:
                raise ValueError("give a directory or set config.output_dir")
            directory = Path(self.config.output_dir) / f"checkpoint-{self.step}"
        state = {"step": self.step, "optimizer": self.optimizer.state_dict(),
                 "scheduler": self.scheduler.state_dict(), "rng": capture_rng(self.generator),
                 "sampler": self.sampler.state_dict(), "nonfinite_streak": self._nonfinite_streak,
                 "config": self.config.to_dict()}
        return save_checkpoint(directory, model=self.model, tokenizer=self.tokenizer, state=state,
                               history=self.history, eval_history=self.eval_history,
                               value_model=self.value_model, ref_model=self.ref_model)

    def load_checkpoint(self, directory) -> None:
        """Restore a :meth:`save_checkpoint` folder into this trainer (weights, optimizer,
        scheduler, random states, data position, history)."""
        state, history, eval_history = load_checkpoint(
            directory, model=self.model, value_model=self.value_model, ref_model=self.ref_model)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        restore_rng(state["rng"], self.generator)
        self.sampler.load_state_dict(state["sampler"])
        self.step = state["step"]
        self._nonfinite_streak = state["nonfinite_streak"]
        self.rows = history.to_dict("records")
        self.eval_rows = eval_history.to_dict("records")

    @contextmanager
    def _hold_interrupts(self):
        """Hold Ctrl-C (the notebook's stop button) until the block ends, so that an update is
        never half applied; the trainer then stops after recording the step."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def request_stop(signum, frame):
            self._stop_requested = True

        previous = signal.signal(signal.SIGINT, request_stop)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)


def train(config: TrainConfig | None = None, model=None, tokenizer=None, train_dataset=None,
          eval_dataset=None, reward_funcs=None, callbacks=(), resume_from=None) -> TrainResult:
    """Build a :class:`Trainer` and run it; see :class:`Trainer` for the arguments."""
    trainer = Trainer(config, model=model, tokenizer=tokenizer, train_dataset=train_dataset,
                      eval_dataset=eval_dataset, reward_funcs=reward_funcs, callbacks=callbacks)
    return trainer.train(resume_from=resume_from)


# ---- helpers -------------------------------------------------------------------------------------
class _Accumulator:
    """Weighted means of per-micro-batch metrics, kept as tensors until the end (one sync)."""

    def __init__(self):
        self.sums, self.weights, self.counts = {}, {}, {}
        self.optimizer_steps = 0

    def add(self, name, value, weight):
        """``weight=None``: a sum per optimizer step (the loss), averaged over optimizer steps."""
        value = value.detach().float() if isinstance(value, torch.Tensor) else float(value)
        w = 1.0 if weight is None else weight
        self.sums[name] = self.sums.get(name, 0.0) + value * w
        self.weights[name] = None if weight is None else self.weights.get(name, 0.0) + w

    def add_count(self, name, value):
        self.counts[name] = self.counts.get(name, 0) + value

    def result(self) -> dict:
        row = dict(self.counts)
        for name, total in self.sums.items():
            weight = self.weights[name]
            denominator = self.optimizer_steps if weight is None else weight
            row[name] = float(total / denominator) if float(denominator) > 0 else math.nan
        for name in ("loss", "clip_low", "clip_high", "clip_region", "kl_old", "entropy"):
            row.setdefault(name, math.nan)
        return row


def _finite_where(mask, *tensors) -> bool:
    m = mask.bool()
    return bool(torch.stack([torch.isfinite(torch.where(m, t, 0)).all()
                             for t in tensors if t is not None]).all())


def _frozen_copy(model):
    import copy

    ref = copy.deepcopy(model).eval()
    ref.requires_grad_(False)
    return ref


def _reward_names(funcs) -> list[str]:
    names = []
    for fn in funcs:
        name = getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__",
                                                        type(fn).__name__)
        name = name.removesuffix("_reward")
        names.append(name if name not in names else f"{name}_{len(names)}")
    return names


def _nanmean(x: torch.Tensor) -> float:
    return float(x.nanmean()) if x.numel() else math.nan


def _nanstd(x: torch.Tensor) -> float:
    x = x[~torch.isnan(x)]
    return float(x.std()) if x.numel() > 1 else 0.0


def _peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10
