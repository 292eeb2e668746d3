#!/usr/bin/env bash
# The GPU check: one call on a machine with one CUDA GPU, from the project root, about 7 minutes.
#
#   bash .ci/gpu_check.sh --prepare     # here, once, with a network: TRL and friends as wheels
#   bash .ci/gpu_check.sh               # there: carry .whl/ with the checkout; results in $OUT
#
# A GPU machine that has torch (CUDA build), transformers, peft, accelerate, pandas, matplotlib
# and pyarrow but no registry gets the rest from .whl/ (TRL for the bench, datasets for the task
# suite, ipywidgets for labkit's import). What it measures, in order of how much it says:
#
#   1. decode loops (labkit.scale.bench --decode): ms per decode step of the tiny Qwen, 128 rows, on
#      the dynamic loop, the fixed-shape loop with eager steps and the fixed-shape loop replayed as
#      a CUDA graph; then the same at the Qwen2.5-0.5B shape (random weights, every row 64 tokens);
#   2. the CUDA tests (the fixed-shape loop and its graph against eager steps and the dynamic
#      loop, no cuDNN attention, LoRA not captured; the trainer and log-probs on CUDA);
#   3. notebook 02's live run (GRPO, 30 steps, medium cells, eval 40 x 8) on the GPU, with the
#      notebook's asserted learning (eval pass@1 up by more than 15 points), split by phase, once
#      with the loss path eager and once compiled (compile_loss; its compile time is inside);
#   4. the labkit-vs-TRL bench with its phases at the Qwen2.5-0.5B and Qwen2.5-1.5B shapes.
#
# The figures to beat, measured on one H100 80GB HBM3 (torch 2.11.0+cu130, transformers 5.17.0,
# TRL 1.16.0) at commit 411c080, before the fixed-shape sampler: 26.5 ms per decode step (4.5 ms
# with cuDNN's attention switched off); notebook 02's live run 91.2 s, 69.1 s of it sampling;
# 0.5B shape labkit 1.705 s/step against TRL's 1.741 s; 1.5B shape not finished in 140 s.
# With it (2ee84ad, same machine kind and versions; docs/measurements/gpu_h100.txt): 0.92 ms per
# decode step; notebook 02's live run 16.8 s, 3.5 s of it sampling; 0.5B shape 0.825 s against
# TRL's 4.300 s per step; 1.5B shape 1.221 s against 5.381 s.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if [ "${1:-}" = "--prepare" ]; then
    set -e
    for d in /.whl/; do
        grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude
    done
    mkdir -p .whl
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        -d .whl trl==1.16.0 datasets==4.7.0 dill==0.4.0 multiprocess==0.70.18 ipywidgets==8.1.8
    echo "ready: .whl/ ($(ls .whl | wc -l) wheels); device call: bash .ci/gpu_check.sh, carry .whl"
    exit 0
fi

OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    MPLBACKEND=Agg
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 3
    export PYTHONPATH=/tmp/site:$root
else
    export PYTHONPATH=$root
fi
t0=$(date +%s)
lap() { echo "== t=$(( $(date +%s) - t0 )) s"; }
run() {  # run <seconds> <output file> <command...>: time-boxed, kept under $OUT, tail shown
    local limit=$1 file=$2
    shift 2
    timeout "$limit" "$@" > "$OUT/$file" 2>&1
    echo "(exit $?)" >> "$OUT/$file"
    grep -v -e Warning -e warnings.warn "$OUT/$file" | tail -12
    lap
}

{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', \
transformers.__version__)"
git log -1 --format='commit %h %s' 2>/dev/null | cut -c1-100
} | tee "$OUT/versions.txt"

echo "== 1. decode loops, tiny Qwen"
run 60 decode_tiny.txt python3 -m labkit bench --decode --device cuda --dtype bfloat16 --rounds 5
echo "== 1. decode loops, Qwen2.5-0.5B shape"
run 60 decode_05b.txt python3 -m labkit bench --decode --device cuda --rounds 3 \
    --model Qwen/Qwen2.5-0.5B-Instruct

echo "== 2. CUDA tests"
run 100 cuda_tests.txt python3 -m pytest -q -o addopts="" -p no:cacheprovider -rs \
    -k "gpu or cuda" tests/test_rollout_fixed.py tests/test_trainer.py tests/test_logprobs.py \
    tests/test_clock.py

echo "== 3. notebook 02's live run on the GPU, the loss path eager then compiled (compile_loss)"
run 240 nb02_gpu.txt python3 - <<'PY'
import time

from labkit.config import preset
from labkit.tasks import medium_cells
from labkit.trainer import train

train_cells, eval_cells = medium_cells("train"), medium_cells("eval")
for compile_loss in (False, True):
    start = time.perf_counter()
    result = train(preset("grpo", max_steps=30, eval_every=30, eval_k=8, seed=0, progress=False,
                          compile_loss=compile_loss),
                   train_dataset=train_cells, eval_dataset=eval_cells)
    history, evals = result.history, result.eval_history
    wall = time.perf_counter() - start
    # where the seconds go (labkit.training.clock: CUDA events, read once per step)
    spent = {column: float(history[column].sum()) for column in
             ("generation_time", "sample_time", "score_time", "advantage_time", "update_time",
              "step_time")}
    spent["eval_time"] = float(evals["eval_time"].sum())
    spent["outside steps and evals (loading, setup)"] = wall - spent["step_time"] - spent["eval_time"]
    print(f"compile_loss={compile_loss}: wall_s", round(wall, 1), "|",
          " | ".join(f"{k} {v:.1f}" for k, v in spent.items()))
    before, after = evals["eval_accuracy"].iloc[[0, -1]]
    print(f"eval pass@1 {before:.1%} -> {after:.1%}; notebook 02 asserts a gain above 15 points:",
          "holds" if after > before + 0.15 else "FAILS")
PY

echo "== 4. bench with phases, Qwen2.5-0.5B shape"
run 90 bench_05b.txt python3 -m labkit bench --device cuda --model Qwen/Qwen2.5-0.5B-Instruct \
    --reward alternating --steps 5 --warmup 2
echo "== 4. bench with phases, Qwen2.5-1.5B shape"
run 100 bench_15b.txt python3 -m labkit bench --device cuda --model Qwen/Qwen2.5-1.5B-Instruct \
    --reward alternating --steps 3 --warmup 1
echo "== 5. memory planner vs measured peak"
run 100 memory_05b.txt python3 -m labkit bench_memory --device cuda \
    --model Qwen/Qwen2.5-0.5B-Instruct --prompts 16 --generations 8 --completion-length 64
run 100 memory_05b_checkpointing.txt python3 -m labkit bench_memory --device cuda \
    --model Qwen/Qwen2.5-0.5B-Instruct --prompts 16 --generations 8 --completion-length 64 \
    --gradient-checkpointing
run 100 memory_qwen3.txt python3 -m labkit bench_memory --device cuda --model Qwen/Qwen3-0.6B \
    --prompts 16 --generations 8 --completion-length 128
