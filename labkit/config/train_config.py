"""Every knob of a training run in one dataclass, :class:`TrainConfig`, and the method presets.

Where TRL's ``GRPOConfig`` has the concept, the field has TRL's name and meaning
(``num_generations``, ``epsilon``, ``epsilon_high``, ``delta``, ``beta``, ``loss_type``,
``importance_sampling_level``, ``scale_rewards``, ``num_iterations``, ``max_completion_length``,
``mask_truncated_completions``, ``temperature``, ``top_p``, ``top_k``, ``reward_weights``,
``learning_rate``, ``max_grad_norm``, ``lr_scheduler_type``, ``warmup_ratio``, ``seed``,
``num_remains_in_group``...), so what a learner sets here carries over to TRL. Lab-only knobs sit
beside them. Two batch-size differences from TRL:

* a step samples ``prompts_per_step`` prompts x ``num_generations`` completions (TRL counts
  completions: ``generation_batch_size``, available here as a read-only property);
* that generation batch is split into ``num_mini_batches`` optimizer steps per pass (PPO's
  mini-batches; TRL's ``steps_per_generation / gradient_accumulation_steps``), each processed in
  micro-batches of ``micro_batch_size`` completions (TRL's ``per_device_train_batch_size``);
  ``gradient_accumulation_steps`` follows from the two and is a property, not a knob.

A config validates itself on construction and again on every assignment (``cfg.beta = -1``
raises and leaves the old value): a bad value raises ``ValueError`` naming the field and its
allowed range, an impossible combination raises one that says how to fix it, and a misspelt field
raises ``AttributeError``. The option lists come from the modules that implement them (one source
each): ``loss_type`` from :mod:`labkit.losses`, ``scale_rewards`` from :mod:`labkit.advantages`,
``gfpo_metric`` from :mod:`labkit.tricks.filters`, ``dtype`` from :mod:`labkit.models`.

The method presets are in :mod:`labkit.config.presets`.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import sys
import warnings
from dataclasses import asdict, dataclass, fields

from labkit.advantages import (
    MULTI_OBJECTIVE_AGGREGATIONS,
    SCALE_REWARDS,
    estimators,
    get_estimator,
    group_estimators,
)
from labkit.config import methods  # noqa: F401 (registers every method's rules before any config)
from labkit.config.fields import (
    Check,
    Setting,
    between,
    boolean,
    choice,
    device,
    integer,
    integer_tuple,
    number_tuple,
    one_of,
    path,
    refuse,
    text,
    whole,
)
from labkit.config.rules import config_rules
from labkit.decode import DECODE_PATHS
from labkit.losses import (
    IMPORTANCE_SAMPLING_LEVELS,
    KL_ESTIMATORS,
    get_loss_type,
    loss_types,
)
from labkit.losses.registry import LOSS_REGISTRY, all_options, option_owners
from labkit.losses.registry import listen as listen_to_loss_types
from labkit.models import DTYPES
from labkit.offpolicy import ADMISSIONS, ASYNC_MODES
from labkit.offpolicy import CORRECTIONS as OFFPOLICY_CORRECTIONS
from labkit.rewards.diversity import DIVERSITY_SIMILARITIES
from labkit.rewards.length import LENGTH_REWARDS
from labkit.tricks.filters import GFPO_METRICS
from labkit.tricks.mismatch import MODES as IMPORTANCE_SAMPLING_MODES
from labkit.tricks.prompt_sampling import PROMPT_SAMPLERS
from labkit.tricks.temperature import TEMPERATURE_SCHEDULES
from labkit.tricks.token_filters import COV_PENALTIES
from labkit.trl_bridge.names import refuse_trl_names

#: ``sampling_dtype`` values: the precision of a sampler that differs from the trainer.
SAMPLING_DTYPES = ("bfloat16", "float32")
#: ``lr_scheduler_type`` values (transformers' names).
LR_SCHEDULERS = ("constant", "constant_with_warmup", "linear", "cosine")


def inert_clip_higher_message(config) -> str:
    """The one wording of the inert clip-higher warning (config time and the run doctor)."""
    return (f"epsilon_high = {config.epsilon_high} > epsilon = {config.epsilon}, but every batch "
            f"trains one optimizer step (num_iterations = num_mini_batches = 1): the ratio is "
            f"exactly 1 and no clip ever binds, so clip-higher changes nothing; DAPO splits each "
            f"batch into 16 mini-batches (set num_mini_batches > 1 to make it act)")


# ---- ranges that need more than one bound ----------------------------------------------------------
def _ranged(default, check: Check):
    """A field with its range beside it: :meth:`TrainConfig._check_values` loops over these."""
    return dataclasses.field(default=default, metadata={"range": check})


def _device(cfg, name):
    device(cfg)


def _trainable_dtype(cfg, name):
    choice(cfg, name, DTYPES)
    if getattr(cfg, name) in ("float16", "fp16"):
        raise ValueError("dtype='float16' cannot train here: without loss scaling the "
                         "updates overflow and the weights turn NaN after one step (measured "
                         "on the tiny Qwen: 796k of 800k weights). Use 'bfloat16' on a GPU "
                         "that has it, else 'float32'")


def _num_generations(cfg) -> int:
    return cfg.num_generations


def _adaptive_k(cfg, name):
    if getattr(cfg, name) is not None:
        integer_tuple(cfg, name, 4, low=2, high=cfg.num_generations)


def _reward_weights(cfg, name):
    if getattr(cfg, name) is not None:
        number_tuple(cfg, name)


def _overlong_buffer(cfg, name):
    integer(cfg, name, low=0)
    if cfg.overlong_buffer_len >= cfg.max_completion_length:
        raise ValueError(
            f"overlong_buffer_len must be in [0, max_completion_length) = "
            f"[0, {cfg.max_completion_length}), got {cfg.overlong_buffer_len}")


def _lora_targets(cfg, name):
    targets = cfg.lora_target_modules
    if targets is None or targets == "all-linear":
        return
    ok = (not isinstance(targets, (str, bytes, dict)) and hasattr(targets, "__iter__")
          and len(tuple(targets)) > 0
          and all(isinstance(t, str) and t.strip() for t in tuple(targets)))
    if not ok:
        raise ValueError(f"lora_target_modules must be None, 'all-linear' or a non-empty "
                         f"tuple of module names such as ('q_proj', 'v_proj'), got "
                         f"{targets!r}")
    object.__setattr__(cfg, "lora_target_modules", tuple(targets))


@dataclass
class TrainConfig:
    """All settings of a run; ``TrainConfig()`` is the lab's GRPO (``preset("grpo")``).

    Each field's comment in the source is its documentation; ``help(TrainConfig)`` lists them all
    (appended below from :data:`FIELD_DOCS`). A loss type's own knobs are not written here: its
    registration declares them (:class:`labkit.config.fields.Setting`) and they become fields at the end
    of the list (``sapo_temperature_pos``, ``vespo_k_pos``, ``cispo_min_weight``...).
    """

    # ---- model and machine ----------------------------------------------------------------------
    model_name_or_path: str = _ranged("tiny", text)
    """policy to load when ``train`` gets no model: ``"tiny"`` (shipped), a folder or a hub id"""
    device: str = _ranged("auto", _device)
    """``"auto"`` = cuda, then mps, then cpu; or any torch device string"""
    dtype: str = _ranged("auto", _trainable_dtype)
    """``"auto"`` = bfloat16 on GPUs that support it, else float32; or float32/bfloat16 (float16
    is refused: without loss scaling its updates overflow and the weights turn NaN)"""
    gradient_checkpointing: bool = _ranged(False, boolean)
    """recompute activations in backward: less memory, about a third more compute"""
    seed: int = _ranged(0, whole(0))
    """seeds python, torch, the prompt order and the sampling generator: same seed, same CPU run"""

    # ---- LoRA (peft; TRL's ModelConfig names) ---------------------------------------------------
    use_peft: bool = _ranged(False, boolean)
    """train LoRA adapters (labkit.scale.lora, arXiv 2106.09685) instead of every weight; with beta > 0
    the reference is the same model with its adapters disabled, not a copy (TRL)"""
    lora_r: int = _ranged(16, whole(1))
    """LoRA rank r (TRL default 16)"""
    lora_alpha: float = _ranged(32, between(0, math.inf, low_open=True))
    """LoRA alpha: the adapter's update is scaled by lora_alpha / lora_r (TRL default 32)"""
    lora_dropout: float = _ranged(0.05, between(0, 1, high_open=True))
    """dropout on the adapters' input (TRL default 0.05)"""
    lora_target_modules: tuple[str, ...] | str | None = _ranged(None, _lora_targets)
    """module names to adapt, e.g. ("q_proj", "v_proj"); "all-linear" = every linear layer but
    the output head; None = peft's default for the architecture (q_proj, v_proj on Qwen) (TRL)"""
    use_rslora: bool = _ranged(False, boolean)
    """rank-stabilised LoRA (arXiv 2312.03732): scale the update by lora_alpha / sqrt(lora_r)
    instead of lora_alpha / lora_r, so a higher rank still learns (TRL, peft)"""
    use_dora: bool = _ranged(False, boolean)
    """DoRA (arXiv 2402.09353): split each adapted weight into a magnitude, trained directly, and
    a direction that LoRA adapts; slower per step than LoRA (TRL, peft)"""

    # ---- which prompts ----------------------------------------------------------------------------
    prompt_sampler: str = _ranged("uniform", one_of(PROMPT_SAMPLERS))
    """uniform (shuffled passes), curriculum (easy to hard by the difficulty column, Kimi k1.5),
    prioritized (p ~ 1 - solve rate, Kimi k1.5) or multitask (MT-GRPO family weights)"""
    curriculum_ratio: float = _ranged(0.5, between(0, 1, low_open=True))
    """curriculum: share of max_steps over which the hardest allowed difficulty rises to the top"""
    prioritized_floor: float = _ranged(0.05, between(0, math.inf, low_open=True))
    """prioritized: weight floor, so a prompt always solved can still be drawn"""
    multitask_lambda: float = _ranged(0.2, between(0, math.inf))
    """multitask: weight lambda of the accuracy term in MT-GRPO's score (paper 0.2)"""
    multitask_lr: float = _ranged(0.025, between(0, math.inf, low_open=True))
    """multitask: step size of the family logits (paper 0.025)"""

    # ---- sampling: a step is prompts_per_step prompts x num_generations completions -------------
    prompts_per_step: int = _ranged(16, whole(1))
    """prompts sampled per step (lab name; TRL: generation_batch_size / num_generations)"""
    num_generations: int = _ranged(8, whole(1))
    """G: completions sampled per prompt, the group (TRL). GFPO samples G and keeps k of them"""
    max_completion_length: int = _ranged(128, whole(1))
    """most new tokens per completion; a completion without end-of-turn by then is truncated"""
    temperature: float = _ranged(1.0, between(0, math.inf, low_open=True))
    """sampling temperature; training log-probs use the same temperature (TRL). ProRL samples
    at 1.2 (arXiv 2505.24864)"""
    temperature_schedule: str = _ranged("constant", one_of(TEMPERATURE_SCHEDULES))
    """constant, linear or cosine decay from temperature to temperature_final over max_steps
    (Kimi K2, arXiv 2507.20534, section 3.2.3; shape and end point unpublished)"""
    temperature_final: float | None = _ranged(
        None, between(0, math.inf, low_open=True, optional=True))
    """the last step's temperature under a linear/cosine schedule"""
    eval_temperature: float | None = _ranged(
        None, between(0, math.inf, low_open=True, optional=True))
    """evaluation's sampling temperature; None = temperature (set it to compare runs sampled at
    different temperatures on equal terms)"""
    top_p: float = _ranged(1.0, between(0, 1, low_open=True))
    """nucleus sampling (generation only, as in TRL; 1.0 = off)"""
    top_k: int = _ranged(0, whole(0))
    """top-k sampling (generation only; 0 = off)"""
    sampling_dtype: str | None = _ranged(None, one_of(SAMPLING_DTYPES, optional=True))
    """a sampler that differs from the trainer, as an inference engine does: "bfloat16" (or
    "float32") = completions are sampled by a copy of the policy in that dtype, synced every
    step, and its log-probs are the sampling log-probs; None = the policy samples itself"""
    decode_path: str = _ranged("auto", one_of(DECODE_PATHS))
    """the sampler's decode loop (labkit.decode): "auto" = the fixed-shape loop on CUDA (KV
    cache allocated once, finished rows masked in place), the dynamic loop elsewhere (finished
    rows dropped every step: the CPU's faster loop); "fixed" or "dynamic" forces one"""
    cuda_graphs: bool = _ranged(True, boolean)
    """on CUDA, capture the fixed-shape loop's decode step as a CUDA graph and replay it (one
    launch per token instead of one per kernel); False = eager steps. A model with peft (LoRA)
    adapters is never captured (they can be switched per call); no effect off CUDA"""
    vllm_importance_sampling_correction: bool = _ranged(False, boolean)
    """weight each token's policy loss by the bounded ratio pi_trainer / pi_sampler
    (labkit.tricks.mismatch; Yao et al. 2025, TRL's name; TRL turns it on by default with vLLM)"""
    vllm_importance_sampling_mode: str = _ranged("sequence_mask", one_of(IMPORTANCE_SAMPLING_MODES))
    """token_truncate, token_mask, sequence_truncate or sequence_mask: ratio per token or per
    sequence, clipped to [clip_min, clip_max] (truncate) or zeroed outside it (mask) (TRL)"""
    vllm_importance_sampling_clip_max: float | None = _ranged(
        3.0, between(0, math.inf, optional=True))
    """C_max of the correction (TRL default 3.0; None = no upper bound)"""
    vllm_importance_sampling_clip_min: float | None = _ranged(
        None, between(0, math.inf, optional=True))
    """C_min of the correction (TRL default None = no lower bound)"""

    # ---- asynchronous, off-policy training (labkit.offpolicy) ------------------------------------
    max_staleness: int = _ranged(0, whole(0))
    """k: the sampler runs up to k steps ahead of the trainer, so a step trains on a batch sampled
    by the weights of step max(0, t - k) (prime-rl's max_off_policy_steps, AReaL's
    max_head_offpolicyness, TRL AsyncGRPOTrainer's max_staleness); 0 = synchronous"""
    async_mode: str = _ranged("deterministic", one_of(ASYNC_MODES))
    """deterministic (one thread, the sampler exactly k batches ahead: reproducible) or overlapped
    (a sampling thread beside the training thread, at most k steps stale; not reproducible)"""
    offpolicy_correction: str = _ranged("none", one_of(OFFPOLICY_CORRECTIONS))
    """stale batches: none (train as if on-policy), coupled (PPO's ratio against the behaviour
    policy), tis (truncated behaviour weight), icepop (masked outside [floor, cap]) or decoupled
    (AReaL's decoupled PPO, arXiv 2505.24298: weights above the cap masked) (labkit.offpolicy)"""
    offpolicy_weight_cap: float | None = _ranged(
        5.0, between(0, math.inf, low_open=True, optional=True))
    """upper bound of the behaviour weight pi_prox / pi_behav (AReaL's and IcePop's 5.0; None =
    unbounded)"""
    offpolicy_weight_floor: float | None = _ranged(None, between(0, math.inf, optional=True))
    """lower bound of the behaviour weight (tis, icepop; IcePop's 0.5); None = none"""
    staleness_admission: str | None = _ranged(None, one_of(ADMISSIONS, optional=True))
    """groups that take different times (labkit.offpolicy.admission's simulated clock, the bound
    max_staleness): discard (drop a group more than k steps old, the sampler refills) or
    slow_down (admission control: at most (k + 1) x prompts_per_step groups in flight, oldest
    first, the trainer waits for stragglers); None = whole batches, no clock"""
    admission_train_time: float = _ranged(32.0, between(0, math.inf))
    """staleness_admission: one training step on the simulated clock, in units of one decoded
    token of a group's longest completion"""
    partial_rollouts: bool = _ranged(False, boolean)
    """a completion interrupted by a weight sync goes on with the newer weights (AReaL's
    interruptible rollouts, arXiv 2505.24298; verl's partial_rollout): the deterministic sampler
    decodes a chunk with version v and the rest with v + 1; tokens keep their version
    (labkit.offpolicy.partial)"""
    partial_rollout_chunk: int | None = _ranged(None, whole(1, optional=True))
    """partial_rollouts: tokens of each completion the starting version decodes before the sync;
    None = half of max_completion_length"""

    # ---- tools and multi-turn episodes (labkit.agents; the trainer's environment_factory) --------
    max_tool_calling_iterations: int | None = _ranged(None, whole(1, optional=True))
    """most tool calls an episode gets answered; a call past it ends the episode unanswered
    (TRL's name); None = as many as max_completion_length allows"""
    train_on_environment_tokens: bool = _ranged(False, boolean)
    """the masking bug of notebook 10, on purpose: the environment's tokens enter the loss as if
    the policy had written them (TRL's tool_mask and labkit's action mask keep them out); never
    set it outside that demonstration"""

    # ---- rewards ---------------------------------------------------------------------------------
    reward_weights: tuple[float, ...] | None = _ranged(None, _reward_weights)
    """one weight per reward function; None = 1.0 each (TRL). Default functions: accuracy, format"""
    multi_objective_aggregation: str = _ranged(
        "sum_then_normalize", one_of(MULTI_OBJECTIVE_AGGREGATIONS))
    """several reward functions: weighted sum, then group advantage (TRL default); or
    normalize_then_sum (GDPO, arXiv 2601.05242): normalise each function in its group, sum, then
    normalise over the batch (advantage_estimator='grpo' only)"""
    length_reward: str | None = _ranged(None, one_of(LENGTH_REWARDS, optional=True))
    """length shaping added to the rewards (labkit.rewards.length): kimi (group-relative length
    reward, weight length_reward_weight), laser / laser_de (bonus length_reward_weight within
    length_target), budget (Kimi K2: reward 0 past length_target tokens), truncation (DLER:
    reward 0 past length_target), difficulty_truncation (DA-DLER: length_target_easy for prompts
    solved at least half the time, length_target for the others); None = off"""
    length_reward_weight: float = _ranged(0.5, between(0, math.inf))
    """kimi: weight of the length reward; laser/laser_de: the bonus alpha"""
    length_target: int | None = _ranged(None, whole(1, optional=True))
    """tokens: LASER's L_T, K2's budget, DLER's truncation length (or DA-DLER's hard length)"""
    length_target_easy: int | None = _ranged(None, whole(1, optional=True))
    """DA-DLER: the truncation length of prompts solved at least half the time"""
    overlong_buffer_len: int = _ranged(0, _overlong_buffer)
    """DAPO soft overlong punishment: penalty ramps over the last this-many tokens (0 = off)"""
    overlong_penalty_factor: float = _ranged(1.0, between(0, math.inf))
    """DAPO: penalty reached at max_completion_length"""
    diversity_adjustment: str | None = _ranged(None, one_of(DIVERSITY_SIMILARITIES, optional=True))
    """DRA-GRPO (arXiv 2505.09655): divide each reward by its completion's summed similarity to
    its group (near-duplicates share their reward), measured by ngram (character 3-grams) or
    hidden (the policy's mean last hidden state); None = off"""

    # ---- advantages ------------------------------------------------------------------------------
    advantage_estimator: str = _ranged("grpo", one_of(estimators))
    """grpo (group mean/std), rloo (leave-one-out), remax (greedy baseline), opo (length-weighted
    baseline), gae (PPO: critic + generalised advantage estimation), turn_grpo (multi-turn
    episodes: each turn's return-to-go against the group's episodes at that turn)"""
    scale_rewards: str = _ranged("group", one_of(SCALE_REWARDS))
    """grpo advantage denominator: group std, batch std, or none (Dr. GRPO) (TRL)"""
    gamma: float = _ranged(1.0, between(0, 1))
    """discount: per token for PPO/GAE, per policy turn for turn_grpo"""
    lam: float = _ranged(0.95, between(0, 1))
    """PPO/GAE lambda: 1 = Monte-Carlo return minus value, 0 = one-step TD error"""

    # ---- group filters and masking ---------------------------------------------------------------
    dynamic_sampling: bool = _ranged(False, boolean)
    """DAPO: drop groups whose rewards are all equal and sample new prompts to refill the batch"""
    max_resample_rounds: int = _ranged(3, whole(0))
    """DAPO: extra sampling rounds per step at most; a batch still short then trains as it is"""
    num_remains_in_group: int | None = _ranged(None, whole(2, _num_generations, optional=True))
    """GFPO k: keep this many of the G completions per group (by gfpo_metric); None = off (TRL)"""
    gfpo_adaptive_k: tuple[int, int, int, int] | None = _ranged(None, _adaptive_k)
    """adaptive-difficulty GFPO (paper Algorithm 2): k for (very hard, hard, medium, easy)
    prompts by their mean reward against the quartiles of all means seen so far, e.g. (8, 8, 6,
    4) of G = 16; replaces num_remains_in_group; None = off"""
    gfpo_metric: str = _ranged("length", one_of(GFPO_METRICS))
    """GFPO: keep the shortest (length) or the highest reward per token (token_efficiency)"""
    mask_truncated_completions: bool = _ranged(False, boolean)
    """DAPO overlong filtering: truncated completions leave the loss (they still count in the
    group statistics) (TRL)"""

    # ---- policy loss -----------------------------------------------------------------------------
    loss_type: str = _ranged("grpo", one_of(loss_types))
    """a registered loss type (labkit.losses.LOSS_REGISTRY), each a surrogate and an
    aggregation: PPO's clip with grpo (mean per sequence, then over sequences), bnpo (token mean
    per micro-batch), dr_grpo (sum / (B * max_completion_length)), dapo (token mean over the
    generation batch) or sequence_sum; cispo, sapo, vespo, rlplus. TRL's default is dapo; the
    lab's GRPO keeps the paper's grpo"""
    importance_sampling_level: str = _ranged("token", one_of(IMPORTANCE_SAMPLING_LEVELS))
    """token ratios (PPO/GRPO) or sequence = the length-normalised sequence ratio (GSPO) (TRL)"""
    epsilon: float = _ranged(0.2, between(0, 1, high_open=True))
    """lower clip: ratio >= 1 - epsilon (TRL)"""
    epsilon_high: float | None = _ranged(None, between(0, math.inf, allow_inf=True, optional=True))
    """upper clip: ratio <= 1 + epsilon_high; None = epsilon. DAPO clip-higher: 0.28 (TRL)"""
    delta: float | None = _ranged(None, between(1, math.inf, low_open=True, optional=True))
    """two-sided clip: cap the unclipped ratio at delta (INTELLECT-2; > 1 + epsilon_high) (TRL)"""
    dual_clip: float | None = _ranged(None, between(1, math.inf, low_open=True, optional=True))
    """dual-clip PPO constant c > 1: for A < 0 the loss is at most -c * A; None = off"""
    beta: float = _ranged(0.0, between(0, math.inf))
    """KL coefficient to the reference (the initial policy); 0 = no reference model at all (TRL)"""
    ref_reset_every: int = _ranged(0, whole(0))
    """ProRL (arXiv 2505.24864): every this-many steps the reference becomes the current policy
    and the optimizer state is cleared; 0 = never (needs beta > 0)"""
    ref_reset_patience: int = _ranged(0, whole(0))
    """ProRL's trigger: reset after this many evaluations without a new best eval_accuracy
    (needs eval_every and beta > 0); 0 = off"""
    sync_ref_model: bool = _ranged(False, boolean)
    """TR-DPO (arXiv 2404.09656), TRL's name: every ref_model_sync_steps optimizer steps
    ref <- alpha * policy + (1 - alpha) * ref (needs beta > 0)"""
    ref_model_mixup_alpha: float = _ranged(0.6, between(0, 1))
    """TR-DPO's alpha (TRL default 0.6)"""
    ref_model_sync_steps: int = _ranged(512, whole(1))
    """TR-DPO's tau in optimizer steps (TRL default 512)"""
    kl_estimator: str = _ranged("k3", one_of(KL_ESTIMATORS))
    """k1, k2 or k3 (Schulman); GRPO's KL-in-loss is k3, PPO's KL-in-reward is k1"""
    kl_in_reward: bool = _ranged(False, boolean)
    """subtract beta * KL from the reward (PPO/InstructGPT) instead of adding it to the loss"""
    entropy_coef: float = _ranged(0.0, between(0, math.inf))
    """entropy bonus: loss -= entropy_coef * mean token entropy (TRL)"""
    ptx_coef: float = _ranged(0.0, between(0, math.inf))
    """gamma of the PTX loss (Kimi K2, arXiv 2507.20534 section 3.2.3; InstructGPT's form, arXiv
    2203.02155 eq. 2): loss += ptx_coef * token-mean NLL of ptx_batch_size warm-start examples
    each optimizer step (labkit.tricks.ptx); 0 = off"""
    ptx_batch_size: int = _ranged(8, whole(1))
    """PTX: supervised examples per optimizer step"""
    top_entropy_quantile: float = _ranged(1.0, between(0, 1, low_open=True))
    """rho: only the tokens whose sampling entropy is in the top rho of the batch get a gradient
    (arXiv 2506.01939 keeps 0.2; TRL's name); 1.0 = every token"""
    cov_penalty: str | None = _ranged(None, one_of(COV_PENALTIES, optional=True))
    """clip_cov or kl_cov (arXiv 2505.22617): silence at random (clip_cov) or KL-penalise
    (kl_cov, which also drops the clip) the tokens whose log-prob covaries most with their
    advantage; None = off"""
    clip_cov_ratio: float = _ranged(2e-4, between(0, 1, low_open=True))
    """Clip-Cov: share of the valid tokens silenced (paper 2e-4)"""
    clip_cov_lb: float = _ranged(1.0, between(-math.inf, math.inf))
    """Clip-Cov: lower bound of the covariance of a candidate token (paper 1)"""
    clip_cov_ub: float = _ranged(5.0, between(-math.inf, math.inf))
    """Clip-Cov: upper bound of the covariance of a candidate token (paper 5)"""
    kl_cov_ratio: float = _ranged(2e-3, between(0, 1, low_open=True))
    """KL-Cov: share of the valid tokens (largest covariance) that get the KL penalty (paper
    2e-3)"""
    kl_cov_coef: float = _ranged(1.0, between(0, math.inf))
    """KL-Cov: coefficient of |log pi - log pi_old| on those tokens (verl's ppo_kl_coef)"""
    rlplus_demonstrations: bool = _ranged(False, boolean)
    """RL-PLUS: the last completion of every group is the prompt's worked solution (an external
    demonstration, trained with the MIS ratio and the exploration weight)"""
    use_bias_correction_kl: bool = _ranged(False, boolean)
    """multiply the k3 KL-in-loss by the importance ratio (DeepSeek-V3.2; TRL 1.16 default True)"""

    # ---- PPO critic ------------------------------------------------------------------------------
    vf_coef: float = _ranged(0.1, between(0, math.inf, low_open=True))
    """weight of the value loss (TRL PPO: 0.1)"""
    clip_range_value: float | None = _ranged(
        0.2, between(0, math.inf, low_open=True, optional=True))
    """value clipping: new values stay within this of the old ones; None = no clipping"""
    value_learning_rate: float | None = _ranged(
        None, between(0, math.inf, low_open=True, optional=True))
    """critic learning rate; None = learning_rate"""

    # ---- optimisation ----------------------------------------------------------------------------
    learning_rate: float = _ranged(3e-4, between(0, math.inf, low_open=True))
    """AdamW peak learning rate (TRL's default, 1e-6, suits billion-parameter models)"""
    lr_scheduler_type: str = _ranged("constant_with_warmup", one_of(LR_SCHEDULERS))
    """constant, constant_with_warmup, linear or cosine decay to 0 (warm-up for the last three)"""
    warmup_ratio: float = _ranged(0.05, between(0, 1, high_open=True))
    """fraction of max_steps spent warming the learning rate up linearly from 0"""
    weight_decay: float = _ranged(0.0, between(0, math.inf))
    """AdamW decoupled weight decay"""
    adam_beta1: float = _ranged(0.9, between(0, 1, high_open=True))
    """AdamW beta1"""
    adam_beta2: float = _ranged(0.999, between(0, 1, high_open=True))
    """AdamW beta2"""
    max_grad_norm: float = _ranged(1.0, between(0, math.inf))
    """clip the global gradient norm to this; 0 = no clipping (the norm is still logged)"""
    num_iterations: int = _ranged(1, whole(1))
    """mu: passes over each generation batch (PPO epochs) (TRL)"""
    num_mini_batches: int = _ranged(1, whole(1))
    """optimizer steps per pass: the generation batch is split into this many mini-batches"""
    micro_batch_size: int | None = _ranged(None, whole(1, optional=True))
    """most completions per forward/backward (gradient accumulation inside a mini-batch; set it
    to fit GPU memory); None = no cap. The trainer also groups completions of similar length"""
    max_steps: int = _ranged(60, whole(1))
    """training steps (one step = one generation batch)"""

    # ---- evaluation, checkpoints, safety ---------------------------------------------------------
    eval_every: int = _ranged(0, whole(0))
    """evaluate on the eval split before training and every this-many steps (0 = never)"""
    eval_k: int = _ranged(2, whole(1))
    """samples per eval prompt (accuracy = pass@1 at the sampling temperature)"""
    eval_max_prompts: int | None = _ranged(None, whole(1, optional=True))
    """use only the first this-many eval prompts (None = the whole split)"""
    output_dir: str | None = _ranged(None, path)
    """where checkpoints go (None = nowhere)"""
    save_every: int = _ranged(0, whole(0))
    """save a checkpoint every this-many steps (0 = never; needs output_dir)"""
    save_on_interrupt: bool = _ranged(True, boolean)
    """on KeyboardInterrupt, save a checkpoint of the last completed step (when output_dir)"""
    resume_from: str | None = _ranged(None, path)
    """checkpoint folder to resume from"""
    max_nonfinite_steps: int = _ranged(3, whole(1))
    """consecutive steps with a NaN/inf loss or gradient (skipped) before training stops"""
    rollback_nonfinite_weights: bool = _ranged(True, boolean)
    """copy the trainable weights before each optimizer step and put them back if the step made
    any NaN/inf (costs one copy of the trainable weights; the step then counts as skipped)"""
    progress: bool = _ranged(True, boolean)
    """show a tqdm progress bar"""
    entropy_threshold: float = _ranged(0.5, between(0, math.inf))
    """nats: the entropy_high_frac metric counts loss tokens whose sampling entropy exceeds it"""

    def __post_init__(self):
        self._check_values()
        self._check_combinations()
        object.__setattr__(self, "_validated", True)

    def __setattr__(self, name, value):
        """Assignment after construction is validated like construction; a refused value leaves
        the config as it was."""
        if not self.__dict__.get("_validated"):
            object.__setattr__(self, name, value)
            return
        if name not in _FIELD_NAMES:
            raise AttributeError(f"TrainConfig has no field {name!r}; the fields are listed in "
                                 f"labkit.config.FIELD_DOCS")
        old = getattr(self, name)
        object.__setattr__(self, name, value)
        try:
            self._check_values()
            self._check_combinations()
        except Exception:
            object.__setattr__(self, name, old)
            raise

    # ---- derived sizes ---------------------------------------------------------------------------
    @property
    def generation_batch_size(self) -> int:
        """Completions sampled per step (TRL's name): prompts_per_step * num_generations."""
        return self.prompts_per_step * self.num_generations

    @property
    def kept_per_prompt(self) -> int:
        """Completions per prompt that train: GFPO's k (the largest adaptive k), else G."""
        if self.gfpo_adaptive_k is not None:
            return max(self.gfpo_adaptive_k)
        return self.num_remains_in_group or self.num_generations

    @property
    def train_batch_size(self) -> int:
        """Completions per step that reach the loss (after GFPO's filter)."""
        return self.prompts_per_step * self.kept_per_prompt

    @property
    def mini_batch_size(self) -> int:
        """Completions per optimizer step (the last mini-batch may be smaller)."""
        return math.ceil(self.train_batch_size / self.num_mini_batches)

    @property
    def gradient_accumulation_steps(self) -> int:
        """Micro-batches per optimizer step."""
        if self.micro_batch_size is None:
            return 1
        return math.ceil(self.mini_batch_size / self.micro_batch_size)

    @property
    def off_policy(self) -> bool:
        """True when the weights move between sampling and some update, so the loss needs the
        behaviour policy's log-probs (num_iterations > 1 or several mini-batches)."""
        return self.num_iterations > 1 or self.num_mini_batches > 1

    @property
    def clip_higher_inert(self) -> bool:
        """True when ``epsilon_high`` widens the band (DAPO's clip-higher) but the run is on-policy:
        every ratio is exactly 1 at its one update, no clip ever binds, and the setting changes
        nothing. (CISPO's ``epsilon_high`` is a weight cap, not a band, and is not counted.)"""
        return (self.epsilon_high is not None and self.epsilon_high > self.epsilon
                and get_loss_type(self.loss_type).clipped and not self.off_policy)

    @property
    def needs_reference(self) -> bool:
        """A frozen reference model exists only when the KL coefficient is non-zero."""
        return self.beta != 0

    def to_dict(self) -> dict:
        return asdict(self)

    # ---- validation ------------------------------------------------------------------------------
    def _check_values(self):
        """Each field against the range beside it (a loss's settings: the range it declared)."""
        for f in fields(self):
            f.metadata["range"](self, f.name)

    def _check_combinations(self):
        gfpo = self.num_remains_in_group is not None or self.gfpo_adaptive_k is not None
        self._check_estimator()
        self._check_loss_type()
        if self.lr_scheduler_type == "constant" and self.warmup_ratio > 0:
            refuse("lr_scheduler_type='constant' ignores warm-up (as in transformers): use "
                    "lr_scheduler_type='constant_with_warmup' or warmup_ratio=0")
        for name in ("learning_rate", "value_learning_rate"):
            rate = getattr(self, name)
            if rate is not None and rate * self.weight_decay >= 1:
                refuse(f"{name} x weight_decay = {rate * self.weight_decay:g} >= 1: AdamW "
                        f"would shrink every weight by 100% or more per step; lower "
                        f"weight_decay (0 to 0.1 is usual)")
        if self.num_mini_batches > self.train_batch_size:
            refuse(f"num_mini_batches ({self.num_mini_batches}) exceeds the completions that "
                    f"train per step ({self.train_batch_size} = prompts_per_step x "
                    f"{'the GFPO k' if gfpo else 'num_generations'}): lower num_mini_batches "
                    f"or raise prompts_per_step")
        if self.micro_batch_size is not None and self.micro_batch_size > self.mini_batch_size:
            refuse(f"micro_batch_size ({self.micro_batch_size}) exceeds the mini-batch "
                    f"({self.mini_batch_size} completions): lower micro_batch_size or use None")
        high, low = (self.vllm_importance_sampling_clip_max,
                     self.vllm_importance_sampling_clip_min)
        if high is not None and low is not None and low > high:
            refuse(f"vllm_importance_sampling_clip_min ({low}) exceeds "
                   f"vllm_importance_sampling_clip_max ({high})")
        if self.save_every and self.output_dir is None:
            refuse("save_every > 0 writes checkpoints, and output_dir is None: set output_dir "
                    "or save_every=0")
        for rule in config_rules():  # the rules each method module registered (labkit.config.rules)
            rule(self)
        if (self.importance_sampling_level == "sequence"
                and get_loss_type(self.loss_type).aggregation != "sequence_mean"):
            warnings.warn(f"importance_sampling_level='sequence' with loss_type="
                          f"{self.loss_type!r} weighs each sequence by its length; GSPO as "
                          f"published uses loss_type='grpo' (TRL gives the same warning)",
                          stacklevel=_outside_stacklevel())
        if self.clip_higher_inert:
            warnings.warn(inert_clip_higher_message(self), stacklevel=_outside_stacklevel())

    def _check_estimator(self):
        """The chosen estimator's own rules (its file registers them)."""
        estimator = get_estimator(self.advantage_estimator)
        if estimator.groups and self.num_generations < 2:
            others = " or ".join(f"advantage_estimator={name!r}" for name in estimators()
                                 if name not in group_estimators())
            refuse(f"advantage_estimator={self.advantage_estimator!r} compares the completions "
                   f"of a group, which needs at least two: use num_generations >= 2 or {others}")
        if estimator.config_check is not None:
            estimator.config_check(self)

    def _check_loss_type(self):
        """The chosen loss type's own rules (its file registers them), and no switch of another
        loss type left on: an option that is off by default (None) and set for a loss that does
        not read it would silently do nothing."""
        loss = get_loss_type(self.loss_type)
        for name, default in all_options().items():
            if default is None and name not in loss.options and getattr(self, name) is not None:
                refuse(f"{name} acts on loss types {option_owners(name)}, and loss_type="
                        f"{self.loss_type!r} does not read it: use one of them or {name}=None")
        if loss.config_check is not None:
            loss.config_check(self)



