"""The lab's commands behind one entry point, ``python -m labkit <command>``, and a package root
that shows the architecture: every command the repository prints is one the dispatcher knows, and
the root holds only the modules named below."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.__main__ import COMMANDS, main
from labkit.commands.reference_runs import OLDER_COMMAND_LINES

ROOT = Path(__file__).resolve().parents[1]

#: The modules the package root keeps: the algorithm box and what a notebook calls around it. The
#: rest sits in folders that say what it is (config/, tricks/, finetune/, scale/, runtime/,
#: commands/, ...). A new root module is a decision: name it here and in labkit/__init__.py.
ROOT_MODULES = {"__init__", "__main__", "trainer", "grpo_minimal", "ppo_minimal", "experience",
                "metrics", "models", "logprobs", "evaluate", "exercises",
                "doctor", "catalog", "quotes"}

#: Where the repository's prose, code, logs and notebooks live (data/ holds the run logs' and
#: shipped models' ``# command:`` lines).
SCANNED = ("README.md", "CONTRIBUTING.md", "pyproject.toml", ".ci", "data", "deploy", "docs",
           "labkit", "notebooks", "tests")
TEXT = {".py", ".md", ".ipynb", ".sh", ".toml", ".cfg", ".yml", ".yaml", ".txt", ".csv", ".json",
        ".ini", ""}
#: ``-m labkit`` and what follows: a dotted module (``.check``) or a command (`` check``).
MENTION = re.compile(r"-m labkit(\.[\w.]+| [\w-]+)?")


def text_files():
    for name in SCANNED:
        top = ROOT / name
        for path in [top] if top.is_file() else sorted(top.rglob("*")):
            if (path.is_file() and path.suffix in TEXT and "__pycache__" not in path.parts
                    and not path.name.startswith("tally")):   # fuzz tallies: records of a past run
                yield path


def test_the_root_holds_only_the_listed_modules():
    found = {path.stem for path in (ROOT / "labkit").glob("*.py")}
    assert found <= ROOT_MODULES, (
        f"new root module(s) {sorted(found - ROOT_MODULES)}: put each in the folder of its kind, "
        f"or name it in ROOT_MODULES and labkit/__init__.py's table")


def test_every_printed_command_is_one_the_dispatcher_knows():
    wrong = []
    for path in text_files():
        for line_no, line in enumerate(path.read_text(encoding="utf-8", errors="replace")
                                       .splitlines(), 1):
            for older in OLDER_COMMAND_LINES:   # the old log header, accepted on purpose
                line = line.replace(older, "")
            for match in MENTION.finditer(line):
                word = match.group(1)
                if word is None or word.strip() in COMMANDS or word.strip().startswith("-"):
                    continue  # bare ``python -m labkit`` (the list) or a known command
                wrong.append(f"{path.relative_to(ROOT)}:{line_no}: {match.group(0)}")
    assert not wrong, ("commands that `python -m labkit` does not run (write `python -m labkit "
                       f"<command>`, one of {', '.join(COMMANDS)}):\n" + "\n".join(wrong))


def test_the_scan_sees_both_forms():
    old = "python -m labkit" + ".check"   # in two pieces, or the scan would flag this file
    found = [m.group(1) for m in MENTION.finditer(f"{old}; python -m labkit check; python -m labkit")]
    assert found == [".check", " check", None]


def test_the_bare_command_lists_every_command_with_its_line(capsys):
    assert main([]) == 0
    listing = capsys.readouterr().out
    assert main(["--help"]) == 0 and capsys.readouterr().out == listing
    rows = listing.split("commands:\n")[1].split("\n\n")[0].splitlines()
    assert [row.split()[0] for row in rows] == list(COMMANDS)
    assert all(len(row.split(maxsplit=1)) == 2 for row in rows), listing  # each has a summary
    assert "Rebuild the shipped tiny Qwen" in listing and "`" not in listing  # plain text


def test_an_unknown_command_is_refused_by_name(capsys):
    assert main(["chek"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'chek'" in err and all(name in err for name in COMMANDS)


def run(*args):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "LABKIT_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300, check=False)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_command_answers_help(command):
    done = run("labkit", command, "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"usage: python -m labkit {command}"), done.stdout[:300]


def test_the_dotted_form_runs_too():
    done = run(COMMANDS["check"], "--help")
    assert done.returncode == 0 and "usage:" in done.stdout, done.stderr[-2000:]


def test_where_prints_the_file_and_line_of_every_registered_method():
    """``python -m labkit where NAME`` answers for every name of every registry (loss types,
    estimators, named rewards, config rules): the line it prints opens the registered code."""
    from labkit.commands.where import registrations, where

    for kind, table in registrations().items():
        for name, code in table.items():
            (found,) = [p for p in where(name) if p.kind == kind]
            line = (ROOT / found.file).read_text().splitlines()[found.line - 1]
            assert line.startswith((f"def {code.__name__}(", f"class {code.__name__}")), \
                (kind, name, found.file, line)


def test_where_grpo_names_the_loss_and_the_estimator(capsys):
    assert main(["where", "grpo"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [row.split()[1:3] for row in out] == [["loss_type", "'grpo'"],
                                                 ["advantage_estimator", "'grpo'"]]
    assert out[0].startswith("labkit/losses/clipped.py:")
    assert out[1].startswith("labkit/advantages/grpo.py:")


def test_where_refuses_an_unknown_name_listing_the_known_ones(capsys):
    assert main(["where", "grpoo"]) == 2
    err = capsys.readouterr().err
    assert "no registered method is called 'grpoo'" in err
    for known in ("loss_type: cispo, grpo", "advantage_estimator: grpo", "accuracy", "gdpo"):
        assert known in err
