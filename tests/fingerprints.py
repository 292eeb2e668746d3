"""Seeded fingerprints of 33 configurations: a refactor must leave every one bit for bit the same.

Each configuration trains the shipped tiny Qwen for 3 steps (4 prompts x 4 completions, 24
tokens, seed 3, one thread) and is reduced to three hashes: its history rows (every column but
wall-clock time, throughput and memory), its evaluation rows, and its final weights. The
configurations cover the six presets, the async producers (ahead, overlapped, admission, partial
rollouts), a bf16 sampling copy, the fixed-shape decode loop, top-p/top-k, the prompt orders, the
advantage estimators, RL-PLUS, the temperature schedule, token filters, PTX, several updates per
batch, KL, CISPO, LoRA, evaluation and dynamic sampling. ``async_mode="overlapped"`` is not
reproducible by design (the thread's timing decides which weights sample), so only its weights
are compared.

Not a test (it takes about a minute and its hashes hold on one machine only); run it before and
after a change, on the same machine::

    python tests/fingerprints.py before.json          # on the old tree
    python tests/fingerprints.py after.json           # on the new one
    python tests/fingerprints.py --compare before.json after.json
"""

import hashlib
import json
import sys
from pathlib import Path

import torch

CONFIGS = {
    "ppo": ("ppo", {}), "grpo": ("grpo", {}), "dapo": ("dapo", {}), "dr_grpo": ("dr_grpo", {}),
    "gspo": ("gspo", {}), "gfpo": ("gfpo", {"num_remains_in_group": 2}),
    "ahead": ("grpo", {"max_staleness": 1}),
    "ahead_tis": ("grpo", {"max_staleness": 2, "offpolicy_correction": "tis"}),
    "overlapped": ("grpo", {"max_staleness": 1, "async_mode": "overlapped"}),
    "admission": ("grpo", {"max_staleness": 2, "staleness_admission": "discard"}),
    "partial": ("grpo", {"max_staleness": 1, "partial_rollouts": True}),
    "bf16_sampler": ("grpo", {"sampling_dtype": "bfloat16",
                              "vllm_importance_sampling_correction": True}),
    "fixed_loop": ("grpo", {"decode_path": "fixed"}),
    "top_p_k": ("grpo", {"top_p": 0.9, "top_k": 20}),
    "curriculum": ("grpo", {"prompt_sampler": "curriculum"}),
    "prioritized": ("grpo", {"prompt_sampler": "prioritized"}),
    "remax": ("grpo", {"advantage_estimator": "remax"}),
    "rloo": ("grpo", {"advantage_estimator": "rloo"}),
    "opo": ("grpo", {"advantage_estimator": "opo"}),
    "rlplus": ("grpo", {"rlplus_demonstrations": True, "loss_type": "rlplus"}),
    "temp_sched": ("grpo", {"temperature_schedule": "linear", "temperature_final": 0.6}),
    "top_entropy": ("grpo", {"top_entropy_quantile": 0.2}),
    "ptx": ("grpo", {"ptx_coef": 0.1}),
    "iters2": ("grpo", {"num_iterations": 2, "num_mini_batches": 2}),
    "kl": ("grpo", {"beta": 0.04}),
    "cispo": ("grpo", {"loss_type": "cispo", "epsilon_high": 5.0}),
    "lora": ("grpo", {"use_peft": True}),
    "eval": ("grpo", {"eval_every": 2, "eval_max_prompts": 4}),
    "dynamic": ("dapo", {"dynamic_sampling": True, "max_resample_rounds": 1}),
    "mask_trunc": ("grpo", {"mask_truncated_completions": True}),
    "eval_fixed": ("grpo", {"eval_every": 2, "eval_max_prompts": 4, "decode_path": "fixed"}),
    "overlapped_bf16": ("grpo", {"max_staleness": 1, "async_mode": "overlapped",
                                 "sampling_dtype": "bfloat16"}),
    "seq_level": ("grpo", {"importance_sampling_level": "sequence"}),
}
SMALL = {"prompts_per_step": 4, "num_generations": 4, "max_completion_length": 24,
         "max_steps": 3, "progress": False, "seed": 3}
#: Columns that measure the machine, not the run.
UNTIMED = ("time", "second", "memory")


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _rows(rows: list[dict]) -> list[dict]:
    return [{k: repr(v) if isinstance(v, float) else v for k, v in row.items()
             if not any(word in k for word in UNTIMED)} for row in rows]


def fingerprint(name: str) -> dict:
    """The three hashes of configuration ``name`` (or the error it raised)."""
    from labkit.config import preset
    from labkit.trainer import Trainer

    method, overrides = CONFIGS[name]
    try:
        trainer = Trainer(preset(method, **SMALL, **overrides))
        trainer.train()
    except Exception as error:  # noqa: BLE001 (a configuration that no longer runs is a difference too)
        return {"error": f"{type(error).__name__}: {error}"[:300]}
    weights = [hashlib.sha256(p.detach().float().contiguous().numpy().tobytes()).hexdigest()
               for p in trainer.model.parameters()]
    return {"rows": _digest(_rows(trainer.rows)), "eval": _digest(_rows(trainer.eval_rows)),
            "weights": _digest(weights)}


def compare(before: dict, after: dict) -> list[str]:
    """The configurations whose fingerprints differ (overlapped ones: their weights only)."""
    differences = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a is not None and b is not None and name.startswith("overlapped"):
            a, b = a.get("weights", a), b.get("weights", b)
        if a != b:
            differences.append(f"{name}: {a} -> {b}")
    return differences


def main(argv: list[str]) -> int:
    if argv[:1] == ["--compare"]:
        before, after = (json.loads(Path(path).read_text()) for path in argv[1:3])
        differences = compare(before, after)
        print("\n".join(differences) or f"all {len(before)} configurations are bit for bit the "
                                          f"same")
        return 1 if differences else 0
    torch.set_num_threads(1)
    out, names = argv[0], argv[1:] or list(CONFIGS)
    results = {}
    for name in names:
        results[name] = fingerprint(name)
        print(name, results[name], flush=True)
    with open(out, "w") as file:
        json.dump(results, file, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
