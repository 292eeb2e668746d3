"""Every module that registers a method: importing this module fills the registries.

Loss types register in :mod:`labkit.losses` (one file each), advantage estimators in
:mod:`labkit.advantages`, and the configuration rules of the other methods
(:mod:`labkit.plugins.rules`) in the modules below. :mod:`labkit.config` imports this module, so a
config is never validated before every rule is known. A method module with a rule of its own joins the list here.
"""

from labkit import (  # noqa: F401 (imported for what they register)
    advantages,
    losses,
    offpolicy,
)
from labkit.rewards import length  # noqa: F401
from labkit.training import lora  # noqa: F401
from labkit.tricks import (  # noqa: F401
    filters,
    reference,
    temperature,
    token_filters,
)
