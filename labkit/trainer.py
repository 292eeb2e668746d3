"""The training loop: sample, score, compute advantages, update; one row of metrics per step.

One step (:meth:`Trainer.training_step`) is the papers' algorithm box, and the method reads the
same way:

1. **sample** ``prompts_per_step`` prompts (in the run's prompt order over the train split) and
   ``num_generations`` completions of each with the KV-cached sampler (:mod:`labkit.sampling`);
2. **score** them with the weighted reward functions (default accuracy + format; TRL's
   signature), plus DAPO's soft overlong penalty and the chosen length reward
   (:mod:`labkit.training.batches`, :mod:`labkit.training.scoring`). With DAPO's dynamic sampling,
   groups whose rewards are all equal are dropped and new prompts are sampled until the batch is
   full again, for at most ``max_resample_rounds`` extra rounds. The step calls this itself
   (:meth:`Trainer.sample_and_score`); with ``max_staleness = k > 0`` a producer
   (:class:`labkit.offpolicy.BatchSource`) samples k steps ahead and hands over a stamped batch;
3. **score forwards** without gradient (:func:`labkit.training.forward.score_forwards`), only
   those the configuration needs: the behaviour
   policy's log-probs when the update is off-policy (``num_iterations > 1`` or several
   mini-batches) or when the sampler/trainer mismatch is corrected (:mod:`labkit.tricks.mismatch`,
   ``sampling_dtype``), the frozen reference's when ``beta != 0`` (with LoRA, the policy with
   its adapters disabled: :mod:`labkit.training.lora`), the critic's values for PPO;
4. **advantages**: the registered estimator (:data:`labkit.advantages.ESTIMATOR_REGISTRY`: GRPO,
   GDPO, RLOO, ReMax, OPO, GAE with the critic, or turn-level GRPO over an episode's turns:
   :mod:`labkit.advantages.turn_level`), or GFPO's filtered groups
   (:mod:`labkit.tricks.filters`);
5. **update**: ``num_iterations`` passes, each split into ``num_mini_batches`` optimizer steps,
   each accumulated over micro-batches. The loss is :func:`labkit.losses.policy_loss` of the
   registered ``loss_type`` (plus ``vf_coef`` times :func:`labkit.losses.value_loss` for PPO)
   with its normalisers counted over the whole mini-batch, so micro-batching does not change the
   gradient; ``compile_loss`` compiles it and the log-probs (:mod:`labkit.training.compiled`).

:mod:`labkit.grpo_minimal` and :mod:`labkit.ppo_minimal` are GRPO and PPO on one screen with none
of the machinery below; ``tests/test_grpo_minimal.py`` and ``tests/test_ppo_minimal.py`` check
that each gives the trainer's gradient.

Where this departs from the papers and from TRL's ``GRPOTrainer`` (and why):

* three savings that leave the gradient unchanged (up to float rounding): completions that
  cannot contribute (zero advantage with ``beta = 0`` and no entropy bonus, or nothing left in
  their loss mask) skip the training forward, while the normalisers still count them; the
  completions of one prompt share one forward of the prompt; micro-batches gather completions of
  similar length (:mod:`labkit.training.forward`). The ``entropy`` and clip metrics are therefore
  averaged over the completions that trained;
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
* safety (:mod:`labkit.training.run_control`, :mod:`labkit.training.checkpoint`): a NaN/inf loss,
  gradient or updated weight skips the optimizer step and rolls the weights back; Ctrl-C never
  leaves an update, a history row, an evaluation or a checkpoint half done; a step that fails
  before its update (interrupt or error) can be retried with the same prompts.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from labkit.advantages import AdvantageInputs, Estimator, get_estimator, kl_penalized_rewards
from labkit.agents.episodes import checked_environment_factory
from labkit.config import RESUMABLE_CHANGES, TrainConfig
from labkit.evaluate import eval_metrics, evaluate
from labkit.experience import Experience
from labkit.finetune.ptx import PTXData, ptx_nll
from labkit.losses import (
    LOCAL_AGGREGATIONS,
    LossType,
    get_loss_type,
    kl_estimate,
    policy_loss_settings,
    value_loss,
)
from labkit.metrics import METRICS, TIMING_COLUMNS, StepStats
from labkit.models import ValueModel, attention_kernels
from labkit.offpolicy import BatchSource, correct_batch, make_producer
from labkit.rewards import accuracy_reward
from labkit.rewards.environment import check_environment_rewards
from labkit.runtime.seeds import seed_offset, shifted_seed
from labkit.runtime.static import static_outputs
from labkit.sampling import Decoder
from labkit.training.batches import Sampling, greedy_rewards
from labkit.training.checkpoint import restore_trainer, save_trainer
from labkit.training.clock import PhaseClock
from labkit.training.compiled import LossPath
from labkit.training.forward import (
    completion_logprobs_and_entropy,
    completion_values,
    micro_batches,
    rows_with_gradient,
    score_forwards,
    shares_prompts,
)
from labkit.training.run_control import (
    InterruptGuard,
    check_nonfinite_streak,
    finite_where,
    guarded_optimizer_step,
    peak_memory_mb,
    step_rewind,
    terminate_as_interrupt,
)
from labkit.training.setup import (
    frozen_copy,
    make_optimizer,
    prepare_datasets,
    prepare_policy,
    prepare_reward_funcs,
)
from labkit.tricks.filters import AdaptiveGFPO, gfpo_advantages, gfpo_filter
from labkit.tricks.prompt_sampling import make_prompt_order
from labkit.tricks.reference import StallTrigger, move_reference, reset_reference
from labkit.tricks.token_filters import token_filters


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
    step (notebooks draw live plots with it). ``environment_factory`` (TRL's name) turns each
    completion into a multi-turn episode with tools (:mod:`labkit.agents.episodes`): a callable
    returning an environment whose public methods are the tools; it is reset on each prompt's
    row, handed to the reward functions as the ``environments`` column, and only the policy's
    own tokens enter the loss.
    """

    def __init__(self, config: TrainConfig | None = None, model=None, tokenizer=None,
                 train_dataset=None, eval_dataset=None, reward_funcs=None, callbacks=(),
                 environment_factory=None):
        self.config = cfg = config if config is not None else TrainConfig()
        if not isinstance(cfg, TrainConfig):
            raise TypeError(f"config must be a TrainConfig, got {type(cfg).__name__}")
        if seed_offset():  # the same notebook under another seed (python -m labkit bands)
            cfg = self.config = dataclasses.replace(cfg, seed=shifted_seed(cfg.seed))
        random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        self.model, self.tokenizer = prepare_policy(cfg, model, tokenizer)  # LoRA's seeded above
        self.device = next(self.model.parameters()).device
        self.reward_funcs, self.reward_names = prepare_reward_funcs(cfg, reward_funcs)
        self.train_dataset, self.eval_dataset = prepare_datasets(
            cfg, train_dataset, eval_dataset, needs_answers=accuracy_reward in self.reward_funcs,
            episodes=environment_factory is not None)
        self.callbacks = list(callbacks)
        # multi-turn episodes with tools (labkit.agents): a callable that builds one environment,
        # probed once here as TRL probes it
        self.environment_factory = checked_environment_factory(environment_factory, cfg)
        if environment_factory is None:  # an environment reward would have nothing to read
            check_environment_rewards(self.reward_funcs, None, "environment_factory is None")
        # Only the models the configuration needs: a frozen reference only when beta != 0, and
        # none with LoRA, whose reference is the same model with its adapters disabled.
        self.ref_model = (frozen_copy(self.model) if cfg.needs_reference and not cfg.use_peft
                          else None)
        # A sampler that differs from the trainer (an inference engine's stand-in), synced every
        # step: a copy of the policy in sampling_dtype.
        self.sampling_copy = (frozen_copy(self.model, getattr(torch, cfg.sampling_dtype))
                               if cfg.sampling_dtype else None)
        # which decode loop samples (labkit.sampling), passed to every sampling call of the run
        # and keeping its captured steps; "fixed" where it cannot run is refused here
        self.decoder = Decoder(cfg.decode_path, cfg.cuda_graphs)
        self.decode_plan = self.decoder.plan(
            self.model if self.sampling_copy is None else self.sampling_copy)
        self.loss_path = LossPath(cfg.compile_loss)  # eager, or compiled (labkit.training.compiled)
        self.value_model = ValueModel(self.model) if self.estimator.critic else None
        self.optimizer, self.scheduler = make_optimizer(cfg, self.model, self.value_model)
        self.prompt_order = make_prompt_order(
            cfg.prompt_sampler, self.train_dataset, cfg.seed, total_steps=cfg.max_steps,
            curriculum_ratio=cfg.curriculum_ratio, prioritized_floor=cfg.prioritized_floor,
            multitask_lambda=cfg.multitask_lambda, multitask_lr=cfg.multitask_lr)
        # PTX: warm-start examples whose NLL joins the loss; replace .ptx to bring your own data
        self.ptx = PTXData(cfg.ptx_batch_size, seed=cfg.seed) if cfg.ptx_coef > 0 else None
        self.generator = torch.Generator(device=self.device).manual_seed(cfg.seed)
        self.step = 0
        self.rows: list[dict] = []
        self.eval_rows: list[dict] = []
        self.guard = InterruptGuard()
        self.nonfinite_streak = 0  # consecutive steps skipped for a NaN/inf
        self._update_started = False
        self.adaptive_gfpo = (AdaptiveGFPO(cfg.gfpo_adaptive_k, cfg.num_generations)
                              if cfg.gfpo_adaptive_k else None)
        self.optimizer_steps = 0  # TR-DPO syncs the reference every ref_model_sync_steps of them
        self.stall = StallTrigger(cfg.ref_reset_patience)  # ProRL's reset when eval stalls
        self.temperature = cfg.temperature  # the current step's (temperature_schedule)
        # what a batch is sampled and scored with (the same objects as above, not copies)
        self.sampling = Sampling(cfg, self.model, self.sampling_copy, self.tokenizer,
                                 self.reward_funcs, self.reward_names, self.train_dataset,
                                 self.environment_factory, self.device, self.prompt_order,
                                 self.generator, self.decoder)
        # k > 0: a producer samples k steps ahead through it (labkit.offpolicy); k = 0: None
        self.producer: BatchSource | None = make_producer(cfg, self.sampling)
        if cfg.resume_from:
            self.load_checkpoint(cfg.resume_from)

    # ---- tables ----------------------------------------------------------------------------------
    @property
    def history(self) -> pd.DataFrame:
        """One row per completed step (columns: :data:`labkit.metrics.METRICS`)."""
        return pd.DataFrame(self.rows)

    @property
    def eval_history(self) -> pd.DataFrame:
        """One row per evaluation, step 0 being the model before training."""
        return pd.DataFrame(self.eval_rows)

    @property
    def admission_log(self) -> pd.DataFrame:
        """With ``staleness_admission``: one row per sampled group, trained, discarded or still
        pending (:meth:`labkit.offpolicy.admission.AdmissionSource.log`); else empty."""
        log = getattr(self.producer, "log", None)
        return log() if log is not None else pd.DataFrame()

    # ---- the loop --------------------------------------------------------------------------------
    def train(self, resume_from=None, allow_changes=()) -> TrainResult:
        """Run steps until ``max_steps``; returns a :class:`TrainResult`, also when interrupted.
        ``resume_from`` (and ``allow_changes``) as in :meth:`load_checkpoint`.

        A Ctrl-C stops the run at the next safe point: the step in progress is either finished
        (its update had started) or forgotten (it had not); with ``output_dir`` a checkpoint of
        the last completed step is saved, and a second Ctrl-C cannot tear it (nor cut short the
        stop of the overlapped sampling thread). SIGTERM (``kill``, a scheduler's preemption)
        stops the run the same way.
        """
        from tqdm.auto import tqdm

        cfg = self.config
        if resume_from is not None:
            self.load_checkpoint(resume_from, allow_changes)
        if self.device.type != "cpu" or cfg.decode_path != "auto":  # the CPU default is silent
            print(self.decode_plan)
        # a static copy of a notebook (LABKIT_STATIC=1) would keep the bar frozen at 0%
        bar = tqdm(total=cfg.max_steps, initial=self.step,
                   disable=not cfg.progress or static_outputs(),
                   desc=f"{cfg.advantage_estimator}/{cfg.loss_type}")
        interrupted = False
        try:
            with terminate_as_interrupt():  # SIGTERM (kill, preemption) stops as Ctrl-C does
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
            if self.producer is not None:
                with self.guard.absorbing():  # a second Ctrl-C cannot cut the thread's stop short
                    self.producer.close()
            self.model.eval()
        return TrainResult(self.model, self.tokenizer, self.history, self.eval_history,
                           interrupted, self)

    def _run_step(self) -> dict:
        """:meth:`training_step`, forgotten if it fails before its update: the random state and
        the prompt position go back (unless the producer's thread draws from them) and so does
        the producer's batch, so a retry trains the same prompts and completions."""
        rewind = step_rewind(self.generator, self.prompt_order, self.producer)
        self._update_started = False
        try:
            return self.training_step()
        except BaseException:
            if not self._update_started:
                rewind()
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
                if self.stall.stalled(metrics["eval_accuracy"]):
                    reset_reference(self.model, self.ref_model, self.optimizer)
                    row["ref_reset"] = 1
            if cfg.save_every and self.step % cfg.save_every == 0:
                self.save_checkpoint()
        check_nonfinite_streak(self.nonfinite_streak, cfg.max_nonfinite_steps, self.step)
        for callback in self.callbacks:
            callback(self, row)
        self.guard.raise_if_requested()

    def _on_interrupt(self) -> None:
        cfg = self.config
        self.optimizer.zero_grad(set_to_none=True)
        where = ""
        if cfg.save_on_interrupt and cfg.output_dir:
            with self.guard.absorbing():  # a second Ctrl-C waits until the checkpoint is whole
                where = f"; checkpoint saved to {self.save_checkpoint()}"
        print(f"Training interrupted at step {self.step}: history and weights of step "
              f"{self.step} kept{where}.")

    def training_step(self) -> dict:
        """Sample, score, compute advantages and update once; returns the step's metrics row.
        Every generate of the step (sampling, ReMax's greedy baseline, episodes) decodes with the
        run's :class:`~labkit.sampling.Decoder` (``decode_path``, ``cuda_graphs``)."""
        cfg = self.config
        clock = PhaseClock(self.device)  # where the step's seconds go (labkit.training.clock)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self.temperature = self.sampling.temperature_at(self.step)
        if self.producer is None:                            # 1-2, by this step's weights
            batch, row = self.sample_and_score()
            staleness = 0
        else:                                                # 1-2, k steps ahead (offpolicy)
            stamped = self.producer.next(self.step)
            batch, row, self.temperature = stamped.batch, stamped.row, stamped.temperature
            staleness = self.step - stamped.version
        clock.mark("sample")
        row.update(self.score_forwards(batch))               # 3
        clock.mark("score")
        row.update(correct_batch(batch, cfg, staleness))
        row.update(self.compute_advantages(batch))           # 4
        clock.mark("advantage")
        learning_rate = self.optimizer.param_groups[0]["lr"]
        with self.guard:                                     # 5, never half applied
            self._update_started = True
            row.update(self.update(batch))
            self.optimizer_steps, moves = move_reference(
                cfg, self.step, self.optimizer_steps, self.model, self.ref_model, self.optimizer)
            clock.mark("update")
            phases = clock.seconds()
            row.update(moves, **phases)
            self.step += 1
            elapsed = sum(phases.values())
            row.update(step=self.step, learning_rate=learning_rate, step_time=elapsed,
                       tokens_per_second=row["sampled_tokens"] / elapsed,
                       peak_memory_mb=peak_memory_mb(self.device))
            first = ["step", "reward", "accuracy", "completion_length"]
            row = {**{k: row[k] for k in first}, **{k: v for k, v in row.items()
                                                       if k not in first}}
            self.rows.append(row)
        return row

    # ---- 1-2. sample and score -------------------------------------------------------------------
    def sample_and_score(self) -> tuple[Experience, dict]:
        """Sample prompts_per_step prompts x G completions with the current weights at this
        step's temperature and score them (:meth:`labkit.training.batches.Sampling.batch`, with
        DAPO's dynamic sampling's rounds). Returns the batch and the sampling metrics."""
        return self.sampling.batch(self.temperature)

    # ---- 3. score forwards -----------------------------------------------------------------------
    def score_forwards(self, batch: Experience) -> dict:
        """No-grad forwards the update needs, and only those (behaviour policy, reference,
        critic: :func:`labkit.training.forward.score_forwards`); returns the sampler/trainer
        mismatch metrics when the correction is on (else ``{}``)."""
        return score_forwards(batch, self.config, self.model, self.ref_model, self.value_model,
                              self.temperature, self.micro_batches)

    @property
    def loss(self) -> LossType:
        """The registered loss type of this run (:data:`labkit.losses.LOSS_REGISTRY`)."""
        return get_loss_type(self.config.loss_type)

    def micro_batches(self, batch: Experience, rows: torch.Tensor) -> list[torch.Tensor]:
        """``rows`` in micro-batches of at most ``micro_batch_size``, packed by length."""
        return micro_batches(batch, rows, self.config.micro_batch_size,
                             self.loss.aggregation in LOCAL_AGGREGATIONS)

    # ---- 4. advantages ---------------------------------------------------------------------------
    def compute_advantages(self, batch: Experience) -> dict:
        """Set the batch's advantages with the registered estimator (and ``returns`` for a
        critic's); GFPO's filter replaces GRPO's formula on its kept subsets. Returns the step's
        KL-in-reward and estimator metrics."""
        cfg, estimator = self.config, self.estimator
        num_generations, rewards, mask = cfg.num_generations, batch.rewards, batch.loss_mask
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
        gfpo_k = (self.adaptive_gfpo.num_remains(rewards) if self.adaptive_gfpo is not None
                  else cfg.num_remains_in_group)
        if gfpo_k is not None:
            kept = gfpo_filter(rewards, batch.lengths, num_generations, gfpo_k, cfg.gfpo_metric)
            batch.sequence_advantages = gfpo_advantages(rewards, kept, num_generations,
                                                        cfg.scale_rewards)
            return metrics
        result = estimator.compute(AdvantageInputs(
            rewards=rewards, num_generations=num_generations, lengths=batch.lengths, mask=mask,
            config=cfg, reward_components=batch.reward_components, values=batch.values,
            token_kl=kl if estimator.per_token else None,
            greedy_rewards=lambda: greedy_rewards(self.sampling.inputs(self.temperature), batch),
            action_mask=batch.action_mask, turn_rewards=batch.turn_rewards))
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
        self.nonfinite_streak = self.nonfinite_streak + 1 if row["skipped_nonfinite"] else 0
        return row

    def rows_with_gradient(self, batch: Experience) -> torch.Tensor:
        """Bool (B,): the rows whose loss terms can be non-zero
        (:func:`labkit.training.forward.rows_with_gradient`)."""
        return rows_with_gradient(batch, self.config, critic=self.value_model is not None)

    def accumulate_gradients(self, mini: Experience, has_gradient: torch.Tensor, num_items,
                             stats: StepStats | None = None) -> bool:
        """Backward the loss of one mini-batch, micro-batch by micro-batch, into ``.grad``.

        Returns False (and stops) when a log-prob is not finite. ``has_gradient`` (bool per row)
        selects the rows that run the forward; the others still count in the normalisers.
        """
        cfg = self.config
        stats = StepStats() if stats is None else stats
        tokens = mini.loss_mask.sum().clamp(min=1)
        for micro_rows in self.micro_batches(mini, has_gradient.nonzero().squeeze(-1)):
            mb = mini.select(micro_rows).trimmed()
            logp, entropy = completion_logprobs_and_entropy(
                self.model, mb, self.temperature, shares_prompts(cfg), self.loss_path.logprobs)
            if not finite_where(mb.loss_mask, logp, mb.old_logp, mb.ref_logp):
                return False
            if mb.action_mask is not None:  # episodes: what the policy thinks of the tool's text
                env = mb.completion_mask.bool() & (mb.action_mask == 0)
                if env.any():
                    stats.add("environment_logp", logp.detach()[env].mean(), env.sum())
            weights, penalty, filtered = token_filters(
                cfg, logp, mb.old_logp, mb.advantages, mb.loss_mask, mb.token_weights,
                torch.Generator().manual_seed(cfg.seed * 7_919 + self.step))  # Clip-Cov's draw
            if mb.is_weights is not None:  # sampler/trainer mismatch correction (TRL's place)
                weights = mb.is_weights if weights is None else weights * mb.is_weights
            if filtered is not None:
                stats.add("tokens_masked", filtered[mb.loss_mask.bool()].float().mean(),
                          mb.loss_mask.sum())
            loss, metrics = self.loss_path.policy_loss(
                logp, mb.old_logp, mb.advantages, mb.loss_mask, ref_logp=mb.ref_logp,
                **policy_loss_settings(cfg), **self.loss.inputs_from(mb),
                num_items_in_batch=num_items, num_sequences_in_batch=len(mini),
                entropy=entropy if cfg.entropy_coef else entropy.detach(),
                token_weights=weights, token_penalty=penalty)
            stats.add("loss", metrics.pop("loss"), weight=None)
            weight = mb.loss_mask.sum()
            if self.value_model is not None:
                values = completion_values(self.value_model, mb, shares_prompts(cfg))
                v_loss, v_metrics = value_loss(values, mb.values, mb.returns, mb.loss_mask,
                                               cfg.clip_range_value)
                # value_loss is a token mean of the micro-batch: weigh it into the mini-batch's
                loss = loss + cfg.vf_coef * v_loss * (weight / tokens)
                stats.add("value_loss", v_loss.detach(), weight)
                metrics.update(v_metrics)
            for key in _LOGGED_LOSS_METRICS:
                if key in metrics:
                    stats.add(key, metrics[key], weight)
            # The backward under the forward's kernels: with gradient_checkpointing it recomputes
            # the forward, and on CUDA outside this context SDPA picks cuDNN's attention, whose
            # saved tensors differ from the forward's (torch's CheckpointError; the GPU check).
            with attention_kernels(self.device):
                loss.backward()
        return True

    def accumulate_ptx_gradients(self, examples, stats: StepStats | None = None) -> bool:
        """Backward ``ptx_coef`` x the token-mean NLL of ``examples`` (:func:`labkit.finetune.ptx.ptx_nll`)
        into ``.grad``, on top of the RL gradient of the same optimizer step (InstructGPT's
        PPO-ptx, arXiv 2203.02155 eq. 2). Logs ``ptx_loss``; returns False if it is not finite."""
        nll = ptx_nll(self.model, self.tokenizer, examples)
        if not torch.isfinite(nll):
            return False
        (self.config.ptx_coef * nll).backward()
        if stats is not None:
            stats.add("ptx_loss", nll.detach(), weight=1)
        return True

    def _apply_gradients(self, finite: bool, stats: StepStats) -> None:
        """Clip and step (:func:`labkit.training.run_control.guarded_optimizer_step`): skipped when a
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
        clock = PhaseClock(self.device)
        table, samples = evaluate(
            self.model, self.tokenizer, self.eval_dataset, k=cfg.eval_k,
            temperature=cfg.eval_temperature or cfg.temperature,
            max_completion_length=cfg.max_completion_length, seed=cfg.seed,
            return_samples=True, environment_factory=self.environment_factory,
            max_tool_calling_iterations=cfg.max_tool_calling_iterations,
            decoder=self.decoder)  # the run's decode loop and captured steps, as the steps'
        clock.mark("eval")
        return {**eval_metrics(table, samples), **clock.seconds()}  # with eval_time

    def save_checkpoint(self, directory=None) -> Path:
        """Save everything needed to resume, atomically; default ``output_dir/checkpoint-<step>``."""
        if directory is None:
            if self.config.output_dir is None:
                raise ValueError("give a directory or set config.output_dir")
            directory = Path(self.config.output_dir) / f"checkpoint-{self.step}"
        with self.guard:
            return save_trainer(self, directory)

    def load_checkpoint(self, directory, allow_changes=()) -> None:
        """Restore a :meth:`save_checkpoint` folder into this trainer (weights, optimizer,
        scheduler, random states, data position, history). Refuses a checkpoint whose run had a
        different configuration in any field outside :data:`RESUMABLE_CHANGES`, or other
        training data, reward functions or environment factory, unless ``allow_changes`` names
        that input (``"data"``, ``"rewards"``, ``"environment"``, or a tuple of them)."""
        restore_trainer(self, directory, allow_changes)


def train(config: TrainConfig | None = None, model=None, tokenizer=None, train_dataset=None,
          eval_dataset=None, reward_funcs=None, callbacks=(), resume_from=None,
          environment_factory=None, allow_changes=()) -> TrainResult:
    """Build a :class:`Trainer` and run it; see :class:`Trainer` for the arguments."""
    trainer = Trainer(config, model=model, tokenizer=tokenizer, train_dataset=train_dataset,
                      eval_dataset=eval_dataset, reward_funcs=reward_funcs, callbacks=callbacks,
                      environment_factory=environment_factory)
    return trainer.train(resume_from=resume_from, allow_changes=allow_changes)


# ---- helpers -------------------------------------------------------------------------------------
#: policy_loss / value_loss metrics averaged into the history, weighted by loss tokens.
_LOGGED_LOSS_METRICS = ("clip_low", "clip_high", "clip_region", "clip_dual", "kl_old", "kl_ref",
                        "entropy", "value_clipfrac")


__all__ = ["METRICS", "RESUMABLE_CHANGES", "TIMING_COLUMNS", "TrainResult", "Trainer", "train"]
