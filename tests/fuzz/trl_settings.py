"""Surface 2: the TRL bridge's settings, both ways (``to_grpo_config``, ``trl_batch_sizes``,
``from_grpo_config``), TRL's signatures on the lab (``labkit.trl_bridge.compat``) and the command
line ``python -m labkit trl_train``, with odd values: negative, zero, huge, wrong types, unknown names.
No case trains: a bad value must be refused before a model loads."""

from __future__ import annotations

import contextlib
import io
import os

from fuzz.harness import Case
from fuzz.scratch import scratch

SURFACE = 2
#: A run so small that a setting accepted by mistake trains for seconds, not hours.
TINY_RUN = ("--max-steps", "1", "--set", "prompts_per_step=2", "--set", "num_generations=2",
            "--set", "max_completion_length=8", "--families", "add", "--difficulties", "1")


def _grpo(**overrides):
    from labkit.config import preset

    return preset("grpo", **{"prompts_per_step": 4, "num_generations": 4,
                             "max_completion_length": 16, "max_steps": 2, "progress": False,
                             **overrides})


def _to(config=None, **kwargs):
    from labkit.trl_bridge import to_grpo_config

    kwargs.setdefault("output_dir", str(scratch("trl-out")))
    return lambda: to_grpo_config(_grpo() if config is None else config(), **kwargs)


def _sizes(num_processes, **overrides):
    from labkit.trl_bridge import trl_batch_sizes

    return lambda: trl_batch_sizes(_grpo(**overrides), num_processes)


def _from(args, **kwargs):
    from labkit.trl_bridge import from_grpo_config

    base = {"per_device_train_batch_size": 8, "num_generations": 4, "max_steps": 10}
    settings = {**base, **args} if isinstance(args, dict) else args
    return lambda: from_grpo_config(settings, **kwargs)


def _cli(*argv, env=None):
    """``python -m labkit trl_train`` in this process; a usage error becomes SystemExit whose
    message is what argparse printed."""
    from labkit.trl_bridge import train as trl_train

    def call():
        saved = {k: os.environ.get(k) for k in (env or {})}
        os.environ.update(env or {})
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                try:
                    trl_train.main([*argv, "--output-dir", str(scratch("trl-cli"))])
                except SystemExit as exit_:
                    raise SystemExit(f"exit {exit_.code}: {err.getvalue()}") from None
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        return "trained"
    return call


def _compat(**kwargs):
    from labkit.tasks import load_split

    def call():
        from labkit.trl_bridge.compat import GRPOConfig, GRPOTrainer

        data = load_split("train", families="add", difficulties=1).select(range(8))
        args = GRPOConfig(output_dir=str(scratch("compat")), per_device_train_batch_size=4,
                          num_generations=4, max_steps=1, max_completion_length=8)
        options = {"model": "tiny", "reward_funcs": _length, "args": args,
                   "train_dataset": data, **kwargs}
        return GRPOTrainer(**options)
    return call


def _length(completions, **kwargs):
    return [float(len(str(c))) for c in completions]


