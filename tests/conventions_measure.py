"""Same name, different number: labkit against TRL and verl, measured from each library's code.

labkit, TRL (``trl/trainer/grpo_trainer.py``) and verl (``verl/trainer/ppo/core_algos.py``)
implement the same losses and advantage estimators under the same names, and on the same
tensors they do not always return the same number. Each ``measure_*`` function below computes
one such convention on fixed, seeded tensors with the three libraries' own code and returns a
:class:`Convention`: what each library does, the measured size of the difference, the paper
that defines the quantity, and what to set to get the same number. ``render_page`` turns them
into ``docs/conventions.md``, with a short table of what :func:`measure_agreements` finds equal;
``tests/test_conventions.py`` checks that the page still matches.

Where the code comes from:

* labkit: the installed package.
* TRL: ``GRPOTrainer._compute_loss`` (the loss, the KL term, the entropy bonus), TRL's own method
  called on :class:`_TrlLossHarness`, a minimal object that holds the attributes it reads and
  returns chosen log-probs in place of a model forward. The advantages live in the middle of
  ``GRPOTrainer._generate_and_score_completions`` (which samples with a model), so
  :func:`trl_advantages` transcribes those lines, citing them, around TRL's own ``nanstd``.
* verl: ``core_algos.py`` of the 0.9.1 wheel, fetched once per machine with ``pip download``
  (no install) and loaded as a standalone module by :func:`load_verl`, with the few stubs listed
  there; its defaults are read from the wheel's ``_generated_ppo_trainer.yaml``.
* Episodes and tools: a scripted policy (:data:`EPISODE_SCRIPTS`, fixed turns in place of
  sampling) runs through labkit's :func:`~labkit.agents.episodes.run_episodes` (its sampler
  replaced for the call) and TRL's own ``GRPOTrainer._generate`` and ``_tool_call_loop`` on
  :class:`_TrlEpisodeHarness`. verl's agent loop (``verl/experimental/agent_loop``) needs its
  rollout server, so its cells in those rows are read from the wheel's source and say so.

Rows marked :func:`in_class` (the notebook and the name its code uses) come first on the page.

Run ``python tests/conventions_measure.py`` to print the page, ``--write`` to regenerate it. The
page is never written without the verl wheel (half a page would look complete).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import math
import os
import re
import subprocess
import sys
import types
import zipfile
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import yaml

from labkit.advantages import (
    batch_normalize,
    combine_rewards,
    gae,
    group_advantages,
    kl_penalized_rewards,
    opo_advantages,
    outcome_to_token_rewards,
    remax_advantages,
    rloo_advantages,
)
from labkit.agents import CalculatorEnv, format_tool_call
from labkit.agents.episodes import token_authors
from labkit.agents.tool_calls import environment_tools
from labkit.config import TrainConfig
from labkit.losses import (
    aggregate,
    clipped_surrogate,
    entropy_bonus,
    kl_estimate,
    policy_loss,
    token_log_ratio,
    value_loss,
)
from labkit.models import resolve_model_path
from labkit.sampling import encode_prompts
from labkit.tricks.token_filters import token_filters

VERL_VERSION = "0.9.1"
REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "conventions.md"
COMMAND = "python tests/conventions_measure.py --write"
#: verl's files this module reads from the wheel (nothing else of verl is imported).
VERL_SOURCES = (
    "verl/utils/import_utils.py",
    "verl/utils/groupwise.py",
    "verl/utils/torch_functional.py",
    "verl/trainer/ppo/core_algos.py",
    "verl/trainer/config/_generated_ppo_trainer.yaml",
)
#: Seconds ``pip download`` may take before the verl rows are skipped.
FETCH_TIMEOUT_S = 120


# --------------------------------------------------------------------------------------------
# verl: fetch the wheel once, load core_algos.py on its own
# --------------------------------------------------------------------------------------------


class VerlUnavailable(RuntimeError):
    """The verl wheel could not be fetched (no network, no pip) or read."""


def verl_cache_dir() -> Path:
    """Where the wheel and its extracted files live: ``$LABKIT_VERL_CACHE`` or the user cache."""
    default = Path.home() / ".cache" / "labkit-tests" / "verl"
    return Path(os.environ.get("LABKIT_VERL_CACHE", default))


def fetch_verl_wheel(cache: Path | None = None) -> Path:
    """Path of the verl wheel, downloaded with ``pip download --no-deps`` on first use.

    Raises :class:`VerlUnavailable` with the reason when it cannot be fetched; a partial download
    is never used because pip writes the file only once it is complete.
    """
    cache = verl_cache_dir() if cache is None else cache
    wheel = cache / f"verl-{VERL_VERSION}-py3-none-any.whl"
    if wheel.is_file():
        return wheel
    cache.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", f"verl=={VERL_VERSION}", "--no-deps",
               "--only-binary=:all:", "--retries", "1", "--timeout", "15", "-d", str(cache)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False,
                              timeout=FETCH_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise VerlUnavailable(f"pip download verl=={VERL_VERSION} failed: {err}") from err
    if done.returncode != 0 or not wheel.is_file():
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise VerlUnavailable(
            f"pip download verl=={VERL_VERSION} exited {done.returncode}: {last[0]}")
    return wheel


def _extract(wheel: Path) -> Path:
    """Copy :data:`VERL_SOURCES` out of the wheel (a zip) next to it; return their root."""
    root = wheel.parent / f"verl-{VERL_VERSION}-sources"
    if all((root / name).is_file() for name in VERL_SOURCES):
        return root
    try:
        with zipfile.ZipFile(wheel) as archive:
            for name in VERL_SOURCES:
                target = root / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(name))
    except (zipfile.BadZipFile, KeyError) as err:
        raise VerlUnavailable(f"{wheel} is not a readable verl {VERL_VERSION} wheel: {err}") \
            from err
    return root


class _Fields:
    """Attribute access plus ``.get``, the part of verl's config classes core_algos uses."""

    def __init__(self, **fields):
        for name, value in fields.items():
            setattr(self, name, _Fields(**value) if isinstance(value, dict) else value)

    def get(self, name, default=None):
        return getattr(self, name, default)


@contextmanager
def _temporary_modules(modules: dict[str, types.ModuleType]):
    """Put ``modules`` in ``sys.modules`` for the block, then restore what was there."""
    saved = {name: sys.modules.get(name) for name in modules}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous


def _module(name: str, package: bool = False, **attributes) -> types.ModuleType:
    module = types.ModuleType(name)
    if package:
        module.__path__ = []
    module.__dict__.update(attributes)
    return module


def _exec_file(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Verl:
    """verl's real code: ``core`` (core_algos), ``F`` (torch_functional), its default config."""

    core: types.ModuleType
    F: types.ModuleType
    defaults: dict
    sha256: str
    ActorConfig: type
    AlgoConfig: type

    def actor(self, global_batch_info: dict | None = None, **overrides) -> _Fields:
        """verl's default actor config (``actor_rollout_ref.actor``), with overrides."""
        fields = dict(self.defaults["actor_rollout_ref"]["actor"]) | overrides
        config = self.ActorConfig(**fields)
        config.global_batch_info = dict(global_batch_info or {})
        return config

    def actor_default(self, name: str):
        return self.defaults["actor_rollout_ref"]["actor"][name]


@lru_cache(maxsize=1)
def load_verl() -> Verl:
    """Load verl's ``core_algos.py`` without its package ``__init__`` (which needs ray).

    Real files executed, from the wheel: ``verl/utils/import_utils.py`` (``deprecated``),
    ``verl/utils/groupwise.py`` (``group_mean_std``), ``verl/utils/torch_functional.py``
    (``masked_mean``, ``masked_whiten``...) and ``verl/trainer/ppo/core_algos.py``.
    Stubs, in ``sys.modules`` only while those run:

    * ``verl``, ``verl.utils``, ``verl.trainer``, ``verl.trainer.ppo``, ``verl.workers``: empty
      packages (their real ``__init__`` imports ray and the workers);
    * ``verl.utils.device``: ``get_device_name() -> "cpu"``, ``get_torch_device() -> torch.cpu``
      (the real one probes accelerators through a plugin registry);
    * ``verl.trainer.config.AlgoConfig`` and ``verl.workers.config.ActorConfig``: classes with
      attribute access and ``.get``; core_algos only reads fields and checks ``isinstance``;
    * ``omegaconf.DictConfig`` and ``tensordict.TensorDict``: empty classes, named only in
      annotations of the functions used here.
    """
    wheel = fetch_verl_wheel()
    root = _extract(wheel)
    algo_config = type("AlgoConfig", (_Fields,), {})
    actor_config = type("ActorConfig", (_Fields,), {})
    stubs = {name: _module(name, package=True)
             for name in ("verl", "verl.utils", "verl.trainer", "verl.trainer.ppo",
                          "verl.workers")}
    stubs["verl.utils.device"] = _module(
        "verl.utils.device", get_device_name=lambda: "cpu", get_torch_device=lambda: torch.cpu)
    stubs["verl.trainer.config"] = _module("verl.trainer.config", AlgoConfig=algo_config)
    stubs["verl.workers.config"] = _module("verl.workers.config", ActorConfig=actor_config)
    stubs["omegaconf"] = _module("omegaconf", DictConfig=type("DictConfig", (), {}))
    stubs["tensordict"] = _module("tensordict", TensorDict=type("TensorDict", (), {}))
    real = ("verl.utils.import_utils", "verl.utils.groupwise", "verl.utils.torch_functional",
            "verl.trainer.ppo.core_algos")
    # The real modules also enter sys.modules while they load; the context removes them after.
    placeholders = {name: _module(name) for name in real}
    with _temporary_modules(stubs | placeholders):
        utils = stubs["verl.utils"]
        utils.import_utils = _exec_file(real[0], root / VERL_SOURCES[0])
        groupwise = _exec_file(real[1], root / VERL_SOURCES[1])
        utils.as_torch_index, utils.group_mean_std = groupwise.as_torch_index, \
            groupwise.group_mean_std
        utils.torch_functional = _exec_file(real[2], root / VERL_SOURCES[2])
        core = _exec_file(real[3], root / VERL_SOURCES[3])
    defaults = yaml.safe_load((root / VERL_SOURCES[4]).read_text(encoding="utf-8"))
    sha256 = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return Verl(core, utils.torch_functional, defaults, sha256, actor_config, algo_config)


# --------------------------------------------------------------------------------------------
# TRL: its loss method on a minimal object, its advantage lines transcribed
# --------------------------------------------------------------------------------------------


class _OneProcess:
    """The accelerate calls ``_compute_loss`` and ``_generate`` make, for a single process."""

    num_processes = 1
    device = torch.device("cpu")
    sync_gradients = True  # every micro-batch ends an optimizer step (no accumulation)

    def gather(self, tensor):
        return tensor

    def reduce(self, tensor, reduction="sum"):
        return tensor

    def pad_across_processes(self, tensor, dim=0, pad_index=0):
        return tensor


@lru_cache(maxsize=1)
def _trl():
    import trl
    from trl import GRPOConfig
    from trl.trainer.grpo_trainer import GRPOTrainer
    from trl.trainer.utils import nanstd

    defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)
                if f.default is not dataclasses.MISSING}
    return types.SimpleNamespace(version=trl.__version__, GRPOTrainer=GRPOTrainer,
                                 nanstd=nanstd, defaults=defaults)


