"""Training with TRL's ``GRPOTrainer`` from a lab config, and TRL's log in the lab's columns.

:func:`train_with_trl` builds the run with :func:`~labkit.trl_bridge.lab_to_trl.to_trl`, loads the
lab's defaults (tiny model, task split, rewards) where none are given, trains, and returns a
:class:`TRLResult` whose history has the lab's column names (:func:`history_from_logs`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import os
import re
import tempfile
import time
import warnings
from dataclasses import dataclass, field

import pandas as pd
import torch

from labkit.config import TrainConfig
from labkit.runtime.counts import int_at_least
from labkit.runtime.seeds import seed_offset, shifted_seed
from labkit.trl_bridge.lab_to_trl import to_trl
from labkit.trl_bridge.tables import TRL_METRICS

_REWARD_KEY = re.compile(r"^rewards/(?P<name>.+)/mean$")
_OVERLONG_NAME = "soft_overlong_punishment_reward"


# ---- the log -------------------------------------------------------------------------------------
def _reward_column(name: str) -> str:
    if name == _OVERLONG_NAME:
        return "reward_overlong"
    return "reward_" + name.removesuffix("_reward")


def history_from_logs(log_history, steps_per_lab_step: int = 1) -> pd.DataFrame:
    """TRL's ``trainer.state.log_history`` as the lab's history frame, one row per optimizer step.

    Columns: ``step`` (the lab's step, one per generation batch), ``optimizer_step`` (TRL's
    ``global_step``) and the lab names of TRL's metrics (:data:`TRL_METRICS`; per-function means
    become ``reward_<name>``, DAPO's punishment ``reward_overlong``). TRL logs a generation's
    metrics (rewards, lengths) on the first optimizer step after it; the other optimizer steps of
    the same lab step have NaN there. ``history.groupby("step").mean()`` gives the lab's one row
    per generation batch. The run's summary entry (``train_runtime`` ...) is left out.

    ``loss`` is the lab's policy surrogate where TRL logs it apart (``policy_loss``, when an
    entropy bonus is on); otherwise TRL's training loss, which with ``beta > 0`` also holds the
    KL term that the lab logs separately (``kl_ref``).
    """
    rows = []
    for entry in log_history:
        if "train_runtime" in entry or "step" not in entry or any(
                k.startswith("eval_") for k in entry):
            continue
        global_step = int(entry["step"])
        row = {"step": math.ceil(global_step / steps_per_lab_step), "optimizer_step": global_step}
        for key, value in entry.items():
            if key in TRL_METRICS:
                row[TRL_METRICS[key]] = value
            match = _REWARD_KEY.match(key)
            if match:
                row[_reward_column(match["name"])] = value
        if "policy_loss" in entry:  # the surrogate alone, as the lab logs it (entropy bonus on)
            row["loss"] = entry["policy_loss"]
        rows.append(row)
    frame = pd.DataFrame(rows)
    return frame.astype({c: float for c in frame.columns if c not in ("step", "optimizer_step")})


def _checked(reward_funcs) -> list:
    """The user's reward functions wrapped in :class:`labkit.rewards.CheckedReward` (a faulty
    result names the function), leaving TRL's own functions, reward models and async functions
    to TRL."""
    from labkit.rewards.rule_based import CheckedReward

    def plain(fn) -> bool:
        inner = fn.func if isinstance(fn, functools.partial) else fn
        return (callable(fn) and not isinstance(fn, (str, torch.nn.Module))
                and not str(getattr(inner, "__module__", "")).startswith("trl.")
                and not inspect.iscoroutinefunction(inner)
                and not inspect.iscoroutinefunction(type(inner).__call__))

    return [CheckedReward(fn) if plain(fn) else fn for fn in reward_funcs]


class _HistoryCallback:
    """Keeps every train log TRL emits (``on_log``), on every process."""

    def __init__(self):
        from transformers import TrainerCallback

        outer = self

        class Callback(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs:
                    outer.logs.append({"step": state.global_step, **logs})

        self.logs: list[dict] = []
        self.callback = Callback()


# ---- training ------------------------------------------------------------------------------------
@dataclass
class TRLResult:
    """What :func:`train_with_trl` returns."""

    trainer: object
    """the ``trl.GRPOTrainer`` after training (``trainer.model`` is the trained policy)"""
    history: pd.DataFrame
    """one row per optimizer step in the lab's column names, see :func:`history_from_logs`"""
    args: object
    """the ``trl.GRPOConfig`` the bridge built"""
    dropped: dict = field(default_factory=dict)
    """lab features dropped on request"""

    def __iter__(self):
        """``trainer, history = train_with_trl(...)`` also works."""
        return iter((self.trainer, self.history))


