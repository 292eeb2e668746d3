"""The small trainer the training tests build (imported by name: ``from small_trainer import
small_trainer``; not from ``conftest``, for the reason ``text_rewards.py`` gives).

Each test file binds its own defaults once, what differs between the files:

    make_trainer = functools.partial(small_trainer, settings=SMALL, reward_funcs=[my_reward])

and calls ``make_trainer(base, "dapo", max_steps=1, ...)``.
"""

import copy

from labkit.config import preset
from labkit.trainer import Trainer


def small_trainer(base, name="grpo", *, settings: dict, reward_funcs, data=None, callbacks=(),
                  environment_factory=None, **overrides) -> Trainer:
    """A :class:`labkit.trainer.Trainer` of preset ``name`` with ``settings`` (the file's small
    run), then ``overrides``, on a deep copy of ``base``'s model, so that no run trains the
    weights another test starts from.

    ``base`` is ``(model, tokenizer, train rows)`` (the ``random_tiny`` fixture's shape);
    ``data`` replaces the rows; ``reward_funcs`` None gives the trainer's default rewards.
    """
    model, tokenizer, rows = base
    return Trainer(preset(name, **{**settings, **overrides}), model=copy.deepcopy(model),
                   tokenizer=tokenizer, train_dataset=rows if data is None else data,
                   reward_funcs=None if reward_funcs is None else list(reward_funcs),
                   callbacks=callbacks, environment_factory=environment_factory)
