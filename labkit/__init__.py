"""labkit: the code behind the GRPO Lab.

One direction of data flow, one concept per module:

    config -> tasks, rewards -> rollout -> advantages, filters -> logprobs, losses -> trainer -> viz

Where things live:

=============================  ===================================================================
taught (notebooks call them)   ``losses/`` (one file per surrogate family), ``advantages/`` (one
                               file per estimator), ``rewards/`` (rule-checked rewards and their
                               families), ``filters``, ``temperature``, ``reference``,
                               ``token_filters``, ``logprobs``, ``rollout``, ``tasks``, ``models``,
                               ``lora``, ``mismatch``, ``memory``, ``ptx``, ``rft``, ``evaluate``,
                               ``grpo_minimal`` (GRPO on one screen), ``agents/`` (tools and
                               multi-turn episodes)
the run                        ``config`` (every knob, validated; presets), ``trainer`` (the
                               algorithm box), ``engine/`` (its machinery: no notebook needs it),
                               ``rules``/``methods`` (each method's config rules)
teaching tools                 ``viz/``, ``widgets``, ``exercises``, ``doctor``, ``catalog``
commands (``python -m``)       ``labkit.commands.check``, ``labkit.tasks``, ``labkit.commands.build_tiny``,
                               ``labkit.commands.build_judge``, ``labkit.commands.reference_runs``, ``labkit.scale.bench``,
                               ``labkit.scale.bench_memory``, ``labkit.trl_train``,
                               ``labkit.commands.section_times``
TRL both ways                  ``trl_bridge`` (a lab recipe to TRL)
the environment                ``compat`` (version floors, transformers' dialects), ``cpu``
                               (threads within a container's quota)
=============================  ===================================================================

Import what a notebook shows from its module (``from labkit.losses import policy_loss``); the
trainer calls exactly the same functions. A new loss or estimator is one file in ``losses/`` or
``advantages/`` that registers itself (``CONTRIBUTING.md``).
"""

__version__ = "0.1.0"

# An environment older than the declared floors fails here, with one line naming the package,
# the version found and the version needed, not later with a traceback from inside a dependency.
from labkit.runtime.compat import require_compatible as _require_compatible

_require_compatible()

from labkit.runtime.cpu import limit_torch_threads as _limit_torch_threads

_limit_torch_threads()  # on purpose at import: every notebook imports labkit before training