def cases() -> list[Case]:
    c = []

    def refuse(name, call, *fragments, errors=(ValueError, TypeError), seconds=10.0):
        c.append(Case(SURFACE, name, call, tuple(fragments), errors=errors, seconds=seconds))

    # to_grpo_config / trl_batch_sizes: processes, output folder, reward count, drops, overrides
    for label, value in (("zero", 0), ("negative", -1), ("float", 1.5), ("bool", True),
                         ("string", "2"), ("none", None)):
        refuse(f"to-num-processes-{label}", _to(num_processes=value), "num_processes",
               repr(value))
        refuse(f"sizes-num-processes-{label}", _sizes(value), "num_processes", repr(value))
    refuse("to-num-processes-million", _to(num_processes=10**6), "1000000", "processes")
    for label, value in (("none", None), ("number", 3)):
        refuse(f"to-output-dir-{label}", _to(output_dir=value), "output_dir", repr(value))
    for label, value in (("zero", 0), ("negative", -1), ("string", "2"), ("float", 2.5)):
        refuse(f"to-num-reward-funcs-{label}",
               _to(lambda: _grpo(overlong_buffer_len=4), num_reward_funcs=value),
               "num_reward_funcs", repr(value))
    refuse("to-drop-unknown", _to(drop_unsupported=("bogus",)), "drop_unsupported", "bogus")
    refuse("to-drop-none", _to(drop_unsupported=None), "drop_unsupported", "None")
    refuse("to-drop-number", _to(drop_unsupported=3), "drop_unsupported", "3")
    c.append(Case(SURFACE, "to-drop-one-name-as-a-string",
                  _to(lambda: _dapo(), drop_unsupported="dynamic_sampling"), None,
                  check=_dynamic_sampling_dropped, seconds=10.0))
    refuse("to-config-a-dict", lambda: _to_raw({"preset": "grpo"}), "config", "dict")
    refuse("to-config-a-preset-name", lambda: _to_raw("grpo"), "config", "str")
    refuse("to-override-unknown", _to(bogus=1), "bogus")
    refuse("to-override-derived", _to(per_device_train_batch_size=4),
           "per_device_train_batch_size")
    refuse("to-override-wrong-type", _to(logging_steps="x"), "logging_steps", "'x'")
    refuse("to-override-save-steps-string", _to(save_steps="10"), "save_steps", "'10'")
    refuse("to-preset-unknown", lambda: _preset("bogus"), "preset", "'bogus'")
    refuse("to-preset-not-a-string", lambda: _preset(["grpo"]), "preset", "['grpo']")
    for field, value in (("prompts_per_step", -4), ("num_generations", 0),
                         ("max_completion_length", "16"), ("num_mini_batches", 2.5),
                         ("micro_batch_size", 0), ("learning_rate", "1e-5")):
        refuse(f"config-{field}={value!r}", lambda field=field, value=value: _grpo(
            **{field: value}), field, repr(value))
    refuse("sizes-mini-batches-do-not-divide", _sizes(1, num_mini_batches=3), "num_mini_batches",
           "3")
    c.append(Case(SURFACE, "sizes-huge-batch", _sizes(1, prompts_per_step=10**12), None,
                  check=_huge_sizes, seconds=5.0, isolate=True))
    c.append(Case(SURFACE, "sizes-huge-batch-with-a-micro-cap",
                  _sizes(1, prompts_per_step=10**12, micro_batch_size=999_999), None,
                  check=lambda s: _check(s["per_device_train_batch_size"] <= 999_999,
                                         f"{s}"), seconds=5.0, isolate=True))
    c.append(Case(SURFACE, "to-huge-steps", _to(lambda: _grpo(max_steps=10**12)), None,
                  check=lambda a: _check(a.max_steps == 10**12, f"max_steps {a.max_steps}"),
                  seconds=10.0))
    # from_grpo_config: TRL's settings back to the lab
    for field, values in (
            ("per_device_train_batch_size", (0, -4, "8", 2.5, None, True)),
            ("gradient_accumulation_steps", (0, -1, "2", 1.5, None)),
            ("steps_per_generation", (0, -2, "4", 1.5)),
            ("generation_batch_size", (0, -8, "16", 2.5)),
            ("num_generations", (0, -4, "8", 2.5, None)),
            ("max_steps", (1.5, "10", None)),
            ("warmup_steps", (-1, "5", float("nan"))),
            ("save_steps", ("10", -1)),
            ("bf16", ("yes", 1)), ("fp16", ("False",)), ("use_cpu", ("no",)),
            ("disable_tqdm", ("yes",)),
            ("reward_weights", ("abc", [1.0, "x"], 2.0))):
        for value in values:
            args = {field: value}
            if field == "save_steps":
                args["output_dir"] = str(scratch("from-out"))
            refuse(f"from-{field}={value!r}", _from(args), field, repr(value))
    refuse("from-num-train-epochs-nan", _from({"max_steps": -1, "num_train_epochs": float("nan")},
                                              dataset_size=64), "num_train_epochs", "nan")
    refuse("from-num-train-epochs-string", _from({"max_steps": -1, "num_train_epochs": "3"},
                                                 dataset_size=64), "num_train_epochs", "'3'")
    for label, value in (("zero", 0), ("negative", -1), ("string", "64"), ("float", 6.5)):
        refuse(f"from-dataset-size-{label}", _from({"max_steps": -1}, dataset_size=value),
               "dataset_size", repr(value))
    for label, value in (("zero", 0), ("bool", True), ("float", 1.5)):
        refuse(f"from-num-processes-{label}", _from({}, num_processes=value), "num_processes",
               repr(value))
    refuse("from-reward-funcs-not-a-list", _from({}, reward_funcs=3), "reward_funcs", "3")
    refuse("from-loss-type-unknown", _from({"loss_type": "bogus"}), "loss_type", "'bogus'")
    refuse("from-unknown-setting", _from({"bogus_field": 1}), "bogus_field")
    refuse("from-args-a-list", _from([("max_steps", 3)]), "args", "list")
    refuse("from-args-none", _from(None), "args", "NoneType")
    refuse("from-geometry-does-not-divide", _from({"per_device_train_batch_size": 6}),
           "generation_batch_size", "num_generations")
    # labkit.trl_bridge.compat: TRL's signatures on the lab's trainer
    refuse("compat-reward-funcs-a-name", _compat(reward_funcs="accuracy"), "reward_funcs",
           "'accuracy'")
    refuse("compat-reward-funcs-none", _compat(reward_funcs=None), "reward_funcs", "None")
    refuse("compat-peft-config-a-dict", _compat(peft_config={"r": 8}), "peft_config", "dict")
    refuse("compat-unknown-argument", _compat(optimizers=(None, None)), "optimizers")
    refuse("compat-train-dataset-none", _compat(train_dataset=None), "train_dataset")
    # the command line: refused before any model loads (a silent acceptance trains 1 tiny step)
    bound = 120.0
    for label, argv, fragments in (
            ("preset-unknown", ("--preset", "bogus"), ("preset", "'bogus'")),
            ("preset-ppo", ("--preset", "ppo"), ("advantage_estimator", "'gae'")),
            ("set-without-equals", ("--set", "max_steps"), ("--set", "'max_steps'")),
            ("set-empty-name", ("--set", "=3"), ("--set", "'=3'")),
            ("set-unknown-field", ("--set", "bogus=1"), ("bogus",)),
            ("set-negative-size", ("--set", "prompts_per_step=-1"), ("prompts_per_step", "-1")),
            ("set-code", ("--set", "learning_rate=__import__('os').getcwd()"),
             ("learning_rate", "__import__")),
            ("max-steps-word", ("--max-steps", "abc"), ("--max-steps", "'abc'")),
            ("threads-negative", ("--threads", "-1"), ("--threads", "-1")),
            ("threads-word", ("--threads", "two"), ("--threads", "'two'")),
            ("record-generations-negative", ("--record-generations", "-1"),
             ("--record-generations", "-1")),
            ("families-unknown", ("--families", "add,nope"), ("families", "'nope'")),
            ("difficulties-word", ("--difficulties", "x"), ("difficulties", "'x'")),
            ("difficulties-empty-item", ("--difficulties", "2,,3"), ("difficulties", "''")),
            ("difficulties-unknown", ("--difficulties", "9"), ("difficulties", "9")),
            ("drop-unknown", ("--drop", "bogus"), ("drop_unsupported", "bogus")),
            ("launch-config-unknown", ("--launch-config", "bogus"), ("--launch-config",
                                                                     "'bogus'"))):
        # the tiny run's own --families/--difficulties come first, so these override them
        refuse(f"cli-{label}", _cli(*TINY_RUN, *argv), *fragments, errors=(SystemExit,),
               seconds=bound)
    for label, value in (("word", "abc"), ("zero", "0"), ("negative", "-2")):
        refuse(f"cli-world-size-{label}", _cli(*TINY_RUN, env={"WORLD_SIZE": value}),
               "WORLD_SIZE", repr(value), errors=(SystemExit, ValueError), seconds=bound)
    return c


def _dapo():
    from labkit.config import preset

    return preset("dapo", prompts_per_step=4, num_generations=4, max_completion_length=16,
                  max_steps=2, progress=False, num_mini_batches=1)


def _to_raw(config):
    from labkit.trl_bridge import to_grpo_config

    return to_grpo_config(config, output_dir=str(scratch("trl-out")))


def _preset(name):
    from labkit.config import preset

    return preset(name)


def _check(condition, message):
    assert condition, message


def _dynamic_sampling_dropped(args):
    assert args.num_generations == 4, args


def _huge_sizes(sizes):
    assert sizes["generation_batch_size"] == 4 * 10**12, sizes
    assert sizes["per_device_train_batch_size"] == 4 * 10**12, sizes
