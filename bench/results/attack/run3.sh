#!/bin/bash
# After the two runs in flight (old runner's Nesterov seed 0 at 54c7732, FedAvg none/sybil at c96591e) finish:
# Nesterov's sybil cell again, then Adam seed 0 and seed 1 of both, from commit c96591e.
while kill -0 8638 2>/dev/null || kill -0 8717 2>/dev/null; do sleep 5; done
export PYTHONPATH=/tmp/ab-after2
cd /tmp/ab-after2
PY=/work/wt-attack/.venv/bin/python
OUT=/tmp/ab-after/out
for spec in "nesterov 0 none,sybil" "adam 0 all" "nesterov 1 all" "adam 1 all"; do
  set -- $spec
  A=$3; [ "$A" = all ] && A=none,scaled,sign_flip,noise,sybil,drift,ratchet
  echo "=== $1 seeds $2 attacks $A: $(uptime)"
  $PY bench/attack_bench.py --seeds $2 --rounds 3 --outers $1 --attacks $A --out $OUT --work /tmp/ab-after2/work
done
echo "=== done: $(uptime)"
