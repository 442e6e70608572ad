#!/usr/bin/env bash
# The user's trial: pretrain a locally made Llama on its BPE tokenizer, then LoRA on the licence task.
set -euo pipefail
export PATH=/work/main/.venv/bin:$PATH
cd "$(dirname "$0")"
uptime
geofed local --clients 2 --tokenizer my-tokenizer --set model.path=my-model --data corpus --duration 300 --run-dir runs --quiet
base=$(ls -d runs/*/final_model | tail -1)
uptime
geofed local --clients 2 --paradigm lora --tokenizer my-tokenizer --set model.path="$base" --data task/train --eval-data task/eval --duration 300 --run-dir runs-lora --quiet
uptime
