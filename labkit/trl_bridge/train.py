"""Train a lab preset with TRL's ``GRPOTrainer``, on one process or many.

    python -m labkit trl_train --preset grpo [--model tiny|PATH|HUB_ID] [--set FIELD=VALUE ...]
        [--max-steps N] [--output-dir DIR] [--families add,sub --difficulties 2,3]
        [--drop dynamic_sampling] [--threads N] [--record-generations K]

The run's :class:`~labkit.config.TrainConfig` is ``preset(NAME)`` with the ``--set`` overrides
(values are Python literals: ``--set epsilon_high=0.28 --set loss_type=dapo``); the TRL bridge
(:mod:`labkit.trl_bridge`) turns it into a ``GRPOConfig`` for as many processes as the launcher
started (``WORLD_SIZE``), refusing what TRL cannot express. Under any launcher:

=====================================================  ============================================
command                                                runs
=====================================================  ============================================
``python -m labkit trl_train ...``                     one process (GPU if any, else CPU)
``accelerate launch --config_file                      one process per GPU, DDP (edit
$(python -m labkit trl_train --launch-config           ``num_processes``)
multi_gpu) -m labkit trl_train ...``
``... --launch-config fsdp`` / ``deepspeed_zero3``     FSDP2 / ZeRO-3 sharding, bf16
``accelerate launch --config_file                      two CPU processes (gloo), as the test does
$(python -m labkit trl_train --launch-config
cpu_2proc) -m labkit trl_train ...``
``torchrun --nproc_per_node 2 -m labkit trl_train``    the same without accelerate's launcher
=====================================================  ============================================

``accelerate launch --cpu --num_processes 2`` starts ONE process (accelerate's CPU launcher runs
several only through ``mpirun``); the ``cpu_2proc`` config starts torch's elastic launcher
instead, and the bridge's ``use_cpu=True`` makes each rank join a gloo process group.

Writes into ``--output-dir``: ``final/`` (the trained model and tokenizer, via
``trainer.save_model``: ``save_pretrained`` on the main process, after gathering sharded weights
under FSDP or ZeRO-3), ``summary.json`` (main process: the lab config, TRL's batch sizes, what was
dropped, the history in the lab's column names, wall time) and ``ranks/rank<R>.json`` (every
process: its rank, device, backend, and for its first ``--record-generations`` generations the
rewards it computed for its own completions and the advantages TRL handed it, which is how
``tests/test_trl_launch.py`` proves that the group statistics span the processes).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import socket
import sys
import time
import warnings
from pathlib import Path

LAUNCH_DIR = Path(__file__).resolve().parent / "launch"
#: The shipped accelerate configs: name -> what it launches.
LAUNCH_CONFIGS = {
    "single_gpu": "one process on one GPU, bf16",
    "multi_gpu": "DDP, one process per GPU (8 as the example), bf16",
    "fsdp": "FSDP2 full sharding, auto-wrapping the Qwen decoder layers, bf16",
    "deepspeed_zero3": "DeepSpeed ZeRO-3, bf16",
    "cpu_2proc": "two CPU processes with gloo (the distributed test; no GPU needed)",
}


def launch_config(name: str) -> Path:
    """Path of a shipped accelerate config (:data:`LAUNCH_CONFIGS`), for ``accelerate launch
    --config_file``."""
    if name not in LAUNCH_CONFIGS:
        raise ValueError(f"launch config must be one of {', '.join(LAUNCH_CONFIGS)}, got {name!r}")
    path = LAUNCH_DIR / f"{name}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall labkit (pip install -e .)")
    return path


def parse_overrides(pairs) -> dict:
    """``["epsilon=0.1", "loss_type=dapo"]`` -> ``{"epsilon": 0.1, "loss_type": "dapo"}``:
    values are Python literals (numbers, None, True, tuples), anything else a string."""
    out = {}
    for pair in pairs or ():
        name, sep, text = pair.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--set takes FIELD=VALUE, got {pair!r}")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
        out[name.strip()] = value
    return out


def _cells(text, cast, option: str):
    """``"2,3"`` -> ``(2, 3)``; None for no text; a ValueError naming ``option`` and the item
    that does not parse."""
    if not text:
        return None
    cells = []
    for item in text.split(","):
        try:
            cells.append(cast(item.strip()))
        except ValueError:
            raise ValueError(f"{option} takes comma-separated {cast.__name__} values (e.g. "
                             f"{'2,3' if cast is int else 'add,sub'}); {item!r} in {text!r} "
                             f"is not one") from None
    return tuple(cells)


def _count(option: str):
    """An argparse type: an integer >= 0 for ``option``."""
    from labkit.runtime.counts import int_at_least

    def parse(text: str) -> int:
        value = int_at_least(text, 0)
        if value is None:
            raise argparse.ArgumentTypeError(f"{option} must be an integer >= 0, got {text!r}")
        return value
    return parse


class _Recorder:
    """Per-process evidence of the first ``limit`` generations: the rewards this process
    computed for its own completions (one list per reward function) and its advantages."""

    def __init__(self, limit: int):
        self.limit, self.generations, self.current = limit, [], None

    def wrap(self, fn):
        name = getattr(fn, "__name__", type(fn).__name__)

        def recorded(*args, **kwargs):
            rewards = fn(*args, **kwargs)
            if self.current is not None:
                self.current["rewards"][name] = [None if r is None else float(r) for r in rewards]
            return rewards

        recorded.__name__ = name
        return recorded

    def trainer_class(self, base):
        recorder = self

        class RecordingGRPOTrainer(base):
            """GRPOTrainer that notes each generation's local rewards and advantages."""

            def _generate_and_score_completions(self, inputs):
                if self.model.training and len(recorder.generations) < recorder.limit:
                    recorder.current = {"rewards": {}}
                output = super()._generate_and_score_completions(inputs)
                if recorder.current is not None:
                    recorder.current["advantages"] = output["advantages"].float().cpu().tolist()
                    recorder.current["lengths"] = (
                        output["completion_mask"].sum(1).cpu().tolist())
                    recorder.generations.append(recorder.current)
                    recorder.current = None
                return output

        return RecordingGRPOTrainer


