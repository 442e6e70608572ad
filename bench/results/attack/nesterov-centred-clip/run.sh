#!/bin/bash
# Nesterov at DiLoCo's outer step (η 0.7, μ 0.9) without and with centred clipping (aggregation.centred_clip),
# the attacks sign_flip and scaled against their control, seed 0, 3 rounds; defaults otherwise. From the
# worktree root of the commit that adds aggregation.centred_clip, with both cores shared with other work.
set -e
OUT=$(cd "$(dirname "$0")" && pwd)
cd "$OUT/../../../.."
export PYTHONPATH=$PWD:$PWD/operator
PY=${PY:-/work/main/.venv/bin/python}
for spec in "plain-eta07 0" "centred-clip-1.5-eta07 1.5"; do
  set -- $spec
  echo "=== $1: $(uptime)" | tee -a "$OUT/stdout.txt"
  extra=()
  [ "$2" != 0 ] && extra=(--set "aggregation.centred_clip=$2")
  nice -n 10 $PY bench/attack_bench.py --seeds 0 --rounds 3 --outers nesterov --attacks sign_flip,scaled \
    --set aggregation.global_lr=0.7 --set aggregation.momentum=0.9 "${extra[@]}" \
    --out "$OUT/$1" --work "/tmp/geofed-attack-cc-$1" 2>&1 | tee -a "$OUT/stdout.txt"
done
echo "=== done: $(uptime)" | tee -a "$OUT/stdout.txt"
