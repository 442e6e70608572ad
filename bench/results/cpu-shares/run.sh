#!/bin/bash
# hetero-wan with per-process CPU shares: sync FedAvg against ours (defaults) and ours in auto mode, each client
# and the PS capped at 0.35 CPU in its own cgroup v1 cpu group (5 × 0.35 = 1.75 of this machine's 2 cores, the
# rest left to the harness and the WAN emulator), three repeats each (repeat numbers seed the batch order).
# Results under this folder's hetero-wan/, not bench/results/hetero-wan/. As root, from anywhere.
set -e
OUT=$(cd "$(dirname "$0")" && pwd)
cd "$OUT/../../.."
export PYTHONPATH=$PWD:$PWD/operator
PY=${PY:-.venv/bin/python}
METHODS=${METHODS:-fedavg,ours,ours-auto}
echo "=== hetero-wan, --cpu-share 0.35, $METHODS: $(date -u +%FT%T) $(uptime)" | tee -a "$OUT/stdout.txt"
for repeat in ${REPEATS:-1 2 3}; do
  $PY bench/run.py federation --scenario hetero-wan --methods "$METHODS" --cpu-share 0.35 --repeat "$repeat" \
    --results-dir "$OUT" --work-dir /tmp/geofed-cpu-shares 2>&1 | tee -a "$OUT/stdout.txt"
  echo "=== repeat $repeat done $(date -u +%FT%T) $(uptime)" | tee -a "$OUT/stdout.txt"
done
