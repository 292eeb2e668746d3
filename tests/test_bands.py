"""Portable bands: how far a recorded value travels to another CPU, kernel path or seed
(labkit.runtime.bands, labkit.commands.bands, the check in labkit.quotes)."""

import json
import math

import pytest

from labkit import quotes
from labkit.commands import bands as command
from labkit.runtime import bands
from labkit.runtime.platform_record import (
    IDENTITY,
    describe,
    platform_differences,
    platform_record,
    same_platform,
)
from labkit.runtime.seeds import SEED_OFFSET_VARIABLE, seed_offset, shifted_seed

# --- the rule -------------------------------------------------------------------------------

def _t_cdf(t: float, nu: int, steps: int = 20000) -> float:
    """Student's t CDF by Simpson's rule on its density (independent of the table)."""
    density = lambda x: (math.gamma((nu + 1) / 2) / (math.sqrt(nu * math.pi) * math.gamma(nu / 2))
                         * (1 + x * x / nu) ** (-(nu + 1) / 2))
    h = t / steps
    total = density(0) + density(t) + sum((4 if i % 2 else 2) * density(i * h)
                                          for i in range(1, steps))
    return 0.5 + total * h / 3


@pytest.mark.parametrize("nu", [2, 3, 4, 6, 10, 30])
def test_the_t_table_is_the_9995_quantile(nu):
    assert _t_cdf(bands.T_9995[nu - 1], nu) == pytest.approx(0.9995, abs=2e-6)


def test_a_value_nothing_moved_is_exact_and_checked_to_the_floor():
    band = bands.band_of(0.5, {"default": 0.5}, [], floor=1e-4)
    assert (band.kind, band.low, band.high) == ("exact", 0.5 - 5e-5, 0.5 + 5e-5)


def test_a_last_digit_move_is_float_and_its_band_is_ten_moves_wide():
    band = bands.band_of(1.0, {"default": 1.0 + 3e-7, "compatible": 1.0 - 1e-7}, [],
                         floor=1e-6)
    assert band.kind == "float"
    assert band.low == pytest.approx(1 - 3e-6) and band.high == pytest.approx(1 + 3e-6)
    assert not band.contains(1 + 4e-6)


@pytest.mark.parametrize("kernels, seeds", [({"default": 0.58}, []),  # a kernel path diverged
                                            ({"default": 0.5}, [0.5, 0.55, 0.6])])  # seeds
def test_an_outcome_another_trajectory_moves_is_a_run(kernels, seeds):
    assert bands.kind_of(0.5, kernels, seeds) == "run"


def test_a_runs_band_is_a_prediction_interval_around_every_outcome():
    value, kernels, seeds = 0.566, {"default": 0.566, "compatible": 0.584}, [0.566, 0.547, 0.6]
    samples = bands.run_samples(value, kernels, seeds)
    assert samples == [0.566, 0.584, 0.547, 0.6]   # seed 0 is the lab's run: counted once
    mean, sd = sum(samples) / 4, math.sqrt(sum((x - sum(samples) / 4) ** 2 for x in samples) / 3)
    band = bands.band_of(value, kernels, seeds, floor=1e-6)
    half = bands.T_9995[2] * sd * math.sqrt(1 + 1 / 4)
    assert band.low == pytest.approx(mean - half) and band.high == pytest.approx(mean + half)
    assert all(band.contains(x) for x in samples)


def test_the_floor_is_ten_times_the_largest_float_move_of_any_notebook():
    measured = [(1.0, {"a": 1.0 + 2e-7}, []), (2.0, {"a": 2.0}, []),
                (0.5, {"a": 0.6}, [])]  # a run: not float noise
    assert bands.float_floor(measured) == pytest.approx(2e-6, rel=1e-6)
    assert bands.float_floor([]) == bands.FLOAT_FLOOR


def test_a_live_value_finds_its_seeds_pass8_as_passk():
    values = {"live.pass8_after": {"value": 0.8}, "seeds.s0.passk_after": {"value": 0.8},
              "seeds.s1.passk_after": {"value": 0.9}, "seeds.gain_max": {"value": 1.0},
              "seeds.s1.pass1_after": {"value": 0.5}}
    assert bands.seed_values("live.pass8_after", values) == [0.8, 0.9]
    assert bands.seed_values("ref.pass8_after", values) == []


