#!/usr/bin/env bash
# LoRA rank 32 (alpha 64) on every linear layer at lr 5e-3 for 900 s from the base that run.sh pretrained.
set -euo pipefail
export PATH=/work/main/.venv/bin:$PATH
cd "$(dirname "$0")"
uptime
base=$(ls -d runs/*/final_model | tail -1)
geofed local --clients 2 --paradigm lora --tokenizer my-tokenizer --set model.path="$base" --data task/train --eval-data task/eval --duration 900 --seed "${SEED:-0}" --run-dir runs-lora-r32-s"${SEED:-0}" --set "paradigm.target_modules=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]" --set paradigm.rank=32 --set paradigm.alpha=64 --set training.lr=5e-3 --quiet
uptime
