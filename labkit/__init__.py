"""labkit: the code behind the GRPO Lab.

One direction of data flow, one concept per module:

    config -> tasks, rewards -> rollout -> advantages, filters -> logprobs, losses -> trainer -> viz

Every function a notebook shows is importable from here, so a learner can call the loss or the
advantage estimator on a hand-made tensor, and the trainer uses exactly the same code.
"""

__version__ = "0.1.0"
