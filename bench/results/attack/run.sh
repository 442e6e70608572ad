#!/bin/bash
# The closed-loop attack benchmark at commit 54c7732, from this snapshot of it.
export PYTHONPATH=/tmp/ab-after
PY=/work/wt-attack/.venv/bin/python
OUT=/tmp/ab-after/out
for spec in "fedavg 0,1,2" "nesterov 0" "adam 0" "nesterov 1,2" "adam 1,2"; do
  set -- $spec
  echo "=== $1 seeds $2: $(uptime)"
  $PY bench/attack_bench.py --seeds $2 --rounds 3 --outers $1 --out $OUT --work /tmp/ab-after/work
done
echo "=== done: $(uptime)"