@pytest.mark.parametrize("entry, why", [
    (None, "no band is recorded"),
    ({"kind": "run", "value": 0.5, "low": "a", "high": 1}, "malformed"),
    ({"kind": "guess", "value": 0.5, "low": 0, "high": 1}, "malformed"),
    ({"kind": "run", "value": 0.5, "low": float("nan"), "high": 1}, "malformed"),
    ({"kind": "run", "value": 0.4, "low": 0, "high": 1}, "measured for 0.4, not the committed"),
])
def test_a_band_that_does_not_apply_says_why(entry, why):
    data = {"bands": {} if entry is None else {"k": entry}}
    assert why in bands.band_entry(data, "k", 0.5)


# --- measuring and building ---------------------------------------------------------------------

def _committed(folder, values, environment=None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "02_grpo.json").write_text(json.dumps(
        {"written_by": quotes.WRITER, "notebook": "02_grpo", "environment": environment,
         "values": {k: {"value": v, "tolerance": 0.0} for k, v in values.items()}}))


def _measured(values, **variables):
    return {"environment": {"variables": variables},
            "values": {k: {"value": v, "tolerance": 0.0} for k, v in values.items()}}


def test_build_keeps_every_measurement_beside_the_band_it_gives(tmp_path):
    results, folder = tmp_path / "results", tmp_path / "results" / "bands"
    values = {"live.pass1_after": 0.566, "ref.end": 0.351, "fork.p": 0.3495426}
    _committed(results, values)
    for name, measured in (("default", {"live.pass1_after": 0.584, "ref.end": 0.351,
                                        "fork.p": 0.3495418}),
                           ("seed1000", {"live.pass1_after": 0.55, "ref.end": 0.351,
                                         "fork.p": 0.3495426})):
        command.store_measurement("02_grpo", name, _measured(measured), committed=json.loads(
            (results / "02_grpo.json").read_text())["values"], folder=folder)
    built = command.build(results, folder)["02_grpo"]
    kinds = {k: e["kind"] for k, e in built["bands"].items()}
    assert kinds == {"live.pass1_after": "run", "ref.end": "exact", "fork.p": "float"}
    entry = built["bands"]["live.pass1_after"]
    assert entry["measured"] == {"default": 0.584, "seed1000": 0.55}
    assert entry["low"] < 0.55 and entry["high"] > 0.584
    assert built["floor"] == pytest.approx(10 * (0.3495426 - 0.3495418) / 0.3495426)


def test_a_changed_committed_value_drops_its_measurements(tmp_path):
    results, folder = tmp_path / "results", tmp_path / "results" / "bands"
    _committed(results, {"k": 1.0})
    command.store_measurement("02_grpo", "default", _measured({"k": 1.5}),
                              {"k": {"value": 1.0}}, folder)
    _committed(results, {"k": 2.0})   # the notebook was re-executed and the value changed
    built = command.build(results, folder)["02_grpo"]
    assert built["bands"]["k"] == {"value": 2.0, "measured": {}}
    assert "no band is recorded" not in bands.band_entry(built, "k", 2.0)  # none to apply
    assert isinstance(bands.band_entry(built, "k", 2.0), str)


def test_seed_runs_read_each_seed_path_beside_the_recorded_value():
    data = {"paths": {"default": {"variables": {"ATEN_CPU_CAPABILITY": "default"}},
                      "seed2000": {"variables": {"LABKIT_SEED_OFFSET": "2000"}},
                      "seed1000": {"variables": {"LABKIT_SEED_OFFSET": "1000"}}},
            "bands": {"a": {"value": 0.5, "measured": {"default": 0.5, "seed1000": 0.4,
                                                       "seed2000": 0.7}},
                      "b": {"value": 1.0, "measured": {"seed2000": 2.0}}}}
    runs = bands.seed_runs(data, ["a", "b"])
    assert list(runs) == ["recorded", "seed1000", "seed2000"]  # kernel paths are no seeds
    assert runs["recorded"] == {"a": 0.5, "b": 1.0}
    assert runs["seed1000"] == {"a": 0.4} and runs["seed2000"] == {"a": 0.7, "b": 2.0}


def test_a_bands_file_the_lab_did_not_write_is_refused(tmp_path):
    (tmp_path / "02_grpo.json").write_text('{"mine": true}')
    with pytest.raises(ValueError, match="not written by labkit.bands"):
        command.store_measurement("02_grpo", "default", _measured({}), {}, tmp_path)
    assert (tmp_path / "02_grpo.json").read_text() == '{"mine": true}'
    (tmp_path / "03_baselines.json").write_text("{not json")
    with pytest.raises(ValueError, match="cannot be read as a bands file"):
        bands.load_bands("03_baselines", tmp_path)