def trl_default(name: str):
    """A ``GRPOConfig`` default of the installed TRL."""
    return _trl().defaults[name]


class _TrlLossHarness:
    """What ``GRPOTrainer._compute_loss`` reads from ``self``, around TRL's own method.

    The model forward (``_get_per_token_logps_and_entropies``) returns the chosen log-probs and
    entropies; every other line run is TRL's. ``args`` takes ``GRPOConfig``'s defaults.
    """

    def __init__(self, logp, entropy, max_completion_length, **config):
        trl = _trl()
        settings = trl.defaults | config
        self.args = types.SimpleNamespace(**settings)
        self.loss_type = settings["loss_type"]
        self.importance_sampling_level = settings["importance_sampling_level"]
        self.epsilon_low = settings["epsilon"]
        self.epsilon_high = settings["epsilon_high"] if settings["epsilon_high"] is not None \
            else settings["epsilon"]
        self.beta = settings["beta"]
        self.top_entropy_quantile = settings["top_entropy_quantile"]
        self.entropy_coef = settings["entropy_coef"]
        self._entropy_bonus_enabled = self.entropy_coef != 0.0
        self.use_adaptive_entropy = False
        self.off_policy_mask_threshold = None
        self.use_vllm = False
        self.vllm_importance_sampling_correction = False
        self.aux_loss_enabled = False
        self.max_completion_length = max_completion_length
        self.current_gradient_accumulation_steps = 1
        self.args.steps_per_generation = 1
        self.model = types.SimpleNamespace(training=True)
        self.accelerator = _OneProcess()
        self._metrics = defaultdict(lambda: defaultdict(list))
        self._outputs = (logp, entropy, None)
        self._compute_loss = types.MethodType(trl.GRPOTrainer._compute_loss, self)
        self.get_high_entropy_mask = types.MethodType(trl.GRPOTrainer.get_high_entropy_mask, self)

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        return self._outputs


def trl_loss(batch: Batch, **config) -> tuple[float, dict]:
    """TRL's ``_compute_loss`` on ``batch`` with ``GRPOConfig`` settings ``config``."""
    harness = _TrlLossHarness(batch.logp, batch.entropy, batch.max_completion_length, **config)
    b, t = batch.mask.shape
    inputs = {
        "prompt_ids": torch.zeros(b, 1, dtype=torch.long),
        "prompt_mask": torch.ones(b, 1, dtype=torch.long),
        "completion_ids": torch.zeros(b, t, dtype=torch.long),
        "completion_mask": batch.mask.long(),
        "advantages": batch.adv,
        "old_per_token_logps": batch.old,
        "ref_per_token_logps": batch.ref,
        "num_items_in_batch": batch.mask.sum(),
    }
    loss = harness._compute_loss(None, inputs)
    return float(loss), {k: v[-1] for k, v in harness._metrics["train"].items()}


def trl_advantages(rewards_per_func: torch.Tensor, num_generations: int,
                   aggregation: str = "sum_then_normalize") -> torch.Tensor:
    """TRL's advantages: trl 1.16.0, ``trl/trainer/grpo_trainer.py`` lines 2759-2810.

    Transcribed line for line from ``GRPOTrainer._generate_and_score_completions`` (which also
    samples, so it cannot run without a model) for TRL's default ``scale_rewards="group"``, all
    ``reward_weights`` 1 and one process; ``nanstd`` is TRL's own. Rewards are (N, K).
    """
    nanstd = _trl().nanstd
    weights = torch.ones(rewards_per_func.shape[1], dtype=rewards_per_func.dtype)
    unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)
    if aggregation == "sum_then_normalize":
        rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        rewards[unscorable_mask] = torch.nan
        mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations), dim=1)
        mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(num_generations, dim=0)
        if num_generations > 1:
            std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)
            std_rewards = std_rewards.repeat_interleave(num_generations, dim=0)
        else:
            std_rewards = torch.zeros_like(rewards)
        advantages = rewards - mean_grouped_rewards
        advantages = advantages / (std_rewards + 1e-4)
    else:  # "normalize_then_sum" (GDPO)
        grouped = rewards_per_func.view(-1, num_generations, rewards_per_func.shape[1])
        mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
        std_k = nanstd(grouped, dim=1, keepdim=True) if num_generations > 1 \
            else torch.zeros_like(mean_k)
        reward_k = (grouped - mean_k) / (std_k + 1e-4)
        reward_k = reward_k.view(-1, rewards_per_func.shape[1])
        rewards = (reward_k * weights.unsqueeze(0)).nansum(dim=1)
        rewards[unscorable_mask] = torch.nan
        std_rewards = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 \
            else torch.zeros_like(rewards)
        advantages = (rewards - torch.nanmean(rewards)) / (std_rewards + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


# --------------------------------------------------------------------------------------------
# the fixed tensors
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """One optimisation batch: P prompts x G completions, ragged lengths, one empty row."""

    logp: torch.Tensor  # (B, T) current policy
    old: torch.Tensor  # (B, T) behaviour policy
    ref: torch.Tensor  # (B, T) reference policy
    adv: torch.Tensor  # (B,) GRPO advantages of ``rewards``
    mask: torch.Tensor  # (B, T) bool
    entropy: torch.Tensor  # (B, T)
    rewards: torch.Tensor  # (B,) float32, as reward functions return them
    rewards_per_func: torch.Tensor  # (B, 2) float32: correctness and format
    values: torch.Tensor  # (B, T) a critic's values at rollout time
    num_generations: int
    max_completion_length: int

    @property
    def index(self) -> np.ndarray:
        """verl's group ids (``uid``): one per prompt, repeated over its completions."""
        groups = len(self.rewards) // self.num_generations
        return np.repeat(np.arange(groups), self.num_generations)

    @property
    def adv_tokens(self) -> torch.Tensor:
        """(B, T) advantages as verl takes them: the sequence value on its response tokens."""
        return self.adv[:, None] * self.mask

    def outcome_tokens(self, rewards: torch.Tensor) -> torch.Tensor:
        """(B, T) token-level rewards as verl's reward managers build them: the reward on the
        last response token, and on the last column for an empty response (index -1)."""
        lengths = self.mask.sum(-1)
        last = torch.where(lengths > 0, lengths - 1, self.mask.shape[1] - 1)
        out = torch.zeros(self.mask.shape, dtype=rewards.dtype)
        out[torch.arange(len(rewards)), last] = rewards
        return out


#: Response lengths of the fixed batch; row 5 is empty (e.g. a truncated answer masked out).
LENGTHS = (9, 3, 6, 1, 7, 0, 5, 8, 2, 9, 4, 6)
REWARDS = (1.0, 0.0, 0.3, 1.0, 0.0, 0.7, 1.0, 0.2, 0.6, 0.5, 1.0, 0.0)
CORRECT = (1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0)
FORMAT = (1.0, 0.5, 1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 1.0, 0.0, 1.0, 0.5)
#: Per-row drift of log pi - log pi_old: the rows with A < 0 drift far enough (r > 3) for
#: dual-clip to bind, the others leave the clip band on both sides.
DRIFT = (0.35, -0.4, 1.3, -0.25, 0.5, 0.0, -0.3, 1.2, 0.15, -0.35, 0.3, 1.25)


@lru_cache(maxsize=1)
def fixed_batch() -> Batch:
    """The seeded batch every row is measured on: 3 prompts x 4 completions, T = 9 padded
    tokens, L_max = 16, float64 log-probs, one token whose reference log-ratio is 3."""
    g = torch.Generator().manual_seed(20250611)
    b, t, num_generations = len(LENGTHS), max(LENGTHS), 4
    mask = torch.arange(t)[None] < torch.tensor(LENGTHS)[:, None]
    d = torch.float64
    logp = -torch.rand(b, t, dtype=d, generator=g) * 3
    drift = torch.tensor(DRIFT, dtype=d)[:, None]
    old = logp - drift - torch.randn(b, t, dtype=d, generator=g) * 0.2
    ref = logp + torch.randn(b, t, dtype=d, generator=g) * 0.5
    ref[0, 0] = logp[0, 0] + 3.0  # k3 = e^3 - 4 = 16.1 on this token
    entropy = torch.rand(b, t, dtype=d, generator=g) * 2
    values = torch.where(mask, torch.rand(b, t, dtype=d, generator=g) * 0.8, 0)
    rewards = torch.tensor(REWARDS, dtype=torch.float32)
    adv = group_advantages(rewards.double(), num_generations)
    per_func = torch.tensor([CORRECT, FORMAT], dtype=torch.float32).T.contiguous()
    return Batch(logp, old, ref, adv, mask, entropy, rewards, per_func, values,
                 num_generations, 16)


@lru_cache(maxsize=1)
def covariance_batch() -> Batch:
    """A larger seeded batch (16 x 320 tokens, lengths 100-320) for Clip-Cov/KL-Cov, whose
    token counts are ratios of the number of valid tokens."""
    g = torch.Generator().manual_seed(7)
    b, t = 16, 320
    lengths = torch.randint(100, t + 1, (b,), generator=g)
    mask = torch.arange(t)[None] < lengths[:, None]
    d = torch.float64
    logp = -torch.rand(b, t, dtype=d, generator=g) * 4
    old = logp - torch.randn(b, t, dtype=d, generator=g) * 0.1
    rewards = (torch.rand(b, generator=g) < 0.5).float()
    adv = group_advantages(rewards.double(), 4)
    zeros = torch.zeros(b, t, dtype=d)
    return Batch(logp, old, logp.clone(), adv, mask, zeros, rewards, rewards[:, None], zeros,
                 4, t)


# --------------------------------------------------------------------------------------------
# episodes: one scripted policy through labkit's episode loop and TRL's tool loop
# --------------------------------------------------------------------------------------------

#: The turns a scripted policy writes in each episode, in order (each closed by its end-of-turn
#: token); every episode runs on a fresh :class:`labkit.agents.CalculatorEnv`. Rows: a call then
#: the answer; a call whose JSON lacks its closing brace; two calls in one turn; a call to a
#: tool that does not exist (the tool dispatch fails); a call the calculator answers with its own
#: error text (division by zero); three calls in three turns, one past the turn limit.
EPISODE_SCRIPTS = (
    (format_tool_call("calculator", {"expression": "425*13"}), "<answer>5525</answer>"),
    ('<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+2"}\n</tool_call>',
     "<answer>4</answer>"),
    (format_tool_call("calculator", {"expression": "1+1"})
     + format_tool_call("calculator", {"expression": "2+2"}), "<answer>4</answer>"),
    (format_tool_call("search", {"query": "2+2"}), "<answer>4</answer>"),
    (format_tool_call("calculator", {"expression": "1/0"}), "<answer>none</answer>"),
    (format_tool_call("calculator", {"expression": "1+1"}),
     format_tool_call("calculator", {"expression": "2+2"}),
     format_tool_call("calculator", {"expression": "3+3"}), "<answer>6</answer>"),
)
#: ``max_tool_calling_iterations`` of the scripted batch, and its ``max_completion_length``.
TURN_LIMIT, EPISODE_BUDGET = 2, 256


@lru_cache(maxsize=1)
def tool_tokenizer():
    """The shipped tool model's tokenizer (chat template and response template with tool calls)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model_path("tiny-tools"))


def episode_prompts(rows: int) -> list[list[dict]]:
    """One conversational prompt per episode; each differs, so the script finds its episode."""
    return [[{"role": "user", "content": f"Episode {row}: compute with the calculator."}]
            for row in range(rows)]


class _ScriptedPolicy:
    """Writes :data:`EPISODE_SCRIPTS`' turns in place of sampling: an episode is recognised by its
    prompt (the start of its context), and its next turn is cut at the sampler's budget."""

    def __init__(self, tokenizer, prompt_ids: list[list[int]], scripts):
        self.prompt_ids = [list(map(int, ids)) for ids in prompt_ids]
        eos = [tokenizer.eos_token_id]
        self.turns = [[tokenizer(turn, add_special_tokens=False)["input_ids"] + eos
                       for turn in script] for script in scripts]
        self.written = [0] * len(scripts)

    def next_turn(self, context: list[int], budget: int) -> tuple[list[int], bool]:
        """The episode's next turn (ids, cut at ``budget``) and whether the cut shortened it."""
        row = next(i for i, ids in enumerate(self.prompt_ids) if context[:len(ids)] == ids)
        turn = self.turns[row][self.written[row]]
        self.written[row] += 1
        return turn[:budget], len(turn) > budget


def labkit_episodes(scripts=EPISODE_SCRIPTS, max_completion_length: int = EPISODE_BUDGET,
                    limit: int | None = TURN_LIMIT):
    """labkit's :func:`~labkit.agents.episodes.run_episodes` on the scripted policy: its
    ``generate_from_ids`` (the sampler) is replaced for the call, every other line runs."""
    from labkit.agents import episodes as loop

    tokenizer = tool_tokenizer()
    prompts = episode_prompts(len(scripts))
    ids, mask = encode_prompts(tokenizer, prompts, "cpu")
    policy = _ScriptedPolicy(tokenizer, [i[m.bool()] for i, m in zip(ids, mask)], scripts)

    def sample(model, tokenizer, ids, mask, *, max_completion_length, **_):
        turns = [policy.next_turn(i[m.bool()].tolist(), max_completion_length)
                 for i, m in zip(ids, mask)]
        width = max(len(t) for t, _ in turns)
        out = torch.full((len(turns), width), tokenizer.pad_token_id, dtype=torch.long)
        for row, (turn, _) in enumerate(turns):
            out[row, :len(turn)] = torch.tensor(turn)
        return types.SimpleNamespace(
            completion_ids=out, lengths=torch.tensor([len(t) for t, _ in turns]),
            truncated=torch.tensor([cut for _, cut in turns]),
            logprobs=torch.zeros(out.shape), entropies=torch.zeros(out.shape))

    envs = [CalculatorEnv() for _ in scripts]
    for env in envs:
        env.reset()
    real, loop.generate_from_ids = loop.generate_from_ids, sample
    try:
        return loop.run_episodes(torch.nn.Linear(1, 1), tokenizer, prompts, envs,
                                 max_completion_length=max_completion_length,
                                 max_tool_calling_iterations=limit)
    finally:
        loop.generate_from_ids = real


class _TrlEpisodeHarness:
    """What ``GRPOTrainer._generate`` reads from ``self`` (one process, no vLLM, text only),
    around TRL's own ``_generate``, ``_tokenize_prompts``, ``_tool_call_loop`` and
    ``_get_tool_suffix_ids``. The sampler (``_generate_single_turn``) is the scripted policy;
    the tools are each environment's public methods, TRL's rule (its ``_prepare_inputs``)."""

    def __init__(self, scripts, max_completion_length: int, limit: int | None):
        trl = _trl()
        self.processing_class = self._tokenizer = tokenizer = tool_tokenizer()
        self.chat_template, self.chat_template_kwargs = None, {}
        self._is_vlm = self.use_vllm = False
        self.rollout_func = self.environment_factories = None
        envs = [CalculatorEnv() for _ in scripts]
        for env in envs:
            env.reset()
        self.tools = [envs[0].calculator]
        self._sync_tool_dicts = [environment_tools(env) for env in envs]
        self._async_tool_dicts = [{} for _ in envs]
        self.accelerator = _OneProcess()
        self.model = types.SimpleNamespace(training=True, config=types.SimpleNamespace(
            max_position_embeddings=tokenizer.model_max_length))
        self.state = types.SimpleNamespace(num_input_tokens_seen=0, global_step=0)
        self.eos_token_ids = [tokenizer.eos_token_id]
        self.num_generations = 1
        self.max_completion_length = max_completion_length
        self.max_tool_calling_iterations = sys.maxsize if limit is None else limit
        self._metrics = defaultdict(lambda: defaultdict(list))
        for name in ("_generate", "_tokenize_prompts", "_tool_call_loop", "_get_tool_suffix_ids"):
            setattr(self, name, types.MethodType(getattr(trl.GRPOTrainer, name), self))
        self.scripts = scripts
        self.policy = None

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations,
                              has_tool_images=False):
        if self.policy is None:  # the first call holds every prompt, in order
            self.policy = _ScriptedPolicy(self._tokenizer, prompt_ids, self.scripts)
        return [self.policy.next_turn(list(ids), self.max_completion_length)[0]
                for ids in prompt_ids], None


