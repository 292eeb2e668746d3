"""The training loop: sample, score, compute advantages, update; one row of metrics per step.

One step (:meth:`Trainer.training_step`) is the papers' algorithm box, and the method reads the
same way:

1. **sample** ``prompts_per_step`` prompts (shuffled passes over the train split) and
   ``num_generations`` completions of each with the KV-cached sampler (:mod:`labkit.rollout`);
2. **score** them with the weighted reward functions (default accuracy + format; TRL's
   signature), plus DAPO's soft overlong penalty and the chosen length reward
   (:mod:`labkit.engine.scoring`). With DAPO's
   dynamic sampling, groups whose rewards are all equal are dropped and new prompts are sampled
   until the batch is full again, for at most ``max_resample_rounds`` extra rounds;
3. **score forwards** without gradient, only those the configuration needs: the behaviour
   policy's log-probs when the update is off-policy (``num_iterations > 1`` or several
   mini-batches) or when the sampler/trainer mismatch is corrected (:mod:`labkit.mismatch`,
   ``sampling_dtype``), the frozen reference's when ``beta != 0`` (with LoRA, the policy with
   its adapters disabled: :mod:`labkit.lora`), the critic's values for PPO;
4. **advantages**: a group estimator (:mod:`labkit.advantages`: GRPO, RLOO, ReMax, OPO, GDPO),
   GFPO's filtered groups (:mod:`labkit.filters`), or GAE with the critic (whitened);
5. **update**: ``num_iterations`` passes, each split into ``num_mini_batches`` optimizer steps,
   each accumulated over micro-batches. The loss is :func:`labkit.losses.policy_loss` (plus
   ``vf_coef`` times :func:`labkit.losses.value_loss` for PPO) with its normalisers counted over
   the whole mini-batch, so micro-batching does not change the gradient.

:mod:`labkit.grpo_minimal` is the same algorithm (GRPO only) on one screen with none of the
machinery below; ``tests/test_grpo_minimal.py`` checks that both give the same gradient.

Where this departs from the papers and from TRL's ``GRPOTrainer`` (and why):

* three savings that leave the gradient unchanged (up to float rounding): completions that
  cannot contribute (zero advantage with ``beta = 0`` and no entropy bonus, or nothing left in
  their loss mask) skip the training forward, while the normalisers still count them; the
  completions of one prompt share one forward of the prompt; micro-batches gather completions of
  similar length (:mod:`labkit.engine.forward`). The ``entropy`` and clip metrics are therefore averaged
  over the completions that trained;
* the ``dapo`` normaliser is TRL's: loss tokens of the whole generation batch divided by the
  number of mini-batches;
* dynamic sampling keeps groups whose *total* reward varies (verl's ``seq_reward`` metric; the
  DAPO paper, arXiv 2503.14476, uses accuracy) and, when the batch is still short after
  ``max_resample_rounds``, trains on what it has (verl raises);
* GFPO's rejected completions get advantage 0 and stay in the normaliser (arXiv 2508.09726,
  eq. 2; TRL's removed trainer dropped them);
* KL in the reward (``kl_in_reward``) is the per-token estimate between the sampling and the
  reference log-probs: per token for GAE (InstructGPT, arXiv 2203.02155), summed over the
  completion for the group estimators (as RLOO does);
* safety (:mod:`labkit.engine.run_control`, :mod:`labkit.engine.checkpoint`): a NaN/inf loss, gradient or
  updated weight skips the optimizer step and rolls the weights back; Ctrl-C never leaves an
  update, a history row, an evaluation or a checkpoint half done; a step that fails before its
  update (interrupt or error) can be retried with the same prompts.
"""

from __future__ import annotations

import copy
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from labkit.advantages import AdvantageInputs, Estimator, get_estimator, kl_penalized_rewards
from labkit.config import TrainConfig
from labkit.engine.checkpoint import (
    RESUMABLE_CHANGES,
    check_same_run,
    load_checkpoint,
    load_state,
    save_checkpoint,
)
from labkit.engine.data import as_dataset, check_prompt_dataset
from labkit.engine.forward import (
    completion_logprobs,
    completion_logprobs_and_entropy,
    completion_values,
    length_packed_micro_batches,
)
from labkit.engine.run_control import (
    InterruptGuard,
    capture_rng,
    guarded_optimizer_step,
    peak_memory_mb,
    restore_rng,
)
from labkit.engine.scoring import (
    check_context,
    completion_embeddings,
    demonstration_texts,
    sampling_metrics,
    score_completions,
)
from labkit.evaluate import evaluate
from labkit.experience import Experience
from labkit.filters import (
    adaptive_num_remains,
    difficulty_quartiles,
    dynamic_sampling_mask,
    gfpo_advantages,
    gfpo_filter,
)
from labkit.lora import adapters_disabled, wrap_with_lora
from labkit.losses import (
    LOCAL_AGGREGATIONS,
    LossType,
    get_loss_type,
    kl_estimate,
    policy_loss,
    value_loss,
)
from labkit.metrics import METRICS, TIMING_COLUMNS, StepStats
from labkit.mismatch import mismatch_metrics, mismatch_weights
from labkit.models import ValueModel, load_policy
from labkit.prompt_sampling import make_sampler
from labkit.ptx import PTXData, ptx_nll
from labkit.reference import mix_reference, reset_reference
from labkit.rewards import accuracy_reward, format_reward, reward_function_names
from labkit.rollout import generate, with_demonstrations
from labkit.tasks import load_split
from labkit.temperature import temperature_at
from labkit.token_filters import token_filters, top_entropy_mask


