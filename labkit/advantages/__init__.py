"""Advantage estimators: pure tensor functions, one per method.

One file per estimator, each registering itself in :data:`ESTIMATOR_REGISTRY` (the trainer, the
config, the TRL bridge and the catalog read that table; adding one is a new file, with its public
names in its ``__all__``, plus its import line below). Layout (same as TRL): outcome rewards are a
1-D tensor of length ``N = P * G`` in which the ``G`` completions of each of the ``P`` prompts are
consecutive, so ``rewards.view(P, G)`` is one row per group. Outcome estimators return one
advantage per completion, shape (N,), to be broadcast over its tokens by the loss. Token-level
estimators (GAE) work on (B, T) tensors with a 0/1 response mask.

=============================  ====================================================================
function                       method
=============================  ====================================================================
``group_advantages``           GRPO ((r - mean_g) / (std + eps)); Dr. GRPO (``scale_rewards="none"``);
                               Lite-PPO / TRL ``scale_rewards="batch"``
``rloo_advantages``            RLOO leave-one-out baseline
``remax_advantages``           ReMax greedy-decode baseline
``opo_advantages``             OPO length-weighted baseline
``batch_normalize``            REINFORCE++-baseline / DLER batch-level scaling, PPO whitening
``combine_rewards``            several reward functions: TRL sum-then-normalise or GDPO
``gae``                        PPO's generalised advantage estimation and value targets
``explained_variance``         how much of the returns' spread the critic predicts (PPO diagnostic)
``outcome_to_token_rewards``   put a sequence reward on its last token (PPO-RLHF)
``kl_penalized_token_rewards`` KL folded into per-token rewards (PPO-RLHF, k1)
``kl_penalized_rewards``       KL folded into the sequence reward (RLOO, "Comedy of Estimators")
``turn_level_advantages``      multi-turn episodes: each turn's return-to-go, normalised per turn
=============================  ====================================================================

Missing rewards. A reward function may return ``None`` for a completion (TRL's contract); the
caller turns it into NaN. Following TRL exactly, ``group_advantages`` and ``combine_rewards`` treat a
NaN reward as *missing*: it is left out of every mean and standard deviation and its completion gets
advantage 0. The other estimators need every reward and raise ``ValueError`` on NaN. Infinite
rewards always raise.

Departures from TRL/verl, all deliberate and tested:

* a group whose (present) rewards are all equal gets advantages of exactly 0; TRL gets
  ``(r - mean) / (0 + 1e-4)``, i.e. the rounding error of the mean divided by 1e-4: exactly 0 for
  0/1 rewards, up to 2.4e-3 on constant groups of rewards such as 0.3 or 1.7 in float32
  (measured in ``docs/conventions.md``);
* a group of one completion gets advantage 0 from the group baselines (GRPO, Dr. GRPO, RLOO, OPO;
  TRL's rule); verl's GRPO, RLOO and OPO return the raw reward for a singleton group, which is not
  centred at all;
* the standard deviation is Bessel-corrected (n - 1) as in TRL and verl, with ``eps = 1e-4`` added
  to it (TRL; verl uses 1e-6, oat 1e-8); GFPO's population std is available with ``unbiased=False``.
"""

# One line per file: importing a file registers its estimator and exports its public names (the
# file's ``__all__``), so ``from labkit.advantages import rloo_advantages`` works for every one.
from labkit.advantages.groups import *
from labkit.advantages.grpo import *
from labkit.advantages.kl_reward import *
from labkit.advantages.normalization import *
from labkit.advantages.opo import *
from labkit.advantages.ppo_gae import *
from labkit.advantages.registry import *
from labkit.advantages.remax import *
from labkit.advantages.rloo import *
from labkit.advantages.turn_level import *
