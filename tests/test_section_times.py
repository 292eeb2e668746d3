"""labkit.commands.section_times: sections by `##` heading, real kernel timings, one thread per kernel.

The notebooks here are small ones written by the tests (a real kernel executes them), not the
lab's: those take minutes.
"""

import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from labkit.commands import section_times
from labkit.commands.section_times import (
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
                "os.environ['LABKIT_THREADS'], os.environ['LABKIT_STATIC'])\n"
                "print(repr(os.environ.get('CUDA_VISIBLE_DEVICES')), torch.cuda.is_available())")


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


def test_thread_variables_reach_the_kernel_and_a_cpu_kernel_sees_no_gpu(executed):
    assert executed["error"] is None
    printed = "".join(o.get("text", "") for o in executed["nb"].cells[1].outputs).split()
    assert printed == ["1", "1", "1", "1", "1", "''", "False"]


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
    [record] = report["notebooks"]
    assert record["command"].startswith("python -m labkit section_times 07 ")
    assert record["machine"]["threads_per_kernel"] == 1
    assert record["machine"]["logical_cores"] >= 1
    assert record["notebook"] == "07_tiny.ipynb" and record["status"] == "ok"
    assert record["device"] == "cpu" and "gpu" not in record["machine"]
    assert [s["title"] for s in record["sections"]] == ["setup", "Only | one"]
    assert record["wall_s"] == pytest.approx(sum(s["wall_s"] for s in record["sections"]))
    text = out_md.read_text()
    assert "| Only \\| one | 1 of 1 |" in text and "## 07_tiny.ipynb" in text
    assert markdown_report(report) == text


def test_a_teachers_run_writes_its_own_report_and_leaves_the_repository_alone(tmp_path,
                                                                             monkeypatch):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    nbformat.write(new_notebook(cells=[new_code_cell("a = 1")]), folder / "99_quick.ipynb")
    pages = {p: p.read_text() for p in (*section_times.SUMMARY_PAGES, section_times.DEFAULT_JSON,
                                        section_times.DEFAULT_MARKDOWN)}
    monkeypatch.chdir(tmp_path)
    assert main(["99", "--notebooks-dir", str(folder), "--cell-timeout", "60"]) == 0
    assert json.loads((tmp_path / "section_times.json").read_text())["notebooks"][0][
        "notebook"] == "99_quick.ipynb"
    assert (tmp_path / "section_times.md").exists()
    assert all(path.read_text() == text for path, text in pages.items())


@pytest.mark.parametrize("argv, message", [
    (["--lab", "--out-json", "x.json"], "--lab writes the lab's own report"),
    (["--save-executed", str(section_times.NOTEBOOKS_DIR)], "add --lab")])
def test_the_labs_report_and_committed_outputs_need_lab(argv, message, capsys):
    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err


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

    from labkit.commands.section_times import WIDGET_VIEW, without_widget_state

    nb = nbformat.v4.new_notebook(metadata={"widgets": {"state": {"m": {}}}})
    cell = nbformat.v4.new_code_cell("bar()")
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        WIDGET_VIEW: {"model_id": "m"}, "text/plain": "grpo: 100%"})]
    nb.cells = [cell]
    out = without_widget_state(nb)
    assert "widgets" not in out.metadata
    assert out.cells[0].outputs[0]["data"] == {"text/plain": "grpo: 100%"}


# ---- a run merges into the report, saves as it goes, and refuses what it cannot do up front ------
def old_format_report(*notebooks):
    """A report as the committed one was written: one machine and command, CPU times only."""
    return {"command": "python -m labkit section_times", "cell_timeout_s": 900,
            "machine": {"cpu": "Old CPU", "logical_cores": 2, "threads_per_kernel": 1,
                        "memory_gib": 8.0, "os": "Linux", "python": "3.11.7", "torch": "2.13.0",
                        "transformers": "5.24.0", "date": "2026-11-26 00:48 UTC",
                        "load_average_before": [1.0, 1.0, 1.0]},
            "notebooks": [{"notebook": name, "status": "ok", "error": None, "wall_s": wall,
                           "cpu_s": wall, "sections": [
                               {"title": "setup", "first_cell": 0, "code_cells": 1,
                                "timed_cells": 1, "wall_s": wall, "cpu_s": wall}],
                           "cells": [{"index": 0, "wall_s": wall, "cpu_s": wall}]}
                          for name, wall in notebooks]}


def folder_with(tmp_path, **cells):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    for stem, source in cells.items():
        nbformat.write(new_notebook(cells=[new_code_cell(source)]), folder / f"{stem}.ipynb")
    return folder


