#!/bin/bash
# Every fine-tuning row, 3 seeds each, with own-domain F1 and bytes at the socket; results beside this file.
# Rows already measured there are kept (the benchmark resumes); the log goes to LOG (default run.txt).
# usage: bash bench/results/finetune/own-domain/run.sh [LOG]
set -u
dir="$(dirname "$0")"
log="$dir/${1:-run.txt}"
cmd=(.venv/bin/python bench/finetune_bench.py --runs 3 --steps 300 --clients 2 --out "$dir"
     --rows rule,hybrid-lora,lora,central-lora,central-full,central-lora-steps,central-full-steps,ravan,zo,zo-wallclock)
{ echo "\$ ${cmd[*]}"; echo "# commit $(git rev-parse --short HEAD)$(git diff --quiet || echo +uncommitted); $(date -u +%FT%TZ); uptime:$(uptime)"
  "${cmd[@]}" 2>&1; echo "# exit $?; $(date -u +%FT%TZ); uptime:$(uptime)"; } > "$log"
