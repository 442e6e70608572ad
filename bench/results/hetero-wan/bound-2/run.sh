#!/bin/bash
# hetero-wan: the defaults (norm bound multiple 3) against norm_bound_multiple 2, interleaved run by run.
# Run from the repository root: bash bench/results/hetero-wan/bound-2/run.sh
set -u
OUT=bench/results/hetero-wan/bound-2
for R in 1 2 3; do
  for M in ours ours-bound-2; do
    echo "$(date -u +%T) $M r$R $(cat /proc/loadavg)" >> $OUT/window-log.txt
    .venv/bin/python bench/run.py federation --scenario hetero-wan --methods $M --repeat $R --results-dir /tmp/hwb2 --work-dir /tmp/hwb2-runs > $OUT/console.$M.r$R.txt 2>&1
  done
done
echo "$(date -u +%T) done $(cat /proc/loadavg)" >> $OUT/window-log.txt
cp /tmp/hwb2/hetero-wan/*.json $OUT/
