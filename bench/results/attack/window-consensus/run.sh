#!/bin/bash
# The attack benchmark at the defaults with the consensus bound's window part (a site's latest deltas, with the
# new one, may project at most −0.25 × the reference against the other sites' directions): FedAvg η 0.5,
# async, H 10, every attack, seeds 0, 1 and 2 (two invocations; the
# summary covers every run under the folder), 16 rounds, as bench/results/attack/h10-defaults/. From the
# repository root.
set -e
OUT=$(cd "$(dirname "$0")" && pwd)
cd "$OUT/../../../.."
export PYTHONPATH=$PWD:$PWD/operator
PY=${PY:-.venv/bin/python}
echo "=== attack bench at the defaults with the window consensus bound, 16 rounds: $(date -u +%FT%T) $(uptime)" | tee -a "$OUT/stdout.txt"
for seeds in 0,1 2; do
  $PY bench/attack_bench.py --seeds $seeds --rounds 16 --outers fedavg --out "$OUT" --work /tmp/geofed-attack-window 2>&1 | tee -a "$OUT/stdout.txt"
done
echo "=== done $(date -u +%FT%T) $(uptime)" | tee -a "$OUT/stdout.txt"
