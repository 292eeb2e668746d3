"""The package run as a module: :func:`labkit.commands.section_times.main`, as ``python -m labkit
section_times`` runs it."""

import sys

from labkit.commands.section_times import main

sys.exit(main())
