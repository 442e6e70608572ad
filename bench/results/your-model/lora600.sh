#!/usr/bin/env bash
# LoRA on the licence pairs for 600 s from the base that run.sh pretrained (the preset's settings).
set -euo pipefail
export PATH=/work/main/.venv/bin:$PATH
cd "$(dirname "$0")"
uptime
base=$(ls -d runs/*/final_model | tail -1)
geofed local --clients 2 --paradigm lora --tokenizer my-tokenizer --set model.path="$base" --data task/train --eval-data task/eval --duration 600 --run-dir runs-lora600 --quiet
uptime