def trl_episodes(scripts=EPISODE_SCRIPTS, max_completion_length: int = EPISODE_BUDGET,
                 limit: int | None = TURN_LIMIT) -> dict:
    """TRL's ``GRPOTrainer._generate`` on the scripted policy: completion ids, ``tool_mask``,
    the parsed messages and the logged tool metrics (their last values)."""
    harness = _TrlEpisodeHarness(scripts, max_completion_length, limit)
    _, completion_ids, tool_mask, completions, *_ = harness._generate(
        episode_prompts(len(scripts)))
    metrics = {k: v[-1] for k, v in harness._metrics["train"].items()}
    return {"completion_ids": completion_ids, "tool_mask": tool_mask,
            "completions": completions, "metrics": metrics}


# --------------------------------------------------------------------------------------------
# one row per convention
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Convention:
    """One row of the page and its section."""

    key: str
    title: str
    labkit: str
    trl: str
    verl: str
    size: str
    paper: str
    match: str
    lacks: str | None = None
    #: (notebook file stem, the term its code uses) where a student meets this convention.
    in_class: tuple[str, str] | None = None


def in_class(notebook: str, term: str):
    """Mark a measure as one a student meets: the code of ``notebooks/<notebook>.ipynb`` calls
    the function or sets the field the row is about (``term``), so the notebook runs labkit's
    side of the convention. The page lists these rows first; ``tests/test_conventions.py``
    checks that the notebook still holds the term."""
    def mark(fn):
        fn.in_class = (notebook, term)
        return fn
    return mark


def _num(x: float, digits: int = 4) -> str:
    return f"{float(x):.{digits}g}"


def _diff(x: float) -> str:
    """An absolute difference; below 1e-12 it is float64 rounding, printed as such."""
    x = abs(float(x))
    return "< 1e-12" if x < 1e-12 else f"{x:.3g}"


def _diff32(x: float) -> str:
    """An absolute difference of float32 results; below 1e-6 it is float32 rounding."""
    x = abs(float(x))
    return "< 1e-6" if x < 1e-6 else f"{x:.3g}"


