#!/bin/bash
# Central fine-tuning on the default base, scored at each quarter of STEPS, with and without the later
# docstring windows as extra training pairs; one file per paradigm, seed, data and steps.
# usage: bash bench/results/finetune/windows/run.sh PARADIGM SEED STEPS [--windows]
set -u
q=$(($3 / 4))
out="$(dirname "$0")/$1-seed$2${4:+-windows}-$3.txt"
cmd=(.venv/bin/python -m bench.finetune_central --paradigm "$1" --steps "$3" --eval-at "$q,$((2 * q)),$((3 * q))" --seed "$2" ${4:-})
{ echo "\$ ${cmd[*]}"; echo "# commit $(git rev-parse --short HEAD)$(git diff --quiet || echo +uncommitted); $(date -u +%FT%TZ); uptime:$(uptime)"
  "${cmd[@]}" 2>&1; echo "# exit $?; $(date -u +%FT%TZ); uptime:$(uptime)"; } > "$out"