def test_one_notebook_merges_into_the_report_and_keeps_the_others(tmp_path):
    """Timing one notebook used to replace the committed eleven-notebook report with itself."""
    folder = folder_with(tmp_path, **{"01_small": "x = 1"})
    out_json, out_md = tmp_path / "times.json", tmp_path / "times.md"
    out_json.write_text(json.dumps(old_format_report(("00_tour.ipynb", 22.0),
                                                     ("01_small.ipynb", 99.0))))
    status = main(["01", "--notebooks-dir", str(folder), "--out-json", str(out_json),
                   "--out-md", str(out_md), "--cell-timeout", "60"])
    assert status == 0
    report = json.loads(out_json.read_text())
    tour, small = report["notebooks"]
    assert (tour["notebook"], tour["wall_s"], tour["device"]) == ("00_tour.ipynb", 22.0, "cpu")
    assert tour["machine"]["cpu"] == "Old CPU" and tour["command"] == "python -m labkit section_times"
    assert small["notebook"] == "01_small.ipynb" and small["wall_s"] < 99.0
    assert small["machine"]["cpu"] != "Old CPU"
    text = out_md.read_text()
    assert "| 00_tour.ipynb | 1 | 22.0 | 22.0 | unmeasured | unmeasured | ok |" in text
    assert "**cpu**, 00_tour.ipynb: measured with `python -m labkit section_times` on " \
           "2026-11-26 00:48 UTC" in text
    assert markdown_report(report) == text


def test_the_report_is_written_after_each_notebook(tmp_path):
    """The report used to be written at the end only: a failure later lost every time."""
    out_json = tmp_path / "times.json"
    reads_the_report = (f"import json\nrecords = json.load(open({str(out_json)!r}))['notebooks']\n"
                        f"assert [r['notebook'] for r in records] == ['01_first.ipynb']")
    folder = folder_with(tmp_path, **{"01_first": "x = 1", "02_second": reads_the_report})
    status = main(["--notebooks-dir", str(folder), "--out-json", str(out_json),
                   "--out-md", str(tmp_path / "times.md"), "--cell-timeout", "60"])
    records = json.loads(out_json.read_text())["notebooks"]
    assert [(r["notebook"], r["error"]) for r in records] == [("01_first.ipynb", None),
                                                              ("02_second.ipynb", None)]
    assert status == 0


@pytest.mark.parametrize(("argv", "kernelspec", "message"), [
    (["--kernel", "julia-1.9"], "python3",
     r"--kernel 'julia-1.9' is not installed \(installed kernels: .*python3"),
    ([], "ir", (r"notebook 01_small.ipynb asks for kernel 'ir' \(its kernelspec\), which is "
                r"not installed \(installed kernels: .*python3.*\); pass --kernel"))])
def test_a_kernel_that_is_not_installed_is_refused_before_anything_runs(tmp_path, capsys, argv,
                                                                        kernelspec, message):
    """A missing kernel used to stop the run with a raw NoSuchKernel traceback."""
    import re

    folder = tmp_path / "notebooks"
    folder.mkdir()
    nbformat.write(new_notebook(cells=[new_code_cell("1")], metadata={"kernelspec": {
        "name": kernelspec, "display_name": kernelspec, "language": "python"}}),
        folder / "01_small.ipynb")
    out_json, out_md = tmp_path / "t.json", tmp_path / "t.md"
    with pytest.raises(SystemExit) as stopped:
        main(["--notebooks-dir", str(folder), "--out-json", str(out_json), "--out-md",
              str(out_md), *argv])
    assert stopped.value.code == 2
    assert re.search(message, capsys.readouterr().err)
    assert not out_json.exists() and not out_md.exists()


@pytest.mark.parametrize(("flag", "name", "content"), [
    ("--out-json", "grades.json", '{"ada": "A"}'), ("--out-json", "times.json", "not json"),
    ("--out-md", "notes.md", "# My notes\n")])
def test_an_output_file_that_is_not_a_report_is_refused_and_kept(tmp_path, capsys, flag, name,
                                                                 content):
    folder = folder_with(tmp_path, **{"01_small": "x = 1"})
    path = tmp_path / name
    path.write_text(content)
    outputs = {"--out-json": str(tmp_path / "t.json"), "--out-md": str(tmp_path / "t.md"),
               flag: str(path)}
    with pytest.raises(SystemExit):
        main(["--notebooks-dir", str(folder), *[a for pair in outputs.items() for a in pair]])
    assert f"{flag} {path} is not a report of python -m labkit section_times" in \
        capsys.readouterr().err
    assert path.read_text() == content