@dataclass
class TrainResult:
    """What :func:`train` returns."""

    model: torch.nn.Module
    tokenizer: object
    history: pd.DataFrame
    """one row per step, columns described in :data:`labkit.metrics.METRICS`"""
    eval_history: pd.DataFrame
    """one row per evaluation (step 0 = before training)"""
    interrupted: bool
    """True when training stopped on KeyboardInterrupt"""
    trainer: Trainer


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
        self.config = cfg = config if config is not None else TrainConfig()
        if not isinstance(cfg, TrainConfig):
            raise TypeError(f"config must be a TrainConfig, got {type(cfg).__name__}")
        random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        self.model, self.tokenizer = self._policy(model, tokenizer)
        if cfg.use_peft:  # fresh adapters (seeded above); only they train (labkit.lora)
            self.model = wrap_with_lora(self.model, cfg)
        self.device = next(self.model.parameters()).device
        self._set_data(train_dataset, eval_dataset, reward_funcs)
        self.callbacks = list(callbacks)
        # Only the models the configuration needs: a frozen reference only when beta != 0, and
        # none with LoRA, whose reference is the same model with its adapters disabled.
        self.ref_model = (_frozen_copy(self.model) if cfg.needs_reference and not cfg.use_peft
                          else None)
        # A sampler that differs from the trainer (an inference engine's stand-in), synced every
        # step: a copy of the policy in sampling_dtype.
        self.sampling_model = (_frozen_copy(self.model).to(getattr(torch, cfg.sampling_dtype))
                               if cfg.sampling_dtype else None)
        self.value_model = (ValueModel(self.model) if get_estimator(cfg.advantage_estimator).critic
                            else None)
        self.optimizer, self.scheduler = self._optimizer()
        self.sampler = make_sampler(cfg.prompt_sampler, self.train_dataset, cfg.seed,
                                    total_steps=cfg.max_steps,
                                    curriculum_ratio=cfg.curriculum_ratio,
                                    prioritized_floor=cfg.prioritized_floor,
                                    multitask_lambda=cfg.multitask_lambda,
                                    multitask_lr=cfg.multitask_lr)
        # PTX: warm-start examples whose NLL joins the loss; replace .ptx to bring your own data
        self.ptx = PTXData(cfg.ptx_batch_size, seed=cfg.seed) if cfg.ptx_coef > 0 else None
        self.generator = torch.Generator(device=self.device).manual_seed(cfg.seed)
        self.step = 0
        self.rows: list[dict] = []
        self.eval_rows: list[dict] = []
        self.guard = InterruptGuard()
        self._nonfinite_streak = 0
        self._update_started = False
        self._gfpo_mean_rewards: list[float] = []  # adaptive GFPO's record of group difficulty
        self._optimizer_steps = 0  # TR-DPO syncs the reference every ref_model_sync_steps of them
        self._best_eval, self._evals_since_best = -math.inf, 0  # ProRL's stall trigger
        self.temperature = cfg.temperature  # the current step's (temperature_schedule)
        if cfg.resume_from:
            self.load_checkpoint(cfg.resume_from)

    # ---- set-up ----------------------------------------------------------------------------------
    def _policy(self, model, tokenizer):
        cfg = self.config
        if model is None:
            return load_policy(cfg.model_name_or_path, device=cfg.device, dtype=cfg.dtype,
                               gradient_checkpointing=cfg.gradient_checkpointing)
        if tokenizer is None:
            raise ValueError("pass the model's tokenizer along with the model")
        if cfg.gradient_checkpointing:  # transformers 5 renamed it; 4.x has only the old name
            enable = (getattr(model, "activation_checkpointing_enable", None)
                      or model.gradient_checkpointing_enable)
            enable()
            model.config.use_cache = False
        return model, tokenizer

    def _set_data(self, train_dataset, eval_dataset, reward_funcs):
        cfg = self.config
        self.reward_funcs = ([accuracy_reward, format_reward] if reward_funcs is None
                             else list(reward_funcs))
        if not self.reward_funcs:
            raise ValueError("reward_funcs is empty: give at least one reward function, e.g. "
                             "[accuracy_reward, format_reward] from labkit.rewards")
        for fn in self.reward_funcs:
            if not callable(fn):
                raise TypeError(f"reward_funcs must hold callables fn(prompts, completions, "
                                f"**columns); got {type(fn).__name__}")
        self.reward_names = reward_function_names(self.reward_funcs)
        if cfg.reward_weights is not None and len(cfg.reward_weights) != len(self.reward_funcs):
            raise ValueError(f"reward_weights has {len(cfg.reward_weights)} weights for "
                             f"{len(self.reward_funcs)} reward functions "
                             f"({', '.join(self.reward_names)}): give one weight per function")
        uses_accuracy = accuracy_reward in self.reward_funcs
        self.train_dataset = (load_split("train") if train_dataset is None
                              else as_dataset(train_dataset, "train_dataset"))
        check_prompt_dataset(self.train_dataset, "train_dataset", needs_answers=uses_accuracy)
        if eval_dataset is None and cfg.eval_every:
            eval_dataset = load_split("eval")
        if eval_dataset is not None:
            eval_dataset = as_dataset(eval_dataset, "eval_dataset")
            check_prompt_dataset(eval_dataset, "eval_dataset", needs_answers=True)
            if cfg.eval_max_prompts is not None:
                eval_dataset = eval_dataset.select(
                    range(min(cfg.eval_max_prompts, len(eval_dataset))))
        self.eval_dataset = eval_dataset

    def _optimizer(self):
        from transformers import get_scheduler

        cfg = self.config
        param_groups = [{"params": [p for p in self.model.parameters() if p.requires_grad]}]
        if self.value_model is not None:
            param_groups.append({"params": list(self.value_model.parameters()),
                                 "lr": cfg.value_learning_rate or cfg.learning_rate})
        optimizer = torch.optim.AdamW(param_groups, lr=cfg.learning_rate,
                                      betas=(cfg.adam_beta1, cfg.adam_beta2),
                                      weight_decay=cfg.weight_decay)
        steps = cfg.max_steps * cfg.num_iterations * cfg.num_mini_batches
        scheduler = get_scheduler(cfg.lr_scheduler_type, optimizer,
                                  num_warmup_steps=math.ceil(cfg.warmup_ratio * steps),
                                  num_training_steps=steps)
        return optimizer, scheduler

    # ---- tables ----------------------------------------------------------------------------------
    @property
    def history(self) -> pd.DataFrame:
        """One row per completed step (columns: :data:`labkit.metrics.METRICS`)."""
        return pd.DataFrame(self.rows)

    @property
    def eval_history(self) -> pd.DataFrame:
        """One row per evaluation, step 0 being the model before training."""
        return pd.DataFrame(self.eval_rows)

    # ---- the loop --------------------------------------------------------------------------------
    def train(self, resume_from=None) -> TrainResult:
        """Run steps until ``max_steps``; returns a :class:`TrainResult`, also when interrupted.

        A Ctrl-C stops the run at the next safe point: the step in progress is either finished
        (its update had started) or forgotten (it had not); with ``output_dir`` a checkpoint of
        the last completed step is saved, and a second Ctrl-C cannot tear it.
        """
        from tqdm.auto import tqdm

        cfg = self.config
        if resume_from is not None:
            self.load_checkpoint(resume_from)
        bar = tqdm(total=cfg.max_steps, initial=self.step, disable=not cfg.progress,
                   desc=f"{cfg.advantage_estimator}/{cfg.loss_type}")
        interrupted = False
        try:
            if cfg.eval_every and not self.eval_rows:
                with self.guard:
                    self.eval_rows.append({"step": self.step, **self.evaluate()})
                self.guard.raise_if_requested()
            while self.step < cfg.max_steps:
                row = self._run_step()
                bar.update(1)
                bar.set_postfix(reward=f"{row['reward']:.3f}", acc=f"{row['accuracy']:.2f}",
                                len=f"{row['completion_length']:.0f}")
                self._after_step(row)
        except KeyboardInterrupt:
            interrupted = True
            self._on_interrupt()
        finally:
            bar.close()
            self.model.eval()
        return TrainResult(self.model, self.tokenizer, self.history, self.eval_history,
                           interrupted, self)

    def _run_step(self) -> dict:
        """:meth:`training_step`, forgotten if it fails before its update: the random state and
        the prompt position go back, so a retry samples the same prompts and completions."""
        snapshot = (capture_rng(self.generator), self.sampler.state_dict())
        self._update_started = False
        try:
            return self.training_step()
        except BaseException:
            if not self._update_started:
                restore_rng(snapshot[0], self.generator)
                self.sampler.load_state_dict(snapshot[1])
            raise

    def _after_step(self, row: dict) -> None:
        """Evaluate and save when due (never torn by Ctrl-C), then callbacks, then stop if asked
        or if too many steps in a row were not finite."""
        cfg = self.config
        with self.guard:
            if cfg.eval_every and (self.step % cfg.eval_every == 0 or self.step == cfg.max_steps):
                metrics = self.evaluate()
                self.eval_rows.append({"step": self.step, **metrics})
                row.update(metrics)
                if self._eval_stalled(metrics["eval_accuracy"]):
                    reset_reference(self.model, self.ref_model, self.optimizer)
                    row["ref_reset"] = 1
            if cfg.save_every and self.step % cfg.save_every == 0:
                self.save_checkpoint()
        if self._nonfinite_streak >= cfg.max_nonfinite_steps:
            raise FloatingPointError(
                f"the loss, the gradients or the updated weights were NaN/inf in "
                f"{self._nonfinite_streak} consecutive steps (up to step {self.step}); those "
                f"optimizer steps were skipped and the weights are still finite. Try a lower "
                f"learning_rate, a max_grad_norm, dtype='float32', or check the reward functions "
                f"and the data.")
        for callback in self.callbacks:
            callback(self, row)
        self.guard.raise_if_requested()

    def _eval_stalled(self, accuracy: float) -> bool:
        """ProRL's trigger: ``ref_reset_patience`` evaluations in a row without a new best."""
        patience = self.config.ref_reset_patience
        if not patience:
            return False
        if accuracy > self._best_eval:
            self._best_eval, self._evals_since_best = accuracy, 0
            return False
        self._evals_since_best += 1
        if self._evals_since_best < patience:
            return False
        self._evals_since_best = 0
        return True

    def _on_interrupt(self) -> None:
        cfg = self.config
        self.optimizer.zero_grad(set_to_none=True)
        where = ""
        if cfg.save_on_interrupt and cfg.output_dir:
            with self.guard:  # a second Ctrl-C waits until the checkpoint is whole
                where = f"; checkpoint saved to {self.save_checkpoint()}"
            self.guard.requested = False
        print(f"Training interrupted at step {self.step}: history and weights of step "
              f"{self.step} kept{where}.")

    def training_step(self) -> dict:
        """Sample, score, compute advantages and update once; returns the step's metrics row."""
        cfg = self.config
        start = time.perf_counter()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self.temperature = temperature_at(self.step, cfg.max_steps, cfg.temperature,
                                          cfg.temperature_final, cfg.temperature_schedule)
        batch, row = self.sample_and_score()                 # 1-2
        row.update(self.score_forwards(batch))               # 3
        row.update(self.compute_advantages(batch))           # 4
        learning_rate = self.optimizer.param_groups[0]["lr"]
        with self.guard:                                     # 5, never half applied
            self._update_started = True
            row.update(self.update(batch))
            row.update(self._move_reference())
            self.step += 1
            elapsed = time.perf_counter() - start
            row.update(step=self.step, learning_rate=learning_rate, step_time=elapsed,
                       tokens_per_second=row.pop("sampled_tokens") / elapsed,
                       peak_memory_mb=peak_memory_mb(self.device))
            first = ["step", "reward", "accuracy", "completion_length"]
            row = {**{k: row[k] for k in first}, **{k: v for k, v in row.items()
                                                       if k not in first}}
            self.rows.append(row)
        return row

    # ---- 1-2. sample and score -------------------------------------------------------------------
    def sample_and_score(self) -> tuple[Experience, dict]:
        """Sample prompts_per_step prompts x G completions (refilled by dynamic sampling) and
        score them; returns the batch and the sampling metrics."""
        cfg = self.config
        per_prompt = cfg.num_generations
        kept, sampled = [], []
        needed, rounds, dropped, generation_time = cfg.prompts_per_step, 0, 0, 0.0
        sampling_model = self._synced_sampling_model()
        while True:
            indices = self.sampler.take(needed)
            rows = self.train_dataset[indices]
            tic = time.perf_counter()
            rollout = generate(sampling_model, self.tokenizer, rows["prompt"],
                               num_generations=per_prompt,
                               max_completion_length=cfg.max_completion_length,
                               temperature=self.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
                               generator=self.generator)
            generation_time += time.perf_counter() - tic
            if cfg.rlplus_demonstrations:
                rollout = with_demonstrations(rollout, self.tokenizer,
                                              demonstration_texts(rows), per_prompt)
            check_context(self.model, rollout, indices, cfg.max_completion_length, per_prompt)
            batch = Experience.from_rollout(rollout, self.tokenizer.pad_token_id)
            batch.prompt_index = torch.tensor(indices, device=self.device).repeat_interleave(
                per_prompt)
            is_demo = torch.zeros(len(batch), dtype=torch.bool, device=self.device)
            if cfg.rlplus_demonstrations:
                is_demo[per_prompt - 1::per_prompt] = True
            batch.demonstrations = is_demo
            batch.reward_components, batch.rewards, correct = self._rewards(rows, rollout)
            self.sampler.observe(indices, correct.view(-1, per_prompt).nanmean(-1).tolist())
            sampled.append((batch.reward_components, batch.rewards, correct, batch.lengths,
                            batch.truncated, [f for f in rows.get("family", [None] * len(indices))
                                              for _ in range(per_prompt)]))
            if not cfg.dynamic_sampling:
                kept.append(batch)
                break
            informative = dynamic_sampling_mask(batch.rewards, per_prompt)
            kept.append(batch.select(informative.repeat_interleave(per_prompt)))
            dropped += int((~informative).sum())
            needed -= int(informative.sum())
            if needed <= 0 or rounds == cfg.max_resample_rounds:
                break
            rounds += 1
        batch = Experience.cat(kept).select(slice(0, cfg.prompts_per_step * per_prompt))
        if cfg.mask_truncated_completions:
            batch.loss_mask = batch.loss_mask * ~batch.truncated[:, None]
        if cfg.top_entropy_quantile < 1:
            batch.token_weights = top_entropy_mask(batch.sample_entropy, batch.loss_mask,
                                                   cfg.top_entropy_quantile).float()
        row = sampling_metrics(sampled, self.reward_names, per_prompt, self.temperature)
        real = batch.loss_mask.bool() & ~batch.demonstrations[:, None]
        row["entropy_high_frac"] = float(
            (batch.sample_entropy[real] > cfg.entropy_threshold).float().mean()) \
            if real.any() else math.nan
        row.update(groups_dropped=dropped, resample_rounds=rounds,
                   generation_time=generation_time)
        return batch, row

    def _synced_sampling_model(self):
        """The model that samples: the policy, or (``sampling_dtype``) its copy in another
        dtype with this step's weights copied in (cast), as a trainer pushes weights to vLLM."""
        if self.sampling_model is None:
            return self.model
        with torch.no_grad():
            for copy_, weight in zip(self.sampling_model.parameters(), self.model.parameters(),
                                     strict=True):
                copy_.copy_(weight)
        return self.sampling_model

    def _rewards(self, rows: dict, rollout):
        """:func:`labkit.engine.scoring.score_completions` with this run's reward functions."""
        return score_completions(self.config, self.reward_funcs, rows, rollout,
                                 embed=lambda r: completion_embeddings(
                                     self.model, r, self.config.diversity_adjustment))

    # ---- 3. score forwards -----------------------------------------------------------------------
    def score_forwards(self, batch: Experience) -> dict:
        """No-grad forwards the update needs, and only those; returns the sampler/trainer
        mismatch metrics when the correction is on (else ``{}``)."""
        cfg = self.config
        if len(batch) == 0:
            return {}
        temperature = self.temperature
        # demonstrations were not sampled by the policy: the old policy must score them; the
        # mismatch correction compares the trainer's old log-probs with the sampler's (TRL)
        if (cfg.off_policy or cfg.rlplus_demonstrations
                or cfg.vllm_importance_sampling_correction):
            batch.old_logp = self._no_grad(batch, lambda mb: completion_logprobs(
                self.model, mb, temperature, self._share_prompts))
            if cfg.rlplus_demonstrations:  # their "sampling" log-probs are the old policy's
                demo = batch.demonstrations[:, None]
                batch.sample_logp = torch.where(demo, batch.old_logp, batch.sample_logp)
        if cfg.needs_reference:  # LoRA: the policy itself with its adapters off
            with adapters_disabled(self.ref_model if self.ref_model is not None
                                   else self.model) as reference:
                batch.ref_logp = self._no_grad(batch, lambda mb: completion_logprobs(
                    reference, mb, temperature, self._share_prompts))
        if self.value_model is not None:
            batch.values = self._no_grad(batch, lambda mb: completion_values(
                self.value_model, mb, self._share_prompts))
        if not cfg.vllm_importance_sampling_correction:
            return {}
        mode = cfg.vllm_importance_sampling_mode
        batch.is_weights, corrected = mismatch_weights(
            batch.old_logp, batch.sample_logp, batch.completion_mask, mode,
            cfg.vllm_importance_sampling_clip_max, cfg.vllm_importance_sampling_clip_min)
        return mismatch_metrics(batch.old_logp, batch.sample_logp, batch.completion_mask,
                                batch.is_weights, corrected, mode)

    @property
    def _share_prompts(self) -> bool:
        # activation checkpointing recomputes forwards without the shared prompt cache
        return not self.config.gradient_checkpointing

    def _no_grad(self, batch: Experience, forward) -> torch.Tensor:
        """Run ``forward`` on micro-batches under inference mode; (B, L) result, 0 on padding."""
        everything = torch.arange(len(batch), device=self.device)
        with torch.inference_mode():
            pieces = [(rows, forward(batch.select(rows).trimmed()))
                      for rows in self._micro_batches(batch, everything)]
        out = batch.sample_logp.new_zeros(batch.completion_ids.shape)
        for rows, piece in pieces:
            out[rows, :piece.size(1)] = piece
        return out

    @property
    def loss(self) -> LossType:
        """The registered loss type of this run (:data:`labkit.losses.LOSS_REGISTRY`)."""
        return get_loss_type(self.config.loss_type)

    @property
    def _loss_settings(self) -> dict:
        """``policy_loss``'s keywords that come from the config: the shared ones and the loss
        type's own options. KL-Cov replaces the clip by its penalty, so it opens the band."""
        cfg = self.config
        unclipped = cfg.cov_penalty == "kl_cov"
        return dict(loss_type=cfg.loss_type, importance_sampling_level=cfg.importance_sampling_level,
                    epsilon=math.inf if unclipped else cfg.epsilon,
                    epsilon_high=math.inf if unclipped else cfg.epsilon_high,
                    beta=0.0 if cfg.kl_in_reward else cfg.beta, kl_estimator=cfg.kl_estimator,
                    use_bias_correction_kl=cfg.use_bias_correction_kl,
                    max_completion_length=cfg.max_completion_length,
                    entropy_coef=cfg.entropy_coef, **self.loss.options_from(cfg))

    def _micro_batches(self, batch: Experience, rows: torch.Tensor) -> list[torch.Tensor]:
        """``rows`` in micro-batches of at most ``micro_batch_size``, packed by length; a loss
        whose aggregation is local to a micro-batch (bnpo) keeps TRL's plain split."""
        cfg = self.config
        if self.loss.aggregation in LOCAL_AGGREGATIONS:
            cap = cfg.micro_batch_size or max(len(rows), 1)
            return list(rows.split(cap)) if len(rows) else []
        packs = length_packed_micro_batches(batch.prompt_mask.sum(-1)[rows],
                                            batch.completion_mask.sum(-1)[rows],
                                            cfg.micro_batch_size, self.device.type)
        return [rows[pack] for pack in packs]

    # ---- 4. advantages ---------------------------------------------------------------------------
    def compute_advantages(self, batch: Experience) -> dict:
        """Set the batch's advantages with the registered estimator (and ``returns`` for a
        critic's); GFPO's filter replaces GRPO's formula on its kept subsets. Returns the step's
        KL-in-reward and estimator metrics."""
        cfg, estimator = self.config, self.estimator
        per_prompt, rewards, mask = cfg.num_generations, batch.rewards, batch.loss_mask
        if len(batch) == 0:
            batch.sequence_advantages = rewards
            return {}
        if not estimator.missing_rewards and torch.isnan(rewards).any():
            raise ValueError(f"some completions got no reward (every reward function returned "
                             f"None); advantage_estimator={cfg.advantage_estimator!r} needs one "
                             f"for every completion (only 'grpo' treats them as missing)")
        kl, metrics = None, {}
        if cfg.kl_in_reward:
            kl = kl_estimate(batch.sample_logp, batch.ref_logp, cfg.kl_estimator)
            metrics["kl_ref"] = float(torch.where(mask.bool(), kl, 0).sum()
                                      / mask.sum().clamp(min=1))
            if not estimator.per_token:  # summed over the completion; GAE folds it per token
                rewards = kl_penalized_rewards(rewards, kl, cfg.beta, mask)
        gfpo_k = self._gfpo_k(rewards)
        if gfpo_k is not None:
            kept = gfpo_filter(rewards, batch.lengths, per_prompt, gfpo_k, cfg.gfpo_metric)
            batch.sequence_advantages = gfpo_advantages(rewards, kept, per_prompt,
                                                        cfg.scale_rewards)
            return metrics
        result = estimator.compute(AdvantageInputs(
            rewards=rewards, num_generations=per_prompt, lengths=batch.lengths, mask=mask,
            config=cfg, reward_components=batch.reward_components, values=batch.values,
            token_kl=kl if estimator.per_token else None,
            greedy_rewards=lambda: self._greedy_rewards(batch)))
        if estimator.per_token:
            batch.token_advantages, batch.returns = result.advantages, result.returns
        else:
            batch.sequence_advantages = result.advantages
        metrics.update(result.metrics)
        return metrics

    @property
    def estimator(self) -> Estimator:
        """The registered advantage estimator of this run (:data:`ESTIMATOR_REGISTRY`)."""
        return get_estimator(self.config.advantage_estimator)

    def _gfpo_k(self, rewards: torch.Tensor):
        """GFPO's k: the configured one, or adaptive GFPO's per-prompt k from the quartiles of
        every group mean reward seen so far (this step's included); None without GFPO."""
        cfg = self.config
        if cfg.gfpo_adaptive_k is None:
            return cfg.num_remains_in_group
        means = rewards.view(-1, cfg.num_generations).nanmean(-1)
        self._gfpo_mean_rewards += means.tolist()
        history = torch.tensor(self._gfpo_mean_rewards, dtype=torch.float32)
        quartiles = difficulty_quartiles(history[~torch.isnan(history)], min_count=4)
        return adaptive_num_remains(means.cpu(), quartiles, cfg.gfpo_adaptive_k).to(self.device)

    def _greedy_rewards(self, batch: Experience) -> torch.Tensor:
        """ReMax's baseline: the reward of one greedy completion per prompt."""
        cfg = self.config
        rows = self.train_dataset[batch.prompt_index[::cfg.num_generations].tolist()]
        rollout = generate(self.model, self.tokenizer, rows["prompt"], num_generations=1,
                           max_completion_length=cfg.max_completion_length,
                           temperature=self.temperature, greedy=True)
        return self._rewards(rows, rollout)[1]

    # ---- 5. update -------------------------------------------------------------------------------
    def update(self, batch: Experience) -> dict:
        """num_iterations passes of num_mini_batches optimizer steps over the batch."""
        cfg = self.config
        self.model.train()
        if self.value_model is not None:
            self.value_model.train()
        stats = StepStats()
        # dapo normaliser (TRL): loss tokens of the generation batch per optimizer step
        num_items = batch.loss_mask.sum() / cfg.num_mini_batches
        has_gradient = self.rows_with_gradient(batch)
        for iteration in range(cfg.num_iterations):
            order = torch.arange(len(batch), device=self.device)
            if cfg.num_mini_batches > 1:  # TRL shuffles the generation batch before splitting
                shuffle = torch.Generator().manual_seed(
                    cfg.seed * 1_000_003 + self.step * 1_009 + iteration)
                order = order[torch.randperm(len(batch), generator=shuffle).to(self.device)]
            for k, rows in enumerate(order.tensor_split(cfg.num_mini_batches)):
                finite = self.accumulate_gradients(batch.select(rows), has_gradient[rows],
                                                   num_items, stats)
                if finite and self.ptx is not None:
                    step = (self.step * cfg.num_iterations + iteration) * cfg.num_mini_batches + k
                    finite = self.accumulate_ptx_gradients(self.ptx.batch(step), stats)
                self._apply_gradients(finite, stats)
        self.model.eval()
        row = stats.result()
        row["completions_trained"] = int(has_gradient.sum())
        self._nonfinite_streak = self._nonfinite_streak + 1 if row["skipped_nonfinite"] else 0
        return row

    def rows_with_gradient(self, batch: Experience) -> torch.Tensor:
        """Bool (B,): the rows whose loss terms can be non-zero.

        A row with an empty loss mask contributes nothing; a row with zero advantage contributes
        nothing unless a KL-in-loss, an entropy bonus or a critic gives it a term. The other
        rows still count in the global normalisers, so leaving them out changes no gradient;
        only bnpo's per-micro-batch token mean depends on which rows share a micro-batch.
        """
        cfg = self.config
        if self.loss.aggregation in LOCAL_AGGREGATIONS:
            return torch.ones(len(batch), dtype=torch.bool, device=self.device)
        has_tokens = batch.loss_mask.any(-1)
        if (self.value_model is not None or cfg.entropy_coef != 0
                or (cfg.beta != 0 and not cfg.kl_in_reward)):
            return has_tokens
        advantages = batch.advantages
        nonzero = advantages != 0 if advantages.dim() == 1 else (advantages != 0).any(-1)
        return has_tokens & nonzero

    def accumulate_gradients(self, mini: Experience, has_gradient: torch.Tensor, num_items,
                             stats: StepStats | None = None) -> bool:
        """Backward the loss of one mini-batch, micro-batch by micro-batch, into ``.grad``.

        Returns False (and stops) when a log-prob is not finite. ``has_gradient`` (bool per row)
        selects the rows that run the forward; the others still count in the normalisers.
        """
        cfg = self.config
        stats = StepStats() if stats is None else stats
        tokens = mini.loss_mask.sum().clamp(min=1)
        for micro_rows in self._micro_batches(mini, has_gradient.nonzero().squeeze(-1)):
            mb = mini.select(micro_rows).trimmed()
            logp, entropy = completion_logprobs_and_entropy(self.model, mb, self.temperature,
                                                            self._share_prompts)
            if not _finite_where(mb.loss_mask, logp, mb.old_logp, mb.ref_logp):
                return False
            weights, penalty, filtered = token_filters(
                cfg, logp, mb.old_logp, mb.advantages, mb.loss_mask, mb.token_weights,
                torch.Generator().manual_seed(cfg.seed * 7_919 + self.step))  # Clip-Cov's draw
            if mb.is_weights is not None:  # sampler/trainer mismatch correction (TRL's place)
                weights = mb.is_weights if weights is None else weights * mb.is_weights
            if filtered is not None:
                stats.add("tokens_masked", filtered[mb.loss_mask.bool()].float().mean(),
                          mb.loss_mask.sum())
            loss, metrics = policy_loss(
                logp, mb.old_logp, mb.advantages, mb.loss_mask, ref_logp=mb.ref_logp,
                **self._loss_settings, **self.loss.inputs_from(mb), num_items_in_batch=num_items,
                num_sequences_in_batch=len(mini),
                entropy=entropy if cfg.entropy_coef else entropy.detach(),
                token_weights=weights, token_penalty=penalty)
            stats.add("loss", metrics.pop("loss"), weight=None)
            weight = mb.loss_mask.sum()
            if self.value_model is not None:
                values = completion_values(self.value_model, mb, self._share_prompts)
                v_loss, v_metrics = value_loss(values, mb.values, mb.returns, mb.loss_mask,
                                               cfg.clip_range_value)
                # value_loss is a token mean of the micro-batch: weigh it into the mini-batch's
                loss = loss + cfg.vf_coef * v_loss * (weight / tokens)
                stats.add("value_loss", v_loss.detach(), weight)
                metrics.update(v_metrics)
            for key in _LOGGED_LOSS_METRICS:
                if key in metrics:
                    stats.add(key, metrics[key], weight)
            loss.backward()
        return True

    def accumulate_ptx_gradients(self, examples, stats: StepStats | None = None) -> bool:
        """Backward ``ptx_coef`` x the token-mean NLL of ``examples`` (:func:`labkit.ptx.ptx_nll`)
        into ``.grad``, on top of the RL gradient of the same optimizer step (InstructGPT's
        PPO-ptx, arXiv 2203.02155 eq. 2). Logs ``ptx_loss``; returns False if it is not finite."""
        nll = ptx_nll(self.model, self.tokenizer, examples)
        if not torch.isfinite(nll):
            return False
        (self.config.ptx_coef * nll).backward()
        if stats is not None:
            stats.add("ptx_loss", nll.detach(), weight=1)
        return True

    def _move_reference(self) -> dict:
        """After an update: TR-DPO's soft sync every ref_model_sync_steps optimizer steps, and
        ProRL's periodic hard reset. Returns the ``ref_sync``/``ref_reset`` events."""
        cfg = self.config
        events = {}
        if cfg.sync_ref_model:
            before = self._optimizer_steps
            self._optimizer_steps += cfg.num_iterations * cfg.num_mini_batches
            if self._optimizer_steps // cfg.ref_model_sync_steps > \
                    before // cfg.ref_model_sync_steps:
                mix_reference(self.model, self.ref_model, cfg.ref_model_mixup_alpha)
                events["ref_sync"] = 1
        if cfg.ref_reset_every and (self.step + 1) % cfg.ref_reset_every == 0:
            reset_reference(self.model, self.ref_model, self.optimizer)
            events["ref_reset"] = 1
        return events

    def _apply_gradients(self, finite: bool, stats: StepStats) -> None:
        """Clip and step (:func:`labkit.engine.run_control.guarded_optimizer_step`): skipped when a
        loss or gradient was not finite, rolled back when the step made a weight non-finite."""
        named = [("grad_norm", self.optimizer.param_groups[0]["params"])]
        if self.value_model is not None:
            named.append(("value_grad_norm", self.optimizer.param_groups[1]["params"]))
        guarded_optimizer_step(self.optimizer, self.scheduler, named, self.config.max_grad_norm,
                               finite, self.config.rollback_nonfinite_weights, stats)

    # ---- evaluation and checkpoints --------------------------------------------------------------
    def evaluate(self) -> dict:
        """Sample eval_k answers per eval prompt; the ``eval_*`` columns (see METRICS)."""
        cfg = self.config
        if self.eval_dataset is None:
            raise ValueError("no eval dataset: pass eval_dataset or set eval_every > 0")
        table = evaluate(self.model, self.tokenizer, self.eval_dataset, k=cfg.eval_k,
                         temperature=cfg.eval_temperature or cfg.temperature,
                         max_completion_length=cfg.max_completion_length, seed=cfg.seed)
        overall = table[table["family"] == "all"].iloc[0]
        row = {"eval_accuracy": float(overall["accuracy"]),
               "eval_pass@k": float(overall["pass@k"]), "eval_length": float(overall["length"]),
               "eval_format_rate": float(overall["format_rate"]),
               "eval_truncation": float(overall["truncation"])}
        cells = table[table["family"] != "all"]
        if len(cells) > 1:  # per cell, so a run shows what it gains and where it forgets
            row.update({f"eval_accuracy_{c.family}_d{c.difficulty}": float(c.accuracy)
                        for c in cells.itertuples()})
        return row

    def save_checkpoint(self, directory=None) -> Path:
        """Save everything needed to resume, atomically; default ``output_dir/checkpoint-<step>``."""
        if directory is None:
            if self.config.output_dir is None:
                raise ValueError("give a directory or set config.output_dir")
            directory = Path(self.config.output_dir) / f"checkpoint-{self.step}"
        state = {"step": self.step, "optimizer": self.optimizer.state_dict(),
                 "scheduler": self.scheduler.state_dict(), "rng": capture_rng(self.generator),
                 "sampler": self.sampler.state_dict(), "nonfinite_streak": self._nonfinite_streak,
                 "gfpo_mean_rewards": list(self._gfpo_mean_rewards),
                 "optimizer_steps": self._optimizer_steps,
                 "best_eval": [self._best_eval, self._evals_since_best],
                 "config": self.config.to_dict()}
        with self.guard:
            return save_checkpoint(directory, model=self.model, tokenizer=self.tokenizer,
                                   state=state, history=self.history,
                                   eval_history=self.eval_history,
                                   value_model=self.value_model, ref_model=self.ref_model)

    def load_checkpoint(self, directory) -> None:
        """Restore a :meth:`save_checkpoint` folder into this trainer (weights, optimizer,
        scheduler, random states, data position, history). Refuses a checkpoint whose run had a
        different configuration in any field outside :data:`RESUMABLE_CHANGES`."""
        state = load_state(directory)
        check_same_run(state.get("config", {}), self.config, directory)
        state, history, eval_history = load_checkpoint(
            directory, model=self.model, value_model=self.value_model, ref_model=self.ref_model,
            verify=False)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        restore_rng(state["rng"], self.generator)
        self.sampler.load_state_dict(state["sampler"])
        self.step = state["step"]
        self._nonfinite_streak = state["nonfinite_streak"]
        self._gfpo_mean_rewards = list(state.get("gfpo_mean_rewards", []))
        self._optimizer_steps = state.get("optimizer_steps", 0)
        self._best_eval, self._evals_since_best = state.get("best_eval", [-math.inf, 0])
        self.rows = history.to_dict("records")
        self.eval_rows = eval_history.to_dict("records")


