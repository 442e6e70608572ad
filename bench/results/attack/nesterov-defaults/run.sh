#!/bin/bash
# Nesterov at the benchmark's η 0.5 (μ 0.9, the default), default settings otherwise, seeds 0-2, every attack,
# from a `git archive` snapshot of the commit named in stdout.txt with the checkout's environment.
set -e
OUT=$(cd "$(dirname "$0")" && pwd)
SNAP=${SNAP:-/tmp/snapB}
cd "$SNAP"
uptime | tee -a "$OUT/stdout.txt"
PYTHONPATH="$SNAP" /work/main/.venv/bin/python bench/attack_bench.py --seeds 0,1,2 --rounds 3 --outers nesterov \
  --out "$OUT" --work /tmp/geofed-attack-B 2>&1 | tee -a "$OUT/stdout.txt"
uptime | tee -a "$OUT/stdout.txt"
