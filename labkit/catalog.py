"""The machine-readable catalog of every method and trick in the lab.

Each :class:`Method` says what a method changes relative to plain GRPO, the paper it comes from,
how to switch it on (:class:`labkit.config.TrainConfig` fields the trainer acts on, and the
``labkit`` functions that compute it), the notebook that demonstrates it and the tests that check
it. ``status`` is derived, not written: a method is ``"implemented"`` when it names a config switch
or a function, else ``"planned"``. ``tests/test_catalog.py`` keeps this honest: switches are real
config fields the trainer reads, every method switch of ``TrainConfig`` belongs to some entry (so
a switch cannot exist while its entry says "planned"), functions import, test ids exist,
notebooks mention the ids.

Ids are stable: the lab's core path (``CORE_IDS``) and the 29 tricks it teaches, in a fixed order
(``TRICK_IDS``). Where popular lists of GRPO tricks credit a trick to the wrong source,
the entry cites the paper that introduced it and says so in ``note``. A loss type, advantage
estimator or named reward registered without an entry here is listed from its registration
(:func:`registered_methods`), so the catalog never misses a method the trainer can run.

>>> from labkit.catalog import catalog_frame
>>> catalog_frame().query("status == 'implemented'")[["id", "changes", "switch"]]  # doctest: +SKIP
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import asdict, dataclass, field

__all__ = ["CATALOG", "CHANGES", "CORE_IDS", "EXTRA_IDS", "TRICK_IDS", "Method", "all_methods",
           "catalog_frame", "get", "registered_methods"]

CHANGES = (
    "reward",
    "advantage",
    "ratio",
    "clip",
    "aggregation",
    "sampling",
    "data",
    "reference",
    "temperature",
    "loss",
)

CORE_IDS = (
    "ppo",
    "ppo-dual-clip",
    "gae",
    "grpo",
    "dapo-dynamic-sampling",
    "dapo-overlong-filter",
    "gspo-token",
    "gfpo-token-efficiency",
    "gfpo-adaptive",
)

TRICK_IDS = (
    "dapo-no-kl",
    "dapo-clip-higher",
    "kimi-temperature-decay",
    "dler-higher-clip",
    "prorl-ref-reset",
    "rlplus-no-clip-exploration",
    "kl-estimators",
    "opo-baseline",
    "gdpo-reward-decoupled-norm",
    "remax-greedy-baseline",
    "rloo-baseline",
    "drgrpo-no-std",
    "gspo-sequence",
    "batch-reward-norm",
    "prorl-high-temperature",
    "curriculum-difficulty",
    "gfpo-length-filter",
    "dra-diversity",
    "dapo-overlong-penalty",
    "dapo-token-loss",
    "kimi-budget-control",
    "laser-length-reward",
    "dler-difficulty-truncation",
    "rft-rejection-sampling",
    "rlvr-rules",
    "ttrl-majority-vote",
    "generative-judge",
    "multitask-weights",
    "kimi-ptx-loss",
)


@dataclass(frozen=True)
class Method:
    """One catalog row.

    Attributes:
        id: stable identifier (lower-case, dashes).
        title: title of the paper that introduced it.
        arxiv: arXiv id of that paper, or None when it has none.
        changes: what it changes relative to plain GRPO, one of :data:`CHANGES`.
        functions: dotted paths of the labkit functions that implement it.
        config: ``TrainConfig`` fields and the values that switch it on.
        notebook: ``notebooks/NN_name.ipynb`` that demonstrates it, or None.
        tests: pytest node ids (``tests/test_x.py::test_name``) that check it.
        note: attribution corrections and how labkit departs from the paper.
    """

    id: str
    title: str
    arxiv: str | None
    changes: str
    functions: tuple[str, ...] = ()
    config: dict = field(default_factory=dict)
    notebook: str | None = None
    tests: tuple[str, ...] = ()
    note: str = ""

    @property
    def status(self) -> str:
        """``"implemented"`` when a config switch or a function exists, else ``"planned"``."""
        return "implemented" if self.config or self.functions else "planned"

    @property
    def switch(self) -> str:
        """How to switch it on, as one line: config fields, then functions."""
        fields = [f"{k}={v!r}" for k, v in self.config.items()]
        return "; ".join(fields + list(self.functions))


# Papers: (title, arXiv id).
_PPO = ("Proximal Policy Optimization Algorithms", "1707.06347")
_DUAL = ("Mastering Complex Control in MOBA Games with Deep Reinforcement Learning", "1912.09729")
_GAE = ("High-Dimensional Continuous Control Using Generalized Advantage Estimation", "1506.02438")
_GRPO = (
    "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models",
    "2402.03300",
)
_DAPO = ("DAPO: An Open-Source LLM Reinforcement Learning System at Scale", "2503.14476")
_GSPO = ("Group Sequence Policy Optimization", "2507.18071")
_GFPO = (
    "Sample More to Think Less: Group Filtered Policy Optimization for Concise Reasoning",
    "2508.09726",
)
_K2 = ("Kimi K2: Open Agentic Intelligence", "2507.20534")
_K15 = ("Kimi k1.5: Scaling Reinforcement Learning with LLMs", "2501.12599")
_DLER = (
    (
        "DLER: Doing Length pEnalty Right - Incentivizing More Intelligence per Token via "
        "Reinforcement Learning"
    ),
    "2510.15110",
)
_PRORL = (
    "ProRL: Prolonged Reinforcement Learning Expands Reasoning Boundaries in Large Language Models",
    "2505.24864",
)
_RLPLUS = (
    (
        "RL-PLUS: Countering Capability Boundary Collapse of LLMs in Reinforcement Learning with "
        "Hybrid-policy Optimization"
    ),
    "2508.00222",
)
_COMEDY = ("A Comedy of Estimators: On KL Regularization in RL Training of LLMs", "2512.21852")
_OPO = ("On-Policy RL with Optimal Reward Baseline", "2505.23585")
_GDPO = (
    (
        "GDPO: Group reward-Decoupled Normalization Policy Optimization for Multi-reward RL "
        "Optimization"
    ),
    "2601.05242",
)
_REMAX = (
    (
        "ReMax: A Simple, Effective, and Efficient Reinforcement Learning Method for Aligning Large "
        "Language Models"
    ),
    "2310.10505",
)
_RLOO = (
    (
        "Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human Feedback "
        "in LLMs"
    ),
    "2402.14740",
)
_DRGRPO = ("Understanding R1-Zero-Like Training: A Critical Perspective", "2503.20783")
_DRA = (
    (
        "DRA-GRPO: Exploring Diversity-Aware Reward Adjustment for R1-Zero-Like Training of Large "
        "Language Models"
    ),
    "2505.09655",
)
_LASER = ("Learn to Reason Efficiently with Adaptive Length-based Reward Shaping", "2505.15612")
_RFT = (
    "Scaling Relationship on Learning Mathematical Reasoning with Large Language Models",
    "2308.01825",
)
_TULU = ("Tulu 3: Pushing Frontiers in Open Language Model Post-Training", "2411.15124")
_TTRL = ("TTRL: Test-Time Reinforcement Learning", "2504.16084")
_GENRM = ("Generative Verifiers: Reward Modeling as Next-Token Prediction", "2408.15240")
_MTGRPO = ("Multi-Task GRPO: Reliable LLM Reasoning Across Tasks", "2602.05547")

_CISPO = ("MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention",
          "2506.13585")
_SAPO = ("Soft Adaptive Policy Optimization", "2511.20347")
_VESPO = (("VESPO: Variational Sequence-Level Soft Policy Optimization for Stable Off-Policy "
           "LLM Training"), "2602.10693")
_FORKING = (("Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective Reinforcement "
             "Learning for LLM Reasoning"), "2506.01939")
_ENTROPY = ("The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models",
            "2505.22617")
_TRDPO = ("Learn Your Reference Model for Real Good Alignment", "2404.09656")
_TIS = ("Your Efficient RL Framework Secretly Brings You Off-Policy RL Training", None)
_TORL = ("ToRL: Scaling Tool-Integrated RL", "2503.23383")
_SEARCHR1 = (("Search-R1: Training LLMs to Reason and Leverage Search Engines with "
              "Reinforcement Learning"), "2503.09516")
_RAGEN = (("RAGEN: Understanding Self-Evolution in LLM Agents via Multi-Turn Reinforcement "
           "Learning"), "2504.20073")
_ASYNC_RLHF = ("Asynchronous RLHF: Faster and More Efficient Off-Policy RL for Language Models",
               "2410.18252")
_AREAL = (("AReaL: A Large-Scale Asynchronous Reinforcement Learning System for Language "
           "Reasoning"), "2505.24298")
_RING1T = ("Every Step Evolves: Scaling Reinforcement Learning for Trillion-Scale Thinking Model",
           "2510.18855")

_NB = {
    "ppo": "notebooks/01_ppo.ipynb",
    "grpo": "notebooks/02_grpo.ipynb",
    "baselines": "notebooks/03_baselines.ipynb",
    "dapo": "notebooks/04_dapo.ipynb",
    "gspo": "notebooks/05_gspo.ipynb",
    "gfpo": "notebooks/06_gfpo_length.ipynb",
    "exploration": "notebooks/07_exploration.ipynb",
    "rewards": "notebooks/08_rewards_data.ipynb",
    "scaling": "notebooks/09_scaling_up.ipynb",
    "agents": "notebooks/10_agents.ipynb",
    "async": "notebooks/11_async.ipynb",
}

_A, _F, _L, _S = "labkit.advantages.", "labkit.tricks.filters.", "labkit.losses.", "labkit.rewards.shaping."
_TA, _TF, _TL, _TK = (
    "tests/test_advantages.py::",
    "tests/test_filters.py::",
    "tests/test_losses.py::",
    "tests/test_kl.py::",
)
_TRL = "tests/test_trl_crosscheck.py::"
_TS = "tests/test_switches.py::"
_TE = "tests/test_exploration.py::"
_PS, _TPS = "labkit.tricks.prompt_sampling.", "tests/test_prompt_sampling.py::"
_LC, _TLC = "labkit.rewards.length.", "tests/test_length_control.py::"
_TM = "tests/test_mismatch.py::"
_OP, _TOP = "labkit.offpolicy.", "tests/test_offpolicy.py::"
_TAD, _TPR = "tests/test_offpolicy_admission.py::", "tests/test_offpolicy_partial.py::"


def _m(paper, **kwargs) -> Method:
    title, arxiv = paper
    return Method(title=title, arxiv=arxiv, **kwargs)


CATALOG: tuple[Method, ...] = (
    # ---------------------------------------------------------------- core path
    _m(
        _PPO,
        id="ppo",
        changes="clip",
        functions=(_L + "clipped_surrogate", _L + "policy_loss", _L + "value_loss"),
        config={"advantage_estimator": "gae"},
        notebook=_NB["ppo"],
        tests=(
            _TL + "test_four_sign_cases_and_where_the_gradient_vanishes",
            _TL + "test_ratio_one_is_reinforce_weighted_by_the_advantage",
            _TL + "test_value_clipping_regimes",
        ),
        note="LLM libraries aggregate PPO by token mean; value clipping comes from OpenAI "
        "baselines ppo2, not the paper.",
    ),
    _m(
        _DUAL,
        id="ppo-dual-clip",
        changes="clip",
        functions=(_L + "clipped_surrogate",),
        config={"dual_clip": 3.0},
        notebook=_NB["ppo"],
        tests=(
            _TL + "test_dual_clip_caps_the_loss_for_negative_advantages",
            _TL
            + "test_dual_clip_with_huge_c_is_vanilla_ppo_and_delta_equals_it_for_negative_advantages",
        ),
        note="c = 3 is verl's default; the paper only requires c > 1. For A < 0 it equals TRL's "
        "delta with delta = c.",
    ),
    _m(
        _GAE,
        id="gae",
        changes="advantage",
        functions=(_A + "gae", _A + "outcome_to_token_rewards", _A + "batch_normalize"),
        config={"advantage_estimator": "gae", "gamma": 1.0, "lam": 0.95},
        notebook=_NB["ppo"],
        tests=(
            _TA + "test_gae_lambda_one_is_reward_to_go_minus_value",
            _TA + "test_gae_lambda_zero_is_the_td_error",
            _TA + "test_gae_skips_holes_in_the_mask",
        ),
    ),
    _m(
        _GRPO,
        id="grpo",
        changes="advantage",
        functions=(_A + "group_advantages", _L + "policy_loss"),
        config={"advantage_estimator": "grpo", "scale_rewards": "group", "loss_type": "grpo"},
        notebook=_NB["grpo"],
        tests=(
            _TA + "test_group_advantages_sum_to_zero_per_group",
            _TA + "test_bessel_std_gives_sum_of_squares_g_minus_1_and_population_gives_g",
            _TL + "test_per_token_gradient_weights_of_each_aggregation",
            _TRL + "test_policy_loss_matches_trl_compute_loss",
        ),
        note="Bessel std + 1e-4 as TRL (the paper gives no epsilon); KL as k3 in the loss.",
    ),
    _m(
        _DAPO,
        id="dapo-dynamic-sampling",
        changes="sampling",
        functions=(_F + "dynamic_sampling_mask",),
        config={"dynamic_sampling": True},
        notebook=_NB["dapo"],
        tests=(_TF + "test_dynamic_sampling_drops_all_correct_and_all_wrong_groups",),
        note="The paper filters on accuracy; the mask accepts any per-completion metric.",
    ),
    _m(
        _DAPO,
        id="dapo-overlong-filter",
        changes="loss",
        config={"mask_truncated_completions": True},
        notebook=_NB["dapo"],
        tests=(_TS + "test_truncated_completions_leave_the_loss",),
        note="Truncated completions leave the loss but still count in the group statistics "
        "(TRL); needs the rollout's truncation flags and the trainer.",
    ),
    _m(
        _GSPO,
        id="gspo-token",
        changes="ratio",
        functions=(_L + "gspo_token_log_ratio", _L + "policy_loss"),
        config={"importance_sampling_level": "sequence_token", "num_mini_batches": 4},
        notebook=_NB["gspo"],
        tests=(_TL + "test_gspo_token_equals_gspo_with_shared_advantages",
               _TS + "test_every_loss_type_and_ratio_level_trains"),
        note="Only differs from GSPO with per-token advantages. Gone from TRL 1.16.",
    ),
    _m(
        _GFPO,
        id="gfpo-token-efficiency",
        changes="sampling",
        functions=(_F + "gfpo_filter", _F + "gfpo_advantages"),
        config={"num_remains_in_group": 8, "gfpo_metric": "token_efficiency"},
        notebook=_NB["gfpo"],
        tests=(
            _TF + "test_token_efficiency_keeps_the_highest_reward_per_token",
            _TF + "test_gfpo_rejected_get_zero_and_kept_are_standardised_with_population_std",
        ),
    ),
    _m(
        _GFPO,
        id="gfpo-adaptive",
        changes="sampling",
        functions=(_F + "adaptive_num_remains", _F + "difficulty_quartiles", _F + "gfpo_filter"),
        config={"num_generations": 16, "gfpo_adaptive_k": (8, 8, 6, 4)},
        notebook=_NB["gfpo"],
        tests=(
            _TF + "test_adaptive_k_by_quartile_bucket_and_before_ready",
            _TF + "test_adaptive_k_feeds_the_filter",
            _TS + "test_adaptive_gfpo_keeps_more_of_the_harder_groups",
        ),
        note="Exact quantiles over the history of group mean rewards replace the paper's t-digest.",
    ),
    # ---------------------------------------------------------------- tricks, in the list's order
    _m(
        _DAPO,
        id="dapo-no-kl",
        changes="reference",
        functions=(_L + "policy_loss",),
        config={"beta": 0.0},
        notebook=_NB["dapo"],
        tests=(_TRL + "test_policy_loss_matches_trl_compute_loss",),
        note="beta = 0 also means no reference model is loaded (TRL's default).",
    ),
    _m(
        _DAPO,
        id="dapo-clip-higher",
        changes="clip",
        functions=(_L + "clipped_surrogate",),
        config={"epsilon": 0.2, "epsilon_high": 0.28},
        notebook=_NB["dapo"],
        tests=(_TL + "test_clip_higher_moves_only_the_upper_edge",),
    ),
    _m(
        _K2,
        id="kimi-temperature-decay",
        changes="temperature",
        functions=("labkit.tricks.temperature.temperature_at",),
        config={"temperature": 1.2, "temperature_schedule": "cosine", "temperature_final": 0.8},
        notebook=_NB["exploration"],
        tests=(_TE + "test_temperature_schedules_start_end_and_never_rise",
               _TS + "test_on_policy_ratio_is_one_along_a_temperature_schedule"),
        note="A Kimi K2 addition (arXiv 2507.20534 section 3.2.3), not k1.5 as lists of GRPO "
        "tricks often say. Schedule and endpoints are unpublished: linear and cosine offered.",
    ),
    _m(
        _DLER,
        id="dler-higher-clip",
        changes="clip",
        functions=(_L + "clipped_surrogate",),
        config={"epsilon": 0.2, "epsilon_high": 0.28},
        notebook=_NB["dapo"],
        tests=(_TL + "test_clip_higher_moves_only_the_upper_edge",),
        note="DAPO's clip-higher (2503.14476) reused by DLER with the same 0.2/0.28.",
    ),
    _m(
        _PRORL,
        id="prorl-ref-reset",
        changes="reference",
        functions=("labkit.tricks.reference.reset_reference",),
        config={"beta": 0.04, "ref_reset_every": 40},
        notebook=_NB["exploration"],
        tests=(_TS + "test_reference_reset_has_prorls_properties",
               _TS + "test_stalled_evaluation_triggers_a_reset"),
        note="The reset target is the current policy, not the base model; the optimizer state "
        "is cleared (the paper's v1). Trigger: every N steps, or N evaluations without a new "
        "best (ref_reset_patience).",
    ),
    _m(
        _RLPLUS,
        id="rlplus-no-clip-exploration",
        changes="clip",
        functions=(_L + "rlplus_surrogate", _L + "focal_weight", _L + "mis_ratio"),
        config={"loss_type": "rlplus", "rlplus_demonstrations": True, "scale_rewards": "none"},
        notebook=_NB["exploration"],
        tests=(_TE + "test_rlplus_mis_ratio_and_focal_weight_checks",
               _TS + "test_rlplus_trains_with_a_demonstration_in_every_group"),
        note="The worked solution of each prompt is the external demonstration (one per group, "
        "as the released code's n_prefix = 1); the exploration weight applies to its tokens "
        "only, as in the code.",
    ),
    _m(
        _COMEDY,
        id="kl-estimators",
        changes="reference",
        functions=(
            _L + "kl_estimate",
            _A + "kl_penalized_rewards",
            _A + "kl_penalized_token_rewards",
        ),
        config={"beta": 0.05, "kl_estimator": "k1", "kl_in_reward": True},
        notebook=_NB["grpo"],
        tests=(
            _TK + "test_expected_gradient_of_each_placement",
            _TK + "test_sequence_kl_k1_in_reward_is_exact_tokenwise_k2_loss_is_not",
            _TK + "test_values_k3_and_k2_never_negative_k1_sometimes",
        ),
        note="The estimators are Schulman's (blog, no arXiv id); the paper compares their "
        "placements and recommends k1 in the reward.",
    ),
    _m(
        _OPO,
        id="opo-baseline",
        changes="advantage",
        functions=(_A + "opo_advantages",),
        config={"advantage_estimator": "opo"},
        notebook=_NB["baselines"],
        tests=(
            _TA + "test_opo_length_weighted_baseline_example",
            _TA + "test_opo_weighted_sum_is_zero_and_zero_length_counts_as_one",
        ),
    ),
    _m(
        _GDPO,
        id="gdpo-reward-decoupled-norm",
        changes="advantage",
        functions=(_A + "combine_rewards",),
        config={"multi_objective_aggregation": "normalize_then_sum"},
        notebook=_NB["baselines"],
        tests=(
            _TA + "test_gdpo_example_from_the_paper",
            _TRL + "test_advantages_match_trl_generate_and_score",
            _TS + "test_gdpo_switch_gives_the_decoupled_advantages",
        ),
        note="TRL's name for the switch: multi_objective_aggregation.",
    ),
    _m(
        _REMAX,
        id="remax-greedy-baseline",
        changes="advantage",
        functions=(_A + "remax_advantages",),
        config={"advantage_estimator": "remax"},
        notebook=_NB["baselines"],
        tests=(_TA + "test_remax_subtracts_the_greedy_reward_of_each_prompt",),
        note="The greedy rollout itself is the rollout module's job.",
    ),
    _m(
        _RLOO,
        id="rloo-baseline",
        changes="advantage",
        functions=(_A + "rloo_advantages",),
        config={"advantage_estimator": "rloo"},
        notebook=_NB["baselines"],
        tests=(
            _TA + "test_rloo_example_and_formula",
            _TA + "test_dr_grpo_times_g_over_g_minus_1_is_rloo",
        ),
        note="The leave-one-out baseline is Kool et al. 2019; 2402.14740 brought it to LLMs.",
    ),
    _m(
        _DRGRPO,
        id="drgrpo-no-std",
        changes="advantage",
        functions=(_A + "group_advantages", _L + "aggregate"),
        config={"scale_rewards": "none", "loss_type": "dr_grpo"},
        notebook=_NB["baselines"],
        tests=(
            _TA + "test_dr_grpo_only_centres",
            _TL
            + "test_grpo_gives_a_3x_longer_wrong_answer_3x_less_penalty_per_token_dapo_does_not",
        ),
    ),
    _m(
        _GSPO,
        id="gspo-sequence",
        changes="ratio",
        functions=(_L + "sequence_log_ratio", _L + "policy_loss"),
        config={"importance_sampling_level": "sequence", "loss_type": "grpo"},
        notebook=_NB["gspo"],
        tests=(
            _TL + "test_sequence_ratio_is_the_geometric_mean_of_token_ratios",
            _TL
            + "test_gspo_per_token_gradient_is_s_times_a_over_length_and_a_clipped_sequence_is_silenced",
        ),
    ),
    _m(
        _DLER,
        id="batch-reward-norm",
        changes="advantage",
        functions=(_A + "batch_normalize", _A + "group_advantages"),
        notebook=_NB["baselines"],
        tests=(
            _TA + "test_batch_normalize_dler_example",
            _TA + "test_batch_scale_divides_by_the_std_of_all_raw_rewards",
        ),
        note="From REINFORCE++-baseline, used by DLER: group-centre, then one batch std "
        "(batch_normalize). TRL's scale_rewards='batch' divides by the std of the raw rewards.",
    ),
    _m(
        _PRORL,
        id="prorl-high-temperature",
        changes="temperature",
        config={"temperature": 1.2},
        tests=(_TS + "test_on_policy_ratio_is_one_at_any_temperature",),
        notebook=_NB["exploration"],
        note="Sample at temperature 1.2; the training log-probs use the same temperature, so the "
        "on-policy ratio stays exactly 1.",
    ),
    _m(
        _K15,
        id="curriculum-difficulty",
        changes="data",
        functions=(_PS + "CurriculumOrder", _PS + "PrioritizedOrder"),
        config={"prompt_sampler": "curriculum", "curriculum_ratio": 0.5},
        notebook=_NB["rewards"],
        tests=(_TPS + "test_curriculum_allows_harder_prompts_over_time",
               _TPS + "test_prioritized_sampling_follows_one_minus_solve_rate",
               _TPS + "test_the_trainer_feeds_solve_rates_back"),
        note="Two forms from Kimi k1.5 (section 2.3.4): a fixed easy-to-hard schedule on the "
        "difficulty column, and prioritized sampling p ~ 1 - solve rate (the adaptive one; "
        "prompt_sampler='prioritized'). SEC (2505.14970) is the bandit form, not implemented.",
    ),
    _m(
        _GFPO,
        id="gfpo-length-filter",
        changes="sampling",
        functions=(_F + "gfpo_filter", _F + "gfpo_advantages"),
        config={"num_remains_in_group": 8, "gfpo_metric": "length"},
        notebook=_NB["gfpo"],
        tests=(
            _TF + "test_shortest_k_keeps_exactly_the_k_smallest_lengths",
            _TF + "test_gfpo_rejected_get_zero_and_kept_are_standardised_with_population_std",
        ),
    ),
    _m(
        _DRA,
        id="dra-diversity",
        changes="reward",
        functions=("labkit.rewards.diversity.dra_weights", "labkit.rewards.diversity.ngram_embeddings"),
        config={"diversity_adjustment": "ngram"},
        notebook=_NB["exploration"],
        tests=(_TE + "test_dra_weights_paper_checks",
               _TS + "test_diversity_adjustment_discounts_duplicates"),
        note="Character 3-gram cosine (offline, cheap) or the policy's mean hidden state replace "
        "the paper's sentence embedder; the similarity is taken within each prompt's group.",
    ),
    _m(
        _DAPO,
        id="dapo-overlong-penalty",
        changes="reward",
        functions=(_S + "overlong_penalty",),
        config={"overlong_buffer_len": 32, "overlong_penalty_factor": 1.0},
        notebook=_NB["dapo"],
        tests=(
            "tests/test_advantages.py::test_dapo_overlong_penalty_curve",
            _TRL + "test_overlong_penalty_matches_trl_soft_overlong_punishment",
        ),
    ),
    _m(
        _DAPO,
        id="dapo-token-loss",
        changes="aggregation",
        functions=(_L + "aggregate",),
        config={"loss_type": "dapo"},
        notebook=_NB["dapo"],
        tests=(
            _TL + "test_per_token_gradient_weights_of_each_aggregation",
            _TL + "test_micro_batch_losses_add_up_to_the_full_batch_loss",
        ),
    ),
    _m(
        _K2,
        id="kimi-budget-control",
        changes="reward",
        functions=(_LC + "budget_control_reward", _LC + "kimi_length_reward"),
        config={"length_reward": "budget", "length_target": 64},
        notebook=_NB["gfpo"],
        tests=(
            _TLC + "test_budget_control_over_budget_is_penalised_regardless_of_correctness",
            _TLC + "test_kimi_length_reward_reference_example",
            _TS + "test_length_rewards_shape_the_trainers_rewards",
        ),
        note="A Kimi K2 addition, not k1.5 (k1.5 has the length reward, kimi_length_reward). "
             "Budgets and penalty are unpublished.",
    ),
    _m(
        _LASER,
        id="laser-length-reward",
        changes="reward",
        functions=(_LC + "laser_reward", _LC + "laser_adaptive_target"),
        config={"length_reward": "laser", "length_target": 48, "length_reward_weight": 0.5},
        notebook=_NB["gfpo"],
        tests=(_TLC + "test_laser_reference_examples", _TLC + "test_laser_adaptive_target_ecr",
               _TS + "test_length_rewards_shape_the_trainers_rewards"),
        note="LASER-D's adaptive target (laser_adaptive_target) is a teaching function: the "
        "trainer has no monitoring set to recompute it on.",
    ),
    _m(
        _DLER,
        id="dler-difficulty-truncation",
        changes="sampling",
        functions=(_LC + "truncation_reward", _LC + "difficulty_truncation_lengths"),
        config={"length_reward": "difficulty_truncation", "length_target": 64,
                "length_target_easy": 32},
        notebook=_NB["gfpo"],
        tests=(_TLC + "test_truncation_reward_zero_beyond_the_limit",
               _TLC + "test_da_dler_lengths_and_the_tie",
               _TS + "test_length_rewards_shape_the_trainers_rewards"),
        note="DA-DLER: a shorter truncation length for prompts solved more than half the time.",
    ),
    _m(
        _RFT,
        id="rft-rejection-sampling",
        changes="data",
        functions=("labkit.finetune.rft.rejection_sample", "labkit.finetune.rft.rft", "labkit.finetune.rft.dedup_correct"),
        notebook=_NB["rewards"],
        tests=("tests/test_rft.py::test_wrong_and_unjudged_samples_are_never_kept",
               "tests/test_rft.py::test_duplicates_differ_only_in_whitespace_and_are_per_prompt",
               "tests/test_rft.py::test_rejection_sample_keeps_only_verified_distinct_solutions"),
        note="Duplicates are equal texts up to whitespace (the paper: equal calculator-equation "
        "lists, keeping the farthest in edit distance); the first sampled is kept; rounds > 1 "
        "iterate from the previous round's model, without mixing in the original SFT data.",
    ),
    _m(
        _TULU,
        id="rlvr-rules",
        changes="reward",
        functions=("labkit.rewards.accuracy_reward", "labkit.rewards.format_reward",
                   "labkit.rewards.verifiers.lenient_length_reward",
                   "labkit.rewards.verifiers.answer_anywhere_reward",
                   "labkit.rewards.verifiers.format_only_reward",
                   "labkit.rewards.verifiers.digit_credit_reward"),
        notebook=_NB["rewards"],
        tests=("tests/test_rewards.py::test_accuracy_reward_on_strings_and_messages",
               "tests/test_rewards.py::test_format_reward",
               "tests/test_rewards.py::test_rewards_never_raise_on_malformed_completions",
               ("tests/test_verifiers.py::"
                "test_lenient_length_pays_a_long_wrong_think_the_strict_reward_refuses"),
               "tests/test_verifiers.py::test_digit_credit_reward_is_one_exactly_when_strict_passes"),
        note="The lab's default rewards are rule verifiers of exact answers and of the format "
        "(binary, weight 1; Tulu 3 uses 10). labkit.rewards.verifiers adds lax verifiers to exploit and "
        "partial credit, which are the lab's, not the paper's.",
    ),
    _m(
        _TTRL,
        id="ttrl-majority-vote",
        changes="reward",
        functions=("labkit.rewards.ttrl.ttrl_reward", "labkit.rewards.ttrl.majority_vote",
                   "labkit.rewards.ttrl.label_accuracy_reward"),
        notebook=_NB["rewards"],
        tests=("tests/test_ttrl.py::test_majority_vote_paper_example_ties_and_no_votes",
               "tests/test_ttrl.py::test_reward_ignores_the_true_answer",
               ("tests/test_ttrl.py::"
                "test_reward_equals_accuracy_where_the_majority_is_right_and_lucky_hits_where_not")),
        note="One set of G samples votes and trains (the paper votes with 64, trains on 32); "
        "trained on the train split, not on the test set, so the eval split stays held out.",
    ),
    _m(
        _GENRM,
        id="generative-judge",
        changes="reward",
        functions=("labkit.rewards.judge.JudgeReward", "labkit.rewards.judge.yes_probability",
                   "labkit.rewards.judge.judge_agreement", "labkit.commands.build_judge.build"),
        notebook=_NB["rewards"],
        tests=(("tests/test_judge.py::"
                "test_equal_logits_give_one_half_and_the_score_is_a_probability"),
               "tests/test_judge.py::test_reward_never_reads_the_answer_column",
               ("tests/test_judge.py::"
                "test_shipped_judge_agrees_with_the_verifier_on_held_out_completions")),
        note="Direct GenRM only (no verification chain of thought); the verdict tokens are Y/N "
        "because 'Yes' is three tokens with the character tokenizer; the judge is the tiny Qwen "
        "fine-tuned on the policy's own samples labelled by the rule verifier.",
    ),
    _m(
        _MTGRPO,
        id="multitask-weights",
        changes="data",
        functions=(_PS + "MultiTaskOrder", _PS + "iwu_step"),
        config={"prompt_sampler": "multitask"},
        notebook=_NB["rewards"],
        tests=(_TPS + "test_iwu_step_paper_checks",
               _TPS + "test_multitask_weights_move_toward_the_worst_family"),
        note="IWU logits by plain gradient steps (the paper: AdamW); no ratio-preserving "
        "resampler.",
    ),
    _m(
        _K2,
        id="kimi-ptx-loss",
        changes="loss",
        functions=("labkit.finetune.ptx.ptx_nll", "labkit.finetune.ptx.PTXData"),
        config={"ptx_coef": 0.2, "ptx_batch_size": 8},
        notebook=_NB["rewards"],
        tests=("tests/test_ptx.py::test_gradient_is_rl_plus_coef_times_sft",
               "tests/test_ptx.py::test_silent_rl_leaves_the_sft_gradient"),
        note="A Kimi K2 addition, not k1.5; its form is InstructGPT's PPO-ptx (2203.02155). "
        "The PTX data are the tiny Qwen's warm-start solutions (every cell), not pretraining "
        "text; K2 publishes neither the coefficient nor the mix.",
    ),
    # ---------------------------------------------------------------- beyond the list
    _m(
        _CISPO,
        id="cispo",
        changes="clip",
        functions=(_L + "cispo_surrogate",),
        config={"loss_type": "cispo", "epsilon_high": 5.0},
        notebook=_NB["exploration"],
        tests=(_TRL + "test_policy_loss_matches_trl_compute_loss",
               _TS + "test_every_loss_type_and_ratio_level_trains"),
        note="epsilon_high is TRL's absolute cap on the detached weight (5.0 from ScaleRL); "
             "cispo_min_weight adds verl's floor (epsilon_high=1.2, cispo_min_weight=0.8 is "
             "verl's default CISPO).",
    ),
    _m(
        _SAPO,
        id="sapo",
        changes="clip",
        functions=(_L + "sapo_surrogate",),
        config={"loss_type": "sapo"},
        notebook=_NB["exploration"],
        tests=(_TRL + "test_policy_loss_matches_trl_compute_loss",
               _TS + "test_every_loss_type_and_ratio_level_trains"),
    ),
    _m(
        _VESPO,
        id="vespo",
        changes="clip",
        functions=(_L + "vespo_surrogate",),
        config={"loss_type": "vespo"},
        notebook=_NB["exploration"],
        tests=(_TRL + "test_policy_loss_matches_trl_compute_loss",
               _TS + "test_every_loss_type_and_ratio_level_trains"),
    ),
    _m(
        _FORKING,
        id="top-entropy-tokens",
        changes="loss",
        functions=("labkit.tricks.token_filters.top_entropy_mask",),
        config={"top_entropy_quantile": 0.2},
        notebook=_NB["exploration"],
        tests=(_TE + "test_top_entropy_mask_keeps_the_top_share",
               _TS + "test_top_entropy_quantile_trains_only_forking_tokens"),
        note="TRL's top_entropy_quantile; the lab takes the quantile over the whole batch's "
        "sampling-time entropies.",
    ),
    _m(
        _ENTROPY,
        id="clip-cov",
        changes="clip",
        functions=("labkit.tricks.token_filters.covariance", "labkit.tricks.token_filters.clip_cov_mask"),
        config={"cov_penalty": "clip_cov"},
        notebook=_NB["exploration"],
        tests=(_TE + "test_clip_cov_picks_candidates_in_the_band",
               _TS + "test_cov_penalties_train"),
    ),
    _m(
        _ENTROPY,
        id="kl-cov",
        changes="loss",
        functions=("labkit.tricks.token_filters.covariance", "labkit.tricks.token_filters.kl_cov_mask"),
        config={"cov_penalty": "kl_cov", "num_mini_batches": 2},
        notebook=_NB["exploration"],
        tests=(_TE + "test_kl_cov_picks_the_largest_covariances", _TS + "test_cov_penalties_train"),
        note="Only acts off-policy: on-policy |log pi - log pi_old| is 0 with zero gradient.",
    ),
    _m(
        _TRDPO,
        id="trdpo-ref-sync",
        changes="reference",
        functions=("labkit.tricks.reference.mix_reference",),
        config={"beta": 0.04, "sync_ref_model": True, "ref_model_sync_steps": 20},
        notebook=_NB["exploration"],
        tests=(_TE + "test_mix_reference_moves_the_reference_by_alpha",
               _TS + "test_reference_sync_events"),
        note="TRL's sync_ref_model (a DPO-family idea that TRL also offers for GRPO).",
    ),
    _m(
        _TIS,
        id="tis-mismatch",
        changes="ratio",
        functions=("labkit.tricks.mismatch.mismatch_weights", "labkit.tricks.mismatch.mismatch_metrics"),
        config={"sampling_dtype": "bfloat16", "vllm_importance_sampling_correction": True,
                "vllm_importance_sampling_mode": "token_truncate",
                "vllm_importance_sampling_clip_max": 2.0,
                "vllm_importance_sampling_clip_min": 0.5},
        notebook=_NB["scaling"],
        tests=(_TM + "test_weights_match_trl_on_random_log_probs",
               _TM + "test_weights_are_exactly_one_when_sampler_and_trainer_agree",
               _TM + "test_a_bfloat16_sampler_shows_a_gap_that_the_correction_weighs"),
        note="Yao et al. (2025), \"Your Efficient RL Framework Secretly Brings You Off-Policy RL "
        "Training\", a blog post with no arXiv id "
        "(fengyao.notion.site/off-policy-rl), as TRL cites it for its "
        "vllm_importance_sampling_* options. labkit has no vLLM: sampling_dtype makes the "
        "sampler a bfloat16 copy of the policy, so the mismatch is real on a CPU; the four "
        "modes, the bounds and where the weight multiplies the loss are TRL 1.16's.",
    ),
    # ---------------------------------------------------------------- agents (notebook 10)
    _m(
        _TORL,
        id="tool-calls",
        changes="sampling",
        functions=("labkit.agents.episodes.run_episodes", "labkit.agents.calculator.calculate"),
        config={"max_tool_calling_iterations": 2},
        notebook=_NB["agents"],
        tests=("tests/test_episodes.py::test_a_tool_call_gets_its_reply_as_masked_tokens",),
        note="Trainer(environment_factory=...) turns each completion into an episode: the policy "
             "calls a tool in Qwen's <tool_call> format, the reply comes back as tokens it did "
             "not write. ReTool (arXiv 2504.11536) starts from tool demonstrations as the lab's "
             "warm start does; ToRL trains tool use with RL from a base model.",
    ),
    _m(
        _SEARCHR1,
        id="environment-token-mask",
        changes="aggregation",
        functions=("labkit.agents.episodes.run_episodes",),
        config={"train_on_environment_tokens": False},
        notebook=_NB["agents"],
        tests=("tests/test_episodes.py::test_only_the_policys_tokens_enter_the_loss",),
        note="The environment's tokens are context, not actions: the loss mask is completion "
             "mask x action mask (TRL's tool_mask). train_on_environment_tokens=True is the bug, "
             "on purpose, for notebook 10's demonstration.",
    ),
    _m(
        _RAGEN,
        id="multi-turn-episodes",
        changes="reward",
        functions=("labkit.agents.guessing.GuessingEnv",
                   "labkit.agents.guessing.expert_transcript",
                   "labkit.rewards.environment.environment_reward",
                   "labkit.rewards.environment.turn_reward"),
        notebook=_NB["agents"],
        tests=("tests/test_agents_envs.py::test_the_expert_solves_every_code_within_max_turns",),
        note="A game whose replies depend on every earlier turn, with an outcome reward "
             "(get_reward) and per-turn rewards (turn_rewards): RAGEN's StarPO optimises whole "
             "multi-turn trajectories.",
    ),
    # ---------------------------------------------------------------- asynchronous (notebook 11)
    _m(
        _ASYNC_RLHF,
        id="async-staleness",
        changes="sampling",
        functions=(_OP + "make_producer", _OP + "AheadSource", _OP + "OverlappedSource"),
        config={"max_staleness": 2, "async_mode": "deterministic"},
        notebook=_NB["async"],
        tests=(_TOP + "test_max_staleness_zero_is_todays_trainer_bit_for_bit",
               _TOP + "test_step_t_trains_the_batch_sampled_at_step_t_minus_k",
               _TOP + "test_overlapped_mode_trains_within_the_bound"),
        note="Noukhovitch et al. (section 3) train on samples of the previous policy while the "
             "next ones generate: off-policy by k steps. The lab's sampler runs k batches ahead "
             "(max_staleness=k; prime-rl's async level, AReaL's max_head_offpolicyness, TRL "
             "AsyncGRPOTrainer's max_staleness), each batch stamped with the version that "
             "sampled it. async_mode='deterministic' runs it in one thread, reproducibly (k=0 is "
             "the synchronous trainer, number for number); 'overlapped' samples in a real thread "
             "beside the trainer, not reproducible.",
    ),
    _m(
        _PPO,
        id="coupled-stale",
        changes="ratio",
        functions=(_OP + "correct_batch", _OP + "offpolicy_terms"),
        config={"max_staleness": 2, "offpolicy_correction": "coupled"},
        notebook=_NB["async"],
        tests=(_TOP + "test_coupled_anchors_the_clip_on_the_behaviour_policy",),
        note="PPO's ratio (section 3, eq. 7) with the sampling policy as pi_old: the 'coupled' "
             "objective in the terms of AReaL (arXiv 2505.24298, section 5.2), what TRL's "
             "AsyncGRPOTrainer and prime-rl do with a stale batch. The clip then binds on the "
             "staleness as well as on the update; the lab's alternatives keep the clip on the "
             "proximal policy (decoupled-ppo).",
    ),
    _m(
        _TIS,
        id="tis-stale",
        changes="ratio",
        functions=(_OP + "offpolicy_terms", "labkit.tricks.mismatch.mismatch_weights"),
        config={"max_staleness": 2, "offpolicy_correction": "tis",
                "offpolicy_weight_floor": 0.5, "offpolicy_weight_cap": 5.0},
        notebook=_NB["async"],
        tests=(_TOP + "test_corrections_equal_hand_computed_weights",
               _TOP + "test_correction_metrics_are_the_hand_computed_ones"),
        note="Truncated importance sampling against the policy that sampled, applied to stale "
             "samples: the weight pi_prox / pi_behav per token, truncated to [floor, cap] "
             "(verl's token_truncate). The blog of Yao et al. (2025, no arXiv id, as in "
             "tis-mismatch) wrote it for the sampler/trainer mismatch of a synchronous trainer; "
             "the lab uses the same function (labkit.tricks.mismatch) for staleness, with the "
             "clip anchored on the proximal policy.",
    ),
    _m(
        _RING1T,
        id="icepop",
        changes="ratio",
        functions=(_OP + "offpolicy_terms",),
        config={"max_staleness": 2, "offpolicy_correction": "icepop",
                "offpolicy_weight_floor": 0.5, "offpolicy_weight_cap": 5.0},
        notebook=_NB["async"],
        tests=(_TOP + "test_corrections_equal_hand_computed_weights",),
        note="IcePop (Ring-1T, section 3.1): tokens whose weight lies outside [0.5, 5] are "
             "masked, not truncated. The paper corrects the training/inference mismatch of a "
             "synchronous trainer; the lab applies it to stale samples, token level only.",
    ),
    _m(
        _AREAL,
        id="decoupled-ppo",
        changes="clip",
        functions=(_OP + "correct_batch", _OP + "offpolicy_terms"),
        config={"max_staleness": 2, "offpolicy_correction": "decoupled",
                "offpolicy_weight_cap": 5.0},
        notebook=_NB["async"],
        tests=(_TOP + "test_decoupled_ppo_is_ppo_when_behaviour_is_proximal",
               _TOP + "test_every_loss_and_estimator_trains_two_steps_stale",
               _TPR + "test_the_correction_weighs_each_token_against_its_own_version"),
        note="AReaL's decoupled PPO (section 5.2, eq. 5), after Hilton et al.'s decoupled "
             "objective (arXiv 2110.00641, section 4): the clip keeps the policy near the "
             "proximal policy (the weights at the update's start, one no-gradient forward) and "
             "the weight pi_prox / pi_behav corrects for the stale sampler; weights above "
             "offpolicy_weight_cap are masked (AReaL's behav_imp_weight_cap).",
    ),
    _m(
        _AREAL,
        id="staleness-admission",
        changes="sampling",
        functions=(_OP + "simulate_admission", _OP + "AdmissionSource"),
        config={"max_staleness": 2, "staleness_admission": "slow_down",
                "admission_train_time": 32.0},
        notebook=_NB["async"],
        tests=(_TAD + "test_a_hand_worked_schedule",
               _TAD + "test_discard_drops_the_long_groups_and_slow_down_keeps_the_sampled_lengths",
               _TAD + "test_the_trainer_logs_every_group_and_keeps_the_bound"),
        note="Groups take different times, so long groups carry older versions. 'slow_down' is "
             "AReaL's staleness control (section 5.1): at most (k + v + 1) x batch groups may "
             "have started by version v, the trainer waits for stragglers, nothing is dropped. "
             "'discard' drops groups older than k (TRL AsyncGRPOTrainer, prime-rl, "
             "open-instruct), which biases training toward short, easy groups. On a simulated "
             "clock (one unit per decoded token); the sampling is real.",
    ),
    _m(
        _AREAL,
        id="partial-rollouts",
        changes="sampling",
        functions=(_OP + "PartialRolloutSource", "labkit.sampling.continue_rollout"),
        config={"max_staleness": 1, "partial_rollouts": True, "partial_rollout_chunk": 64},
        notebook=_NB["async"],
        tests=(_TPR + "test_token_versions_follow_the_schedule",
               _TPR + "test_sampling_logprobs_are_each_tokens_own_version",
               _TPR + "test_a_seeded_run_gives_the_same_history_twice"),
        note="AReaL's interruptible rollouts (section 4) and verl's partial_rollout: a "
             "completion interrupted by a weight sync goes on with the newer weights, each token "
             "keeping its version (Experience.token_versions) and its own sampling log-prob. "
             "The lab departs: no decode loop swaps weights; the deterministic sampler decodes "
             "the first partial_rollout_chunk tokens with version v and continues them with "
             "v + 1 at the next step.",
    ),
)

#: Methods beyond the 29 tricks that every learner meets in current papers and that TRL or verl
#: expose: the other surrogates, entropy-side token filters, the soft reference update, the
#: correction for a sampler that is not the trainer, agents, and asynchronous training (a sampler
#: ahead of the trainer, the corrections of its stale samples, admission, partial rollouts): the
#: entries after the tricks, in the catalog's order.
EXTRA_IDS = tuple(m.id for m in CATALOG if m.id not in CORE_IDS + TRICK_IDS)


def _summary(entry, code) -> str:
    """What a registration says it is: its ``summary``, else its code's first docstring line."""
    return entry.summary or (inspect.getdoc(code) or "").partition("\n")[0]


