#!/bin/bash
# Wait for the first runner (commit 54c7732) to finish its FedAvg stage, stop it, then run from commit c96591e:
# FedAvg's sybil cells again (the rule they exercise changed), then Nesterov and Adam.
until grep -q "=== nesterov seeds 0" /tmp/ab-after/stdout.txt; do sleep 5; done
RUNNER=$(pgrep -f "^/bin/bash ./run.sh" | head -1)
PYPID=$(pgrep -f "bench/attack_bench.py --seeds 0 --rounds 3 --outers nesterov" | head -1)
kill -TERM "$RUNNER"; kill -INT "$PYPID"; sleep 10
echo "=== stopped runner $RUNNER / $PYPID at $(uptime)"
export PYTHONPATH=/tmp/ab-after2
cd /tmp/ab-after2
PY=/work/wt-attack/.venv/bin/python
OUT=/tmp/ab-after/out
rm -f $OUT/nesterov-* $OUT/adam-*
for spec in "fedavg 0,1,2 none,sybil" "nesterov 0 all" "adam 0 all" "nesterov 1 all" "adam 1 all"; do
  set -- $spec
  A=$3; [ "$A" = all ] && A=none,scaled,sign_flip,noise,sybil,drift,ratchet
  echo "=== $1 seeds $2 attacks $A: $(uptime)"
  $PY bench/attack_bench.py --seeds $2 --rounds 3 --outers $1 --attacks $A --out $OUT --work /tmp/ab-after2/work
done
echo "=== done: $(uptime)"
