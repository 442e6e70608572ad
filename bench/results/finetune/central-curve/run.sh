#!/bin/bash
# Central fine-tuning, scored every 1000 steps up to 6000, on the cached base; one file per paradigm and seed.
# usage: bash bench/results/finetune/central-curve/run.sh PARADIGM SEED
set -u
out="$(dirname "$0")/$1-seed$2.txt"
cmd=(.venv/bin/python -m bench.finetune_central --paradigm "$1" --steps 6000 --eval-at 1000,2000,3000,4000,5000 --seed "$2")
{ echo "\$ ${cmd[*]}"; echo "# commit $(git rev-parse --short HEAD)$(git diff --quiet || echo +uncommitted); $(date -u +%FT%TZ); uptime:$(uptime)"
  "${cmd[@]}" 2>&1; echo "# exit $?; $(date -u +%FT%TZ); uptime:$(uptime)"; } > "$out"
