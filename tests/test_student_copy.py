"""``python -m labkit student_copy``: the copy a teacher hands out holds no answer, still runs top
to bottom as far as names go, and the command never writes over a file or into the lab."""

import ast

import nbformat
import pytest

from labkit import quotes
from labkit.commands.student_copy import is_answer, main, strip_answers, student_copy

ROOT = quotes.ROOT


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    dest = tmp_path_factory.mktemp("copy") / "grpo-lab"
    return dest, student_copy(ROOT, dest)


def test_the_copy_leaves_out_the_solutions_and_the_guide(copy):
    dest, _ = copy
    assert not (dest / "docs" / "teaching").exists()
    assert [p.name for p in (dest / "notebooks" / "solutions").iterdir()] == ["__init__.py"]
    assert (dest / "labkit" / "__init__.py").is_file() and (dest / "README.md").is_file()
    assert (dest / "data" / "runs").is_dir()


def test_every_notebook_loses_its_answers_and_nothing_else(copy):
    dest, removed = copy
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert sorted(removed) == [p.name for p in notebooks]
    for path in notebooks:
        original = nbformat.read(path, as_version=4)
        stripped = nbformat.read(dest / "notebooks" / path.name, as_version=4)
        answers = sum(is_answer(cell) for cell in original.cells)
        assert answers >= 2, path.name     # every notebook has exercises to strip
        assert not any(is_answer(cell) for cell in stripped.cells), path.name
        assert removed[path.name] == len(original.cells) - len(stripped.cells) >= answers
        kept_ids = [cell.id for cell in stripped.cells]
        assert kept_ids == [cell.id for cell in original.cells if cell.id in kept_ids]


def test_no_kept_cell_reads_a_name_only_a_removed_cell_bound(copy):
    dest, _ = copy
    for path in sorted((dest / "notebooks").glob("*.ipynb")):
        bound = set()
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "code":
                continue
            tree = ast.parse("\n".join(line for line in cell.source.splitlines()
                                       if not line.lstrip().startswith(("%", "!"))))
            for node in ast.walk(tree):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    bound.add(node.id)
            assert "solutions" not in {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                                       and isinstance(n.ctx, ast.Load)} - bound, path.name


def test_a_cell_that_reads_a_removed_result_goes_with_it():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell("y = solutions.answer(x)"),
        nbformat.v4.new_code_cell("record('k', y)"),
        nbformat.v4.new_code_cell("y = 2\nprint(x, y)"),
        nbformat.v4.new_markdown_cell("<details><summary>What the runs showed</summary>up</details>"),
    ])
    assert strip_answers(nb) == 3
    assert [cell.source for cell in nb.cells] == ["x = 1", "y = 2\nprint(x, y)"]


def test_it_refuses_a_folder_with_files_or_one_inside_the_lab(tmp_path, capsys):
    (tmp_path / "mine.txt").write_text("a teacher's file")
    assert main([str(tmp_path), "--lab", str(ROOT)]) == 2
    assert "not an empty folder" in capsys.readouterr().err
    assert (tmp_path / "mine.txt").read_text() == "a teacher's file"
    assert main([str(ROOT / "notebooks" / "copy"), "--lab", str(ROOT)]) == 2
    assert "inside the lab" in capsys.readouterr().err
    assert not (ROOT / "notebooks" / "copy").exists()
