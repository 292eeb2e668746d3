"""Every number the prose quotes agrees with its recorded source (labkit.quotes)."""

import json

import pytest

from labkit import quotes
from labkit.commands.section_times import save_results
from labkit.runtime import bands
from labkit.runtime.platform_record import IDENTITY, platform_record

#: Files whose timings are all generated (tagged ``times:``): every notebook and notes page but
#: 09's, which quote four one-off measurements (the test machine's 0.5B step, the H100's step
#: times) that no section time holds.
TIMINGS_GENERATED = tuple(f"notebooks/{nb}.ipynb" for nb in (
    "00_tour", "01_ppo", "02_grpo", "03_baselines", "04_dapo", "05_gspo", "06_gfpo_length",
    "07_exploration", "08_rewards_data", "10_agents", "11_async")) + tuple(
    f"docs/teaching/{nb}.md" for nb in (
    "00_tour", "01_ppo", "02_grpo", "03_baselines", "04_dapo", "05_gspo", "06_gfpo_length",
    "07_exploration", "08_rewards_data", "10_agents", "11_async"))


def test_every_quote_matches_its_recorded_value():
    assert quotes.stale_quotes() == []


def test_every_tag_follows_a_number():
    assert quotes.malformed_tags() == []


def test_no_untagged_number_beside_a_tagged_one():
    assert quotes.untagged_numbers() == []


def test_timings_are_generated():
    docs = [(where, text) for where, text in quotes.documents()
            if where.startswith(TIMINGS_GENERATED)]
    assert docs
    assert quotes.untagged_timings(docs) == []


def test_a_stale_quote_is_named_with_its_new_value(tmp_path, monkeypatch):
    _results(tmp_path, monkeypatch, {"live.pass1_after": 0.43125})
    docs = [("notes.md", "pass@1 rose to 47.8%<!--=01:live.pass1_after %--> in 20 steps."),
            ("ok.md", "pass@1 rose to 43.1%<!--=01:live.pass1_after %-->.")]
    [problem] = quotes.stale_quotes(docs)
    assert problem.startswith("notes.md: '47.8%<!--=01:live.pass1_after %-->'")
    assert "recorded value is 43.1" in problem
    missing = [("a.md", "0.5<!--=01:no_such_key--> and 3 s<!--=times:01/42-->")]
    assert [p.split(": ", 2)[2] for p in quotes.stale_quotes(missing)] == [
        "notebooks/results/01_*.json has no key 'no_such_key'",
        "notebook 01 has no section '42.' in section_times.json"]


def test_a_quote_holds_to_the_digits_it_shows():
    [quote] = quotes.quotes_in("0.70<!--=01:k--> ", "x")
    assert quote.holds(0.7049) and quote.holds(0.695) and not quote.holds(0.706)
    [quote] = quotes.quotes_in("2.3 min<!--=times:01/6 min-->", "x")
    assert quote.holds(138) and quote.holds(140.9) and not quote.holds(141.1)


def test_a_retyped_number_beside_a_tagged_one_is_named():
    docs = [("a.md", ("pass@1 went 26.6%<!--=01:a %--> → 43.1%<!--=01:b %--> in 20 steps on "
                      "400 prompts (`G = 16`), and pass@8 0.700 → 0.525<!--=01:c-->. Other: 0.9.")),
            ("b.md", "| 0 | 26.6%<!--=01:a %--> | 31.5 |\n| 1 | 25.0% | 31.2 |")]
    found = quotes.untagged_numbers(docs)
    assert [p.split(":")[0] + ":" + p.split("'")[1] for p in found] == ["a.md:0.700",
                                                                        "b.md:31.5"]


def test_an_untagged_timing_is_named():
    docs = [("a.md", "about 1.5 minutes on a laptop; 2.3 min<!--=times:01/6 min-->; < 1 s")]
    assert [p.split("'")[1] for p in quotes.untagged_timings(docs)] == ["about 1.5 minutes"]


