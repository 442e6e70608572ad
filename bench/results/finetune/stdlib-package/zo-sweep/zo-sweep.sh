#!/bin/bash
# $1 = lr
cd /work/wt-zo
export PYTHONPATH=$PWD:$PWD/operator
out=bench/results/finetune/stdlib-package/zo-sweep/lr-$1
mkdir -p $out
echo "=== zo-lora lr=$1 seed 0 1500 steps: $(date -u +%FT%T) $(uptime)" >> $out/run.txt
.venv/bin/python bench/finetune_bench.py --task stdlib-package --runs 1 --clients 2 --max-seconds 3000 --out $out --rows zo-lora --steps 1500 --set paradigm.lr=$1 >> $out/run.txt 2>&1
echo "=== done rc=$?: $(date -u +%FT%T) $(uptime)" >> $out/run.txt
