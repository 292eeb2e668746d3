"""Surface 15: TRL in, the way TRL scripts write it: ``from_grpo_config`` given a dict where TRL
would derive the generation batch, ``scale_rewards`` as a bool, ``GRPOTrainer(peft_config=...)``
with every kind of peft ``LoraConfig`` setting, ``train(resume_from_checkpoint=True/False)`` and
``GRPOTrainer(environment_factory=...)`` (``labkit.trl_bridge.compat``). A dict must translate as
TRL's own ``GRPOConfig`` does; what the lab cannot honour is refused by name."""

from __future__ import annotations

import functools
import math

from fuzz.harness import Case
from fuzz.scratch import scratch

SURFACE = 15
#: What a dict leaves out and TRL fills in the same way on every machine here.
BASE = {"use_cpu": True, "max_completion_length": 8, "report_to": "none"}


def _from(settings, **kwargs):
    from labkit.trl_bridge import from_grpo_config

    return lambda: from_grpo_config({**BASE, **settings}, **kwargs)


def _as_trl(settings):
    """The lab config TRL's own GRPOConfig gives for the same settings (TRL derives the rest)."""
    from trl import GRPOConfig

    from labkit.trl_bridge import from_grpo_config

    args = GRPOConfig(output_dir=str(scratch("trl-args")), **{**BASE, **settings})
    return from_grpo_config(args)


GEOMETRY = ("prompts_per_step", "num_generations", "num_mini_batches", "micro_batch_size",
            "max_steps", "scale_rewards")


def _same_as_trl(settings):
    def check(config):
        expected = _as_trl(settings)
        got = {k: getattr(config, k) for k in GEOMETRY}
        want = {k: getattr(expected, k) for k in GEOMETRY}
        assert got == want, f"from a dict {got}, from TRL's GRPOConfig {want}"
    return check


def _has(**expected):
    def check(config):
        got = {k: getattr(config, k, "(missing)") for k in expected}
        assert got == expected, f"{got}, expected {expected}"
    return check


@functools.cache
def _data(family="add"):
    from labkit.tasks import load_split

    return load_split("train", families=family, difficulties=1).select(range(8))


def _args(**settings):
    from labkit.trl_bridge.compat import GRPOConfig

    base = {"output_dir": str(scratch("compat")), "per_device_train_batch_size": 4,
            "num_generations": 4, "max_steps": 1, "max_completion_length": 8,
            "disable_tqdm": True}
    return GRPOConfig(**{**base, **settings})


def _length(completions, **kwargs):
    return [float(len(str(c))) for c in completions]


def _compat(model="tiny", data=None, **kwargs):
    def call():
        from labkit.trl_bridge.compat import GRPOTrainer

        options = {"model": model, "reward_funcs": _length, "args": _args(),
                   "train_dataset": _data() if data is None else data(), **kwargs}
        return GRPOTrainer(**options)
    return call


def _lora(**settings):
    from peft import LoraConfig

    return _compat(peft_config=LoraConfig(**{"r": 4, "lora_alpha": 8, **settings}))


def _scaling(expected):
    def check(trainer):
        scalings = {float(s) for module in trainer.model.modules()
                    if isinstance(getattr(module, "scaling", None), dict)
                    for s in module.scaling.values()}
        assert scalings == {expected}, f"LoRA scaling {scalings}, expected {expected}"
    return check


def _dora(trainer):
    assert getattr(trainer.config, "use_dora", False), "the lab's config has no DoRA"
    assert any("lora_magnitude_vector" in name for name, _ in trainer.model.named_parameters())


def _train(resume, *, saved_first=False):
    def call():
        from labkit.trl_bridge.compat import GRPOTrainer

        folder = str(scratch("resume"))
        if saved_first:  # one step saved to output_dir/checkpoint-1, then a run of two
            first = GRPOTrainer("tiny", reward_funcs=_length, train_dataset=_data(),
                                args=_args(output_dir=folder, save_steps=1))
            first.train()
        trainer = GRPOTrainer("tiny", reward_funcs=_length, train_dataset=_data(),
                              args=_args(output_dir=folder, max_steps=2))
        return trainer, trainer.train(resume_from_checkpoint=resume)
    return call


def _trained(steps, resumed_from=None):
    def check(result):
        trainer, output = result
        assert output.global_step == steps, output
        assert len(trainer.state.log_history) == steps, trainer.state.log_history
        if resumed_from is not None:  # the saved step's row came back from the checkpoint
            assert trainer.trainer.rows[0]["step"] == resumed_from, trainer.trainer.rows[0]
    return check


def _factory_is(factory):
    def check(trainer):
        assert trainer.trainer.environment_factory is factory
    return check


def _rewards(names, weights):
    def check(trainer):
        assert trainer.trainer.reward_names == names, trainer.trainer.reward_names
        assert trainer.config.reward_weights == weights, trainer.config.reward_weights
    return check


def _guessing():
    from labkit.agents import guessing_dataset

    return guessing_dataset(8, seed=0)


