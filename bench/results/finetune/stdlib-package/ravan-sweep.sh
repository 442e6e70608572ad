#!/bin/bash
# RAVAN at LoRA's budget (`ravan-matched`) on the stdlib-package task: the rate sweep, seed 0, central at the
# federation's global batch (2 x 8) for 600 steps with a cosine decay (run.sh's central-lora-b16 shape).
# usage: bash bench/results/finetune/stdlib-package/ravan-sweep.sh [LR ...] (default 1e-3 3e-3 1e-2 3e-2), all at
# once; each rate writes ravan-sweep/lr-LR/ beside this file.
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.."
export PYTHONPATH=$PWD:$PWD/operator
rates=("$@")
[ ${#rates[@]} -eq 0 ] && rates=(1e-3 3e-3 1e-2 3e-2)
mkdir -p "$here/ravan-sweep"
echo "=== sweep ${rates[*]}: $(date -u +%FT%T) $(uptime)" >> "$here/ravan-sweep/run.txt"
for lr in "${rates[@]}"; do
  out=$here/ravan-sweep/lr-$lr
  mkdir -p "$out"
  .venv/bin/python bench/finetune_bench.py --task stdlib-package --runs 1 --clients 2 --max-seconds 3000 --out "$out" \
    --rows central-ravan-matched-steps --steps 600 --set training.batch_size=16 --set "training.lr=$lr" \
    --set training.lr_schedule=cosine >> "$out/run.txt" 2>&1 &
done
wait
echo "=== sweep done: $(date -u +%FT%T) $(uptime)" >> "$here/ravan-sweep/run.txt"
