"""docs/conventions.md against a fresh measurement of labkit, TRL and verl, so it cannot rot.

Every row of the page is recomputed by ``tests/conventions_measure.py`` and must print exactly as
on the page (same numbers at the printed precision, same words). The rows that need only labkit
and TRL always run; the verl rows fetch the verl wheel once per machine (``pip download``, no
install) and are skipped, with the reason, when it cannot be fetched.
"""

import json
import sys

import conventions_measure as cm
import pytest

LABKIT_TRL_ROWS = [fn for fn in cm.MEASURES if not cm.needs_verl(fn)]
VERL_ROWS = [fn for fn in cm.MEASURES if cm.needs_verl(fn)]
REGENERATE = f"the page is stale: rerun `{cm.COMMAND}` and commit docs/conventions.md"


@pytest.fixture(scope="module")
def verl():
    try:
        return cm.load_verl()
    except cm.VerlUnavailable as err:
        pytest.skip(f"verl {cm.VERL_VERSION} rows not checked, its wheel is unavailable: {err}")


_MEASURED: dict[str, cm.Convention] = {}


def measured(fn, verl=None) -> cm.Convention:
    """``fn``'s row, measured once per session (the page test reuses the row tests' numbers)."""
    if fn.__name__ not in _MEASURED:
        _MEASURED[fn.__name__] = cm.measure(fn, verl)
    return _MEASURED[fn.__name__]


def page_line(key: str) -> str:
    """The table line of ``key`` in the committed page."""
    prefix = f"| `{key}` |"
    lines = [line for line in cm.DOC.read_text(encoding="utf-8").splitlines()
             if line.startswith(prefix)]
    assert len(lines) == 1, f"docs/conventions.md has {len(lines)} rows for {key}; {REGENERATE}"
    return lines[0]


@pytest.mark.parametrize("fn", LABKIT_TRL_ROWS, ids=lambda fn: fn.__name__)
def test_labkit_trl_row_matches_page(fn):
    row = measured(fn)
    assert cm.table_line(row) == page_line(row.key), REGENERATE


@pytest.mark.parametrize("fn", VERL_ROWS, ids=lambda fn: fn.__name__)
def test_verl_row_matches_page(fn, verl):
    row = measured(fn, verl)
    assert cm.table_line(row) == page_line(row.key), REGENERATE


def test_whole_page_matches(verl):
    rows = [measured(fn, verl) for fn in cm.MEASURES]
    page = cm.render_page(rows, cm.measure_agreements(verl), verl)

    def numbers(text):  # the measured page without its versions line (TRL may be newer here)
        return [line for line in text.splitlines() if not line.startswith("Versions measured")]

    assert numbers(page) == numbers(cm.DOC.read_text(encoding="utf-8")), REGENERATE


def test_in_class_rows_name_what_their_notebook_uses():
    """The page lists a row first because its notebook uses the row's function or field: the
    notebook's code must still hold that name (a row whose notebook dropped it is stale)."""
    marked = [fn for fn in cm.MEASURES if getattr(fn, "in_class", None)]
    assert {fn.in_class[0][:2] for fn in marked} >= {"01", "02", "03", "10"}
    for fn in marked:
        notebook, term = fn.in_class
        cells = json.loads((cm.REPO / "notebooks" / f"{notebook}.ipynb").read_text("utf-8"))["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        assert term in code, f"{fn.__name__}: notebooks/{notebook}.ipynb no longer uses {term!r}"
    rows = cm.class_order([measured(fn) for fn in LABKIT_TRL_ROWS])
    firsts = [row.in_class is not None for row in rows]
    assert firsts == sorted(firsts, reverse=True), "rows met in class come first"


def test_episode_loops_agree_where_the_page_says_so():
    """The episodes the page calls equal under labkit and TRL: same tokens, same loss mask, the
    environment's turn (reply and chat framing) out of the loss, the turn limit alike."""
    lab, trl = cm.scripted_runs()
    for row in (0, 4, len(cm.EPISODE_SCRIPTS) - 1):
        n = int(lab.lengths[row])
        assert lab.completion_ids[row, :n].tolist() == trl["completion_ids"][row]
        assert lab.action_mask[row, :n].tolist() == trl["tool_mask"][row]
    tok, n = cm.tool_tokenizer(), int(lab.lengths[0])
    ids, mask = lab.completion_ids[0, :n].tolist(), lab.action_mask[0, :n].tolist()
    assert ids[mask.index(0) - 1] == tok.eos_token_id  # the policy's end of turn: in the loss
    out = [t for t, m in zip(ids, mask) if m == 0]  # the reply's turn, framing included: out
    assert out.count(tok.convert_tokens_to_ids("<|im_start|>")) == 2 and tok.eos_token_id in out
    assert bool(lab.turn_limit[-1]) and int(lab.tool_calls[-1]) == cm.TURN_LIMIT


def test_trl_constant_group_noise_is_far_above_1e8():
    """The claim the page corrects: TRL's advantage of an all-equal group is not ~1e-8."""
    row = measured(cm.measure_constant_groups_trl)
    noise = cm.sweep_max(lambda r, g, _: cm.trl_advantages(r[:, None], g))
    assert 1e-3 < noise < 1e-2
    assert f"TRL {noise:.3g}" in row.size
    assert cm.sweep_max(lambda r, g, _: cm.group_advantages(r, g)) == 0


def test_loader_leaves_no_stub_behind(verl):
    """verl's code is loaded, and none of the stand-in modules stays importable afterwards."""
    assert "vanilla" in verl.core.POLICY_LOSS_REGISTRY
    assert "grpo" in verl.core.ADV_ESTIMATOR_REGISTRY
    assert not [name for name in sys.modules if name == "verl" or name.startswith("verl.")]
    for name in ("omegaconf", "tensordict"):  # real ones (with a file) may be installed
        assert name not in sys.modules or getattr(sys.modules[name], "__file__", None)


def test_refuses_to_write_without_verl(monkeypatch, tmp_path, capsys):
    def unavailable():
        raise cm.VerlUnavailable("no network (test)")

    page = tmp_path / "conventions.md"
    monkeypatch.setattr(cm, "load_verl", unavailable)
    monkeypatch.setattr(cm, "DOC", page)
    assert cm.main(["--write"]) == 1
    assert not page.exists()
    assert "refusing to build the page without verl" in capsys.readouterr().err


def test_unreadable_wheel_names_the_file(tmp_path):
    wheel = tmp_path / f"verl-{cm.VERL_VERSION}-py3-none-any.whl"
    wheel.write_bytes(b"not a zip")
    with pytest.raises(cm.VerlUnavailable, match="is not a readable verl"):
        cm._extract(wheel)
