#!/bin/bash
# Nesterov (μ 0.9, the default) with the outer learning rate η 0.05 instead of the benchmark's 0.5: η/(1 − μ) = 0.5,
# the same total weight a delta gets from FedAvg at its default η 0.5. Default settings otherwise.
# Ran from a `git archive` snapshot of commit 3af8b02 whose bench/attack_bench.py had OUTERS' nesterov entry set to
# 0.05 (sed below); from commit b1c1e11 on, `--set aggregation.global_lr=0.05` does the same on the checkout.
set -e
OUT=$(cd "$(dirname "$0")" && pwd)
SNAP=${SNAP:-/tmp/snapA}
rm -rf "$SNAP" && mkdir -p "$SNAP" && git -C "$OUT" archive 3af8b02 | tar -x -C "$SNAP"
cp /work/main/geofed/codec/_huffman_c*.so "$SNAP/geofed/codec/" 2>/dev/null || true
cd "$SNAP"
sed -i 's/"nesterov": 0.5,/"nesterov": 0.05,/' bench/attack_bench.py
uptime | tee -a "$OUT/stdout.txt"
/work/main/.venv/bin/python bench/attack_bench.py --seeds 0,1,2 --rounds 3 --outers nesterov \
  --out "$OUT" --work /tmp/geofed-attack-A 2>&1 | tee -a "$OUT/stdout.txt"
uptime | tee -a "$OUT/stdout.txt"
