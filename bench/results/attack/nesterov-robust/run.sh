#!/bin/bash
# Nesterov (the benchmark's η 0.5, μ 0.9) against a sign flip with each robust combination, default settings
# otherwise (commit f41cac5), from a `git archive` snapshot of that commit with the checkout's environment.
set -e
OUT=$(cd "$(dirname "$0")" && pwd)
SNAP=${SNAP:-/tmp/snap-f41}
cd "$SNAP"
for robust in median trimmed_mean; do
  mkdir -p "$OUT/$robust"
  uptime | tee -a "$OUT/stdout.txt"
  PYTHONPATH="$SNAP" /work/main/.venv/bin/python bench/attack_bench.py --seeds 0,1,2 --rounds 3 --outers nesterov \
    --attacks none,honest,sign_flip --set aggregation.robust=$robust --out "$OUT/$robust" \
    --work /tmp/nesterov-robust-work 2>&1 | tee -a "$OUT/stdout.txt"
done
uptime | tee -a "$OUT/stdout.txt"
