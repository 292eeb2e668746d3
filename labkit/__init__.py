"""labkit: the code behind the GRPO Lab.

One direction of data flow, one concept per module:

    config -> tasks, rewards -> rollout -> advantages, filters -> logprobs, losses -> trainer -> viz

Every function a notebook shows is importable from here, so a learner can call the loss or the
advantage estimator on a hand-made tensor, and the trainer uses exactly the same code.
"""

__version__ = "0.1.0"

# An environment older than the declared floors fails here, with one line naming the package,
# the version found and the version needed, not later with a traceback from inside a dependency.
from labkit.compat import require_compatible as _require_compatible

_require_compatible()

from labkit.cpu import limit_torch_threads as _limit_torch_threads

_limit_torch_threads()  # on purpose at import: every notebook imports labkit before training
