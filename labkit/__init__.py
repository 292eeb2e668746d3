"""labkit: the code behind the GRPO Lab.

One direction of data flow, one concept per module:

    config -> tasks, rewards -> sampling -> advantages, tricks -> logprobs, losses -> trainer -> viz

The root holds the algorithm box and what a notebook calls around it; every other module sits in
a folder that says what it is (``tests/test_commands.py`` names the root's modules):

=============================  ===================================================================
the root                       ``trainer`` (the algorithm box), ``grpo_minimal`` (GRPO on one
                               screen), ``ppo_minimal`` (PPO with its critic on one screen),
                               ``experience``, ``metrics``, ``models``, ``logprobs``,
                               ``evaluate``, ``exercises``, ``doctor`` (reads a
                               run's history), ``catalog`` (every method, where taught),
                               ``quotes`` (the recorded values a notebook's prose quotes)
methods (one file each)        ``losses/`` (surrogate families), ``advantages/`` (estimators),
                               ``rewards/`` (rule-checked rewards and their families), ``agents/``
                               (tools and multi-turn episodes), ``offpolicy/`` (stale batches)
``plugins/``                   what a method registers itself with: ``Registry`` (the name
                               table every registry shares), ``Setting`` and the range checks,
                               ``config_rule`` (combination rules); imports nothing of the lab's
``config/``                    ``TrainConfig`` (every knob, validated), ``presets``, ``methods``
                               (the modules that register), ``trl_names`` (TRL's spellings it
                               refuses); stands above the methods and reads their registries
``sampling/``                  prompts in, completions out: ``generate``, the decode loops (the
                               CPU's dynamic one, a GPU's fixed-shape one with CUDA graphs), the
                               ``Decoder`` a caller passes to choose one
``tricks/``                    around the core: ``filters``, ``token_filters``, ``temperature``,
                               ``reference``, ``prompt_sampling`` (the prompt order), ``mismatch``
``finetune/``                  without RL: ``sft``, ``rft``, and ``ptx`` (SFT's loss in an RL step)
``tasks/``                     the task suite (generation, grading, splits) and ``gsm8k``
``scale/``                     beyond the tiny model: ``memory``, ``bench``, ``bench_memory``
``trl_bridge/``                TRL both ways: a lab recipe to TRL, a TRL script on the lab
``training/``                  the parts of a run the trainer composes (no notebook needs
                               them): a step's batch, scoring, the training forward,
                               checkpoints, run control, ``lora``
``viz/``, ``widgets/``         plots and interactive widgets, one module per notebook family
``runtime/``                   the environment: ``compat`` (version floors, transformers'
                               dialects), ``cpu`` (threads within a container's quota),
                               ``hashing``, ``counts`` (a count from the environment or a
                               command line)
``commands/``                  ``python -m labkit <command>`` (``__main__`` lists them): ``check``,
                               ``where``, ``reference_runs``, ``section_times``, ``build_tiny``,
                               ``build_judge``, ``build_tools``; ``bench``, ``bench_memory``,
                               ``trl_train`` and ``tasks`` live with their kind
=============================  ===================================================================

Import what a notebook shows from its module (``from labkit.losses import policy_loss``); the
trainer calls exactly the same functions. A new loss, estimator or named reward is one file in
``losses/``, ``advantages/`` or ``rewards/`` that registers itself, plus its import line
(``CONTRIBUTING.md``); ``python -m labkit where NAME`` finds any registered one.
"""

__version__ = "0.1.0"

# An environment older than the declared floors fails here, with one line naming the package,
# the version found and the version needed, not later with a traceback from inside a dependency.
from labkit.runtime.compat import require_compatible as _require_compatible

_require_compatible()

from labkit.runtime.cpu import limit_torch_threads as _limit_torch_threads

_limit_torch_threads()  # on purpose at import: every notebook imports labkit before training
