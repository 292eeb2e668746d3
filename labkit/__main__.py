"""The lab's commands: ``python -m labkit <command> [args]``.

``python -m labkit`` (or ``--help``) lists the commands, one line each; ``python -m labkit
<command> --help`` gives a command's own options. Each command is a module with a
``main(argv)``, which also runs on its own as ``python -m <module>``.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import sys

#: Command name -> the module whose ``main(argv)`` runs it.
COMMANDS = {
    "check": "labkit.commands.check",
    "where": "labkit.commands.where",
    "reference_runs": "labkit.commands.reference_runs",
    "section_times": "labkit.commands.section_times",
    "bands": "labkit.commands.bands",
    "build_tiny": "labkit.commands.build_tiny",
    "build_judge": "labkit.commands.build_judge",
    "build_tools": "labkit.commands.build_tools",
    "bench": "labkit.scale.bench",
    "bench_memory": "labkit.scale.bench_memory",
    "trl_train": "labkit.trl_bridge.train",
    "tasks": "labkit.tasks.build",
    "async_overlap": "labkit.commands.async_overlap",
    "student_copy": "labkit.commands.student_copy",
}


def summary(module: str) -> str:
    """The first paragraph of ``module``'s docstring, read from its source: listing the commands
    imports none of them (several import torch and transformers, seconds each)."""
    spec = importlib.util.find_spec(module)
    with open(spec.origin, encoding="utf-8") as source:
        doc = ast.get_docstring(ast.parse(source.read())) or ""
    line = " ".join(doc.split("\n\n")[0].split())   # the first paragraph, on one line
    line = re.sub(r"[:.]?\s*``python -m [^`]*``\.?$", "", line).rstrip(".")
    return line.replace("``", "")   # reStructuredText's literals, printed as plain text


def usage() -> str:
    width = max(map(len, COMMANDS))
    rows = [f"  {name:<{width}}  {summary(module)}" for name, module in COMMANDS.items()]
    return "\n".join(["usage: python -m labkit <command> [args]", "", "commands:", *rows, "",
                      "python -m labkit <command> --help gives a command's own options."])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"python -m labkit: unknown command {name!r}; the commands are "
              f"{', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    # argparse names the program after sys.argv[0] in its usage and error lines
    sys.argv = [f"python -m labkit {name}", *rest]
    code = importlib.import_module(COMMANDS[name]).main(rest)
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