def test_the_markdown_has_a_column_per_device():
    from labkit.commands.section_times import records_of

    cpu = records_of(old_format_report(("00_tour.ipynb", 20.0), ("01_ppo.ipynb", 180.0)))
    gpu = {**cpu[1], "device": "cuda", "wall_s": 30.0, "cpu_s": 29.0,
           "machine": {**cpu[1]["machine"], "gpu": "NVIDIA H100", "gpu_memory_gib": 79.1,
                       "cuda": "12.8"},
           "sections": [{**cpu[1]["sections"][0], "wall_s": 30.0}]}
    text = markdown_report({"format": 2, "notebooks": [*cpu, gpu]})
    assert "| notebook | code cells run | cpu wall s | cpu CPU s | cuda wall s | cuda CPU s |" in text
    assert "| 00_tour.ipynb | 1 | 20.0 | 20.0 | unmeasured | unmeasured | ok |" in text
    assert "| 01_ppo.ipynb | 1 | 180.0 | 180.0 | 30.0 | 29.0 | ok |" in text
    assert "| setup | 1 of 1 | 180.0 | 30.0 |" in text
    assert "- **cuda**, 01_ppo.ipynb: " in text and "NVIDIA H100 (79.1 GiB, CUDA 12.8)" in text


def test_kernel_env_hides_the_gpus_on_cpu_only():
    from labkit.commands.section_times import kernel_env

    assert kernel_env("cpu")["CUDA_VISIBLE_DEVICES"] == ""
    assert "CUDA_VISIBLE_DEVICES" not in kernel_env("cuda")


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(cuda_available(), reason="this machine has a GPU")
def test_cuda_is_refused_where_torch_has_no_gpu(tmp_path, capsys):
    folder = folder_with(tmp_path, **{"01_small": "x = 1"})
    with pytest.raises(SystemExit):
        main(["--device", "cuda", "--notebooks-dir", str(folder), "--out-json",
              str(tmp_path / "t.json"), "--out-md", str(tmp_path / "t.md")])
    assert "--device cuda: torch.cuda is not available here" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()


@pytest.mark.skipif(not cuda_available(), reason="needs an NVIDIA GPU")
def test_a_cuda_run_records_the_gpu_and_its_kernel_sees_it(tmp_path):
    folder = folder_with(tmp_path, **{"01_small": "import torch\nassert torch.cuda.is_available()"})
    out_json = tmp_path / "t.json"
    assert main(["--device", "cuda", "--notebooks-dir", str(folder), "--out-json",
                 str(out_json), "--out-md", str(tmp_path / "t.md"), "--cell-timeout", "120"]) == 0
    [record] = json.loads(out_json.read_text())["notebooks"]
    assert record["device"] == "cuda" and record["error"] is None
    assert record["machine"]["gpu"]


# ---- the README's and the guide's table come from the report ----------------------------------
def test_the_readme_and_the_guide_show_the_committed_report():
    """Re-timing a notebook without re-rendering the pages fails here, naming the page."""
    table = section_times.summary_table(section_times.load_report(section_times.DEFAULT_JSON))
    for page in section_times.SUMMARY_PAGES:
        text = page.read_text(encoding="utf-8")
        assert section_times.with_summary(text, table, page) == text, (
            f"{page.name}'s notebook times differ from section_times.json: run "
            f"python -m labkit section_times --render")


def test_the_summary_names_each_machine_and_marks_unmeasured_devices():
    records = section_times.load_report(section_times.DEFAULT_JSON)
    table = section_times.summary_table(records)
    assert "one GPU: not measured yet" in table or "beside" in table
    first = records[0]
    assert f"| `{first['notebook']}` | {first['wall_s'] / 60:.1f} |" in table


def test_render_rewrites_only_between_the_markers_and_refuses_a_page_without_them(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"before\n{section_times.SUMMARY_BEGIN}\nold\n{section_times.SUMMARY_END}\n"
                    "after\n", encoding="utf-8")
    records = section_times.load_report(section_times.DEFAULT_JSON)
    section_times.write_summaries(records, pages=[page])
    text = page.read_text(encoding="utf-8")
    assert text.startswith("before\n") and text.endswith(f"{section_times.SUMMARY_END}\nafter\n")
    assert "old" not in text and section_times.summary_table(records) in text
    bare = tmp_path / "bare.md"
    bare.write_text("no markers\n", encoding="utf-8")
    with pytest.raises(ValueError, match="bare.md has no generated notebook-times block"):
        section_times.write_summaries(records, pages=[bare])
    assert bare.read_text(encoding="utf-8") == "no markers\n"