def registered_methods() -> tuple[Method, ...]:
    """Entries derived from the method registries for every registered loss type, advantage
    estimator and named reward that no entry of :data:`CATALOG` covers (switches on, or names
    among its functions): a method added by registering it is listed (with the paper it
    registered, its own settings, its summary or docstring, status derived) before anyone writes
    its entry."""
    from labkit.advantages import ESTIMATOR_REGISTRY
    from labkit.losses import LOSS_REGISTRY
    from labkit.rewards import REWARD_REGISTRY

    covered = {(switch, m.config.get(switch)) for m in CATALOG
               for switch in ("loss_type", "advantage_estimator")}
    derived = []
    for switch, registry, changes in (("loss_type", LOSS_REGISTRY, "loss"),
                                      ("advantage_estimator", ESTIMATOR_REGISTRY, "advantage")):
        for name, entry in registry.items():
            if (switch, name) in covered:
                continue
            summary = _summary(entry, entry.surrogate if switch == "loss_type" else entry.compute)
            title, arxiv = entry.paper or (summary or name, None)
            settings = "".join(f"; setting {key} (default {setting.default!r}): {setting.doc}"
                               for key, setting in getattr(entry, "settings", {}).items())
            derived.append(Method(id=name.replace("_", "-"), title=title, arxiv=arxiv,
                                  changes=changes, config={switch: name},
                                  note=f"registered in {entry.module}; {summary}{settings}"))
    named = {getattr(sys.modules.get(module), name, None)
             for m in CATALOG for module, _, name in (f.rpartition(".") for f in m.functions)}
    for name, reward in REWARD_REGISTRY.items():
        if reward.code in named:
            continue
        summary = _summary(reward, reward.code)
        derived.append(Method(id=name.replace("_", "-"), title=summary or name, arxiv=None,
                              changes="reward",
                              functions=(f"{reward.module}.{reward.code.__qualname__}",),
                              note=f"registered in {reward.module}; the named reward {name!r}: "
                                   f"{summary}"))
    return tuple(derived)


def all_methods() -> tuple[Method, ...]:
    """:data:`CATALOG` and :func:`registered_methods`: every method the lab can run now."""
    return CATALOG + registered_methods()


def get(method_id: str) -> Method:
    """The catalog entry with this id (``KeyError`` listing the known ids otherwise)."""
    by_id = {m.id: m for m in all_methods()}
    try:
        return by_id[method_id]
    except KeyError:
        raise KeyError(f"unknown method id {method_id!r}; known: {sorted(by_id)}") from None


def catalog_frame():
    """The catalog as a pandas DataFrame, one row per method, core path first.

    Columns: ``id, kind (core/trick/extra), status, changes, title, arxiv, switch, functions, config,
    notebook, tests, note``.
    """
    import pandas as pd  # imported here so that importing labkit does not need pandas

    rows = []
    for m in all_methods():
        row = asdict(m)
        row["kind"] = ("core" if m.id in CORE_IDS else "trick" if m.id in TRICK_IDS
                       else "extra")
        row["status"] = m.status
        row["switch"] = m.switch
        rows.append(row)
    columns = ["id", "kind", "status", "changes", "title", "arxiv", "switch", "functions"]
    columns += ["config", "notebook", "tests", "note"]
    return pd.DataFrame(rows, columns=columns)
