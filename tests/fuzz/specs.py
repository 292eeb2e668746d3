"""Surface 1: reference-run specs (``load_spec``, ``reward_funcs``, ``python -m
labkit.commands.reference_runs``): every key and type, paths that are not JSON files, JSON that is not a
spec."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fuzz.harness import Case
from fuzz.scratch import scratch, write
from labkit.commands import reference_runs
from labkit.tasks import data_dir

SURFACE = 1
RUNS = data_dir() / "runs"
TINY_RUN = {"max_steps": 1, "prompts_per_step": 1, "num_generations": 2,
            "max_completion_length": 4, "eval_every": 0}


def _load(text: str | bytes, name: str = "spec.json"):
    path = write(name, text)
    return lambda: reference_runs.load_spec(path)


def _spec(**spec) -> str:
    return json.dumps({"preset": "grpo", **spec})


def _rewards(names):
    spec = {"preset": "grpo", "reward_funcs": names}
    path = write("spec.json", json.dumps(spec))
    return lambda: reference_runs.reward_funcs(reference_runs.load_spec(path), path)


def _sparse(size: int):
    """A ``size``-byte file of NUL bytes that takes no disk space (sparse)."""
    path = scratch("huge") / "huge.json"
    with path.open("wb") as f:
        f.truncate(size)
    return path


def _huge_valid(size: int):
    path = scratch("huge-valid") / "spec.json"
    with path.open("w", encoding="utf-8") as f:
        f.write('{"preset": "grpo", "about": "')
        chunk = "x" * (1 << 20)
        for _ in range(size >> 20):
            f.write(chunk)
        f.write('"}')
    return path


def _symlink(target: Path, name: str = "link.json") -> Path:
    link = scratch("link") / name
    os.symlink(target, link, target_is_directory=target.is_dir())
    return link


def _has_seeds(expected):
    def check(spec):
        assert spec["seeds"] == expected, f"seeds {spec['seeds']} != {expected}"
    return check


def cases() -> list[Case]:
    c = []

    def refuse(name, call, *fragments, errors=(ValueError, TypeError)):
        c.append(Case(SURFACE, name, call, tuple(fragments), errors=errors))

    def accept(name, call, check=None):
        c.append(Case(SURFACE, name, call, None, check=check))

    # preset
    refuse("preset-unknown", _load(_spec(preset="bogus")), "preset", "'bogus'")
    refuse("preset-number", _load('{"preset": 3}'), "preset", "3")
    refuse("preset-list", _load('{"preset": ["grpo"]}'), "preset", "['grpo']")
    refuse("preset-null", _load('{"preset": null}'), "preset", "None")
    refuse("preset-missing", _load('{"overrides": {}}'), "preset")
    refuse("preset-code", _load(_spec(preset="__import__('os').getcwd()")), "preset",
           "__import__")
    # overrides
    for label, value in (("list", ["max_steps"]), ("string", "max_steps=3"), ("number", 3),
                         ("null", None), ("true", True)):
        refuse(f"overrides-{label}", _load(_spec(overrides=value)), "overrides", repr(value))
    for label, overrides, fragment in (
            ("string-for-float", {"learning_rate": "fast"}, "'fast'"),
            ("bool-for-int", {"max_steps": True}, "True"),
            ("negative-size", {"max_steps": -5}, "-5"),
            ("zero-generations", {"num_generations": 0}, "0"),
            ("float-for-int", {"prompts_per_step": 2.5}, "2.5"),
            ("object-for-int", {"max_steps": {"a": 1}}, "{'a': 1}"),
            ("unknown-choice", {"loss_type": "nope"}, "'nope'"),
            ("list-for-tuple", {"reward_weights": "abc"}, "'abc'")):
        name = next(iter(overrides))
        refuse(f"override-{label}", _load(_spec(overrides=overrides)), name, fragment)
    refuse("override-unknown-field", _load(_spec(overrides={"lerning_rate": 1e-3})),
           "lerning_rate")
    refuse("override-output-dir", _load(_spec(overrides={"output_dir": "/tmp/x"})), "output_dir")
    refuse("override-seed", _load(_spec(overrides={"seed": 3})), "seed", "'seeds'")
    refuse("override-nan", _load('{"preset": "grpo", "overrides": {"learning_rate": NaN}}'),
           "NaN")
    refuse("override-infinity",
           _load('{"preset": "grpo", "overrides": {"temperature": Infinity}}'), "Infinity")
    refuse("override-minus-infinity",
           _load('{"preset": "grpo", "overrides": {"beta": -Infinity}}'), "-Infinity")
    # seeds
    for label, seeds, fragment in (
            ("huge", [2**70], str(2**70)), ("past-64-bits", [2**64], str(2**64)),
            ("negative", [-1], "-1"), ("float", [1.5], "1.5"), ("integral-float", [1.0], "1.0"),
            ("bool", [True], "True"), ("duplicates", [0, 1, 0], "[0, 1, 0]"),
            ("number", 3, "3"), ("string", "012", "'012'"), ("empty", [], "[]"),
            ("null", None, "None"), ("nested", [[0]], "[0]"), ("object", {"a": 0}, "{'a': 0}")):
        refuse(f"seeds-{label}", _load(_spec(seeds=seeds)), "seeds", fragment)
    refuse("seeds-nan", _load('{"preset": "grpo", "seeds": [NaN]}'), "NaN")
    accept("seeds-default", _load(_spec()), _has_seeds([0]))
    accept("seeds-three", _load(_spec(seeds=[0, 1, 2])), _has_seeds([0, 1, 2]))
    # data and eval_data
    for key in ("data", "eval_data"):
        for label, cells, fragments in (
                ("unknown-family", {"families": ["add", "nope"]}, ("families", "'nope'")),
                ("unknown-difficulty", {"difficulties": [9]}, ("difficulties", "9")),
                ("string-difficulty", {"difficulties": ["2"]}, ("difficulties", "'2'")),
                ("bool-difficulty", {"difficulties": [True]}, ("difficulties", "True")),
                ("float-difficulty", {"difficulties": [2.5]}, ("difficulties", "2.5")),
                ("empty-families", {"families": []}, ("families", "[]")),
                ("unknown-key", {"family": ["add"]}, ("'family'",)),
                ("number-families", {"families": 3}, ("families", "3")),
                ("list", [["add"]], ("[['add']]",)),
                ("string", "add", ("'add'",)),
                ("null", None, ("None",))):
            refuse(f"{key}-{label}", _load(_spec(**{key: cells})), key, *fragments)
    accept("eval-data-whole-split", _load(_spec(data={"families": ["add"]}, eval_data={})))
    # reward_funcs: keys of REWARD_REGISTRY only, nothing imported
    for label, names in (("import-path", ["labkit.rewards.accuracy_reward"]),
                         ("module-colon", ["os:system"]), ("dunder", ["__import__"]),
                         ("upper-case", ["ACCURACY"]), ("trailing-space", ["accuracy "]),
                         ("empty-name", [""]), ("one-bad", ["accuracy", "os.system"])):
        bad = next(n for n in names if n != "accuracy")
        refuse(f"reward-funcs-{label}", _rewards(names), "reward_funcs", repr(bad),
               "answer_anywhere")
    for label, names in (("number", [3]), ("string", "accuracy"), ("empty", []),
                         ("object", {"name": "accuracy"}), ("nested", [["accuracy"]])):
        refuse(f"reward-funcs-{label}", _rewards(names), "reward_funcs", repr(names))
    accept("reward-funcs-named", _rewards(["accuracy", "digit_credit"]),
           lambda funcs: _check_len(funcs, 2))
    accept("reward-funcs-null-is-default", _rewards(None), lambda funcs: _check_is_none(funcs))
    # other keys
    refuse("about-number", _load(_spec(about=3)), "about", "3")
    refuse("unknown-key", _load(_spec(sedes=[1])), "sedes")
    refuse("duplicate-key", _load('{"preset": "grpo", "preset": "dapo"}'), "preset", "twice")
    # not a spec object
    for label, text in (("list", "[1, 2]"), ("number", "3"), ("string", '"grpo"'),
                        ("null", "null"), ("empty-file", ""), ("trailing-comma",
                                                               '{"preset": "grpo",}')):
        refuse(f"json-{label}", lambda text=text: reference_runs.load_spec(_named(text)),
               "spec.json")
    deep = '{"preset": "grpo", "about": ' + "[" * 100_000 + "]" * 100_000 + "}"
    refuse("json-nested-100000-deep", _load(deep), "spec.json", "nested")
    refuse("non-utf8", _load(b'{"preset": "gr\xff\xfepo"}'), "spec.json", "UTF-8")
    accept("utf8-bom", _load('\ufeff{"preset": "grpo"}'), _has_seeds([0]))
    # paths
    refuse("path-directory", lambda: reference_runs.load_spec(scratch("dir")), "dir",
           "not a file")
    refuse("path-missing", lambda: reference_runs.load_spec(scratch("gone") / "nope.json"),
           "nope.json", errors=(FileNotFoundError,))
    refuse("path-dangling-symlink",
           lambda: reference_runs.load_spec(_symlink(scratch("t") / "absent.json")), "link.json",
           errors=(FileNotFoundError,))
    refuse("path-symlink-to-directory",
           lambda: reference_runs.load_spec(_symlink(scratch("target-dir"))), "link.json",
           "not a file")
    accept("path-symlink-to-spec",
           lambda: reference_runs.load_spec(_symlink(write("real.json", _spec()))),
           _has_seeds([0]))
    refuse("file-100MB-of-nul", lambda: reference_runs.load_spec(_sparse(100 << 20)),
           "huge.json", "bytes")
    c.append(Case(SURFACE, "file-100MB-valid-json",
                  lambda: reference_runs.load_spec(_huge_valid(100 << 20)),
                  ("spec.json", "bytes"), seconds=20.0, slow=True))
    # the command line (a spec so small that a silent acceptance trains for seconds)
    for label, value in (("negative", "-1"), ("zero", "0"), ("word", "two")):
        c.append(Case(SURFACE, f"cli-threads-{label}", lambda value=value: _cli(
            [str(write("spec.json", _spec(overrides=TINY_RUN))), "--threads", value]),
            ("--threads", value), errors=(SystemExit,), seconds=60.0))
    # every committed spec still loads
    for path in sorted(RUNS.glob("*/*.json")):
        accept(f"committed-{path.parent.name}-{path.stem}",
               lambda path=path: reference_runs.load_spec(path))
    return c


def _named(text: str) -> Path:
    return write("spec.json", text)


def _check_len(funcs, n):
    assert isinstance(funcs, list) and len(funcs) == n, f"got {funcs!r}"
    assert all(callable(f) for f in funcs)


def _check_is_none(funcs):
    assert funcs is None, f"got {funcs!r}"


def _cli(argv):
    """``python -m labkit reference_runs`` in this process; a usage error becomes SystemExit
    with the text argparse printed as its message."""
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            reference_runs.main(argv)
        except SystemExit as exit_:
            raise SystemExit(f"exit {exit_.code}: {err.getvalue()}") from None
    return "ran"
