"""labkit.section_times: sections by `##` heading, real kernel timings, one thread per kernel.

The notebooks here are small ones written by the tests (a real kernel executes them), not the
lab's: those take minutes.
"""

import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from labkit import section_times
from labkit.section_times import (
    CellTime,
    execute_timed,
    group_by_section,
    level_two_headings,
    main,
    markdown_report,
    resolve_notebooks,
)

THREADS_CELL = ("import os\nimport torch\nprint(torch.get_num_threads())\n"
                "print(os.environ['OMP_NUM_THREADS'], os.environ['MKL_NUM_THREADS'], "
                "os.environ['LABKIT_THREADS'], os.environ['LABKIT_STATIC'])")


def small_notebook():
    return new_notebook(cells=[
        new_markdown_cell("# A title, level one: still the setup section"),
        new_code_cell(THREADS_CELL),
        new_markdown_cell("## 1. Sleep\n\nIn a fence a heading is code:\n\n```\n## not a section\n```"),
        new_code_cell("import time\ntime.sleep(0.6)"),
        new_markdown_cell("### A subsection stays in section 1"),
        new_code_cell("time.sleep(0.3)"),
        new_markdown_cell("Text, then a heading:\n\n## 2. Busy\n"),
        new_code_cell("sum(i * i for i in range(3_000_000))"),
        new_markdown_cell("## Summary\n\nNo code here."),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                "language": "python"}})


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    path = tmp_path_factory.mktemp("nb") / "01_small.ipynb"
    nbformat.write(small_notebook(), path)
    before = path.read_bytes()
    nb, times, error = execute_timed(path, cell_timeout=120)
    return {"path": path, "before": before, "nb": nb, "times": times, "error": error}


def test_level_two_headings_skip_fences_and_other_levels():
    text = ("# one\n## Two `code` ##\n### three\n##no space\n  ## indented two\n"
            "~~~python\n## in a tilde fence\n~~~\n````\n```\n## inside a longer fence\n````\n## Last")
    assert level_two_headings(text) == ["Two `code`", "indented two", "Last"]


def test_sections_follow_headings_without_a_kernel():
    nb = small_notebook()
    times = [CellTime(1, 2.0, 1.5), CellTime(3, 0.5, 0.4), CellTime(5, 0.25, None)]
    sections = group_by_section(nb, times)
    assert [s["title"] for s in sections] == ["setup", "1. Sleep", "2. Busy", "Summary"]
    assert [s["first_cell"] for s in sections] == [0, 2, 6, 8]
    assert [s["code_cells"] for s in sections] == [1, 2, 1, 0]
    assert [s["timed_cells"] for s in sections] == [1, 2, 0, 0]
    assert sections[1]["wall_s"] == pytest.approx(0.75)
    assert sections[1]["cpu_s"] is None  # one of its cells had no CPU reading
    assert sections[0]["cpu_s"] == pytest.approx(1.5)


def test_a_cell_with_two_headings_opens_two_sections():
    nb = new_notebook(cells=[new_markdown_cell("## A\n\n## B"), new_code_cell("1")])
    sections = group_by_section(nb, [CellTime(1, 1.0, 1.0)])
    assert [(s["title"], s["wall_s"]) for s in sections] == [("A", 0.0), ("B", 1.0)]


def test_thread_variables_reach_the_kernel(executed):
    assert executed["error"] is None
    printed = "".join(o.get("text", "") for o in executed["nb"].cells[1].outputs).split()
    assert printed == ["1", "1", "1", "1", "1"]


def test_every_code_cell_is_timed_and_summed_per_section(executed):
    times = executed["times"]
    assert [t.index for t in times] == [1, 3, 5, 7]
    sections = {s["title"]: s for s in group_by_section(executed["nb"], times)}
    assert list(sections) == ["setup", "1. Sleep", "2. Busy", "Summary"]
    sleep = sections["1. Sleep"]
    assert sleep["timed_cells"] == 2
    assert 0.9 <= sleep["wall_s"] < 30  # two sleeps of 0.6 s and 0.3 s
    assert sleep["cpu_s"] < 0.5 * sleep["wall_s"]  # sleeping costs the kernel no CPU
    busy = sections["2. Busy"]
    assert busy["cpu_s"] > 0.05 and busy["wall_s"] >= busy["cpu_s"] * 0.9
    assert sections["Summary"]["timed_cells"] == 0 and sections["Summary"]["wall_s"] == 0


def test_the_notebook_file_is_not_modified(executed):
    assert executed["path"].read_bytes() == executed["before"]
    assert not list(executed["path"].parent.glob("*.ipynb.*"))


def test_a_failing_cell_is_recorded_with_the_times_before_it(tmp_path):
    path = tmp_path / "broken.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("x = 1"), new_markdown_cell("## Two"),
                                       new_code_cell("raise ValueError('bad input 42')"),
                                       new_code_cell("y = 2")]), path)
    nb, times, error = execute_timed(path, cell_timeout=60)
    assert error == "CellExecutionError in cell 2: ValueError: bad input 42"
    assert [t.index for t in times] == [0, 2]  # the cell after the error never ran
    assert nb.cells[2].outputs[-1].ename == "ValueError" and not nb.cells[3].outputs


