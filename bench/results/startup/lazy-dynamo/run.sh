#!/bin/bash
# Start-up before and after the client's optimizer stopped importing torch._dynamo and the privacy accountant
# left the default path: interleaved try by try, raw output beside this script.
# Usage: [OUT=DIR] bash run.sh BEFORE_CHECKOUT AFTER_CHECKOUT  (each a git worktree; the after checkout's .venv,
# else /work/main's, runs both; OUT defaults to this folder in the after checkout)
set -u
B=$1; A=$2; R=${OUT:-$A/bench/results/startup/lazy-dynamo}; PY=$A/.venv/bin/python; mkdir -p $R
[ -x "$PY" ] || PY=/work/main/.venv/bin/python
cd /tmp
log() { echo "$(date -u +%FT%TZ) $* loadavg: $(cat /proc/loadavg)" >> $R/loadavg.txt; }
# 1. fresh process: the client's imports, preload, default model and one training step
for i in 1 2 3; do
  for code in before after; do
    if [ $code = before ]; then PP=$B; else PP=$A; fi
    log "first_step $code try $i"
    PYTHONPATH=$PP $PY $A/bench/first_step_time.py | sed "s/^{/{\"label\": \"$code\", /" >> $R/first-step.jsonl
  done
done
# 2. geofed local defaults (3 clients): seconds from each client process's start to its phases
for i in 1 2 3; do
  log "local before try $i"
  PYTHONPATH=$B $PY $A/bench/startup_bench.py --tries 1 --duration 20 --label before --out $R/local-before.jsonl > /dev/null
  log "local after try $i"
  PYTHONPATH=$A $PY $A/bench/startup_bench.py --tries 1 --duration 20 --label after --out $R/local-after.jsonl > /dev/null
done
# 3. rejoin of the 124M model (warm and cold per try)
for i in 1 2 3; do
  log "rejoin before try $i"
  PYTHONPATH=$B $PY $A/bench/rejoin_bench.py --tries 1 --label before --out $R/rejoin-before.jsonl > /dev/null 2>> $R/rejoin-stderr.txt
  log "rejoin after try $i"
  PYTHONPATH=$A $PY $A/bench/rejoin_bench.py --tries 1 --label after --out $R/rejoin-after.jsonl > /dev/null 2>> $R/rejoin-stderr.txt
done
log "done"
