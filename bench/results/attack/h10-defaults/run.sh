#!/bin/bash
# The attack benchmark at the defaults after the recipe search (async, FedAvg η 0.5, H 10 local steps): FedAvg,
# every attack, seeds 0 and 1, 16 rounds (160 steps per site, as 4 rounds at H 40). From the repository root.
set -e
OUT=$(cd "$(dirname "$0")" && pwd)
cd "$OUT/../../../.."
export PYTHONPATH=$PWD:$PWD/operator
PY=${PY:-.venv/bin/python}
echo "=== attack bench at the defaults (async, FedAvg η 0.5, H 10), 16 rounds: $(date -u +%FT%T) $(uptime)" | tee -a "$OUT/stdout.txt"
$PY bench/attack_bench.py --seeds 0,1 --rounds 16 --outers fedavg --out "$OUT" --work /tmp/geofed-attack-h10 2>&1 | tee -a "$OUT/stdout.txt"
echo "=== done $(date -u +%FT%T) $(uptime)" | tee -a "$OUT/stdout.txt"