def _field_docs() -> dict[str, str]:
    """Read each field's comment string from the class source (cleanrl-style field docs)."""
    import ast
    import inspect
    import textwrap

    body = ast.parse(textwrap.dedent(inspect.getsource(TrainConfig))).body[0].body
    docs = {}
    for node, after in itertools.pairwise(body):
        if (isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def _outside_stacklevel() -> int:
    """``stacklevel`` that points a warning at the first caller outside this module (the user's
    ``TrainConfig(...)`` or assignment), however many frames of it lie in between."""
    level, frame = 1, sys._getframe(1)
    # the dataclass-generated __init__ runs with this module's globals but no file of its own
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        level, frame = level + 1, frame.f_back
    return level


def _refuse_trl_names(init):
    """Wrap the generated ``__init__`` so a TRL name gets the lab's equivalent, not just
    ``unexpected keyword argument`` (:func:`labkit.trl_bridge.names.refuse_trl_names`)."""
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        refuse_trl_names(kwargs, _FIELD_NAMES)
        init(self, *args, **kwargs)

    return __init__


# ---- the fields the methods declare -------------------------------------------------------------
#: The fields written in the class above, and its docstring before the field list.
_DECLARED = {f.name: f for f in fields(TrainConfig)}
_DECLARED_DOCS = _field_docs()
_CLASS_DOC = TrainConfig.__doc__
#: What ``@dataclass`` writes into the class, removed before it runs again.
_GENERATED = ("__init__", "__repr__", "__eq__", "__match_args__", "__dataclass_fields__",
              "__dataclass_params__")


def _declared_settings(losses) -> dict[str, dataclasses.Field]:
    """The fields the loss types' :class:`~labkit.config.fields.Setting` options declare, each with its
    range and doc as metadata; ``ValueError`` naming the registration for an option no field
    holds, a setting that redeclares a field, or two losses declaring one name differently."""
    declared: dict[str, tuple[Setting, str]] = {}
    for loss in losses:
        where = f"loss_type {loss.name!r} (registered in {loss.module})"
        for name, setting in loss.settings.items():
            if name in _DECLARED:
                refuse(f"{where} declares the setting {name!r}, which TrainConfig already has: "
                       f"give options={{{name!r}: <its default>}} to read the existing field")
            if name in declared and declared[name][0] != setting:
                refuse(f"{where} declares the setting {name!r} differently from "
                       f"{declared[name][1]}: declare it once and share that Setting")
            declared[name] = (setting, where)
    for loss in losses:
        for name in loss.options:
            if name not in _DECLARED and name not in declared:
                refuse(f"loss_type {loss.name!r} (registered in {loss.module}) reads option "
                       f"{name!r}, which is no TrainConfig field: declare it with "
                       f"options={{{name!r}: Setting(default, range, doc, trl)}} "
                       f"(labkit.config.fields.Setting)")
    return {name: dataclasses.field(default=setting.default, metadata={
        "range": setting.range, "doc": setting.doc, "declared_by": where})
        for name, (setting, where) in declared.items()}


def _build(losses) -> None:
    """Make :class:`TrainConfig` the dataclass of its written fields plus the settings
    ``losses`` declare (at import, and again whenever a loss type is registered or removed), so
    a new loss's knob is a real field: ``fields``, ``asdict``, ``help`` and checkpoints see it."""
    settings = _declared_settings(losses)
    for name in _GENERATED:
        if name in TrainConfig.__dict__:
            delattr(TrainConfig, name)
    for name in set(TrainConfig.__annotations__) - set(_DECLARED) - set(settings):
        delattr(TrainConfig, name)  # a removed loss's setting
    TrainConfig.__annotations__ = {**{name: f.type for name, f in _DECLARED.items()},
                                   **{name: getattr(f.metadata["range"], "annotation", "object")
                                      for name, f in settings.items()}}
    for name, f in {**_DECLARED, **settings}.items():
        setattr(TrainConfig, name, f)
    dataclass(TrainConfig)
    global _FIELD_NAMES
    _FIELD_NAMES = frozenset(f.name for f in fields(TrainConfig))
    FIELD_DOCS.clear()
    FIELD_DOCS.update(_DECLARED_DOCS)
    FIELD_DOCS.update({name: f.metadata["doc"] for name, f in settings.items()})
    TrainConfig.__doc__ = _CLASS_DOC + "\n    Fields (default):\n\n" + "\n".join(
        f"    {f.name} ({f.default!r}): {FIELD_DOCS.get(f.name, '')}" for f in fields(TrainConfig))
    TrainConfig.__init__ = _refuse_trl_names(TrainConfig.__init__)


def _loss_types_changed(name, loss) -> None:
    """The loss registry's listener: rebuild with ``loss`` added (refusing it if its settings
    cannot be fields), or without the removed one."""
    others = [entry for key, entry in LOSS_REGISTRY.items() if key != name]
    _build(others if loss is None else [*others, loss])


#: ``{field name: its documentation}`` for every field of :class:`TrainConfig`.
FIELD_DOCS: dict[str, str] = {}
_build(LOSS_REGISTRY.values())
listen_to_loss_types(_loss_types_changed)
