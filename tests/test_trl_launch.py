"""TRL's GRPOTrainer really runs distributed from the lab's entry point: two CPU processes, gloo.

``python -m labkit trl_train`` is launched as CI would launch it on GPUs, with
``accelerate launch --config_file labkit/trl_bridge/launch/cpu_2proc.yaml``, for 2 steps of the
GRPO preset on the shipped tiny Qwen (1 prompt x 8 completions per step, so each rank samples 4
completions of the same prompt and every group spans both ranks). The test then checks:

(a) both ranks ran: each wrote its ``ranks/rank<R>.json`` with its own pid, world size 2, the
    gloo backend, and 2 optimizer steps;
(b) the completions were gathered across ranks: the advantages TRL handed each rank equal the
    GRPO advantages of BOTH ranks' rewards (recomputed with :func:`labkit.advantages.
    combine_rewards`, cross-checked against TRL elsewhere), and differ from those of the rank's
    own rewards alone in at least one generation, so a run whose ranks only saw their own
    completions fails; the logged mean reward is the mean over both ranks' completions;
(c) the saved model (``final/``, written once, by the main process) differs from the shipped
    weights and is finite.

Launchers tried on a 2-core CPU machine without a GPU (accelerate 1.15, torch 2.13):
``accelerate launch --config_file cpu_2proc.yaml`` (distributed_type MULTI_GPU, which selects
torch's elastic launcher), ``accelerate launch --multi_gpu --num_processes 2`` and
``torchrun --standalone --nproc_per_node 2`` each start two ranks that join a gloo group (the
bridge sets ``use_cpu=True``, which makes accelerate pick MULTI_CPU/gloo; ACCELERATE_USE_CPU is
not needed). ``accelerate launch --cpu --num_processes 2`` starts ONE process: accelerate's CPU
launcher runs several only through mpirun. Measured on that machine: the launch takes 8-12 s (2
steps of training about 1 s of it, the rest two Python processes importing torch, transformers
and TRL and loading the model), this whole module 15 s.
"""

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")
pytest.importorskip("accelerate")

from safetensors.torch import load_file

from labkit.advantages import combine_rewards
from labkit.models import TINY_MODEL_DIR
from labkit.trl_bridge.train import LAUNCH_CONFIGS, launch_config

ROOT = Path(__file__).resolve().parent.parent
WORLD, STEPS, G = 2, 2, 8

pytestmark = pytest.mark.skipif(not TINY_MODEL_DIR.exists(),
                                reason="the shipped tiny model is missing")


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    out = tmp_path_factory.mktemp("trl_launch")
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(launch_config("cpu_2proc")),
        "-m", "labkit.trl_bridge.train", "--preset", "grpo", "--max-steps", str(STEPS),
        "--set", "prompts_per_step=1", "--set", f"num_generations={G}",
        "--set", "max_completion_length=48", "--set", "warmup_ratio=0",
        "--families", "add,sub", "--difficulties", "2,3", "--threads", "1",
        "--output-dir", str(out),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("WORLD_SIZE", None)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=out, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    seconds = time.perf_counter() - start
    assert done.returncode == 0, f"launch failed ({seconds:.0f} s):\n{done.stderr[-4000:]}"
    print(f"2-process TRL launch: {seconds:.1f} s")
    ranks = [json.loads((out / "ranks" / f"rank{r}.json").read_text()) for r in range(WORLD)]
    summary = json.loads((out / "summary.json").read_text())
    return out, ranks, summary


