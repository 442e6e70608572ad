#!/bin/bash
# Nesterov at its default η (aggregation.global_lr unset: 0.5 × (1 − μ) = 0.05 at the default μ 0.9), default
# settings otherwise, seeds 0-2, every attack, on the checkout (its commit is the first line of stdout.txt).
set -e
OUT=$(cd "$(dirname "$0")" && pwd)
cd "$OUT/../../../.."
git log -1 --format='commit %H' | tee "$OUT/stdout.txt"
uptime | tee -a "$OUT/stdout.txt"
.venv/bin/python bench/attack_bench.py --seeds 0,1,2 --rounds 3 --outers nesterov \
  --out "$OUT" --work /tmp/geofed-attack-default 2>&1 | tee -a "$OUT/stdout.txt"
uptime | tee -a "$OUT/stdout.txt"
