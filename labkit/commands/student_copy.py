"""A copy of the lab for students, without the answers: ``python -m labkit student_copy DEST``.

A teacher hands students the notebooks, the package and the data, but not what answers the
exercises. This command writes such a copy into ``DEST`` (a new or empty folder) and leaves the
lab itself untouched. What it leaves out:

- ``notebooks/solutions/[0-9]*.py``, the reference solutions (``notebooks/solutions/__init__.py``
  stays: the notebooks find their own folder through it);
- ``docs/teaching/``, the instructor guide, whose pages answer the discussion questions;
- in every notebook, the code cells that call the solutions (``solutions.``: the exercise checks),
  the markdown cells that read an experiment's outcome ("What the runs showed"), and any later
  code cell that reads what only those cells computed.

What it copies is the lab's tracked files when the lab is a Git clone (``git ls-files``: no
virtual environment, build folder or private output comes along), else every file under the
lab's root but hidden folders, ``__pycache__`` and ``*.egg-info``. It prints, per notebook, how many
cells it removed.

The stripped notebooks are no longer the ones the lab's tests execute: keep the copy out of the
repository.
"""

from __future__ import annotations

import argparse
import ast
import shutil
import subprocess
import sys
from pathlib import Path

#: A code cell that calls the reference solutions holds this text.
SOLUTION_CALL = "solutions."
#: A markdown cell that reads an experiment's outcome holds this text.
ANSWER_HEADING = "What the runs showed"
#: Folders and files of the lab a student copy leaves out, relative to the lab's root.
LEFT_OUT_FOLDERS = (Path("docs") / "teaching",)
SOLUTIONS = Path("notebooks") / "solutions"


def is_answer(cell) -> bool:
    """Whether a notebook cell gives an exercise's answer away (see the module docstring)."""
    if cell.cell_type == "code":
        return SOLUTION_CALL in cell.source
    return cell.cell_type == "markdown" and ANSWER_HEADING in cell.source


def cell_names(source: str) -> tuple[set[str], set[str]]:
    """(names a code cell binds, names it reads): assignments, imports, function and class
    definitions and their arguments bind; IPython's ``%`` and ``!`` lines are skipped."""
    code = "\n".join(line for line in source.splitlines()
                     if not line.lstrip().startswith(("%", "!")))
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set(), set()
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return bound, read


def strip_answers(nb) -> int:
    """Remove the answer cells from a notebook node in place; returns how many it removed.

    A later code cell that reads a name only an answer cell bound (the lab's bookkeeping of a
    checked result, say) goes too, so that the copy runs top to bottom without a NameError.
    """
    kept, orphaned = [], set()   # names bound only by removed cells, so far
    for cell in nb.cells:
        if cell.cell_type != "code":
            if not is_answer(cell):
                kept.append(cell)
            continue
        bound, read = cell_names(cell.source)
        if is_answer(cell) or (read - bound) & orphaned:   # a name it binds first is its own
            orphaned |= bound
        else:
            kept.append(cell)
            orphaned -= bound
    removed = len(nb.cells) - len(kept)
    nb.cells = kept
    return removed


def left_out(relative: Path) -> bool:
    """Whether a file of the lab stays out of the student copy."""
    if any(relative.is_relative_to(folder) for folder in LEFT_OUT_FOLDERS):
        return True
    return (relative.parent == SOLUTIONS and relative.suffix == ".py"
            and relative.name[:1].isdigit())


def lab_files(root: Path) -> list[Path]:
    """The lab's files, relative to ``root``: Git's tracked files in a clone, else a walk."""
    if (root / ".git").exists() and shutil.which("git"):
        listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], check=True,
                                capture_output=True).stdout.decode("utf-8")
        return [Path(name) for name in listed.split("\0") if name and (root / name).is_file()]
    skipped = ("__pycache__",)
    return [path.relative_to(root) for path in sorted(root.rglob("*")) if path.is_file()
            and not any(part.startswith(".") or part in skipped or part.endswith(".egg-info")
                        for part in path.relative_to(root).parts)]


def student_copy(root: Path, dest: Path) -> dict[str, int]:
    """Write the student copy of the lab at ``root`` into ``dest``; returns cells removed per
    notebook. ``dest`` must not exist or be an empty folder (nothing is overwritten)."""
    import nbformat

    root, dest = Path(root).resolve(), Path(dest).resolve()
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ValueError(f"student_copy: DEST {dest} already exists and is not an empty folder; "
                         f"give a new folder (the command never overwrites files)")
    if dest.is_relative_to(root):
        raise ValueError(f"student_copy: DEST {dest} is inside the lab ({root}); give a folder "
                         f"outside it, so that the copy stays out of the repository")
    removed = {}
    for relative in lab_files(root):
        if left_out(relative):
            continue
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if relative.suffix == ".ipynb" and relative.parent == Path("notebooks"):
            nb = nbformat.read(root / relative, as_version=4)
            removed[relative.name] = strip_answers(nb)
            nbformat.write(nb, target)
        else:
            shutil.copy2(root / relative, target)
    return removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m labkit student_copy",
        description="Write a copy of the lab without the exercises' answers (solutions, answer "
                    "cells, the instructor guide) into a new folder.")
    parser.add_argument("dest", help="a new or empty folder outside the lab")
    parser.add_argument("--lab", default=None,
                        help="the lab's root folder (default: the one this labkit belongs to)")
    args = parser.parse_args(argv)
    root = Path(args.lab) if args.lab else Path(__file__).resolve().parents[2]
    if not (root / "notebooks").is_dir():
        parser.error(f"--lab {root} holds no notebooks/ folder; give the lab's root folder")
    try:
        removed = student_copy(root, Path(args.dest))
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    for name, count in removed.items():
        print(f"{name}: removed {count} answer cells")
    print(f"student copy written to {Path(args.dest).resolve()} (without notebooks/solutions/"
          f"[0-9]*.py and docs/teaching/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
