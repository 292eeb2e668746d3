"""The plug-in machinery: what a method module needs to register itself, and nothing of the lab's.

=================  ==========================================================================
module             what
=================  ==========================================================================
``registry.py``    :class:`Registry`: one table of named entries (the loss types, the advantage
                   estimators, the named rewards), refusing a name twice
``settings.py``    :class:`Setting`, a config field declared by the method that reads it, and
                   the range checks (:func:`between`, :func:`whole`, :func:`one_of`,
                   :func:`flag`) and validators a field or a rule uses
``rules.py``       :func:`config_rule`: a combination rule, registered beside its method's code
=================  ==========================================================================

The method folders (``losses/``, ``advantages/``, ``rewards/``, ``tricks/``, ...) import this
package and :mod:`labkit.config` imports them, so the configuration stands above the methods it
reads and no method module imports :mod:`labkit.config`. This package imports nothing of the lab's.
"""

from labkit.plugins.registry import Registry
from labkit.plugins.rules import config_rule, config_rules
from labkit.plugins.settings import Check, Setting, between, flag, one_of, whole

__all__ = ["Check", "Registry", "Setting", "between", "config_rule", "config_rules", "flag",
           "one_of", "whole"]