def test_both_ranks_ran_in_one_gloo_group(launched):
    _, ranks, summary = launched
    assert [r["rank"] for r in ranks] == [0, 1]
    assert len({r["pid"] for r in ranks}) == WORLD
    for info in ranks:
        assert info["world_size"] == WORLD and info["backend"] == "gloo", info
        assert info["global_step"] == STEPS and len(info["generations"]) == STEPS
        assert all(len(g["advantages"]) == G // WORLD for g in info["generations"])
    assert summary["num_processes"] == WORLD
    assert summary["trl_batch_sizes"]["per_device_train_batch_size"] == G // WORLD
    assert len(summary["history"]) == STEPS


def reward_table(generation) -> torch.Tensor:
    """(N, K) rewards of one rank's completions, one column per reward function."""
    columns = [[math.nan if r is None else r for r in values]
               for values in generation["rewards"].values()]
    return torch.tensor(columns, dtype=torch.float32).T


def test_group_statistics_span_both_ranks(launched):
    _, ranks, summary = launched
    weights = torch.tensor(ranks[0]["reward_weights"])
    discriminating = 0
    for step in range(STEPS):
        local = [reward_table(info["generations"][step]) for info in ranks]
        received = torch.tensor([a for info in ranks for a in info["generations"][step]
                                 ["advantages"]])
        gathered = combine_rewards(torch.cat(local), weights, G, scale_rewards="group")
        torch.testing.assert_close(received, gathered, rtol=1e-4, atol=1e-4)
        # what each rank would have computed from its own completions only
        alone = torch.cat([combine_rewards(t, weights, G // WORLD, scale_rewards="group")
                           for t in local])
        discriminating += not torch.allclose(alone, received, rtol=1e-4, atol=1e-4)
        # the logged reward is the mean over both ranks' completions
        totals = (torch.cat(local).nan_to_num() * weights).sum(1)
        assert summary["history"][step]["reward"] == pytest.approx(totals.mean().item(),
                                                                   abs=1e-5)
    assert discriminating, ("every generation gives the same advantages with or without the "
                            "other rank's completions, so this run cannot show the gather; "
                            "change the seed or the steps")


def test_saved_model_moved_away_from_the_shipped_weights(launched):
    out, _, summary = launched
    final = Path(summary["model_dir"])
    if not final.is_absolute():
        final = out / final
    trained = load_file(final / "model.safetensors")
    shipped = load_file(TINY_MODEL_DIR / "model.safetensors")
    assert set(trained) <= set(shipped) and trained
    assert all(torch.isfinite(t).all() for t in trained.values())
    changed = [k for k in trained if not torch.equal(trained[k], shipped[k])]
    assert changed, "no weight changed in 2 steps"
    assert (final / "tokenizer.json").is_file()


@pytest.mark.parametrize("name, kind", [
    ("single_gpu", "NO"), ("multi_gpu", "MULTI_GPU"), ("fsdp", "FSDP"),
    ("deepspeed_zero3", "DEEPSPEED"), ("cpu_2proc", "MULTI_GPU"),
])
def test_shipped_launch_configs_load_in_accelerate(name, kind):
    from accelerate.commands.config.config_args import load_config_from_file

    assert name in LAUNCH_CONFIGS
    config = load_config_from_file(str(launch_config(name)))
    assert str(config.distributed_type).endswith(kind)
    if name == "fsdp":
        assert config.fsdp_config["fsdp_version"] == 2
        assert config.fsdp_config["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    if name == "deepspeed_zero3":
        assert config.deepspeed_config["zero_stage"] == 3
    assert config.mixed_precision == ("no" if name == "cpu_2proc" else "bf16")


def test_launch_configs_ship_with_the_package():
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "launch/*.yaml" in data["package-data"]["labkit.trl_bridge"]
    assert all(launch_config(name).is_file() for name in LAUNCH_CONFIGS)
    with pytest.raises(ValueError, match="launch config must be one of"):
        launch_config("tpu")


def test_cli_overrides_and_refusals_before_any_model_loads(capsys):
    from labkit.trl_bridge.train import main, parse_overrides

    assert parse_overrides(["epsilon_high=0.28", "loss_type=dapo", "delta=None",
                            "reward_weights=(1.0, 0.5)"]) == {
        "epsilon_high": 0.28, "loss_type": "dapo", "delta": None, "reward_weights": (1.0, 0.5)}
    with pytest.raises(ValueError, match="FIELD=VALUE"):
        parse_overrides(["epsilon"])
    for argv, field in ((["--preset", "ppo"], "advantage_estimator='gae'"),
                        (["--preset", "dapo"], "dynamic_sampling=True"),
                        (["--set", "num_mini_batches=3"], "num_mini_batches=3")):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2 and field in capsys.readouterr().err
