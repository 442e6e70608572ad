#!/bin/bash
# The Adam rows with the consensus bound on (commit f41cac5), default settings (norm_bound_multiple 2),
# run from a `git archive` snapshot of that commit with the checkout's virtual environment.
set -e
OUT=$(cd "$(dirname "$0")" && pwd)
SNAP=${SNAP:-/tmp/snap-f41}
cd "$SNAP"
uptime | tee -a "$OUT/stdout.txt"
PYTHONPATH="$SNAP" /work/main/.venv/bin/python bench/attack_bench.py --seeds 0,1,2 --rounds 3 --outers adam \
  --attacks none,honest,sign_flip,scaled,noise,drift,sybil,ratchet --out "$OUT" --work /tmp/adam-consensus-work 2>&1 | tee -a "$OUT/stdout.txt"
uptime | tee -a "$OUT/stdout.txt"
