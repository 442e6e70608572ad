#!/bin/bash
# Central fine-tuning on the default base, scored every 500 steps up to 2000, with and without the later
# docstring windows as extra training pairs; one file per paradigm, seed and data.
# usage: bash bench/results/finetune/windows/run.sh PARADIGM SEED [--windows]
set -u
out="$(dirname "$0")/$1-seed$2${3:+-windows}.txt"
cmd=(.venv/bin/python -m bench.finetune_central --paradigm "$1" --steps 2000 --eval-at 500,1000,1500 --seed "$2" ${3:-})
{ echo "\$ ${cmd[*]}"; echo "# commit $(git rev-parse --short HEAD)$(git diff --quiet || echo +uncommitted); $(date -u +%FT%TZ); uptime:$(uptime)"
  "${cmd[@]}" 2>&1; echo "# exit $?; $(date -u +%FT%TZ); uptime:$(uptime)"; } > "$out"