def test_a_cell_past_the_timeout_stops_the_notebook(tmp_path):
    path = tmp_path / "slow.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("import time\ntime.sleep(60)"),
                                       new_code_cell("after = 1")]), path)
    _nb, times, error = execute_timed(path, cell_timeout=2)
    assert error.startswith("CellTimeoutError in cell 0: ")
    [slow] = times
    assert slow.index == 0 and 2 <= slow.wall_s < 30


def test_main_writes_json_and_markdown(tmp_path):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    nbformat.write(new_notebook(cells=[new_code_cell("a = 1"), new_markdown_cell("## Only | one"),
                                       new_code_cell("b = a + 1")]), folder / "07_tiny.ipynb")
    out_json, out_md = tmp_path / "times.json", tmp_path / "times.md"
    status = main(["07", "--notebooks-dir", str(folder), "--out-json", str(out_json),
                   "--out-md", str(out_md), "--cell-timeout", "60"])
    assert status == 0
    report = json.loads(out_json.read_text())
    assert report["command"].startswith("python -m labkit.section_times 07 ")
    assert report["machine"]["threads_per_kernel"] == 1
    assert report["machine"]["logical_cores"] >= 1
    [record] = report["notebooks"]
    assert record["notebook"] == "07_tiny.ipynb" and record["status"] == "ok"
    assert [s["title"] for s in record["sections"]] == ["setup", "Only | one"]
    assert record["wall_s"] == pytest.approx(sum(s["wall_s"] for s in record["sections"]))
    text = out_md.read_text()
    assert "| Only \\| one | 1 of 1 |" in text and "## 07_tiny.ipynb" in text
    assert markdown_report(report) == text


def test_save_executed_writes_the_clean_notebooks_with_their_outputs(tmp_path):
    folder, saved = tmp_path / "notebooks", tmp_path / "executed"
    folder.mkdir()
    nbformat.write(new_notebook(cells=[new_code_cell("print(6 * 7)")]), folder / "01_ok.ipynb")
    nbformat.write(new_notebook(cells=[new_code_cell("1 / 0")]), folder / "02_fails.ipynb")
    status = main(["--notebooks-dir", str(folder), "--out-json", str(tmp_path / "t.json"),
                   "--out-md", str(tmp_path / "t.md"), "--cell-timeout", "60",
                   "--save-executed", str(saved)])
    assert status == 1  # the failing notebook
    assert sorted(p.name for p in saved.iterdir()) == ["01_ok.ipynb"]
    [cell] = nbformat.read(saved / "01_ok.ipynb", as_version=4).cells
    assert cell.outputs[0]["text"] == "42\n"
    assert not nbformat.read(folder / "01_ok.ipynb", as_version=4).cells[0].outputs


def test_notebook_names_resolve_or_fail_clearly(tmp_path):
    for stem in ("00_tour", "02_grpo", "02_grpo_extra"):
        (tmp_path / f"{stem}.ipynb").write_text("{}")
    assert resolve_notebooks(["00"], tmp_path) == [tmp_path / "00_tour.ipynb"]
    assert resolve_notebooks(["02_grpo.ipynb"], tmp_path) == [tmp_path / "02_grpo.ipynb"]
    assert len(resolve_notebooks([], tmp_path)) == 3
    with pytest.raises(ValueError, match=r"notebook '02' matches 2 notebooks.*00_tour"):
        resolve_notebooks(["02"], tmp_path)
    with pytest.raises(ValueError, match=r"notebook '05' matches 0"):
        resolve_notebooks(["05"], tmp_path)
    with pytest.raises(ValueError, match="holds no .ipynb"):
        resolve_notebooks([], tmp_path / "missing")


def test_bad_cell_timeout_names_the_flag(capsys):
    with pytest.raises(SystemExit):
        main(["--cell-timeout", "-3"])
    assert "--cell-timeout must be a number of seconds > 0, got '-3'" in capsys.readouterr().err


def test_default_paths_point_into_the_repository():
    assert section_times.NOTEBOOKS_DIR.name == "notebooks"
    assert section_times.DEFAULT_JSON.parts[-3:] == ("docs", "teaching", "section_times.json")


def test_saved_notebooks_drop_widget_state_but_keep_each_outputs_text():
    import nbformat

    from labkit.section_times import WIDGET_VIEW, without_widget_state

    nb = nbformat.v4.new_notebook(metadata={"widgets": {"state": {"m": {}}}})
    cell = nbformat.v4.new_code_cell("bar()")
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        WIDGET_VIEW: {"model_id": "m"}, "text/plain": "grpo: 100%"})]
    nb.cells = [cell]
    out = without_widget_state(nb)
    assert "widgets" not in out.metadata
    assert out.cells[0].outputs[0]["data"] == {"text/plain": "grpo: 100%"}
