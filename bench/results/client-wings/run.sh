#!/bin/bash
# Behaviour before and after moving the client's modules into wings: `hetero-wan` with the defaults (`ours`),
# 3 runs, then the attack benchmark at the defaults (FedAvg, 16 rounds, seed 0), from the checkout REPO,
# into bench/results/client-wings/LABEL/ of this checkout. Usage: bash run.sh REPO LABEL
# (here: REPO a worktree at 47d41ed for `before`, this checkout at 8e134b0 for `after`, one after the other
# on a quiet machine). Then `python bench/results/client-wings/compare.py before after`.
set -e
REPO=$1; LABEL=$2
OUT=$(cd "$(dirname "$0")" && pwd)/$LABEL; mkdir -p "$OUT"
cd "$REPO"
export PYTHONPATH=$PWD:$PWD/operator
PY=.venv/bin/python
echo "=== $LABEL at $(git rev-parse --short HEAD) $(date -u +%FT%T) $(uptime)" | tee -a "$OUT/stdout.txt"
for R in 1 2 3; do
  echo "--- hetero-wan ours run $R $(date -u +%T) $(uptime)" | tee -a "$OUT/stdout.txt"
  rm -rf "/tmp/hw-$LABEL"
  $PY bench/run.py federation --scenario hetero-wan --methods ours --repeat $R --no-report \
    --results-dir "$OUT/results" --work-dir "/tmp/hw-$LABEL" 2>&1 | tail -20 | tee -a "$OUT/stdout.txt"
done
echo "--- attack seed 0 $(date -u +%T) $(uptime)" | tee -a "$OUT/stdout.txt"
$PY bench/attack_bench.py --seeds 0 --rounds 16 --outers fedavg --out "$OUT/attack" --work "/tmp/attack-$LABEL" \
  2>&1 | tail -40 | tee -a "$OUT/stdout.txt"
echo "=== done $(date -u +%FT%T) $(uptime)" | tee -a "$OUT/stdout.txt"