def _json_default(value):
    return value.item() if hasattr(value, "item") else str(value)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="grpo", help="lab preset (default grpo)")
    parser.add_argument("--model", default=None,
                        help="'tiny' (shipped), a folder or a hub id (default: the preset's)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a TrainConfig field (repeatable)")
    parser.add_argument("--max-steps", type=int, default=None, help="lab steps (generations)")
    parser.add_argument("--output-dir", default=None, help="default: trl-<preset>")
    parser.add_argument("--families", default=None, help="task families, e.g. add,sub")
    parser.add_argument("--difficulties", default=None, help="task difficulties, e.g. 2,3")
    parser.add_argument("--drop", action="append", default=[], metavar="FIELD",
                        help="run without this lab-only feature (e.g. dynamic_sampling)")
    parser.add_argument("--threads", type=_count("--threads"), default=0,
                        help="torch CPU threads per process (0 = torch's choice)")
    parser.add_argument("--record-generations", type=_count("--record-generations"), default=2,
                        help="generations whose per-rank rewards/advantages go to ranks/*.json")
    parser.add_argument("--launch-config", default=None, choices=sorted(LAUNCH_CONFIGS),
                        help="print the path of a shipped accelerate config and exit")
    args = parser.parse_args(argv)
    if args.launch_config:
        print(launch_config(args.launch_config))
        return {}

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from labkit.config import preset
    from labkit.rewards import accuracy_reward, format_reward
    from labkit.tasks import load_split
    from labkit.trl_bridge.lab_to_trl import trl_batch_sizes
    from labkit.trl_bridge.run import num_processes_from_env, train_with_trl
    from labkit.trl_bridge.tables import check_supported

    try:  # a config TRL cannot run is a usage error: say why before any model loads
        num_processes = num_processes_from_env()
        overrides = parse_overrides(args.set)
        if args.model is not None:
            overrides["model_name_or_path"] = args.model
        if args.max_steps is not None:
            overrides["max_steps"] = args.max_steps
        overrides.setdefault("progress", False)
        config = preset(args.preset, **overrides)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # drops are reported once, after training
            check_supported(config, tuple(args.drop))
        trl_batch_sizes(config, num_processes)
        dataset = load_split("train", families=_cells(args.families, str, "--families"),
                             difficulties=_cells(args.difficulties, int, "--difficulties"))
    except ValueError as error:
        parser.error(str(error))
    output_dir = Path(args.output_dir or config.output_dir or f"trl-{args.preset}")

    recorder = _Recorder(args.record_generations)
    from trl import GRPOTrainer

    # the lab's rewards, recorded; the bridge appends DAPO's overlong punishment when it is on
    funcs = [recorder.wrap(f) for f in (accuracy_reward, format_reward)]
    start = time.perf_counter()
    result = train_with_trl(config, train_dataset=dataset, reward_funcs=funcs,
                            output_dir=output_dir, num_processes=num_processes,
                            drop_unsupported=tuple(args.drop),
                            trainer_class=recorder.trainer_class(GRPOTrainer))
    seconds = time.perf_counter() - start
    trainer = result.trainer
    final = output_dir / "final"
    trainer.save_model(str(final))  # every rank: gathers sharded weights; writes on main only
    accelerator = trainer.accelerator
    if accelerator.is_main_process:
        trainer.processing_class.save_pretrained(str(final))
    dist = torch.distributed
    rank_info = {
        "rank": accelerator.process_index,
        "local_rank": accelerator.local_process_index,
        "world_size": accelerator.num_processes,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "device": str(accelerator.device),
        "distributed_type": str(accelerator.distributed_type),
        "backend": dist.get_backend() if dist.is_available() and dist.is_initialized() else None,
        "global_step": trainer.state.global_step,
        "num_generations": config.num_generations,
        "scale_rewards": config.scale_rewards,
        "reward_funcs": [getattr(f, "__name__", type(f).__name__) for f in trainer.reward_funcs],
        "reward_weights": trainer.reward_weights.tolist(),
        "generations": recorder.generations,
    }
    ranks = output_dir / "ranks"
    ranks.mkdir(parents=True, exist_ok=True)
    (ranks / f"rank{rank_info['rank']}.json").write_text(
        json.dumps(rank_info, default=_json_default))
    summary = {}
    if accelerator.is_main_process:
        summary = {
            "preset": args.preset,
            "config": config.to_dict(),
            "num_processes": num_processes,
            "trl_batch_sizes": trl_batch_sizes(config, num_processes),
            "dropped": result.dropped,
            "model_dir": str(final),
            "train_seconds": seconds,
            "history": result.history.to_dict(orient="records"),
        }
        (output_dir / "summary.json").write_text(
            json.dumps(summary, indent=1, default=_json_default))
        for message in result.dropped.values():
            print(f"NOTE: {message}", file=sys.stderr)
        last = result.history.iloc[-1] if len(result.history) else {}
        print(f"{args.preset} with TRL on {num_processes} process(es): "
              f"{trainer.state.global_step} optimizer steps in {seconds:.1f} s; last step reward "
              f"{last.get('reward', float('nan')):.3f}; model saved to {final}")
    accelerator.wait_for_everyone()
    return summary


if __name__ == "__main__":
    main()
