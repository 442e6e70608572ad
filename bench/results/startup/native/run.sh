#!/bin/bash
# Interleaved before/after benchmarks; raw output under bench/results/startup/native/.
set -u
A=/work/wt-native; B=/work/wt-native-before; R=$A/bench/results/startup/native; PY=$A/.venv/bin/python
cd /tmp
log() { echo "$(date -u +%FT%TZ) $* loadavg: $(cat /proc/loadavg)" >> $R/loadavg.txt; }
# 1. fresh-process timings: the imports and the default model's first step
for i in 1 2 3; do
  for code in before after; do
    if [ $code = before ]; then PP=$B; else PP=$A; fi
    log "imports $code try $i"
    { echo -n "$code try $i: "; PYTHONPATH=$PP /usr/bin/time -f "%e s wall %U s user" $PY -c 'import client_agent.agent' 2>&1; } >> $R/importtime-agent.txt
    { echo -n "$code try $i: "; PYTHONPATH=$PP /usr/bin/time -f "%e s wall %U s user" $PY -c 'import client_agent.agent, transformers.models.gpt2.modeling_gpt2' 2>&1; } >> $R/importtime-agent-transformers.txt
    log "first_step $code try $i"
    PYTHONPATH=$PP $PY $A/bench/first_step_time.py | sed "s/^{/{\"label\": \"$code\", /" >> $R/first-step.jsonl
  done
done
# 2. geofed local start-up, interleaved
for i in 1 2 3; do
  log "local before try $i"
  PYTHONPATH=$B $PY $A/bench/startup_bench.py --tries 1 --duration 20 --label before --out $R/local-before.jsonl > /dev/null
  log "local after try $i"
  $PY $A/bench/startup_bench.py --tries 1 --duration 20 --label after --out $R/local-after.jsonl > /dev/null
done
log "local done"
# 3. rejoin of the 124M model, interleaved
for i in 1 2 3; do
  log "rejoin before try $i"
  PYTHONPATH=$B $PY $A/bench/rejoin_bench.py --tries 1 --label before --out $R/rejoin-before.jsonl > /dev/null 2>> $R/rejoin-stderr.txt
  log "rejoin after try $i"
  $PY $A/bench/rejoin_bench.py --tries 1 --label after --out $R/rejoin-after.jsonl > /dev/null 2>> $R/rejoin-stderr.txt
done
log "rejoin done"