def _max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def _seq(x_tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's (B, T) outcome advantages back to one value per non-empty row."""
    return x_tokens[:, 0][mask.any(-1)]


def measure_empty_rows(v: Verl) -> Convention:
    b = fixed_batch()
    per_token = clipped_surrogate(token_log_ratio(b.logp, b.old, b.mask), b.adv[:, None])
    lab = aggregate(per_token, b.mask, "sequence_mean")
    trl, _ = trl_loss(b, loss_type="grpo")
    lab_full, _ = policy_loss(b.logp, b.old, b.adv, b.mask, loss_type="grpo")
    ver = v.core.agg_loss(per_token, b.mask, "seq-mean-token-mean")
    trainer = v.core.agg_loss(per_token, b.mask, "seq-mean-token-mean",
                              global_batch_size=len(LENGTHS))
    n, empty = len(LENGTHS), LENGTHS.count(0)
    return Convention(
        "empty-rows", "Empty responses in a sequence mean",
        "`grpo`: sum of sequence means / all B rows",
        "`grpo`: `.mean()` over all B rows",
        "`seq-mean-token-mean`: `agg_loss` divides by the non-empty rows unless "
        "`global_batch_size` is given (its trainer gives ppo_mini_batch_size x n)",
        f"labkit / verl `agg_loss` = {_num(lab / ver)} ({n - empty}/{n}, one empty row of {n}); "
        f"TRL - labkit {_diff(trl - float(lab_full))}; verl with global_batch_size={n}: "
        f"{_diff(trainer - lab)}",
        "GRPO objective, 1/G sum over i of 1/len(o_i) (arXiv 2402.03300, section 4.1.1, eq. 3)",
        "verl's trainer passes `global_batch_size` = `ppo_mini_batch_size` x `rollout.n`, which "
        "counts empty rows exactly like labkit and TRL; only a direct call of `agg_loss` (or "
        "`compute_policy_loss_*`) without it leaves them out. An empty row (a truncated answer "
        "masked by `mask_truncated_completions`, a filtered completion) then shrinks the "
        "denominator and scales the whole loss by B / (B - empty).",
        "No labkit setting reproduces a bare `agg_loss` call; none is needed, since verl's "
        "trainer agrees with labkit.",
    )


@in_class("01_ppo", "dual_clip")
def measure_dual_clip(v: Verl) -> Convention:
    b = fixed_batch()
    c = v.actor_default("clip_ratio_c")
    lab, _ = policy_loss(b.logp, b.old, b.adv, b.mask, loss_type="dapo")
    lab_c, _ = policy_loss(b.logp, b.old, b.adv, b.mask, loss_type="dapo", dual_clip=c)
    trl, _ = trl_loss(b, loss_type="dapo")
    trl_delta, _ = trl_loss(b, loss_type="dapo", delta=c)
    ver, _ = v.core.compute_policy_loss_vanilla(b.old, b.logp, b.adv_tokens, b.mask,
                                                "token-mean", config=v.actor())
    ratio = torch.exp(b.logp - b.old)
    binding = int(((ratio > c) & (b.adv[:, None] < 0) & b.mask).sum())
    return Convention(
        "dual-clip", "Dual-clip on by default",
        "`dual_clip=None`: off",
        "no dual-clip (only `delta`, off)",
        f"`clip_ratio_c={c}` in `vanilla`, always on (must be > 1)",
        f"token-mean loss: labkit {_num(lab)}, TRL {_num(trl)}, verl {_num(ver)} "
        f"({binding} tokens with A < 0 and r > {c}); labkit `dual_clip={c}` vs verl: "
        f"{_diff(lab_c - ver)}; TRL `delta={c}` vs verl: {_diff(trl_delta - float(ver))}",
        "dual-clip PPO (arXiv 1912.09729); PPO clip (arXiv 1707.06347, eq. 7)",
        f"Set labkit `dual_clip={c}` to get verl's default; verl cannot switch it off (the "
        f"assert needs c > 1), only make it inert with a huge `clip_ratio_c`. TRL's `delta={c}` "
        "gives the same loss (it also caps r for A > 0, where the clip at 1 + epsilon_high already "
        "binds). "
        "Dual-clip only binds off-policy (several mini-batches or iterations per batch). verl's "
        "`gspo`, `cispo`, `clip_cov` and `kl_cov` losses do not apply it.",
    )


@in_class("07_exploration", "cispo")
def measure_cispo_cap(v: Verl) -> Convention:
    b = fixed_batch()
    eps = v.actor_default("clip_ratio_high")
    lab, _ = policy_loss(b.logp, b.old, b.adv, b.mask, loss_type="cispo", epsilon_high=eps)
    trl, _ = trl_loss(b, loss_type="cispo", epsilon_high=eps)
    ver, _ = v.core.compute_policy_loss_cispo(b.old, b.logp, b.adv_tokens, b.mask,
                                              "token-mean", config=v.actor())
    lab_matched, _ = policy_loss(b.logp, b.old, b.adv, b.mask, loss_type="cispo",
                                 epsilon_high=1 + eps)
    return Convention(
        "cispo-cap", "CISPO's `epsilon_high`: absolute cap or half-width",
        "`epsilon_high` is the weight cap itself: w <= epsilon_high (required)",
        "`epsilon_high` is the weight cap itself (falls back to `epsilon`=0.2)",
        f"`clip_ratio_high` is a half-width: w <= 1 + clip_ratio_high (default {eps})",
        f"same {eps}: labkit {_num(lab)}, TRL {_num(trl)}, verl {_num(ver)}; labkit "
        f"`epsilon_high={1 + eps}` vs verl: {_num(abs(float(lab_matched) - float(ver)), 3)} "
        "(the lower bound, next row)",
        "CISPO, clipped IS weight (arXiv 2506.13585, section 3.1)",
        f"labkit/TRL `epsilon_high` = 1 + verl `clip_ratio_high` (verl {eps} is labkit "
        f"{1 + eps}); the paper writes the cap as 1 + eps_high, and TRL recommends "
        "`epsilon_high=5.0`. An `epsilon_high` below 1 caps every weight below 1 and shrinks "
        "every gradient: the 0.2 that is right for verl is a fivefold shrink in labkit. "
        "labkit keeps TRL's meaning, one field read per loss as TRL reads it: for "
        "`loss_type='cispo'` `epsilon_high` is the absolute cap on the weight, for the clipped "
        "losses the upper band's half-width (ratio <= 1 + `epsilon_high`); "
        "`TrainConfig.upper_clip` resolves its None (= `epsilon`) once, and a TRL CISPO config "
        "carries over unchanged.",
    )


@in_class("07_exploration", "cispo")
def measure_cispo_floor(v: Verl) -> Convention:
    b = fixed_batch()
    low, high = v.actor_default("clip_ratio_low"), v.actor_default("clip_ratio_high")
    ver, _ = v.core.compute_policy_loss_cispo(b.old, b.logp, b.adv_tokens, b.mask,
                                              "token-mean", config=v.actor())
    lab, _ = policy_loss(b.logp, b.old, b.adv, b.mask, loss_type="cispo", epsilon_high=1 + high)
    floored, _ = policy_loss(b.logp, b.old, b.adv, b.mask, loss_type="cispo",
                             epsilon_high=1 + high, cispo_min_weight=1 - low)
    below = int(((torch.exp(b.logp - b.old) < 1 - low) & b.mask).sum())
    return Convention(
        "cispo-floor", "CISPO's lower bound on the weight",
        "none (w only capped above)",
        "none (w only capped above)",
        f"w >= 1 - clip_ratio_low (default {low}: w in [{1 - low:g}, {1 + high:g}])",
        f"caps equal ({1 + high:g}): labkit - verl {_num(float(lab) - float(ver))} "
        f"({below} tokens with w < {1 - low:g}); labkit `cispo_min_weight={1 - low:g}` vs "
        f"verl: {_diff(floored - ver)}",
        "CISPO, r-hat = clip(r, 1 - eps_low, 1 + eps_high) (arXiv 2506.13585, section 3.1)",
        "verl's default CISPO clips the weight from below too, so tokens the policy has made "
        "less likely keep at least 0.8 of their gradient weight; labkit and TRL let the weight "
        "fall to 0. labkit's `cispo_min_weight` (a `TrainConfig` field and a `policy_loss` option "
        "of `loss_type='cispo'`) gives the floor: `epsilon_high=1.2, cispo_min_weight=0.8` is "
        "verl's default CISPO exactly. TRL has no floor (the bridge refuses the field).",
        None,
    )


def _verl_gdpo(v: Verl, b: Batch, mask: torch.Tensor) -> torch.Tensor:
    """verl's GDPO advantages (B, T), the two rewards passed as its reward keys."""
    n, t = mask.shape
    prompt = torch.ones(n, 2, dtype=torch.long)
    batch = {"prompts": prompt, "attention_mask": torch.cat([prompt, mask.long()], 1)}
    names = ("correct", "format")
    scores = {name: b.rewards_per_func[:, k].numpy() for k, name in enumerate(names)}
    config = v.AlgoConfig(gdpo_reward_keys=list(names))
    advantages, _ = v.core.compute_gdpo_outcome_advantage(
        torch.zeros(n, t), mask.float(), b.index, config=config, non_tensor_batch=scores,
        batch=batch)
    return advantages


@in_class("03_baselines", "gdpo")
def measure_gdpo(v: Verl) -> Convention:
    b = fixed_batch()
    lab = combine_rewards(b.rewards_per_func, None, b.num_generations, "normalize_then_sum")
    trl = trl_advantages(b.rewards_per_func, b.num_generations, "normalize_then_sum")
    rows = b.mask.any(-1)
    ragged = _max_abs(lab[rows], _seq(_verl_gdpo(v, b, b.mask), b.mask))
    full = torch.ones_like(b.mask)
    equal = _max_abs(lab, _seq(_verl_gdpo(v, b, full), full))
    n, t = b.mask.shape
    bessel = math.sqrt(t * (n - 1) / (n * t - 1))
    return Convention(
        "gdpo", "GDPO's final normalisation: over sequences or over tokens",
        "z-score of the summed advantages over the B sequences (std + 1e-4)",
        "z-score over the B sequences (std + 1e-4)",
        "`masked_whiten` over tokens: each sequence weighs its length, Bessel over tokens, "
        "rsqrt(var + 1e-8); per-reward step eps 1e-6",
        f"max abs A labkit - verl: {_num(ragged, 3)} on the {int(rows.sum())} non-empty rows "
        f"(2 rewards, ragged lengths); {_num(equal, 3)} with every length {t} (Bessel factor "
        f"{_num(bessel, 3)}); TRL - labkit {_diff32(_max_abs(trl, lab))}",
        "GDPO, group-wise then batch-wise normalisation (arXiv 2601.05242, section 3)",
        "The paper normalises the summed advantage over the batch; labkit and TRL count every "
        "completion once, verl counts every token (long completions pull the mean and the std "
        "towards themselves, and an empty completion does not count). Even with equal lengths "
        "L the stds differ: verl's Bessel correction counts B x L tokens, labkit's B "
        "completions, a factor sqrt(L (B - 1) / (B L - 1)). No setting makes them agree.",
        "labkit lacks: a token-weighted final normalisation for GDPO (verl's), e.g. "
        "`gdpo_final_normalization: str = \"sequence\"` with `\"token\"`.",
    )


def measure_entropy(v: Verl) -> Convention:
    b = fixed_batch()
    coef = 0.01
    lab = -float(entropy_bonus(b.entropy, b.mask, 1.0))
    with_bonus, _ = trl_loss(b, entropy_coef=coef)
    without, _ = trl_loss(b, entropy_coef=0.0)
    trl = (without - with_bonus) / coef
    token = float(v.core.agg_loss(b.entropy, b.mask, "token-mean"))
    seq = float(v.core.agg_loss(b.entropy, b.mask, "seq-mean-token-mean"))
    norm = float(v.core.agg_loss(b.entropy, b.mask, "seq-mean-token-sum-norm"))
    return Convention(
        "entropy-aggregation", "The entropy bonus's average",
        "token mean over the batch, whatever `loss_type`",
        "token mean over the batch, whatever `loss_type`",
        "`agg_loss` with the actor's `loss_agg_mode` (the policy loss's own aggregation)",
        f"mean entropy: labkit {_num(lab)}, TRL {_num(trl)}; verl token-mean {_num(token)}, "
        f"seq-mean-token-mean {_num(seq)}, seq-mean-token-sum-norm {_num(norm)}",
        "entropy bonus c2 S in PPO's objective (arXiv 1707.06347, eq. 9)",
        "With `loss_agg_mode=token-mean` (verl's default; labkit's `dapo`) all three agree. With "
        "a sequence mean (GSPO, SAPO recipes) or Dr. GRPO's `seq-mean-token-sum-norm`, verl "
        "averages the entropy the same way as the policy loss, so the same `entropy_coeff` "
        "means a different bonus: under Dr. GRPO's norm it is divided by the padded width.",
        "labkit lacks: an entropy bonus aggregated like the policy loss (verl), e.g. "
        "`entropy_aggregation: str = \"token_mean\"` with `\"loss_type\"`.",
    )


@in_class("03_baselines", "dr_grpo")
def measure_dr_grpo_scale(v: Verl) -> Convention:
    b = fixed_batch()
    per_token = clipped_surrogate(token_log_ratio(b.logp, b.old, b.mask), b.adv[:, None])
    lab = aggregate(per_token, b.mask, "fixed_length", max_completion_length=b.max_completion_length)
    lab_full, _ = policy_loss(b.logp, b.old, b.adv, b.mask, loss_type="dr_grpo",
                              max_completion_length=b.max_completion_length)
    trl, _ = trl_loss(b, loss_type="dr_grpo")
    ver = v.core.agg_loss(per_token, b.mask, "seq-mean-token-sum-norm")
    matched = v.core.agg_loss(per_token, b.mask, "seq-mean-token-sum-norm",
                              global_batch_size=len(LENGTHS),
                              loss_scale_factor=b.max_completion_length)
    n, t = b.mask.shape
    nonempty = int(b.mask.any(-1).sum())
    return Convention(
        "dr-grpo-scale", "Dr. GRPO's constant denominator",
        "`dr_grpo`: sum / (B x `max_completion_length`)",
        "`dr_grpo`: sum / (B x `max_completion_length`)",
        "`seq-mean-token-sum-norm`: sum / non-empty rows / `loss_scale_factor`, default the "
        "padded width of the micro-batch",
        f"labkit / verl = {_num(lab / ver)} (= {nonempty} x {t} / ({n} x "
        f"{b.max_completion_length}): T = {t} padded, L_max = {b.max_completion_length}); TRL - "
        f"labkit {_diff(trl - float(lab_full))}; verl with `loss_scale_factor="
        f"{b.max_completion_length}`, global_batch_size={n}: {_diff(matched - lab)}",
        "Dr. GRPO, a constant instead of 1/len(o_i) (arXiv 2503.20783, section 3.2)",
        "Set verl `actor.loss_scale_factor` = `max_completion_length` (its docstring asks for a "
        "constant there): then labkit, TRL and verl's trainer agree. By default verl divides by "
        "the padded width of each micro-batch's mask (`loss_mask.shape[-1]`), which can change "
        "from one micro-batch to the next, so Dr. GRPO's constant is not constant.",
        "labkit lacks nothing to match verl's recommended setting; verl's default (the padded "
        "width) is not offered.",
    )


@in_class("02_grpo", "group_advantages")
def measure_grpo_epsilon(v: Verl) -> Convention:
    b = fixed_batch()
    lab = group_advantages(b.rewards, b.num_generations)
    lab_six = group_advantages(b.rewards, b.num_generations, eps=1e-6)
    trl = trl_advantages(b.rewards[:, None], b.num_generations)
    ver, _ = v.core.compute_grpo_outcome_advantage(b.rewards[:, None], torch.ones(len(b.rewards),
                                                   1), b.index)
    ver = ver[:, 0]
    return Convention(
        "grpo-epsilon", "The epsilon of GRPO's std",
        "`(r - mean) / (std + 1e-4)` (`group_advantages(eps=1e-4)`)",
        "`(r - mean) / (std + 1e-4)`, hard-coded",
        "`(r - mean) / (std + 1e-6)` (`epsilon` argument, not in the config)",
        f"max abs A: labkit - verl {_num(_max_abs(lab, ver), 3)}, relative "
        f"{_num(float(((lab - ver).abs() / ver.abs().clamp(min=1e-12)).max()), 3)} "
        f"(groups of 4, float32 rewards); labkit `eps=1e-6` vs verl "
        f"{_diff32(_max_abs(lab_six, ver))}; TRL - labkit {_diff32(_max_abs(trl, lab))}",
        "GRPO's outcome advantage (r - mean) / std (arXiv 2402.03300, section 4.1.2)",
        "`group_advantages(..., eps=1e-6)` reproduces verl up to float32 rounding; the relative "
        "difference is (1e-4 - 1e-6) / std, so it matters only for groups whose rewards barely "
        "differ (std near 1e-4, e.g. small partial-credit rewards).",
        "labkit lacks: a `TrainConfig` field for the epsilon (the function has `eps`), e.g. "
        "`advantage_epsilon: float = 1e-4` (verl's argument is `epsilon`; TRL has none).",
    )


def measure_singleton(v: Verl) -> Convention:
    b = fixed_batch()
    r = b.rewards
    index = np.arange(len(r))
    lab = torch.stack([group_advantages(r, 1), rloo_advantages(r, 1),
                       opo_advantages(r, torch.ones(len(r)), 1)])
    trl = trl_advantages(r[:, None], 1)
    ones = torch.ones(len(r), 1)
    out = {name: getattr(v.core, f"compute_{name}_outcome_advantage")(r[:, None], ones,
                                                                       index)[0][:, 0]
           for name in ("grpo", "rloo", "opo", "grpo_vectorized", "rloo_vectorized")}
    raw = max(_max_abs(out[name], r) for name in ("grpo", "rloo", "opo", "grpo_vectorized"))
    return Convention(
        "singleton-groups", "A group of one completion",
        "advantage 0 (GRPO, RLOO, OPO: no baseline without a second sample)",
        "advantage 0 (r - its own mean)",
        "`grpo`, `grpo_vectorized`: r / (1 + 1e-6); `rloo`, `opo`: r (baseline 0); "
        "`rloo_vectorized`: 0",
        f"verl `grpo`/`rloo`/`opo` - labkit: max abs A {_num(_max_abs(out['grpo'], lab[0]), 4)} "
        f"(= the largest reward; verl - raw reward {_diff32(raw)}); "
        f"`rloo_vectorized` {_diff(_max_abs(out['rloo_vectorized'], lab[1]))}; TRL - labkit "
        f"{_diff(_max_abs(trl, lab[0]))}",
        "group baselines need G >= 2 (GRPO, arXiv 2402.03300, section 4.1.2; RLOO, arXiv "
        "2402.14740)",
        "With G = 1 verl trains on the raw, uncentred reward (REINFORCE without a baseline), "
        "labkit and TRL train on nothing. labkit refuses G = 1 for group estimators in "
        "`TrainConfig`; use ReMax (a greedy baseline) or PPO's critic for one sample per prompt. "
        "verl's ragged groups (a prompt whose other samples were filtered) hit the same case.",
    )


@in_class("03_baselines", "opo_advantages")
def measure_opo_empty(v: Verl) -> Convention:
    b = fixed_batch()
    lengths = b.mask.sum(-1)
    lab = opo_advantages(b.rewards, lengths, b.num_generations)
    ver, _ = v.core.compute_opo_outcome_advantage(b.outcome_tokens(b.rewards), b.mask.float(),
                                                  b.index)
    rows = b.mask.any(-1)
    empty_group = torch.zeros(4, 3, dtype=torch.bool)
    lone = torch.tensor([1.0, 0.0, 1.0, 0.0])
    lab_empty = opo_advantages(lone, torch.zeros(4), 4)
    ver_empty, _ = v.core.compute_opo_outcome_advantage(
        torch.cat([torch.zeros(4, 2), lone[:, None]], 1), empty_group.float(), np.zeros(4))
    nan = int(torch.isnan(ver_empty).any(-1).sum())
    return Convention(
        "opo-empty", "OPO's length weight of an empty response",
        "length clamped to 1: an empty response weighs like a one-token one",
        "no OPO",
        "raw length 0: the empty response leaves the baseline; an all-empty group divides 0 by 0",
        f"group with one empty response: max abs A labkit - verl "
        f"{_num(_max_abs(lab[rows], _seq(ver, b.mask)), 3)}; all-empty group: verl gives NaN on "
        f"{nan} of 4 rows, labkit {_num(float(lab_empty.abs().max()), 2)} (plain mean baseline, "
        "finite)",
        "OPO, length-weighted optimal baseline (arXiv 2505.23585, section 3)",
        "Only empty responses differ. They occur when a completion is cut at zero tokens or "
        "masked whole (e.g. `mask_truncated_completions`); verl then gets NaN advantages for an "
        "all-empty group, which reach the loss unless every token of the group is masked. "
        "labkit's clamp is deliberate and has no switch.",
    )


@in_class("03_baselines", "batch_normalize")
def measure_whitening(v: Verl) -> Convention:
    b = fixed_batch()
    token_rewards = outcome_to_token_rewards(b.rewards.double(), b.mask)
    lam = 0.95
    adv, returns = gae(token_rewards, b.values, b.mask, 1.0, lam)
    lab = batch_normalize(adv, b.mask)
    lab_zero = batch_normalize(adv, b.mask, eps=0.0)
    ver, ver_returns = v.core.compute_gae_advantage_return(token_rewards, b.values,
                                                           b.mask.double(), 1.0, lam)
    m = b.mask
    return Convention(
        "whitening", "Whitening the advantages",
        "`batch_normalize`: (A - mean) / (std + 1e-4), Bessel std, over valid tokens",
        "none in 1.16 (no PPO trainer)",
        "`masked_whiten`: (A - mean) x rsqrt(var + 1e-8), Bessel var (inside `gae`)",
        f"GAE (lambda {lam}) advantages whitened: max abs difference "
        f"{_num(_max_abs(lab[m], ver[m]), 3)}; "
        f"labkit `eps=0`: {_num(_max_abs(lab_zero[m], ver[m]), 2)}; GAE returns "
        f"{_diff(_max_abs(returns[m], ver_returns[m]))}",
        "per-batch advantage normalisation, one of the choices studied in arXiv 2006.05990",
        "The GAE recursion is the same; only the epsilon's place differs, a relative "
        "difference of about 1e-4 / std. `batch_normalize(..., eps=0.0)` matches verl up to "
        "1e-8 / var. verl's `reinforce_plus_plus(_baseline)` and GDPO use the same "
        "`masked_whiten`.",
        "labkit lacks: a `TrainConfig` field for the whitening epsilon (the trainer calls "
        "`batch_normalize` with its default), e.g. `whiten_epsilon: float = 1e-4`.",
    )


@in_class("02_grpo", "kl_estimate")
def measure_k3_clamp(v: Verl) -> Convention:
    b = fixed_batch()
    m = b.mask
    lab = kl_estimate(b.logp, b.ref, "k3")
    ver = v.core.kl_penalty(b.logp, b.ref, "low_var_kl")
    _, metrics = trl_loss(b, beta=0.04, use_bias_correction_kl=False)
    lab_mean = float(lab[m].mean())
    return Convention(
        "k3-clamp", "The k3 estimator's clamp",
        "`kl_estimate(..., 'k3')`: log-ratio clamped to [-20, 20], value not clamped",
        "no clamp",
        "`low_var_kl`/`k3`: log-ratio clamped to [-20, 20], then the value to [-10, 10]",
        f"one token with log(ref/pi) = 3: {_num(float(lab[0, 0]))} vs verl "
        f"{_num(float(ver[0, 0]))}; token-mean KL labkit {_num(lab_mean)} vs verl "
        f"{_num(float(ver[m].mean()))}; TRL - labkit {_diff(metrics['kl'] - lab_mean)}",
        "k3 = ratio - log ratio - 1 in GRPO's loss (arXiv 2402.03300, section 4.1.1, eq. 4)",
        "The clamp binds where k3 > 10: a token at least 2.6 nats more likely under the "
        "reference than under the policy (or 11 nats less likely); there verl's KL gradient "
        "is zero. verl also offers "
        "`k3+` (k3's value with k2's gradient, arXiv 2506.09477).",
        "labkit lacks: a clamp on the k3 value, e.g. `kl_clamp: float | None = None` (verl "
        "hard-codes 10), and verl's straight-through `kl_estimator=\"k3+\"`.",
    )


def _labkit_kl_cov(b: Batch, **fields) -> tuple[torch.Tensor, int]:
    """KL-Cov's loss as labkit's trainer composes it (``Trainer.accumulate_gradients``):
    ``token_filters`` picks the tokens and their penalty, ``policy_loss`` runs without the clip.
    Returns the loss and the number of penalised tokens."""
    config = TrainConfig(cov_penalty="kl_cov", **fields)
    _, penalty, chosen = token_filters(config, b.logp, b.old, b.adv, b.mask)
    loss, _ = policy_loss(b.logp, b.old, b.adv, b.mask, loss_type="dapo", epsilon=math.inf,
                          epsilon_high=math.inf, token_penalty=penalty)
    return loss, int(chosen.sum())


@in_class("07_exploration", "kl_cov")
def measure_kl_cov(v: Verl) -> Convention:
    b = covariance_batch()
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    verl_ratio = v.actor_default("policy_loss")["kl_cov_ratio"]
    verl_coef = v.actor_default("policy_loss")["ppo_kl_coef"]
    lab, lab_count = _labkit_kl_cov(b)
    matched, _ = _labkit_kl_cov(b, kl_cov_ratio=verl_ratio, kl_cov_coef=verl_coef)
    config = v.actor(policy_loss=dict(v.actor_default("policy_loss"), loss_mode="kl_cov"))
    ver, _ = v.core.compute_policy_loss_kl_cov(b.old, b.logp, b.adv_tokens, b.mask,
                                               "token-mean", config=config)
    tokens = int(b.mask.sum())
    return Convention(
        "kl-cov-defaults", "KL-Cov's defaults",
        f"`kl_cov_ratio={defaults['kl_cov_ratio']:g}`, `kl_cov_coef={defaults['kl_cov_coef']:g}`",
        "no KL-Cov",
        f"`kl_cov_ratio={verl_ratio:g}`, `ppo_kl_coef={verl_coef:g}`",
        f"{tokens} valid tokens: labkit penalises {lab_count}, verl "
        f"{max(1, int(verl_ratio * tokens))}; loss labkit - verl "
        f"{_num(float(lab) - float(ver), 3)}; "
        f"labkit with verl's two values: {_diff(matched - ver)}",
        "KL-Cov (arXiv 2505.22617, section 4)",
        f"Set labkit `kl_cov_ratio={verl_ratio:g}, kl_cov_coef={verl_coef:g}` to get verl's "
        "default. Both drop the PPO clip on every token under KL-Cov. Clip-Cov's defaults agree "
        "(`clip_cov_ratio` 2e-4, bounds 1 and 5); its tokens are drawn at random, so the two "
        "libraries agree in distribution, not token by token.",
    )


@in_class("01_ppo", "clip_range_value")
def measure_value_clip(v: Verl) -> Convention:
    b = fixed_batch()
    g = torch.Generator().manual_seed(3)
    m = b.mask
    old_values = b.values
    values = torch.where(m, old_values + torch.randn(m.shape, dtype=torch.float64,
                                                     generator=g) * 0.4, 0)
    token_rewards = outcome_to_token_rewards(b.rewards.double(), m)
    _, returns = gae(token_rewards, old_values, m, 1.0, 0.95)
    eps = {f.name: f.default for f in dataclasses.fields(TrainConfig)}["clip_range_value"]
    verl_eps = v.defaults["critic"]["cliprange_value"]
    lab, _ = value_loss(values, old_values, returns, m, eps)
    lab_matched, _ = value_loss(values, old_values, returns, m, verl_eps)
    ver, _ = v.core.compute_value_loss(values, returns, old_values, m.float(), verl_eps)
    return Convention(
        "value-clip", "The critic's value clip",
        f"`clip_range_value={eps}`",
        "no PPO trainer in 1.16 (its PPO trainer used 0.2)",
        f"`critic.cliprange_value={verl_eps}`",
        f"value loss labkit {_num(lab)} vs verl {_num(ver)} (value moves of std 0.4); labkit "
        f"`clip_range_value={verl_eps}`: {_diff(lab_matched - ver)}",
        "value clipping (arXiv 2005.12729, section 3)",
        f"Set labkit `clip_range_value={verl_eps}` to get verl's default. The clip is relative "
        "to the reward scale: with 0/1 rewards 0.2 is tight and 0.5 loose.",
    )


#: The sweep of constant groups: rewards k/100 for k = 0..300, group sizes 2-8 and 16.
SWEEP_VALUES = tuple(k / 100 for k in range(301))
SWEEP_GROUPS = (2, 3, 4, 5, 6, 8, 16)
SWEEP = "r = k/100 for k = 0..300, G in {2, 3, 4, 5, 6, 8, 16}, float32"


def constant_groups(values: tuple[float, ...], group_size: int) -> tuple[torch.Tensor,
                                                                          np.ndarray]:
    """Every value repeated ``group_size`` times (float32 rewards) and verl's group ids."""
    rewards = torch.tensor(values, dtype=torch.float32).repeat_interleave(group_size)
    return rewards, np.repeat(np.arange(len(values)), group_size)


def sweep_max(advantages, values: tuple[float, ...] = SWEEP_VALUES) -> float:
    """Largest abs advantage ``advantages(rewards, G, index)`` gives over the constant groups."""
    worst = 0.0
    for g in SWEEP_GROUPS:
        rewards, index = constant_groups(values, g)
        worst = max(worst, float(advantages(rewards, g, index).abs().max()))
    return worst


@in_class("02_grpo", "group_advantages")
def measure_constant_groups_trl() -> Convention:
    trl = sweep_max(lambda r, g, _: trl_advantages(r[:, None], g))
    binary = sweep_max(lambda r, g, _: trl_advantages(r[:, None], g), (0.0, 1.0))
    lab = sweep_max(lambda r, g, _: group_advantages(r, g))
    return Convention(
        "constant-groups-trl", "An all-equal group in TRL: rounding noise over 1e-4",
        "exactly 0 (max == min is tested)",
        "(r - mean) / (std + 1e-4): the float32 mean's rounding error divided by 1e-4",
        "see the next row",
        f"max abs A over the sweep: TRL {trl:.3g}, labkit {lab:g}; 0/1 rewards: TRL "
        f"{binary:g}. Sweep: {SWEEP}",
        "all-equal groups carry no signal (DAPO dynamic sampling, arXiv 2503.14476, section "
        "3.2)",
        "labkit's docs said TRL's advantage here is zero up to about 1e-8; it is up to 2.4e-3: "
        "the float32 mean of equal rewards can be off by one or two units in the last place "
        "(about 1e-7 for rewards between 1 and 3), and TRL divides that by 1e-4. It is exactly "
        "0 when every partial sum is exact in binary (0/1 rewards). The noise is a small, "
        "random-signed advantage on a group that should train nothing; DAPO's dynamic "
        "sampling drops such groups in every library.",
    )


@in_class("02_grpo", "group_advantages")
def measure_constant_groups_verl(v: Verl) -> Convention:
    def verl_advantages(name):
        fn = getattr(v.core, f"compute_{name}_outcome_advantage")
        return lambda r, g, index: fn(r[:, None], torch.ones(len(r), 1), index)[0][:, 0]

    grpo = sweep_max(verl_advantages("grpo"))
    vectorized = sweep_max(verl_advantages("grpo_vectorized"))
    binary = sweep_max(verl_advantages("grpo"), (0.0, 1.0))
    return Convention(
        "constant-groups-verl", "An all-equal group in verl: rounding noise over 1e-6",
        "exactly 0",
        "up to 2.4e-3 (previous row)",
        "(r - mean) / (std + 1e-6): the rounding error is comparable to 1e-6",
        f"max abs A over the sweep of the previous row: `grpo` {grpo:.2g}, `grpo_vectorized` "
        f"{vectorized:.2g}; 0/1 rewards: {binary:g}",
        "all-equal groups carry no signal (DAPO dynamic sampling, arXiv 2503.14476, section "
        "3.2)",
        "With eps = 1e-6 the rounding error of a constant group's mean (about 1e-7) is not "
        "small against the denominator: verl hands a group that carries no signal advantages "
        "of order 0.1 with random signs, a real gradient. 0/1 rewards are exact and give 0. Use "
        "0/1 or dyadic rewards, DAPO's dynamic sampling (`algorithm.filter_groups.enable=true`) "
        "or labkit's exact test.",
    )


@in_class("05_gspo", "importance_sampling_level")
def measure_gspo_clamp(v: Verl) -> Convention:
    t = 4
    logp = torch.full((2, t), -1.0, dtype=torch.float64)
    old = logp - torch.tensor([[12.0], [0.1]], dtype=torch.float64)
    mask = torch.ones(2, t, dtype=torch.bool)
    adv = torch.tensor([-1.0, 1.0], dtype=torch.float64)
    lab, _ = policy_loss(logp, old, adv, mask, loss_type="grpo",
                         importance_sampling_level="sequence_token")
    batch = dataclasses.replace(fixed_batch(), logp=logp, old=old, ref=logp, adv=adv, mask=mask,
                                entropy=torch.zeros_like(logp))
    trl, _ = trl_loss(batch, loss_type="grpo", importance_sampling_level="sequence")
    ver, _ = v.core.compute_policy_loss_gspo(old, logp, adv[:, None] * mask, mask,
                                             "seq-mean-token-mean", config=v.actor())
    return Convention(
        "gspo-clamp", "GSPO's sequence log-ratio clamp",
        "token log-ratios clamped to [-20, 20], the sequence mean not clamped",
        "no clamp",
        "GSPO-token log-ratio clamped at 10 from above",
        f"a sequence with log s = 12 and A = -1 (batch of 2): loss labkit {_num(lab)}, TRL "
        f"{_num(trl)}, verl {_num(ver)}",
        "GSPO's sequence ratio (arXiv 2507.18071, section 4)",
        "Binds only when a sequence's ratio exceeds e^10 = 22026 with A < 0, a run that has "
        "already diverged; verl's loss is then e^(log s - 10) times smaller and its gradient "
        "zero (the clamp cuts it). "
        "verl's `gspo` takes the actor's `loss_agg_mode` (default `token-mean`); the GSPO paper "
        "and labkit's recipe use a sequence mean (`grpo`).",
        "labkit lacks nothing worth adding: `dual_clip` already zeroes such a sequence's "
        "gradient, from r > c on.",
    )


def measure_kl_in_reward(v: Verl) -> Convention:
    b = fixed_batch()
    m = b.mask
    estimator = {f.name: f.default for f in dataclasses.fields(TrainConfig)}["kl_estimator"]
    verl_kind = v.defaults["algorithm"]["kl_penalty"]
    zero = torch.zeros(len(b.rewards), dtype=torch.float64)
    lab = kl_penalized_rewards(zero, kl_estimate(b.old, b.ref, estimator), 1.0, m)
    lab_k1 = kl_penalized_rewards(zero, kl_estimate(b.old, b.ref, "k1"), 1.0, m)
    ver = -(v.core.kl_penalty(b.old, b.ref, verl_kind) * m).sum(-1)
    return Convention(
        "kl-in-reward", "The KL estimator put in the reward",
        f"`kl_in_reward=True` uses `kl_estimator` (default `{estimator}`)",
        "no KL in the reward",
        f"`algorithm.kl_penalty` (default `{verl_kind}`, i.e. k1)",
        f"sequence penalty with beta = 1: max abs difference {_num(_max_abs(lab, ver), 3)} over "
        f"the rows; labkit `kl_estimator='k1'`: {_diff(_max_abs(lab_k1, ver))}",
        "k1 in the reward is the unbiased placement (arXiv 2512.21852, section 3)",
        f"Set labkit `kl_estimator='k1'` with `kl_in_reward=True` to get verl's default (and "
        f"the estimator arXiv 2512.21852 recommends there); labkit's default `{estimator}` "
        "suits the KL in the loss, where verl's default `kl_loss_type` is also k3.",
    )


def measure_bias_correction() -> Convention:
    b = fixed_batch()
    beta = 0.04
    trl_default_value = trl_default("use_bias_correction_kl")
    lab, _ = policy_loss(b.logp, b.old, b.adv, b.mask, loss_type="dapo", beta=beta,
                         ref_logp=b.ref)
    lab_on, _ = policy_loss(b.logp, b.old, b.adv, b.mask, loss_type="dapo", beta=beta,
                            ref_logp=b.ref, use_bias_correction_kl=True)
    trl, _ = trl_loss(b, beta=beta)
    return Convention(
        "bias-corrected-kl", "The importance weight on the KL term",
        "`use_bias_correction_kl=False`: plain k3",
        f"`use_bias_correction_kl={trl_default_value}` (1.16 default): k3 x ratio",
        "no such option: plain k3",
        f"beta = {beta}, off-policy batch: loss labkit {_num(lab)}, TRL {_num(trl)}; labkit "
        f"`use_bias_correction_kl=True` vs TRL: {_diff(float(lab_on) - trl)}",
        "importance-corrected KL estimate (DeepSeek-V3.2, arXiv 2512.02556)",
        "On-policy (ratio 1) there is no difference. Set labkit `use_bias_correction_kl=True` "
        "to get TRL 1.16's default, or TRL's `False` to get labkit's and verl's.",
    )


def measure_top_entropy_bonus() -> Convention:
    b = fixed_batch()
    coef, quantile = 0.01, 0.2
    lab = -float(entropy_bonus(b.entropy, b.mask, 1.0))
    with_bonus, _ = trl_loss(b, entropy_coef=coef, top_entropy_quantile=quantile)
    without, _ = trl_loss(b, entropy_coef=0.0, top_entropy_quantile=quantile)
    trl = (without - with_bonus) / coef
    return Convention(
        "top-entropy-bonus", "The entropy bonus under a top-entropy filter",
        "mean over every response token",
        "mean over the tokens the filter keeps",
        "no top-entropy filter",
        f"`top_entropy_quantile={quantile}`: mean entropy in the bonus labkit {_num(lab)}, "
        f"TRL {_num(trl)}",
        "forking tokens (arXiv 2506.01939); entropy bonus (arXiv 1707.06347, eq. 9)",
        "With the filter on, TRL's bonus raises the entropy of the high-entropy tokens only "
        "(their mean is larger, so the same `entropy_coef` pushes harder on fewer tokens); "
        "labkit's raises it everywhere.",
        "labkit lacks: the TRL behaviour, e.g. `entropy_on_kept_tokens: bool = False`.",
    )


def measure_missing_reward(v: Verl) -> Convention:
    b = fixed_batch()
    r = b.rewards.clone()
    r[1] = torch.nan
    lab = group_advantages(r, b.num_generations)
    trl = trl_advantages(r[:, None], b.num_generations)
    ver, _ = v.core.compute_grpo_outcome_advantage(r[:, None].clone(), torch.ones(len(r), 1),
                                                   b.index)
    nan = int(torch.isnan(ver).sum())
    return Convention(
        "missing-reward", "A missing reward (NaN: the function returned None)",
        "left out of the group's statistics, advantage 0",
        "left out of the group's statistics, advantage 0",
        "NaN propagates: the group's mean and std are NaN",
        f"one NaN in a group of 4: verl NaN on {nan} rows; TRL - labkit "
        f"{_diff32(_max_abs(trl, lab))}",
        "none (TRL's convention for unscorable completions)",
        "verl's reward managers always return a number; a NaN reaching `compute_*_advantage` "
        "poisons the group, then the loss. labkit and TRL treat it as missing.",
    )


@lru_cache(maxsize=1)
def scripted_runs() -> tuple:
    """labkit's and TRL's episodes of :data:`EPISODE_SCRIPTS` (budget 256, turn limit 2)."""
    return labkit_episodes(), trl_episodes()


def _replies(text: str) -> list[str]:
    """The tool replies in an episode's text, in order."""
    return re.findall(r"<tool_response>\n(.*?)\n</tool_response>", text, flags=re.DOTALL)


def _trl_text(completion_ids: list[int]) -> str:
    return tool_tokenizer().decode(completion_ids)


def _calls_answered(trl: dict, row: int) -> int:
    """Tool messages TRL appended to episode ``row`` (one per call it answered)."""
    return sum(message["role"] == "tool" for message in trl["completions"][row])


@in_class("10_agents", "max_completion_length")
def measure_tool_budget() -> Convention:
    lab, _ = scripted_runs()
    policy, total = int(lab.action_mask[0].sum()), int(lab.lengths[0])
    first = int(lab.action_mask[0].tolist().index(0))  # the first turn, its end-of-turn included
    exact = first + (total - policy)  # the first turn plus the whole reply turn
    script = EPISODE_SCRIPTS[:1]
    at_lab, at_trl = labkit_episodes(script, exact, None), trl_episodes(script, exact, None)
    below_lab = labkit_episodes(script, exact - 1, None)
    below_trl = trl_episodes(script, exact - 1, None)
    return Convention(
        "tool-budget", "The environment's tokens and `max_completion_length`",
        "count: a reply is dropped (the episode ends) unless the completion stays below the "
        "budget, leaving room for one more token",
        "count: a reply is dropped only if it takes the completion past the budget; one that "
        "ends exactly at it is kept, with no token left to answer",
        "`response_length` counts them (0 in `response_mask`); a reply that brings the response "
        "to `response_length` is dropped, as in labkit (`tool_agent_loop.py`, "
        "`ToolAgentLoop._handle_processing_tools_state`; from source, not run)",
        f"one call and its answer: {total} tokens, {policy} the policy's, in both. Budget "
        f"{exact} (first turn {first} + reply turn {total - policy}): labkit "
        f"{int(at_lab.lengths[0])} tokens, reply dropped; TRL {len(at_trl['completion_ids'][0])}"
        f" tokens, reply kept, {sum(at_trl['tool_mask'][0]) - first} answer tokens. Budget "
        f"{exact - 1}: labkit {int(below_lab.lengths[0])}, TRL "
        f"{len(below_trl['completion_ids'][0])} (both drop it)",
        "tool outputs inside the rollout's length budget, masked from the loss (ToRL, "
        "arXiv 2503.23383; Search-R1, arXiv 2503.09516)",
        "Both trainers count the environment's tokens against `max_completion_length` (the "
        "completion is the whole episode after the prompt), so a tool that answers at length "
        "leaves the policy less room; only the last token differs: TRL keeps a reply that "
        "fills the budget exactly, and the episode ends there without an answer (truncated: "
        "its last token is not an end-of-turn, so `mask_truncated_completions=True` masks "
        "it); labkit drops the reply and ends the episode after the call, also truncated. No "
        "setting changes either rule; the difference is one token of budget.",
    )


@in_class("10_agents", "tool_error_rate")
def measure_malformed_call() -> Convention:
    lab, trl = scripted_runs()
    reply = "; ".join(_replies(lab.texts[1])) or "none"
    return Convention(
        "malformed-tool-call", "A malformed tool call (invalid JSON between the tags)",
        "answered with an `error: ...` reply, counted in `tool_errors`; the episode goes on",
        "not a call: `parse_response` falls back to text, the turn is the answer; no reply, "
        "not counted as a failure",
        "not a call: `HermesToolParser.extract_tool_calls` (`tool_parser.py`) skips it; no call "
        "left, the episode ends (from source, not run)",
        f"a call missing its closing brace: labkit {int(lab.turns[1])} turns, "
        f"{int(lab.lengths[1])} tokens, reply `{reply}`, {int(lab.tool_errors[1])} error; TRL "
        f"{len(trl['completions'][1])} turn, {len(trl['completion_ids'][1])} tokens, "
        f"{_calls_answered(trl, 1)} calls",
        "errors returned to the model as the tool's output (ToRL, arXiv 2503.23383)",
        "labkit treats the policy's text as hostile and tells it what was wrong, so a malformed "
        "call costs a turn and leaves a trace in `tool_error_rate`; under TRL (and verl) the "
        "same text ends the episode as if it were the answer, and the format reward or the "
        "answer check is the only signal. Neither trainer has a switch.",
    )


@in_class("10_agents", "max_tool_calling_iterations")
def measure_parallel_calls() -> Convention:
    lab, trl = scripted_runs()
    one_turn = trl_episodes(EPISODE_SCRIPTS[2:3], EPISODE_BUDGET, 1)
    return Convention(
        "parallel-tool-calls", "Two tool calls in one turn",
        "the last call is run (`last_tool_call`), one reply",
        "every call is run, one tool turn per call; `max_tool_calling_iterations` counts turns, "
        "not calls",
        "the first `multi_turn.max_parallel_calls` calls (default 1) are run "
        "(`ToolAgentLoop._handle_processing_tools_state`; from source, not run)",
        f"calls 1+1 then 2+2 in one turn: labkit replies {_replies(lab.texts[2])}, "
        f"{int(lab.tool_calls[2])} call, {int(lab.lengths[2])} tokens; TRL replies "
        f"{_replies(_trl_text(trl['completion_ids'][2]))}, {_calls_answered(trl, 2)} calls, "
        f"{len(trl['completion_ids'][2])} tokens; policy tokens {int(lab.action_mask[2].sum())}"
        f" and {sum(trl['tool_mask'][2])}; TRL with `max_tool_calling_iterations=1`: "
        f"{_calls_answered(one_turn, 0)} calls answered",
        "one call per turn in the tool-integrated rollout (ToRL, arXiv 2503.23383)",
        "The lab's demonstrations (`calculator_demonstration`) write one call per turn, so "
        "the rule binds when a policy learns to write several: labkit answers the last (the "
        "one the turn ends with), TRL all of them, verl the first. TRL's turn limit counts "
        "turns, so it answers more calls than `max_tool_calling_iterations` when a turn holds "
        "several; labkit's counts calls.",
    )


@in_class("10_agents", "tool_calls")
def measure_tool_metrics() -> Convention:
    from labkit.training.scoring import episode_metrics

    lab, trl = scripted_runs()
    ours, theirs = episode_metrics([lab]), trl["metrics"]
    calls_lab = [int(c) for c in lab.tool_calls]
    calls_trl = [_calls_answered(trl, row) for row in range(len(EPISODE_SCRIPTS))]
    return Convention(
        "tool-metrics", "The tool-call metrics: what a call and a failure are",
        "`tool_calls`: calls answered per episode (one per turn); `tool_error_rate`: replies "
        "that are errors (malformed call, unknown tool, the tool's own `error:` text) / calls",
        "`tools/call_frequency`: calls run per episode (several per turn); "
        "`tools/failure_frequency`: calls that raised or named no tool / calls; the bridge "
        "logs them as `tool_calls` and `tool_error_rate`",
        "`agent_loop/tool_calls/mean` is the seconds spent in tools (`AgentLoopMetrics`, a "
        "timer), no failure metric (`agent_loop.py`, `_performance_metrics`; from source, "
        "not run)",
        f"the {len(EPISODE_SCRIPTS)} scripted episodes: calls per episode labkit "
        f"{calls_lab}, TRL {calls_trl} (means {_num(ours['tool_calls'])} and "
        f"{_num(theirs['tools/call_frequency'])}); error rate labkit "
        f"{_num(ours['tool_error_rate'])}, TRL failure frequency "
        f"{_num(theirs['tools/failure_frequency'])}",
        "tool-use statistics of multi-turn RL (RAGEN/StarPO, arXiv 2504.20073)",
        "Equal means can hide different counts (a malformed call is a call to labkit, none to "
        "TRL; two calls in a turn are one to labkit, two to TRL). The error rates differ by "
        "definition: the calculator answers `1/0` with an error text, which labkit counts and "
        "TRL does not (the tool did not raise). A TRL history read through "
        "`labkit.trl_bridge` carries TRL's definitions under labkit's names: notebook 10's "
        "section 6 prints them from its TRL run.",
    )


def episode_agreements() -> list[tuple[str, str]]:
    """What labkit's episode loop and TRL's tool loop do alike on the scripted episodes."""
    lab, trl = scripted_runs()

    def same(row: int) -> bool:
        n = int(lab.lengths[row])
        return (lab.completion_ids[row, :n].tolist() == trl["completion_ids"][row]
                and lab.action_mask[row, :n].tolist() == trl["tool_mask"][row])

    row, limit = 0, len(EPISODE_SCRIPTS) - 1
    n, policy = int(lab.lengths[row]), int(lab.action_mask[row].sum())
    framing = sum(author == "environment" for _, author in token_authors(
        tool_tokenizer(), lab.completion_ids[row, :n], lab.action_mask[row, :n]))
    verdict = {True: "same tokens, same mask", False: "differ"}
    return [
        (("An episode with one call: completion ids, and the loss mask (labkit `action_mask`, "
          "TRL `tool_mask`)"),
         (f"{verdict[same(row)]}: {policy} of {n} tokens in the loss in both, the policy's "
          f"end-of-turn included; the {n - policy} of the reply's turn out, {framing} of them "
          "chat framing")),
        ("A call the tool answers with its own error text (`1/0`)", verdict[same(4)]),
        ((f"A third call past `max_tool_calling_iterations={TURN_LIMIT}`: left unanswered, the "
          "episode ends"),
         f"{verdict[same(limit)]}: {int(lab.tool_calls[limit])} calls answered in both"),
    ]


def measure_agreements(v: Verl) -> list[tuple[str, str]]:
    """Quantities the three libraries compute alike on the fixed batch: (what, difference)."""
    b = fixed_batch()
    n = len(LENGTHS)
    r = b.rewards.double()
    tokens = b.outcome_tokens(r)
    rows = b.mask.any(-1)
    per_token = clipped_surrogate(token_log_ratio(b.logp, b.old, b.mask), b.adv[:, None])
    token_mean = _max_abs(aggregate(per_token, b.mask, "token_mean"),
                          v.core.agg_loss(per_token, b.mask, "token-mean"))
    rloo = rloo_advantages(r, b.num_generations)
    verl_rloo = [getattr(v.core, f"compute_{name}_outcome_advantage")(tokens, b.mask.double(),
                                                                      b.index)[0]
                 for name in ("rloo", "rloo_vectorized")]
    baselines = torch.tensor([1.0, 0.0, 0.5], dtype=torch.float64)
    remax = remax_advantages(r, baselines, b.num_generations)
    verl_remax, _ = v.core.compute_remax_outcome_advantage(
        outcome_to_token_rewards(r, b.mask), baselines.repeat_interleave(b.num_generations),
        b.mask.double())
    dr_grpo = group_advantages(r, b.num_generations, scale_rewards="none")
    verl_dr, _ = v.core.compute_grpo_outcome_advantage(tokens, b.mask.double(), b.index,
                                                       norm_adv_by_std_in_grpo=False)
    counted = v.actor({"global_batch_size": n})
    sapo, _ = policy_loss(b.logp, b.old, b.adv, b.mask, loss_type="sapo")
    trl_sapo, _ = trl_loss(b, loss_type="sapo")
    verl_sapo, _ = v.core.compute_policy_loss_sapo(b.old, b.logp, b.adv_tokens, b.mask,
                                                   config=counted)
    gspo, _ = policy_loss(b.logp, b.old, b.adv, b.mask, loss_type="grpo",
                          importance_sampling_level="sequence_token")
    verl_gspo, _ = v.core.compute_policy_loss_gspo(b.old, b.logp, b.adv_tokens, b.mask,
                                                   "seq-mean-token-mean", config=counted)
    return [
        ("token-mean aggregation: labkit `dapo` vs verl `token-mean`", _diff(token_mean)),
        ("RLOO advantages, G = 4: labkit vs verl `rloo`, `rloo_vectorized`",
         ", ".join(_diff(_max_abs(rloo[rows], _seq(a, b.mask))) for a in verl_rloo)),
        ("ReMax advantages on every response token: labkit vs verl `remax`",
         _diff(_max_abs(remax[:, None].expand(b.mask.shape)[b.mask], verl_remax[b.mask]))),
        (("Dr. GRPO advantages (no std): labkit `scale_rewards='none'` vs verl "
          "`norm_adv_by_std_in_grpo=False`"),
         _diff(_max_abs(dr_grpo[rows], _seq(verl_dr, b.mask)))),
        (f"SAPO loss: labkit vs TRL, vs verl `sapo` (global_batch_size={n})",
         (f"{_diff32(trl_sapo - float(sapo))} (TRL's temperatures are float32), "
          f"{_diff(verl_sapo - sapo)}")),
        ((f"GSPO loss: labkit `sequence_token` + `grpo` vs verl `gspo`, "
          f"`seq-mean-token-mean` (global_batch_size={n})"), _diff(verl_gspo - gspo)),
        *episode_agreements(),
    ]


#: Every row of the page, in the order measured (the page lists them by :func:`class_order`).
MEASURES = (
    measure_empty_rows, measure_dual_clip, measure_cispo_cap, measure_cispo_floor,
    measure_gdpo, measure_entropy, measure_dr_grpo_scale, measure_grpo_epsilon,
    measure_singleton, measure_opo_empty, measure_whitening, measure_k3_clamp, measure_kl_cov,
    measure_value_clip, measure_constant_groups_trl, measure_constant_groups_verl,
    measure_gspo_clamp, measure_kl_in_reward, measure_bias_correction,
    measure_top_entropy_bonus, measure_missing_reward, measure_tool_budget,
    measure_malformed_call, measure_parallel_calls, measure_tool_metrics,
)


def needs_verl(measure) -> bool:
    """Whether ``measure`` takes verl's code (every measure that has a parameter does)."""
    return bool(measure.__code__.co_argcount)


def measure(fn, verl: Verl | None = None) -> Convention:
    row = fn(verl) if needs_verl(fn) else fn()
    return dataclasses.replace(row, in_class=getattr(fn, "in_class", None))


def class_order(rows: list[Convention]) -> list[Convention]:
    """The rows a student meets first, by notebook (then as measured), then the others."""
    return sorted(rows, key=lambda r: (0, r.in_class[0]) if r.in_class else (1, ""))


# --------------------------------------------------------------------------------------------
# the page
# --------------------------------------------------------------------------------------------

HEADER = """# Same name, different number: labkit, TRL and verl

labkit, TRL and verl implement the same RL losses and advantage estimators under the same names.
On the same tensors they do not always return the same number. Each row below is measured, not
read from documentation: `tests/conventions_measure.py` runs labkit's functions, TRL's own
`GRPOTrainer._compute_loss` (and a cited transcription of its advantage lines) and verl's
`core_algos.py` on fixed, seeded tensors: 3 prompts x 4 completions, ragged lengths with one
empty response, 9 padded tokens, `max_completion_length` 16, float64 log-probs, float32 rewards
(KL-Cov: 16 x 320 tokens). The episode rows run one scripted policy (fixed turns, the shipped
tool model's tokenizer, a calculator environment per episode) through labkit's `run_episodes`
and TRL's own `GRPOTrainer._generate` and tool loop; verl's agent loop is not loaded, so its
cells there are read from its source and say so. `tests/test_conventions.py` fails when a number
here no longer matches the code.

Versions measured: labkit {labkit}, trl {trl}, verl {verl} (wheel sha256 `{sha}`, not installed:
`core_algos.py` is loaded on its own). Regenerate with `{command}`.

A difference printed as `< 1e-12` is float64 rounding: the two agree.
"""


def _cell(text: str) -> str:
    if "|" in text or "\n" in text:
        raise ValueError(f"a table cell cannot hold '|' or a newline: {text!r}")
    return text


def table_line(row: Convention) -> str:
    """The row's line in the page's table."""
    cells = (f"`{row.key}`", row.title, row.labkit, row.trl, row.verl, row.size, row.paper)
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def render_page(rows: list[Convention], agreements: list[tuple[str, str]],
                verl: Verl) -> str:
    """The whole of ``docs/conventions.md``."""
    head = HEADER.format(labkit=importlib.metadata.version("labkit"), trl=_trl().version,
                         verl=VERL_VERSION, sha=verl.sha256, command=COMMAND)
    rows = class_order(rows)
    table = ["| id | convention | labkit | TRL | verl | measured difference | paper |",
             "|---|---|---|---|---|---|---|", *(table_line(r) for r in rows)]
    sections = ["## What to set to get the same number", ""]
    for number, row in enumerate(rows, 1):
        sections += [f"### {number}. {row.title} (`{row.key}`)", "", row.match, ""]
        if row.lacks:
            sections += [row.lacks, ""]
    lacks = [f"- `{r.key}`: {r.lacks.removeprefix('labkit lacks: ')}" for r in rows
             if r.lacks and r.lacks.startswith("labkit lacks:")]
    summary = ["## labkit lacks", "", *lacks, ""]
    agree = ["## Checked and equal", "", ("Measured on the same batch (the episode rows: on the scripted episodes), for "
              "contrast."), "",
             "| quantity | difference |", "|---|---|",
             *(f"| {_cell(what)} | {_cell(size)} |" for what, size in agreements), ""]
    return "\n".join([head, *in_class_section(rows), "## The conventions", "", *table, "",
                      *sections, *summary, *agree, *async_handoff()])


def in_class_section(rows: list[Convention]) -> list[str]:
    """The lines that say which rows come first and in which notebook a student meets them."""
    by_notebook = defaultdict(list)
    for row in rows:
        if row.in_class:
            by_notebook[row.in_class[0]].append(f"`{row.key}` (`{row.in_class[1]}`)")
    return ["## In class first", "",
            ("The table lists first the conventions a student runs in the lab's notebooks: the "
             "notebook's code calls the function or sets the field the row is about (named in "
             "brackets), so what it prints or trains with is labkit's side of the convention, "
             "and the same cell under TRL or verl would follow the other. The rest follow, in "
             "the order measured. `tests/test_conventions.py` checks that each notebook still "
             "uses the name."), "",
            *(f"- notebook {name[:2]} (`{name}.ipynb`): {', '.join(keys)}"
              for name, keys in sorted(by_notebook.items())), ""]


def async_handoff() -> list[str]:
    """The lines of the asynchronous hand-off section: the table notebook 11 shows
    (:mod:`labkit.offpolicy.handoff`, one source for both), not a measurement."""
    from labkit.offpolicy.handoff import SERVER_ONLY, handoff_markdown

    return ["## Asynchronous training: the same settings in TRL, prime-rl, verl and AReaL", "",
            ("Names, not numbers: what the other trainers call the settings of notebook 11 "
             "(`labkit.offpolicy.handoff`; TRL's read from TRL 1.16's "
             "`trl.experimental.async_grpo`). A dash: the framework has no such setting that we "
             "know of."), "",
            *handoff_markdown().splitlines(), "",
            "Refused by name (they need an inference server): " + "; ".join(SERVER_ONLY) + ".", ""]


def measure_all(verl: Verl) -> list[Convention]:
    return [measure(fn, verl) for fn in MEASURES]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="regenerate docs/conventions.md")
    args = parser.parse_args(argv)
    try:
        verl = load_verl()
    except VerlUnavailable as err:
        print(f"refusing to build the page without verl {VERL_VERSION}: {err}", file=sys.stderr)
        return 1
    page = render_page(measure_all(verl), measure_agreements(verl), verl)
    if args.write:
        DOC.parent.mkdir(parents=True, exist_ok=True)
        DOC.write_text(page, encoding="utf-8", newline="\n")
        print(f"wrote {DOC}")
    else:
        print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
