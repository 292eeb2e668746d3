"""Reference solutions to the exercises of notebooks/07_exploration.ipynb.

Each function has the signature of the notebook's stub; the notebook checks it against labkit's
implementation with ``labkit.exercises.check_function``. Import with
``importlib.import_module("solutions.07_exploration")`` (the name starts with a digit).
"""

import torch


def focal_weight(logp, gamma=0.5):
    """RL-PLUS's exploration weight (1 - sg[p])^gamma: detached, so it scales without a gradient."""
    return (1 - logp.detach().exp()).clamp(min=0) ** gamma


def mis_ratio(logp, old_logp):
    """RL-PLUS's MIS ratio 2 p / (p_old + (p_old + 1) / 2) = 4 p / (3 p_old + 1), through logp."""
    return 4 * logp.exp() / (3 * old_logp.detach().exp() + 1)


def dra_weights(embeddings, num_generations):
    """DRA-GRPO: 1 / (sum of a completion's non-negative cosine similarities in its group)."""
    unit = torch.nn.functional.normalize(embeddings.float(), dim=-1)
    groups = unit.view(-1, num_generations, unit.shape[-1])
    similarity = (groups @ groups.transpose(1, 2)).clamp(min=0)
    return (1 / similarity.sum(-1)).reshape(-1)