# --- the check in the notebook tests ---------------------------------------------------------

def _band_file(folder, key, kind, value, low, high):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "02_grpo.json").write_text(json.dumps(
        {"written_by": bands.WRITER, "notebook": "02_grpo", "paths": {}, "floor": 1e-6,
         "bands": {key: {"kind": kind, "value": value, "low": low, "high": high}}}))


@pytest.fixture
def checking(tmp_path, monkeypatch):
    monkeypatch.setenv(quotes.MODE_VARIABLE, "check")
    monkeypatch.setenv(quotes.DIR_VARIABLE, str(tmp_path))
    monkeypatch.setenv(quotes.LOG_VARIABLE, str(tmp_path))
    monkeypatch.setattr(quotes, "documents", lambda: [
        ("notebooks/02_grpo.ipynb cell 40", "rose to 56.6%<!--=02:live.pass1_after %-->")])
    return tmp_path


def test_on_the_recording_platform_the_check_is_exact(checking):
    _committed(checking, {"live.pass1_after": 0.565625}, environment=platform_record())
    _band_file(checking / "bands", "live.pass1_after", "run", 0.565625, 0.4, 0.7)
    record = quotes.recorder("02_grpo")
    record("live.pass1_after", 0.565625)
    with pytest.raises(quotes.StaleResult, match="more than its tolerance 0.0"):
        record("live.pass1_after", 0.584375)   # inside the band, but this is the lab's machine
    assert "1 recorded values checked" not in quotes.check_summary(checking)
    assert "exactly, on the platform that recorded them" in quotes.check_summary(checking)


@pytest.mark.parametrize("environment", [None, "AMD", {"torch": "2.13.0+cpu"},
                                         {**platform_record(), "cpu_model": "Intel Xeon"}])
def test_elsewhere_a_value_is_checked_within_its_band(checking, environment):
    """Another CPU, an older results file without the platform fields, or a malformed one: each
    is read with the band check; none crashes, none passes outside the band."""
    _committed(checking, {"live.pass1_after": 0.565625}, environment=environment)
    _band_file(checking / "bands", "live.pass1_after", "run", 0.565625, 0.45, 0.68)
    record = quotes.recorder("02_grpo")
    record("live.pass1_after", 0.584375)   # within the band: passes
    record("live.pass1_after", 0.565625)   # the lab's digits, repeated
    with pytest.raises(quotes.StaleResult) as caught:
        record("live.pass1_after", 0.3)
    message = str(caught.value)
    for part in ("live.pass1_after", "outside its run band [0.45, 0.68]", ("is not the one that "
                 "recorded it"), "notebooks/02_grpo.ipynb cell 40: '56.6%", "new value 30.0"):
        assert part in message
    summary = quotes.check_summary(checking)
    assert "3 recorded values checked in 1 notebooks" in summary
    assert "2 within their portable bands" in summary
    assert "1 exactly, on another platform (their digits repeated)" in summary


def test_elsewhere_a_value_without_a_current_band_fails_and_says_how_to_measure(checking):
    _committed(checking, {"live.pass1_after": 0.565625}, environment={"torch": "2.13.0+cpu"})
    record = quotes.recorder("02_grpo")
    with pytest.raises(quotes.StaleResult, match="no band is recorded for live.pass1_after.*"
                                                 "python -m labkit bands measure 02"):
        record("live.pass1_after", 0.584375)
    _band_file(checking / "bands", "live.pass1_after", "run", 0.5, 0.45, 0.68)   # stale
    with pytest.raises(quotes.StaleResult, match="measured for 0.5, not the committed"):
        record("live.pass1_after", 0.584375)
    (checking / "bands" / "02_grpo.json").write_text("[]")
    with pytest.raises(quotes.StaleResult, match="not written by labkit.bands"):
        record("live.pass1_after", 0.584375)
    assert "with no band to check them against (failed)" in quotes.check_summary(checking)


# --- band edges in the prose ------------------------------------------------------------------

def test_a_band_edge_rounds_outwards_and_holds_at_its_digits():
    low, high = quotes.quotes_in("45<!--=02:k low %--> to 68%<!--=02:k high %-->", "x")
    assert (low.edge, high.edge) == ("low", "high")
    assert low.expected(0.4539) == "45" and high.expected(0.6712) == "68"
    assert low.holds(0.4539) and not low.holds(0.4439) and high.holds(0.6712)
    assert quotes.quotes_in("0.51<!--=02:k low-->", "x")[0].expected(0.5149) == "0.51"


