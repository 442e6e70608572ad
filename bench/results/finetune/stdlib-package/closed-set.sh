#!/bin/bash
# First-order LoRA and zeroth-order on the same adapters on the stdlib-package task, scored also by closed-set
# accuracy (the likeliest of the 16 package names), seed 0 each, the two side by side; the cases' settings are
# run.sh's `lora` and `zo-lora`. Writes closed-set/ beside this file.
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.."
export PYTHONPATH=$PWD:$PWD/operator
out=$here/closed-set
mkdir -p "$out"
echo "=== closed-set lora and zo-lora, seed 0: $(date -u +%FT%T) $(uptime)" >> "$out/run.txt"
common=(bench/finetune_bench.py --task stdlib-package --runs "${RUNS:-1}" --clients 2 --max-seconds 3000 --out "$out")
.venv/bin/python "${common[@]}" --rows lora --steps 600 --set training.lr=5e-3 --set training.lr_schedule=cosine \
  >> "$out/run-lora.txt" 2>&1 &
.venv/bin/python "${common[@]}" --rows zo-lora --steps 1500 >> "$out/run-zo-lora.txt" 2>&1 &
wait
echo "=== done: $(date -u +%FT%T) $(uptime)" >> "$out/run.txt"