def test_render_rewrites_only_the_timing_quotes(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("Section 6 takes 9.9 min<!--=times:01/6 min--> and reaches "
                    "47.8%<!--=01:live.pass1_after %-->.\n")
    monkeypatch.setattr(quotes, "PAGES", (page,))
    monkeypatch.setattr(quotes, "NOTEBOOKS_DIR", tmp_path)
    minutes = quotes.source_value(quotes.quotes_in("1 min<!--=times:01/6 min-->", "")[0])
    assert quotes.render_times() == [page]
    assert page.read_text() == (f"Section 6 takes {minutes / 60:.1f} min<!--=times:01/6 min--> "
                                "and reaches 47.8%<!--=01:live.pass1_after %-->.\n")


def _results(folder, monkeypatch, values, mode=None):
    (folder / "01_ppo.json").write_text(json.dumps(
        {"written_by": quotes.WRITER, "notebook": "01_ppo", "environment": platform_record(),
         "values": {k: {"value": v, "tolerance": 0.0} for k, v in values.items()}}))
    monkeypatch.setattr(quotes, "RESULTS_DIR", folder)
    if mode is not None:
        monkeypatch.setenv(quotes.MODE_VARIABLE, mode)
        monkeypatch.setenv(quotes.DIR_VARIABLE, str(folder))


def test_record_by_hand_reads_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(quotes.MODE_VARIABLE, raising=False)
    monkeypatch.setenv(quotes.DIR_VARIABLE, str(tmp_path / "absent"))
    record = quotes.recorder("01_ppo")
    assert record("live.pass1_after", 0.5) == 0.5
    assert not (tmp_path / "absent").exists()


def test_record_under_the_notebook_tests_names_the_drift_and_the_quotes(tmp_path, monkeypatch):
    _results(tmp_path, monkeypatch, {"live.pass1_after": 0.478}, mode="check")
    monkeypatch.setattr(quotes, "documents", lambda: [
        ("notebooks/01_ppo.ipynb cell 35", "rose to 47.8%<!--=01:live.pass1_after %-->")])
    record = quotes.recorder("01_ppo")
    assert record("live.pass1_after", 0.4781, tolerance=0.001) == 0.4781
    with pytest.raises(quotes.StaleResult) as caught:
        record("live.pass1_after", 0.43125)
    message = str(caught.value)
    for part in ("live.pass1_after", "0.478", "0.43125", "tolerance 0.0",
                 "notebooks/01_ppo.ipynb cell 35: '47.8%", "new value 43.1"):
        assert part in message
    with pytest.raises(quotes.StaleResult, match="no recorded value"):
        record("live.unknown", 1.0)


def test_record_writes_its_own_file_and_refuses_another(tmp_path, monkeypatch):
    monkeypatch.setenv(quotes.MODE_VARIABLE, "write")
    monkeypatch.setenv(quotes.DIR_VARIABLE, str(tmp_path))
    record = quotes.recorder("01_ppo")
    record("a", 1)
    record("b", 2.5, tolerance=0.1)
    assert quotes.load_results("01_ppo", tmp_path) == {"a": {"value": 1.0, "tolerance": 0.0},
                                                       "b": {"value": 2.5, "tolerance": 0.1}}
    quotes.recorder("01_ppo")("c", 3)  # a re-run of the notebook starts the file afresh
    assert list(quotes.load_results("01_ppo", tmp_path)) == ["c"]
    (tmp_path / "02_grpo.json").write_text('{"mine": true}')
    with pytest.raises(ValueError, match="not written by labkit.quotes"):
        quotes.recorder("02_grpo")
    assert (tmp_path / "02_grpo.json").read_text() == '{"mine": true}'


@pytest.mark.parametrize("call, fragment", [
    (lambda r: r("k", float("nan")), "must be finite, got nan"),
    (lambda r: r("k", "0.5"), "must be a real number, got str '0.5'"),
    (lambda r: r("k", True), "must be a real number, got bool"),
    (lambda r: r("a key", 1.0), "key must be letters"),
    (lambda r: r("k", 1.0, tolerance=-1), "tolerance must be a number >= 0"),
])
def test_record_refuses_bad_input(call, fragment, monkeypatch):
    monkeypatch.delenv(quotes.MODE_VARIABLE, raising=False)
    with pytest.raises((TypeError, ValueError), match=fragment.replace("(", r"\(")):
        call(quotes.recorder("01_ppo"))


def test_recorder_refuses_a_bad_mode_or_name(monkeypatch):
    monkeypatch.setenv(quotes.MODE_VARIABLE, "yes")
    with pytest.raises(ValueError, match="LABKIT_RESULTS='yes': allowed values"):
        quotes.recorder("01_ppo")
    monkeypatch.setenv(quotes.MODE_VARIABLE, "write")
    monkeypatch.delenv(quotes.DIR_VARIABLE, raising=False)
    with pytest.raises(ValueError, match="needs LABKIT_RESULTS_DIR"):
        quotes.recorder("01_ppo")
    with pytest.raises(ValueError, match="notebook's stem"):
        quotes.recorder("ppo")


def test_section_times_saves_results_beside_the_notebooks_and_refuses_a_foreign_file(tmp_path):
    written, saved = tmp_path / "run", tmp_path / "notebooks" / "results"
    written.mkdir()
    (written / "01_ppo.json").write_text(json.dumps({"written_by": quotes.WRITER, "values": {}}))
    save_results("01_ppo", written, saved)
    assert quotes.load_results("01_ppo", saved) == {}
    (saved / "04_dapo.json").write_text("{}")
    (written / "04_dapo.json").write_text(json.dumps({"written_by": quotes.WRITER, "values": {}}))
    with pytest.raises(ValueError, match="not written by"):
        save_results("04_dapo", written, saved)
    assert (saved / "04_dapo.json").read_text() == "{}"


def test_a_timing_tag_adds_up_the_sections_it_names():
    times = {"02": {"cpu_s": 90.0, "wall_s": 95.0,
                    "sections": [{"title": "setup", "cpu_s": 3.0, "wall_s": 4.0},
                                 {"title": "1. The objective", "cpu_s": 5.0, "wall_s": 6.0},
                                 {"title": "2. Groups", "cpu_s": 7.0, "wall_s": 9.0}]},
             "00": {"cpu_s": 21.0, "wall_s": 22.0, "sections": []}}
    block = quotes.quotes_in("12 s<!--=times:02/1/cpu+02/2/cpu-->", "page")[0]
    assert quotes.source_value(block, times=times) == 12.0 and block.holds(12.0)
    mixed = quotes.quotes_in("37 s<!--=times:00+02/setup+02/1/cpu-->", "page")[0]
    assert quotes.source_value(mixed, times=times) == 22.0 + 4.0 + 5.0
    missing = quotes.quotes_in("1 s<!--=times:02/1+02/9-->", "page")[0]
    assert "no section '9.'" in quotes.source_value(missing, times=times)


# --- how far each recorded value travels (labkit.runtime.bands) ---------------------------------

def test_every_result_record_names_its_platform():
    for path in sorted(quotes.RESULTS_DIR.glob("[0-9][0-9]_*.json")):
        environment = json.loads(path.read_text(encoding="utf-8"))["environment"]
        missing = [field for field in IDENTITY if field not in environment]
        assert not missing, f"{path.name} does not record {missing}"
        assert environment["cpu_model"], f"{path.name} names no CPU"


def test_every_recorded_value_has_a_band_measured_for_it():
    every = quotes.all_bands()
    problems = []
    for notebook, values in quotes.all_results().items():
        for key, entry in values.items():
            band = bands.band_entry(every.get(notebook, {}), key, entry["value"])
            if isinstance(band, str):
                problems.append(f"{notebook}: {band}")
            elif not band.contains(entry["value"]):
                problems.append(f"{notebook}: {key}'s band does not hold its own value")
    assert not problems, (f"{len(problems)} values without a current band (python -m labkit "
                          f"bands measure NN): {problems[:20]}")


def test_the_committed_bands_are_what_their_measurements_give(tmp_path):
    import shutil

    from labkit.commands import bands as command

    copy = tmp_path / "bands"
    shutil.copytree(quotes.RESULTS_DIR / quotes.BANDS_FOLDER, copy)
    command.build(quotes.RESULTS_DIR, copy)
    for path in sorted(copy.glob("*.json")):
        committed = quotes.RESULTS_DIR / quotes.BANDS_FOLDER / path.name
        assert json.loads(path.read_text()) == json.loads(committed.read_text()), (
            f"{path.name} is not what python -m labkit bands build makes of its measurements")


def test_every_quoted_run_outcome_carries_its_band():
    assert quotes.unbanded_quotes() == []