def train(config: TrainConfig | None = None, model=None, tokenizer=None, train_dataset=None,
          eval_dataset=None, reward_funcs=None, callbacks=(), resume_from=None) -> TrainResult:
    """Build a :class:`Trainer` and run it; see :class:`Trainer` for the arguments."""
    trainer = Trainer(config, model=model, tokenizer=tokenizer, train_dataset=train_dataset,
                      eval_dataset=eval_dataset, reward_funcs=reward_funcs, callbacks=callbacks)
    return trainer.train(resume_from=resume_from)


# ---- helpers -------------------------------------------------------------------------------------
#: policy_loss / value_loss metrics averaged into the history, weighted by loss tokens.
_LOGGED_LOSS_METRICS = ("clip_low", "clip_high", "clip_region", "clip_dual", "kl_old", "kl_ref",
                        "entropy", "value_clipfrac")


def _finite_where(mask, *tensors) -> bool:
    m = mask.bool()
    return bool(torch.stack([torch.isfinite(torch.where(m, t, 0)).all()
                             for t in tensors if t is not None]).all())


def _frozen_copy(model):
    ref = copy.deepcopy(model).eval()
    ref.requires_grad_(False)
    return ref


__all__ = ["METRICS", "RESUMABLE_CHANGES", "TIMING_COLUMNS", "TrainResult", "Trainer", "train"]