def test_a_runs_quote_without_its_band_is_named(monkeypatch):
    monkeypatch.setattr(quotes, "all_bands", lambda: {"02": {"bands": {
        "run": {"kind": "run"}, "float": {"kind": "float"}}}})
    docs = [("a.md", "It reached 56.6%<!--=02:run %-->. The log-prob is -0.287<!--=02:float-->."),
            ("b.md", ("It reached 56.6%<!--=02:run %--> (45<!--=02:run low %--> to "
                     "68%<!--=02:run high %--> on other machines and seeds)."))]
    [problem] = quotes.unbanded_quotes(docs)
    assert problem.startswith("a.md: '56.6%<!--=02:run %-->' quotes a run's outcome")


def test_render_writes_the_band_edges_and_nothing_else(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("56.6%<!--=02:k %--> here, 1<!--=02:k low %--> to 2%<!--=02:k high %-->.\n")
    monkeypatch.setattr(quotes, "PAGES", (page,))
    monkeypatch.setattr(quotes, "NOTEBOOKS_DIR", tmp_path)
    monkeypatch.setattr(quotes, "all_results", lambda: {"02": {"k": {"value": 0.566}}})
    monkeypatch.setattr(quotes, "all_bands", lambda: {"02": {"bands": {"k": {
        "kind": "run", "value": 0.566, "low": 0.4539, "high": 0.6712}}}})
    assert quotes.render_bands() == [page]
    assert page.read_text() == ("56.6%<!--=02:k %--> here, 45<!--=02:k low %--> to "
                                "68%<!--=02:k high %-->.\n")


# --- the platform and the seed offset -----------------------------------------------------------

def test_a_platform_record_names_the_cpu_its_kernels_and_the_variables(monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    record = platform_record()
    assert set(IDENTITY) <= set(record)
    assert record["variables"] == {"ATEN_CPU_CAPABILITY": "default"}
    # torch reads the variable when it loads: this process keeps the capability it started with
    assert f"torch kernels {record['cpu_capability']} (ATEN_CPU_CAPABILITY=default)" in describe(
        record)
    assert same_platform(record, dict(record, date="another day", torch_threads=7))
    assert platform_differences({k: v for k, v in record.items() if k != "cpu_model"},
                                record) == ["cpu_model: not recorded"]
    assert platform_differences(None, record) == ["no platform record (found NoneType)"]


def test_the_seed_offset_shifts_every_training_seed_and_refuses_nonsense(monkeypatch):
    monkeypatch.delenv(SEED_OFFSET_VARIABLE, raising=False)
    assert (seed_offset(), shifted_seed(7)) == (0, 7)
    monkeypatch.setenv(SEED_OFFSET_VARIABLE, "1000")
    assert shifted_seed(7) == 1007
    assert platform_record()["variables"] == {SEED_OFFSET_VARIABLE: "1000"}
    for bad in ("-1", "one"):
        monkeypatch.setenv(SEED_OFFSET_VARIABLE, bad)
        with pytest.raises(ValueError, match=f"LABKIT_SEED_OFFSET='{bad}': allowed values"):
            seed_offset()


def test_the_trainer_trains_under_the_shifted_seed(monkeypatch, random_tiny):
    from labkit.config import preset
    from labkit.trainer import Trainer

    model, tokenizer, rows = random_tiny
    monkeypatch.setenv(SEED_OFFSET_VARIABLE, "1000")
    trainer = Trainer(preset("grpo", seed=3, max_steps=1, device="cpu"), model=model,
                      tokenizer=tokenizer, train_dataset=rows)
    assert trainer.config.seed == 1003


@pytest.mark.parametrize("samples, edges", [([0.2, 0.9, 0.5], (0.0, 1.0)),
                                            ([3.0, 0.5, 12.0], (0.0, math.inf)),
                                            ([-11.2, -6.8], (-math.inf, 0.0)),
                                            ([-0.1, 0.3], (-math.inf, math.inf))])
def test_a_runs_band_stays_in_the_range_its_outcomes_live_in(samples, edges):
    assert bands.domain(samples) == edges
    band = bands.band_of(0.017, {}, [0.019, 0.289, 0.233, 0.309, 0.309], floor=1e-6)
    assert (band.low, band.high) == (0.0, 1.0)   # a share: the interval's -0.75 and 1.09 cut
