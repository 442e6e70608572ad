#!/bin/bash
# hetero-wan: the earlier defaults (MAIN: norm bound multiple 3, budget 3) against this branch's (multiple 2,
# budget 1.5 x 2 = 3), interleaved run by run. MAIN and HEAD are checkouts; results under /tmp/hwb3.
set -u
OUT=$HEAD/bench/results/hetero-wan/bound-2-budget
for R in 1 2 3; do
  echo "$(date -u +%T) earlier r$R $(cat /proc/loadavg)" >> $OUT/window-log.txt
  (cd $MAIN && .venv/bin/python bench/run.py federation --scenario hetero-wan --methods ours --repeat $R --results-dir /tmp/hwb3/earlier --work-dir /tmp/hwb3/earlier-runs) > $OUT/console.earlier.r$R.txt 2>&1
  echo "$(date -u +%T) head r$R $(cat /proc/loadavg)" >> $OUT/window-log.txt
  (cd /tmp && PYTHONPATH=$HEAD $MAIN/.venv/bin/python $HEAD/bench/run.py federation --scenario hetero-wan --methods ours --repeat $R --results-dir /tmp/hwb3/head --work-dir /tmp/hwb3/head-runs) > $OUT/console.head.r$R.txt 2>&1
done
echo "$(date -u +%T) done $(cat /proc/loadavg)" >> $OUT/window-log.txt
