#!/bin/bash
# hetero-wan: the published code (9e7ce7b) against main's HEAD, interleaved run by run, nothing else running.
set -u
for R in 1 2 3; do
  echo "$(date -u +%T) pub r$R $(cat /proc/loadavg)" >> /tmp/hw6/window-log.txt
  (cd /tmp && PYTHONPATH=$PUBLISHED $MAIN/.venv/bin/python $PUBLISHED/bench/run.py federation --scenario hetero-wan --methods ours --repeat $R --no-report --work-dir /tmp/hw6/pub-runs) > /tmp/hw6/pub.r$R.console.txt 2>&1
  echo "$(date -u +%T) head r$R $(cat /proc/loadavg)" >> /tmp/hw6/window-log.txt
  (cd $MAIN && .venv/bin/python bench/run.py federation --scenario hetero-wan --methods ours --repeat $R --results-dir /tmp/hw6/head --work-dir /tmp/hw6/head-runs) > /tmp/hw6/head.r$R.console.txt 2>&1
done
echo "$(date -u +%T) done $(cat /proc/loadavg)" >> /tmp/hw6/window-log.txt
