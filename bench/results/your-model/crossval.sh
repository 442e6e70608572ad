#!/usr/bin/env bash
# LoRA on every linear layer (lora600-all.sh's settings) on each of three folds of the licence pairs, then the
# pooled pair-by-pair score: every pair held out once.
set -euo pipefail
export PATH=/work/main/.venv/bin:$PATH
cd "$(dirname "$0")"
here=$(cd "$(dirname "$0")" && pwd)
uptime
python "$here/crossval.py" split task folds
base=$(ls -d runs/*/final_model | tail -1)
for k in 0 1 2; do
  geofed local --clients 2 --paradigm lora --tokenizer my-tokenizer --set model.path="$base" \
    --data folds/k$k/train --eval-data folds/k$k/eval --duration 600 --run-dir runs-fold$k \
    --set "paradigm.target_modules=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]" \
    --set training.lr=5e-3 --quiet
  uptime
done
python "$here/crossval.py" score folds runs-fold0/* runs-fold1/* runs-fold2/*