def cases() -> list[Case]:
    from labkit.agents import CalculatorEnv, GuessingEnv

    c = []

    def refuse(name, call, *fragments, seconds=10.0, slow=False):
        c.append(Case(SURFACE, name, call, tuple(fragments), seconds=seconds, slow=slow))

    def accept(name, call, check, seconds=10.0, slow=False):
        c.append(Case(SURFACE, name, call, None, check=check, seconds=seconds, slow=slow))

    # TRL's GRPOConfig.__post_init__ derives the generation batch; a dict must come out the same
    for label, settings in (
            ("generation-batch-16", {"per_device_train_batch_size": 4,
                                     "gradient_accumulation_steps": 2, "num_generations": 4,
                                     "generation_batch_size": 16, "max_steps": 4}),
            ("generation-batch-16-per-device-8", {"num_generations": 4,
                                                  "generation_batch_size": 16, "max_steps": 2}),
            ("generation-batch-32-one-step", {"per_device_train_batch_size": 4,
                                              "num_generations": 8, "generation_batch_size": 32,
                                              "max_steps": 8}),
            ("steps-per-generation-4", {"per_device_train_batch_size": 4,
                                        "gradient_accumulation_steps": 2,
                                        "steps_per_generation": 4, "num_generations": 4,
                                        "max_steps": 4}),
            ("neither", {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
                         "num_generations": 4, "max_steps": 4})):
        accept(f"from-dict-{label}", _from(settings), _same_as_trl(settings))
    refuse("from-dict-both-generation-settings",
           _from({"generation_batch_size": 16, "steps_per_generation": 2, "num_generations": 4,
                  "max_steps": 2}), "generation_batch_size", "steps_per_generation")
    refuse("from-dict-generation-batch-not-a-multiple-of-the-global-batch",
           _from({"generation_batch_size": 12, "num_generations": 4, "max_steps": 2}),
           "generation_batch_size", "12", "per_device_train_batch_size")
    accept("from-dict-generation-batch-over-two-processes",
           _from({"per_device_train_batch_size": 4, "generation_batch_size": 16,
                  "num_generations": 4, "max_steps": 2}, num_processes=2),
           _has(prompts_per_step=4, num_mini_batches=2))
    # scale_rewards: TRL reads True as "group" and False as "none"
    for value, lab in ((True, "group"), (False, "none"), ("batch", "batch")):
        accept(f"from-dict-scale-rewards-{value!r}",
               _from({"scale_rewards": value, "num_generations": 4, "max_steps": 2}),
               _has(scale_rewards=lab))
    accept("from-trl-scale-rewards-False",
           lambda: _as_trl({"scale_rewards": False, "num_generations": 4, "max_steps": 2}),
           _has(scale_rewards="none"))
    for value in ("True", 1, None, "std"):
        refuse(f"from-dict-scale-rewards-{value!r}",
               _from({"scale_rewards": value, "num_generations": 4, "max_steps": 2}),
               "scale_rewards", repr(value))
    # GRPOTrainer(peft_config=...): each LoraConfig setting is carried or refused by name
    accept("compat-lora-plain", _lora(target_modules=["q_proj", "v_proj"]),
           lambda t: _has(use_peft=True, lora_r=4, lora_alpha=8,
                          lora_target_modules=("q_proj", "v_proj"))(t.config), seconds=20.0)
    accept("compat-lora-rslora", _lora(use_rslora=True), _scaling(8 / math.sqrt(4)),
           seconds=20.0)
    accept("compat-lora-plain-scaling", _lora(), _scaling(8 / 4), seconds=20.0)
    accept("compat-lora-dora", _lora(use_dora=True), _dora, seconds=20.0)
    for field, value in (("bias", "all"), ("bias", "lora_only"),
                         ("modules_to_save", ["lm_head"]), ("layers_to_transform", [0]),
                         ("exclude_modules", ["k_proj"]), ("rank_pattern", {"q_proj": 2}),
                         ("alpha_pattern", {"q_proj": 2}), ("init_lora_weights", "gaussian"),
                         ("init_lora_weights", False), ("fan_in_fan_out", True),
                         ("lora_bias", True), ("target_parameters", ["mlp.gate_proj.weight"]),
                         ("layer_replication", [[0, 1]]), ("inference_mode", True),
                         ("task_type", "SEQ_CLS"), ("trainable_token_indices", [1])):
        shown = "{'k_proj'}" if field == "exclude_modules" else repr(value)  # peft keeps a set
        refuse(f"compat-lora-{field}={value!r}", _lora(**{field: value}), field, shown,
               seconds=20.0)
    # train(resume_from_checkpoint=...): TRL's True (the latest in output_dir) and False (none)
    accept("compat-train-resume-false", _train(False), _trained(2), seconds=60.0, slow=True)
    accept("compat-train-resume-none", _train(None), _trained(2), seconds=60.0, slow=True)
    refuse("compat-train-resume-true-no-checkpoint", _train(True), "resume_from_checkpoint",
           "no checkpoint", seconds=60.0, slow=True)
    accept("compat-train-resume-true", _train(True, saved_first=True), _trained(2, 1),
           seconds=90.0, slow=True)
    refuse("compat-train-resume-a-number", _train(3), "resume_from_checkpoint", "3",
           seconds=60.0, slow=True)
    # GRPOTrainer(environment_factory=...) reaches the lab's trainer; an environment's own
    # reward (get_reward) joins the reward functions with weight 1, as TRL adds it
    accept("compat-environment-calculator", _compat("tiny-tools", environment_factory=CalculatorEnv),
           _factory_is(CalculatorEnv), seconds=20.0)
    accept("compat-environment-reward-only",
           _compat("tiny-tools", _guessing, reward_funcs=None, environment_factory=GuessingEnv),
           _rewards(["environment"], None), seconds=20.0)
    accept("compat-environment-reward-weighted",
           _compat("tiny-tools", _guessing, environment_factory=GuessingEnv,
                   args=_args(reward_weights=[2.0])),
           _rewards(["_length", "environment"], (2.0, 1.0)), seconds=20.0)
    refuse("compat-environment-factory-returns-none",
           _compat("tiny-tools", environment_factory=lambda: None), "environment_factory",
           "reset", seconds=20.0)
    return c
