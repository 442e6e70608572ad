#!/bin/bash
# The fine-tuning rows with 32 renamed copies of each training pair and a cosine decay of the inner rate.
# usage: bash bench/results/finetune/renamings/run.sh full|lora|hybrid|others
# full, lora and hybrid write their own folders beside this file; others (RAVAN and zeroth-order at their presets'
# rates) writes into lora/, its log as run-others.txt.
set -u
here=$(dirname "$0")
case "$1" in
  full) args=(--rows central-full --steps 6000 --set training.lr=2e-3) ;;  # 12000 central steps
  lora) args=(--rows central-lora,lora --steps 3000 --set training.lr=5e-3) ;;  # 6000 central, 2 x 3000 federated
  hybrid) args=(--rows hybrid-lora --steps 3000 --set training.lr=2e-3) ;;  # it trains the whole base: full's rate
  others) args=(--rows ravan,zo --steps 3000) ;;
  *) echo "usage: $0 full|lora|hybrid|others" >&2; exit 2 ;;
esac
dir=$1 log=run.txt
[ "$1" = others ] && dir=lora log=run-others.txt
cmd=(.venv/bin/python bench/finetune_bench.py --runs 3 --clients 2 --renamings 32 --set training.lr_schedule=cosine
     --max-seconds 3000 --out "$here/$dir" "${args[@]}")
mkdir -p "$here/$dir"
{ echo "\$ ${cmd[*]}"; echo "# commit $(git rev-parse --short HEAD)$(git diff --quiet || echo +uncommitted); $(date -u +%FT%TZ); uptime:$(uptime)"
  "${cmd[@]}" 2>&1; echo "# exit $?; $(date -u +%FT%TZ); uptime:$(uptime)"; } > "$here/$dir/$log"
