"""The package run as a module: :func:`labkit.commands.check.main`, as ``python -m labkit check``
runs it (``tests/test_check.py`` starts it this way, in a process of its own)."""

import sys

from labkit.commands.check import main

sys.exit(main())