def num_processes_from_env() -> int:
    """Processes of the current launch (``WORLD_SIZE`` from torchrun/accelerate, or MPI's)."""
    for name in ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"):
        text = os.environ.get(name)
        if text:
            count = int_at_least(text, 1)
            if count is None:
                raise ValueError(f"the environment variable {name}={text!r} must be a number "
                                 f"of processes >= 1 (set by torchrun, accelerate or MPI)")
            return count
    return 1


def train_with_trl(config: TrainConfig, *, model=None, tokenizer=None, train_dataset=None,
                   reward_funcs=None, output_dir=None, callbacks=(), num_processes=None,
                   drop_unsupported=(), trainer_class=None, environment_factory=None,
                   **grpo_overrides) -> TRLResult:
    """Train ``config``'s algorithm with TRL's ``GRPOTrainer``; returns a :class:`TRLResult`.

    Defaults as the lab's :class:`~labkit.trainer.Trainer`: the model of
    ``config.model_name_or_path`` (the shipped tiny Qwen: loaded offline on the CPU in float32
    when the run is on the CPU), the task suite's train split, ``[accuracy_reward,
    format_reward]``. ``output_dir`` defaults to ``config.output_dir``, else a temporary folder
    (TRL needs one; nothing is saved unless ``save_every``). ``num_processes`` defaults to the
    launch's (:func:`num_processes_from_env`). ``callbacks`` are ``transformers.TrainerCallback``
    objects; ``trainer_class`` a ``GRPOTrainer`` subclass; ``environment_factory`` goes to
    TRL's trainer as it goes to the lab's (episodes with tools, notebook 10: the config's
    ``max_tool_calling_iterations`` carries over; TRL 1.x calls the argument experimental, so
    its API may change); ``grpo_overrides`` go to
    :func:`to_grpo_config`.
    """
    from trl import GRPOTrainer

    from labkit.models import load_policy
    from labkit.tasks import load_split
    from labkit.training.lora import lora_config

    num_processes = num_processes_from_env() if num_processes is None else num_processes
    if seed_offset():  # the same notebook under another seed (python -m labkit bands)
        config = dataclasses.replace(config, seed=shifted_seed(config.seed))
    temporary = None
    if output_dir is None and config.output_dir is None:
        temporary = tempfile.TemporaryDirectory(prefix="labkit-trl-")
        output_dir = temporary.name
    output_dir = output_dir or config.output_dir
    run = to_trl(config, reward_funcs, output_dir=output_dir, num_processes=num_processes,
                 drop_unsupported=drop_unsupported, **grpo_overrides)
    if run.args.world_size != num_processes:
        raise ValueError(f"the config was built for {num_processes} process(es) but this launch "
                         f"has {run.args.world_size}: pass num_processes={run.args.world_size}")
    if model is None:
        dtype = config.dtype
        if dtype == "auto":  # the lab's choice: bfloat16 weights where TRL gets bf16, else fp32
            dtype = "bfloat16" if run.args.bf16 else "float32"
        model, loaded_tokenizer = load_policy(config.model_name_or_path, device="cpu",
                                              dtype=dtype)
        tokenizer = tokenizer or loaded_tokenizer
    if tokenizer is None:
        raise ValueError("a model without its tokenizer: pass tokenizer= as well")
    if train_dataset is None:
        train_dataset = load_split("train")
    history = _HistoryCallback()
    trainer_class = trainer_class or GRPOTrainer
    episodes = {} if environment_factory is None else {"environment_factory": environment_factory}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*loss_type.*")
        # TRL 1.x marks environment_factory experimental (its API may change); said above
        warnings.filterwarnings("ignore", message=".*'environment_factory'.*experimental")
        trainer = trainer_class(model=model, reward_funcs=_checked(run.reward_funcs),
                                args=run.args,
                                train_dataset=train_dataset, processing_class=tokenizer,
                                callbacks=[history.callback, *callbacks],
                                peft_config=lora_config(config), **episodes)
    if not config.progress:  # as quiet as the lab's trainer: no per-step log dicts on stdout
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            # TRL calls transformers APIs that newer transformers deprecate (TRL 1.16 reads
            # is_gradient_checkpointing under transformers 5.24): TRL's to move, not the learner's
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\.")
            trainer.train()
    finally:
        if temporary is not None:
            temporary.cleanup()
    frame = history_from_logs(history.logs, config.num_iterations * config.num_mini_batches)
    frame.attrs["train_seconds"] = time.perf_counter() - start
    return TRLResult(trainer=trainer, history=frame, args=run.args, dropped=run.dropped)
