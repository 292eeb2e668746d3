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

Each field is one declaration (:func:`labkit.config.knobs.knob`): its default, range, TRL
bridge, whether a resume may change it, its kind, and its doc (the string under it). The TRL
bridge's tables, :data:`RESUMABLE_CHANGES`, :data:`FIELD_DOCS` and the catalog test's generic
fields are derived from them (:data:`FIELDS`). A config validates itself on construction and
again on every assignment (:mod:`labkit.config.checks`). The option lists come from the modules
that implement them (one source each): ``loss_type`` from :mod:`labkit.losses`,
``scale_rewards`` from :mod:`labkit.advantages`, ``gfpo_metric`` from
:mod:`labkit.tricks.filters`, ``dtype`` from :mod:`labkit.models`.

The method presets are in :mod:`labkit.config.presets`.
"""

from __future__ import annotations

import math

from labkit.advantages import MULTI_OBJECTIVE_AGGREGATIONS, SCALE_REWARDS, estimators
from labkit.advantages.registry import TRL_REFUSALS
from labkit.config import methods  # noqa: F401 (registers every method's rules before any config)
from labkit.config.checks import (
    ConfigChecks,
    check_adaptive_k,
    check_device,
    check_dtype,
    check_lora_targets,
    check_overlong_buffer,
    check_reward_weights,
    group_size,
    inert_clip_higher_message,
)
from labkit.config.knobs import Knob, build, derived, knob, lab_only, not_carried
from labkit.config.trl_names import refuse_trl_names
from labkit.losses import IMPORTANCE_SAMPLING_LEVELS, KL_ESTIMATORS, loss_types
from labkit.losses.registry import LOSS_REGISTRY
from labkit.losses.registry import listen as listen_to_loss_types
from labkit.offpolicy import ADMISSIONS, ASYNC_MODES
from labkit.offpolicy import CORRECTIONS as OFFPOLICY_CORRECTIONS
from labkit.plugins.settings import between, boolean, one_of, path, text, whole
from labkit.rewards.diversity import DIVERSITY_SIMILARITIES
from labkit.rewards.length import LENGTH_REWARDS
from labkit.sampling.plan import DECODE_PATHS
from labkit.tricks.filters import GFPO_METRICS
from labkit.tricks.mismatch import MODES as IMPORTANCE_SAMPLING_MODES
from labkit.tricks.prompt_sampling import PROMPT_SAMPLERS
from labkit.tricks.temperature import TEMPERATURE_SCHEDULES
from labkit.tricks.token_filters import COV_PENALTIES

#: ``sampling_dtype`` values: the precision of a sampler that differs from the trainer.
SAMPLING_DTYPES = ("bfloat16", "float32")
#: ``lr_scheduler_type`` values (transformers' names).
LR_SCHEDULERS = ("constant", "constant_with_warmup", "linear", "cosine")

__all__ = ["FIELDS", "FIELD_DOCS", "GENERIC_FIELDS", "RESUMABLE_CHANGES", "TrainConfig",
           "inert_clip_higher_message"]


class TrainConfig(ConfigChecks):
    """All settings of a run; ``TrainConfig()`` is the lab's GRPO (``preset("grpo")``).

    Each field is one :func:`~labkit.config.knobs.knob` declaration with its doc under it;
    ``help(TrainConfig)`` lists them all (appended below from :data:`FIELD_DOCS`). A loss type's
    own knobs are not written here: its registration declares them (:class:`labkit.plugins.Setting`)
    and they become fields at the end of the list (``sapo_temperature_pos``, ``vespo_k_pos``,
    ``cispo_min_weight``...), when the class is built, once, at import.
    """

    # ---- model and machine ----------------------------------------------------------------------
    model_name_or_path: str = knob(
        "tiny", text, trl=derived("the model train_with_trl loads when given none"), kind="generic")
    """policy to load when ``train`` gets no model: ``"tiny"`` (shipped), a folder or a hub id"""
    device: str = knob(
        "auto", check_device,
        trl=derived("use_cpu when the run is on the CPU"), resumable=True, kind="generic")
    """``"auto"`` = cuda, then mps, then cpu; or any torch device string"""
    dtype: str = knob(
        "auto", check_dtype,
        trl=derived("bf16 / fp16 mixed-precision flags (and the dtype train_with_trl loads in)"),
        kind="generic")
    """``"auto"`` = bfloat16 on GPUs that support it, else float32; or float32/bfloat16 (float16
    is refused: without loss scaling its updates overflow and the weights turn NaN)"""
    gradient_checkpointing: bool = knob(
        False, boolean, trl="gradient_checkpointing", resumable=True, kind="generic")
    """recompute activations in backward: less memory, about a third more compute"""
    compile_loss: bool = knob(
        False, boolean,
        trl=not_carried("the lab's loss path (TRL's torch_compile compiles the whole model, "
                        "a TrainingArguments setting the bridge leaves alone)"),
        resumable=True, kind="generic")
    """run the update's log-probs, entropies and policy loss through torch.compile (fused
    kernels: on a GPU the tiny model's loss path is launch-bound); values change by float
    rounding only, and a compile that fails falls back to eager saying why in one line
    (labkit.training.compiled). False = eager"""
    seed: int = knob(0, whole(0), trl="seed", kind="generic")
    """seeds python, torch, the prompt order and the sampling generator: same seed, same CPU run"""

    # ---- LoRA (peft; TRL's ModelConfig names) ---------------------------------------------------
    use_peft: bool = knob(
        False, boolean,
        trl=derived("peft_config = labkit.training.lora.lora_config(config), given to GRPOTrainer "
                    "by train_with_trl (TRL's ModelConfig/get_peft_config names)"), kind="generic")
    """train LoRA adapters (labkit.training.lora, arXiv 2106.09685) instead of every weight; with
    beta > 0 the reference is the same model with its adapters disabled, not a copy (TRL)"""
    lora_r: int = knob(16, whole(1), trl=derived("peft_config's r"), kind="generic")
    """LoRA rank r (TRL default 16)"""
    lora_alpha: float = knob(
        32, between(0, math.inf, low_open=True),
        trl=derived("peft_config's lora_alpha"), kind="generic")
    """LoRA alpha: the adapter's update is scaled by lora_alpha / lora_r (TRL default 32)"""
    lora_dropout: float = knob(
        0.05, between(0, 1, high_open=True),
        trl=derived("peft_config's lora_dropout"), kind="generic")
    """dropout on the adapters' input (TRL default 0.05)"""
    lora_target_modules: tuple[str, ...] | str | None = knob(
        None, check_lora_targets, trl=derived("peft_config's target_modules"), kind="generic")
    """module names to adapt, e.g. ("q_proj", "v_proj"); "all-linear" = every linear layer but
    the output head; None = peft's default for the architecture (q_proj, v_proj on Qwen) (TRL)"""
    use_rslora: bool = knob(False, boolean, trl=derived("peft_config's use_rslora"), kind="generic")
    """rank-stabilised LoRA (arXiv 2312.03732): scale the update by lora_alpha / sqrt(lora_r)
    instead of lora_alpha / lora_r, so a higher rank still learns (TRL, peft)"""
    use_dora: bool = knob(False, boolean, trl=derived("peft_config's use_dora"), kind="generic")
    """DoRA (arXiv 2402.09353): split each adapted weight into a magnitude, trained directly, and
    a direction that LoRA adapts; slower per step than LoRA (TRL, peft)"""

    # ---- which prompts ----------------------------------------------------------------------------
    prompt_sampler: str = knob(
        "uniform", one_of(PROMPT_SAMPLERS),
        trl=lab_only("TRL draws prompts uniformly (its RepeatSampler); the lab's curriculum, "
                     "prioritized and multi-task orders (labkit.tricks.prompt_sampling) have "
                     "no GRPOConfig setting: order or weight the dataset yourself"))
    """uniform (shuffled passes), curriculum (easy to hard by the difficulty column, Kimi k1.5),
    prioritized (p ~ 1 - solve rate, Kimi k1.5) or multitask (MT-GRPO family weights)"""
    curriculum_ratio: float = knob(
        0.5, between(0, 1, low_open=True),
        trl=not_carried("prompt_sampler only (refused)"), kind="generic")
    """curriculum: share of max_steps over which the hardest allowed difficulty rises to the top"""
    prioritized_floor: float = knob(
        0.05, between(0, math.inf, low_open=True),
        trl=not_carried("prompt_sampler only (refused)"), kind="generic")
    """prioritized: weight floor, so a prompt always solved can still be drawn"""
    multitask_lambda: float = knob(
        0.2, between(0, math.inf), trl=not_carried("prompt_sampler only (refused)"), kind="generic")
    """multitask: weight lambda of the accuracy term in MT-GRPO's score (paper 0.2)"""
    multitask_lr: float = knob(
        0.025, between(0, math.inf, low_open=True),
        trl=not_carried("prompt_sampler only (refused)"), kind="generic")
    """multitask: step size of the family logits (paper 0.025)"""

    # ---- sampling: a step is prompts_per_step prompts x num_generations completions -------------
    prompts_per_step: int = knob(
        16, whole(1),
        trl=derived("generation_batch_size = prompts_per_step x num_generations"), kind="generic")
    """prompts sampled per step (lab name; TRL: generation_batch_size / num_generations)"""
    num_generations: int = knob(8, whole(1), trl="num_generations", kind="generic")
    """G: completions sampled per prompt, the group (TRL). GFPO samples G and keeps k of them"""
    max_completion_length: int = knob(128, whole(1), trl="max_completion_length", kind="generic")
    """most new tokens per completion; a completion without end-of-turn by then is truncated"""
    temperature: float = knob(1.0, between(0, math.inf, low_open=True), trl="temperature")
    """sampling temperature; training log-probs use the same temperature (TRL). ProRL samples
    at 1.2 (arXiv 2505.24864)"""
    temperature_schedule: str = knob(
        "constant", one_of(TEMPERATURE_SCHEDULES),
        trl=lab_only("TRL samples at one temperature for the whole run; the lab's decaying "
                     "schedule (Kimi K2, arXiv 2507.20534) has no GRPOConfig setting"))
    """constant, linear or cosine decay from temperature to temperature_final over max_steps
    (Kimi K2, arXiv 2507.20534, section 3.2.3; shape and end point unpublished)"""
    temperature_final: float | None = knob(
        None, between(0, math.inf, low_open=True, optional=True),
        trl=not_carried("temperature_schedule only (refused)"), kind="generic")
    """the last step's temperature under a linear/cosine schedule"""
    eval_temperature: float | None = knob(
        None, between(0, math.inf, low_open=True, optional=True),
        trl=not_carried("lab evaluation only"), kind="generic")
    """evaluation's sampling temperature; None = temperature (set it to compare runs sampled at
    different temperatures on equal terms)"""
    top_p: float = knob(1.0, between(0, 1, low_open=True), trl="top_p", kind="generic")
    """nucleus sampling (generation only, as in TRL; 1.0 = off)"""
    top_k: int = knob(0, whole(0), trl="top_k", kind="generic")
    """top-k sampling (generation only; 0 = off)"""
    sampling_dtype: str | None = knob(
        None, one_of(SAMPLING_DTYPES, optional=True),
        trl=lab_only("the lab's stand-in for an inference engine (a sampler in another dtype); "
                     "TRL samples with the trained model itself, or with vLLM (use_vllm=True, "
                     "vllm_importance_sampling_* correct the mismatch there)"))
    """a sampler that differs from the trainer, as an inference engine does: "bfloat16" (or
    "float32") = completions are sampled by a copy of the policy in that dtype, synced every
    step, and its log-probs are the sampling log-probs; None = the policy samples itself"""
    decode_path: str = knob(
        "auto", one_of(DECODE_PATHS),
        trl=not_carried("the lab sampler's decode loop (TRL samples with transformers' generate "
                        "or vLLM)"), resumable=True, kind="generic")
    """the sampler's decode loop (labkit.sampling): "auto" = the fixed-shape loop on CUDA (KV
    cache allocated once, finished rows masked in place), the dynamic loop elsewhere (finished
    rows dropped every step: the CPU's faster loop); "fixed" or "dynamic" forces one"""
    cuda_graphs: bool = knob(
        True, boolean,
        trl=not_carried("the lab sampler's decode loop on CUDA"), resumable=True, kind="generic")
    """on CUDA, capture the fixed-shape loop's decode step as a CUDA graph and replay it (one
    launch per token instead of one per kernel); False = eager steps. A model with peft (LoRA)
    adapters is never captured (they can be switched per call); no effect off CUDA"""
    vllm_importance_sampling_correction: bool = knob(
        False, boolean,
        trl=not_carried("TRL applies it to vLLM samples only (use_vllm, which the bridge leaves "
                        "to overrides)"))
    """weight each token's policy loss by the bounded ratio pi_trainer / pi_sampler
    (labkit.tricks.mismatch; Yao et al. 2025, TRL's name; TRL turns it on by default with vLLM)"""
    vllm_importance_sampling_mode: str = knob(
        "sequence_mask", one_of(IMPORTANCE_SAMPLING_MODES),
        trl=not_carried("vllm_importance_sampling_correction only"))
    """token_truncate, token_mask, sequence_truncate or sequence_mask: ratio per token or per
    sequence, clipped to [clip_min, clip_max] (truncate) or zeroed outside it (mask) (TRL)"""
    vllm_importance_sampling_clip_max: float | None = knob(
        3.0, between(0, math.inf, optional=True),
        trl=not_carried("vllm_importance_sampling_correction only"))
    """C_max of the correction (TRL default 3.0; None = no upper bound)"""
    vllm_importance_sampling_clip_min: float | None = knob(
        None, between(0, math.inf, optional=True),
        trl=not_carried("vllm_importance_sampling_correction only"))
    """C_min of the correction (TRL default None = no lower bound)"""

    # ---- asynchronous, off-policy training (labkit.offpolicy) ------------------------------------
    max_staleness: int = knob(
        0, whole(0),
        trl=lab_only("TRL's GRPOTrainer is synchronous; its asynchronous trainer, "
                     "trl.experimental.async_grpo.AsyncGRPOTrainer (max_staleness, default 4), "
                     "samples with a vLLM server, which the bridge does not start"))
    """k: the sampler runs up to k steps ahead of the trainer, so a step trains on a batch sampled
    by the weights of step max(0, t - k) (prime-rl's max_off_policy_steps, AReaL's
    max_head_offpolicyness, TRL AsyncGRPOTrainer's max_staleness); 0 = synchronous"""
    async_mode: str = knob(
        "deterministic", one_of(ASYNC_MODES), trl=not_carried("max_staleness only (refused)"))
    """deterministic (one thread, the sampler exactly k batches ahead: reproducible) or overlapped
    (a sampling thread beside the training thread, at most k steps stale; not reproducible)"""
    offpolicy_correction: str = knob(
        "none", one_of(OFFPOLICY_CORRECTIONS),
        trl=lab_only("TRL's AsyncGRPOTrainer takes the vLLM server's log-probs as the old policy "
                     "(the lab's 'coupled') and has no TIS, IcePop or decoupled PPO weight for "
                     "stale samples"))
    """stale batches: none (train as if on-policy), coupled (PPO's ratio against the behaviour
    policy), tis (truncated behaviour weight), icepop (masked outside [floor, cap]) or decoupled
    (AReaL's decoupled PPO, arXiv 2505.24298: weights above the cap masked) (labkit.offpolicy)"""
    offpolicy_weight_cap: float | None = knob(
        5.0, between(0, math.inf, low_open=True, optional=True),
        trl=not_carried("offpolicy_correction only (refused)"))
    """upper bound of the behaviour weight pi_prox / pi_behav (AReaL's and IcePop's 5.0; None =
    unbounded)"""
    offpolicy_weight_floor: float | None = knob(
        None, between(0, math.inf, optional=True),
        trl=not_carried("offpolicy_correction only (refused)"))
    """lower bound of the behaviour weight (tis, icepop; IcePop's 0.5); None = none"""
    staleness_admission: str | None = knob(
        None, one_of(ADMISSIONS, optional=True), trl=not_carried("max_staleness only (refused)"))
    """groups that take different times (labkit.offpolicy.admission's simulated clock, the bound
    max_staleness): discard (drop a group more than k steps old, the sampler refills) or
    slow_down (admission control: at most (k + 1) x prompts_per_step groups in flight, oldest
    first, the trainer waits for stragglers); None = whole batches, no clock"""
    admission_train_time: float = knob(
        32.0, between(0, math.inf), trl=not_carried("max_staleness only (refused)"))
    """staleness_admission: one training step on the simulated clock, in units of one decoded
    token of a group's longest completion"""
    partial_rollouts: bool = knob(False, boolean, trl=not_carried("max_staleness only (refused)"))
    """a completion interrupted by a weight sync goes on with the newer weights (AReaL's
    interruptible rollouts, arXiv 2505.24298; verl's partial_rollout): the deterministic sampler
    decodes a chunk with version v and the rest with v + 1; tokens keep their version
    (labkit.offpolicy.partial)"""
    partial_rollout_chunk: int | None = knob(
        None, whole(1, optional=True), trl=not_carried("max_staleness only (refused)"))
    """partial_rollouts: tokens of each completion the starting version decodes before the sync;
    None = half of max_completion_length"""

    # ---- tools and multi-turn episodes (labkit.agents; the trainer's environment_factory) --------
    max_tool_calling_iterations: int | None = knob(
        None, whole(1, optional=True), trl="max_tool_calling_iterations")
    """most tool calls an episode gets answered; a call past it ends the episode unanswered
    (TRL's name); None = as many as max_completion_length allows"""
    train_on_environment_tokens: bool = knob(
        False, boolean,
        trl=lab_only("TRL always keeps tool results out of the loss (its tool_mask); training on "
                     "them is the lab's demonstration of the masking bug"))
    """the masking bug of notebook 10, on purpose: the environment's tokens enter the loss as if
    the policy had written them (TRL's tool_mask and labkit's action mask keep them out); never
    set it outside that demonstration"""

    # ---- rewards ---------------------------------------------------------------------------------
    reward_weights: tuple[float, ...] | None = knob(
        None, check_reward_weights,
        trl=derived("reward_weights, plus overlong_penalty_factor for the overlong function"),
        kind="generic")
    """one weight per reward function; None = 1.0 each (TRL). Default functions: accuracy, format"""
    multi_objective_aggregation: str = knob(
        "sum_then_normalize", one_of(MULTI_OBJECTIVE_AGGREGATIONS),
        trl="multi_objective_aggregation")
    """several reward functions: weighted sum, then group advantage (TRL default); or
    normalize_then_sum (GDPO, arXiv 2601.05242): normalise each function in its group, sum, then
    normalise over the batch (advantage_estimator='grpo' only)"""
    length_reward: str | None = knob(
        None, one_of(LENGTH_REWARDS, optional=True),
        trl=lab_only("the lab's length shaping (labkit.rewards.length: Kimi, LASER, budget, "
                     "DLER) uses group statistics or per-prompt solve rates that TRL's reward "
                     "functions do not see; TRL's nearest is "
                     "trl.rewards.get_soft_overlong_punishment (the lab's overlong_buffer_len)"))
    """length shaping added to the rewards (labkit.rewards.length): kimi (group-relative length
    reward, weight length_reward_weight), laser / laser_de (bonus length_reward_weight within
    length_target), budget (Kimi K2: reward 0 past length_target tokens), truncation (DLER:
    reward 0 past length_target), difficulty_truncation (DA-DLER: length_target_easy for prompts
    solved at least half the time, length_target for the others); None = off"""
    length_reward_weight: float = knob(
        0.5, between(0, math.inf), trl=not_carried("length_reward only (refused)"), kind="generic")
    """kimi: weight of the length reward; laser/laser_de: the bonus alpha"""
    length_target: int | None = knob(
        None, whole(1, optional=True),
        trl=not_carried("length_reward only (refused)"), kind="generic")
    """tokens: LASER's L_T, K2's budget, DLER's truncation length (or DA-DLER's hard length)"""
    length_target_easy: int | None = knob(
        None, whole(1, optional=True),
        trl=not_carried("length_reward only (refused)"), kind="generic")
    """DA-DLER: the truncation length of prompts solved at least half the time"""
    overlong_buffer_len: int = knob(
        0, check_overlong_buffer,
        trl=derived("trl.rewards.get_soft_overlong_punishment as an extra reward function"))
    """DAPO soft overlong punishment: penalty ramps over the last this-many tokens (0 = off)"""
    overlong_penalty_factor: float = knob(
        1.0, between(0, math.inf),
        trl=derived("the weight of that extra reward function"), kind="generic")
    """DAPO: penalty reached at max_completion_length"""
    diversity_adjustment: str | None = knob(
        None, one_of(DIVERSITY_SIMILARITIES, optional=True),
        trl=lab_only("DRA-GRPO's similarity-discounted rewards (arXiv 2505.09655) are not in "
                     "TRL's GRPOTrainer"))
    """DRA-GRPO (arXiv 2505.09655): divide each reward by its completion's summed similarity to
    its group (near-duplicates share their reward), measured by ngram (character 3-grams) or
    hidden (the policy's mean last hidden state); None = off"""

    # ---- advantages ------------------------------------------------------------------------------
    advantage_estimator: str = knob("grpo", one_of(estimators), trl=lab_only(TRL_REFUSALS))
    """grpo (group mean/std), rloo (leave-one-out), remax (greedy baseline), opo (length-weighted
    baseline), gae (PPO: critic + generalised advantage estimation), turn_grpo (multi-turn
    episodes: each turn's return-to-go against the group's episodes at that turn)"""
    scale_rewards: str = knob("group", one_of(SCALE_REWARDS), trl="scale_rewards")
    """grpo advantage denominator: group std, batch std, or none (Dr. GRPO) (TRL)"""
    gamma: float = knob(
        1.0, between(0, 1),
        trl=not_carried("GAE only (advantage_estimator='gae' is refused)"), kind="generic")
    """discount: per token for PPO/GAE, per policy turn for turn_grpo"""
    lam: float = knob(0.95, between(0, 1), trl=not_carried("GAE only"), kind="generic")
    """PPO/GAE lambda: 1 = Monte-Carlo return minus value, 0 = one-step TD error"""

    # ---- group filters and masking ---------------------------------------------------------------
    dynamic_sampling: bool = knob(
        False, boolean,
        trl=lab_only("TRL's GRPOTrainer does not drop zero-variance groups and resample (DAPO, "
                     "arXiv 2503.14476); their advantage is 0 there", droppable=True))
    """DAPO: drop groups whose rewards are all equal and sample new prompts to refill the batch"""
    max_resample_rounds: int = knob(
        3, whole(0), trl=not_carried("dynamic sampling only (refused or dropped)"), kind="generic")
    """DAPO: extra sampling rounds per step at most; a batch still short then trains as it is"""
    num_remains_in_group: int | None = knob(
        None, whole(2, group_size, optional=True),
        trl=lab_only("GFPO's filter (keep k of G completions per group, arXiv 2508.09726) is not "
                     "in TRL's GRPOTrainer"))
    """GFPO k: keep this many of the G completions per group (by gfpo_metric); None = off (TRL)"""
    gfpo_adaptive_k: tuple[int, int, int, int] | None = knob(
        None, check_adaptive_k,
        trl=lab_only("adaptive-difficulty GFPO (arXiv 2508.09726, Algorithm 2) is not in TRL's "
                     "GRPOTrainer"))
    """adaptive-difficulty GFPO (paper Algorithm 2): k for (very hard, hard, medium, easy)
    prompts by their mean reward against the quartiles of all means seen so far, e.g. (8, 8, 6,
    4) of G = 16; replaces num_remains_in_group; None = off"""
    gfpo_metric: str = knob(
        "length", one_of(GFPO_METRICS), trl=not_carried("GFPO only (refused)"), kind="generic")
    """GFPO: keep the shortest (length) or the highest reward per token (token_efficiency)"""
    mask_truncated_completions: bool = knob(False, boolean, trl="mask_truncated_completions")
    """DAPO overlong filtering: truncated completions leave the loss (they still count in the
    group statistics) (TRL)"""

    # ---- policy loss -----------------------------------------------------------------------------
    loss_type: str = knob("grpo", one_of(loss_types), trl="loss_type")
    """a registered loss type (labkit.losses.LOSS_REGISTRY), each a surrogate and an
    aggregation: PPO's clip with grpo (mean per sequence, then over sequences), bnpo (token mean
    per micro-batch), dr_grpo (sum / (B * max_completion_length)), dapo (token mean over the
    generation batch) or sequence_sum; cispo, sapo, vespo, rlplus. TRL's default is dapo; the
    lab's GRPO keeps the paper's grpo"""
    importance_sampling_level: str = knob(
        "token", one_of(IMPORTANCE_SAMPLING_LEVELS), trl="importance_sampling_level")
    """token ratios (PPO/GRPO) or sequence = the length-normalised sequence ratio (GSPO) (TRL)"""
    epsilon: float = knob(0.2, between(0, 1, high_open=True), trl="epsilon")
    """lower clip: ratio >= 1 - epsilon (TRL)"""
    epsilon_high: float | None = knob(
        None, between(0, math.inf, allow_inf=True, optional=True), trl="epsilon_high")
    """upper clip: ratio <= 1 + epsilon_high; None = epsilon (resolved once: the upper_clip
    property). DAPO clip-higher: 0.28. loss_type='cispo' reads it as TRL does, as the absolute
    cap on the importance weight, w <= epsilon_high (TRL recommends 5.0; docs/conventions.md,
    cispo-cap) (TRL)"""
    delta: float | None = knob(
        None, between(1, math.inf, low_open=True, optional=True), trl="delta", kind="generic")
    """two-sided clip: cap the unclipped ratio at delta (INTELLECT-2; > 1 + epsilon_high) (TRL)"""
    dual_clip: float | None = knob(
        None, between(1, math.inf, low_open=True, optional=True),
        trl=lab_only("dual-clip PPO (arXiv 1912.09729) bounds the loss of negative advantages; "
                     "TRL's nearest is `delta`, which caps the ratio for both signs",
                     droppable=True))
    """dual-clip PPO constant c > 1: for A < 0 the loss is at most -c * A; None = off"""
    beta: float = knob(0.0, between(0, math.inf), trl="beta")
    """KL coefficient to the reference (the initial policy); 0 = no reference model at all (TRL)"""
    ref_reset_every: int = knob(
        0, whole(0),
        trl=lab_only("ProRL's reference resets (arXiv 2505.24864) are not in TRL; its nearest is "
                     "sync_ref_model (TR-DPO's soft update, also a lab field)"))
    """ProRL (arXiv 2505.24864): every this-many steps the reference becomes the current policy
    and the optimizer state is cleared; 0 = never (needs beta > 0)"""
    ref_reset_patience: int = knob(
        0, whole(0),
        trl=lab_only("ProRL's reference resets (arXiv 2505.24864) are not in TRL; its nearest is "
                     "sync_ref_model (TR-DPO's soft update, also a lab field)"), kind="generic")
    """ProRL's trigger: reset after this many evaluations without a new best eval_accuracy
    (needs eval_every and beta > 0); 0 = off"""
    sync_ref_model: bool = knob(False, boolean, trl="sync_ref_model")
    """TR-DPO (arXiv 2404.09656), TRL's name: every ref_model_sync_steps optimizer steps
    ref <- alpha * policy + (1 - alpha) * ref (needs beta > 0)"""
    ref_model_mixup_alpha: float = knob(
        0.6, between(0, 1), trl="ref_model_mixup_alpha", kind="generic")
    """TR-DPO's alpha (TRL default 0.6)"""
    ref_model_sync_steps: int = knob(512, whole(1), trl="ref_model_sync_steps", kind="generic")
    """TR-DPO's tau in optimizer steps (TRL default 512)"""
    kl_estimator: str = knob(
        "k3", one_of(KL_ESTIMATORS),
        trl=lab_only("TRL's KL term is the k3 estimator; k1/k2 have no GRPOConfig setting"),
        kind="generic")
    """k1, k2 or k3 (Schulman); GRPO's KL-in-loss is k3, PPO's KL-in-reward is k1"""
    kl_in_reward: bool = knob(
        False, boolean,
        trl=lab_only("TRL adds the KL to the loss only (beta, k3); a KL penalty inside the "
                     "reward has no GRPOConfig setting"), kind="generic")
    """subtract beta * KL from the reward (PPO/InstructGPT) instead of adding it to the loss"""
    entropy_coef: float = knob(0.0, between(0, math.inf), trl="entropy_coef", kind="generic")
    """entropy bonus: loss -= entropy_coef * mean token entropy (TRL)"""
    ptx_coef: float = knob(
        0.0, between(0, math.inf),
        trl=lab_only("TRL's GRPOTrainer has no supervised term in its loss (Kimi K2's PTX loss, "
                     "arXiv 2507.20534); mix SFT data in with a second trainer or a custom loss"))
    """gamma of the PTX loss (Kimi K2, arXiv 2507.20534 section 3.2.3; InstructGPT's form, arXiv
    2203.02155 eq. 2): loss += ptx_coef * token-mean NLL of ptx_batch_size warm-start examples
    each optimizer step (labkit.finetune.ptx); 0 = off"""
    ptx_batch_size: int = knob(8, whole(1), trl=not_carried("ptx_coef only (refused)"))
    """PTX: supervised examples per optimizer step"""
    top_entropy_quantile: float = knob(
        1.0, between(0, 1, low_open=True), trl="top_entropy_quantile")
    """rho: only the tokens whose sampling entropy is in the top rho of the batch get a gradient
    (arXiv 2506.01939 keeps 0.2; TRL's name); 1.0 = every token"""
    cov_penalty: str | None = knob(
        None, one_of(COV_PENALTIES, optional=True),
        trl=lab_only("Clip-Cov / KL-Cov (arXiv 2505.22617) are not in TRL's GRPOTrainer"))
    """clip_cov or kl_cov (arXiv 2505.22617): silence at random (clip_cov) or KL-penalise
    (kl_cov, which also drops the clip) the tokens whose log-prob covaries most with their
    advantage; None = off"""
    clip_cov_ratio: float = knob(
        2e-4, between(0, 1, low_open=True),
        trl=not_carried("cov_penalty only (refused)"), kind="generic")
    """Clip-Cov: share of the valid tokens silenced (paper 2e-4)"""
    clip_cov_lb: float = knob(
        1.0, between(-math.inf, math.inf),
        trl=not_carried("cov_penalty only (refused)"), kind="generic")
    """Clip-Cov: lower bound of the covariance of a candidate token (paper 1)"""
    clip_cov_ub: float = knob(
        5.0, between(-math.inf, math.inf),
        trl=not_carried("cov_penalty only (refused)"), kind="generic")
    """Clip-Cov: upper bound of the covariance of a candidate token (paper 5)"""
    kl_cov_ratio: float = knob(
        2e-3, between(0, 1, low_open=True),
        trl=not_carried("cov_penalty only (refused)"), kind="generic")
    """KL-Cov: share of the valid tokens (largest covariance) that get the KL penalty (paper
    2e-3)"""
    kl_cov_coef: float = knob(
        1.0, between(0, math.inf), trl=not_carried("cov_penalty only (refused)"), kind="generic")
    """KL-Cov: coefficient of |log pi - log pi_old| on those tokens (verl's ppo_kl_coef)"""
    rlplus_demonstrations: bool = knob(
        False, boolean,
        trl=lab_only("RL-PLUS's demonstration completions (arXiv 2508.00222) are not in TRL's "
                     "GRPOTrainer"))
    """RL-PLUS: the last completion of every group is the prompt's worked solution (an external
    demonstration, trained with the MIS ratio and the exploration weight)"""
    use_bias_correction_kl: bool = knob(
        False, boolean, trl="use_bias_correction_kl", kind="generic")
    """multiply the k3 KL-in-loss by the importance ratio (DeepSeek-V3.2; TRL 1.16 default True)"""

    # ---- PPO critic ------------------------------------------------------------------------------
    vf_coef: float = knob(
        0.1, between(0, math.inf, low_open=True), trl=not_carried("critic only"), kind="generic")
    """weight of the value loss (TRL PPO: 0.1)"""
    clip_range_value: float | None = knob(
        0.2, between(0, math.inf, low_open=True, optional=True),
        trl=not_carried("critic only"), kind="generic")
    """value clipping: new values stay within this of the old ones; None = no clipping"""
    value_learning_rate: float | None = knob(
        None, between(0, math.inf, low_open=True, optional=True),
        trl=not_carried("critic only"), kind="generic")
    """critic learning rate; None = learning_rate"""

    # ---- optimisation ----------------------------------------------------------------------------
    learning_rate: float = knob(
        3e-4, between(0, math.inf, low_open=True), trl="learning_rate", kind="generic")
    """AdamW peak learning rate (TRL's default, 1e-6, suits billion-parameter models)"""
    lr_scheduler_type: str = knob(
        "constant_with_warmup", one_of(LR_SCHEDULERS), trl="lr_scheduler_type", kind="generic")
    """constant, constant_with_warmup, linear or cosine decay to 0 (warm-up for the last three)"""
    warmup_ratio: float = knob(
        0.05, between(0, 1, high_open=True),
        trl=derived("warmup_steps (a ratio below 1)"), kind="generic")
    """fraction of max_steps spent warming the learning rate up linearly from 0"""
    weight_decay: float = knob(0.0, between(0, math.inf), trl="weight_decay", kind="generic")
    """AdamW decoupled weight decay"""
    adam_beta1: float = knob(0.9, between(0, 1, high_open=True), trl="adam_beta1", kind="generic")
    """AdamW beta1"""
    adam_beta2: float = knob(0.999, between(0, 1, high_open=True), trl="adam_beta2", kind="generic")
    """AdamW beta2"""
    max_grad_norm: float = knob(1.0, between(0, math.inf), trl="max_grad_norm", kind="generic")
    """clip the global gradient norm to this; 0 = no clipping (the norm is still logged)"""
    num_iterations: int = knob(1, whole(1), trl="num_iterations", kind="generic")
    """mu: passes over each generation batch (PPO epochs) (TRL)"""
    num_mini_batches: int = knob(
        1, whole(1),
        trl=derived("steps_per_generation / gradient_accumulation_steps"), kind="generic")
    """optimizer steps per pass: the generation batch is split into this many mini-batches"""
    micro_batch_size: int | None = knob(
        None, whole(1, optional=True),
        trl=derived("per_device_train_batch_size (a cap; see trl_batch_sizes)"), resumable=True,
        kind="generic")
    """most completions per forward/backward (gradient accumulation inside a mini-batch; set it
    to fit GPU memory); None = no cap. The trainer also groups completions of similar length"""
    max_steps: int = knob(
        60, whole(1),
        trl=derived("max_steps x num_iterations x num_mini_batches optimizer steps"),
        resumable=True, kind="generic")
    """training steps (one step = one generation batch)"""

    # ---- evaluation, checkpoints, safety ---------------------------------------------------------
    eval_every: int = knob(
        0, whole(0),
        trl=lab_only("the lab's pass@1 evaluation is not run under TRL: evaluate the returned "
                     "model with labkit.evaluate.evaluate", droppable=True), resumable=True,
        kind="generic")
    """evaluate on the eval split before training and every this-many steps (0 = never)"""
    eval_k: int = knob(
        2, whole(1), trl=not_carried("lab evaluation only"), resumable=True, kind="generic")
    """samples per eval prompt (accuracy = pass@1 at the sampling temperature)"""
    eval_max_prompts: int | None = knob(
        None, whole(1, optional=True),
        trl=not_carried("lab evaluation only"), resumable=True, kind="generic")
    """use only the first this-many eval prompts (None = the whole split)"""
    output_dir: str | None = knob(
        None, path, trl=derived("output_dir when none is given"), resumable=True, kind="generic")
    """where checkpoints go (None = nowhere)"""
    save_every: int = knob(
        0, whole(0),
        trl=derived("save_strategy='steps', save_steps in optimizer steps"), resumable=True,
        kind="generic")
    """save a checkpoint every this-many steps (0 = never; needs output_dir)"""
    save_on_interrupt: bool = knob(
        True, boolean,
        trl=not_carried("lab checkpointing; TRL saves on its save_strategy"), resumable=True,
        kind="generic")
    """on KeyboardInterrupt, save a checkpoint of the last completed step (when output_dir)"""
    resume_from: str | None = knob(
        None, path,
        trl=lab_only("a lab checkpoint cannot resume a TRL run: TRL resumes its own with "
                     "trainer.train(resume_from_checkpoint=...)"), resumable=True, kind="generic")
    """checkpoint folder to resume from"""
    max_nonfinite_steps: int = knob(
        3, whole(1),
        trl=not_carried("the lab skips NaN/inf steps; TRL has no such guard"), resumable=True,
        kind="generic")
    """consecutive steps with a NaN/inf loss or gradient (skipped) before training stops"""
    rollback_nonfinite_weights: bool = knob(
        True, boolean,
        trl=not_carried("the lab's NaN/inf guard; TRL has none"), resumable=True, kind="generic")
    """copy the trainable weights before each optimizer step and put them back if the step made
    any NaN/inf (costs one copy of the trainable weights; the step then counts as skipped)"""
    progress: bool = knob(
        True, boolean, trl=derived("disable_tqdm"), resumable=True, kind="generic")
    """show a tqdm progress bar"""
    entropy_threshold: float = knob(
        0.5, between(0, math.inf),
        trl=not_carried("a metric's threshold (entropy_high_frac), not the algorithm"),
        kind="generic")
    """nats: the entropy_high_frac metric counts loss tokens whose sampling entropy exceeds it"""


TrainConfig, _facts, _refuse_late_settings = build(TrainConfig, LOSS_REGISTRY, refuse_trl_names)
listen_to_loss_types(_refuse_late_settings)

#: ``{field name: Knob}``: every field's declaration (default, range, doc, TRL bridge, resumable,
#: kind), the written fields and the loss types' settings alike.
FIELDS: dict[str, Knob] = _facts
#: ``{field name: its documentation}`` for every field of :class:`TrainConfig`.
FIELD_DOCS: dict[str, str] = {name: k.doc for name, k in FIELDS.items()}
#: Fields that may differ between a checkpoint and the run resuming it (they do not change what
#: the run computes); any other difference is refused
#: (:func:`labkit.training.checkpoint.check_same_run`).
RESUMABLE_CHANGES = frozenset(name for name, k in FIELDS.items() if k.resumable)
#: Fields that are no method's switch (``kind="generic"``): the model, the machine, batch sizes,
#: the optimiser, decoding, evaluation, checkpoints.
GENERIC_FIELDS = frozenset(name for name, k in FIELDS.items() if k.kind == "generic")
