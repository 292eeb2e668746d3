"""Reward functions the tests train on (imported by name: ``from text_rewards import ...``; not
from ``conftest``, a module name the notebooks' folder has too, so which one an import finds
depends on the order pytest collects the two folders in)."""


def length_reward(prompts, completions, **columns):
    """A reward that only needs text: longer completions score higher (an untrained model's
    completions vary in length, so every group has a spread)."""
    return [len(c[0]["content"]) / 16 for c in completions]
