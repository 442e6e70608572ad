#!/bin/bash
# A 4x256 base pretrained for 3000 steps (the default base: 2x128, 1500 steps), then central fine-tuning of it,
# full model and LoRA side by side, scored on the held-out answers every 500 steps up to 3000.
# Usage (from the checkout root): bash bench/results/finetune/larger-base/run.sh
set -u
R=bench/results/finetune/larger-base; PY=.venv/bin/python
SHAPE="--layers 4 --heads 8 --embd 256 --steps 3000"
BASE="--base-layers 4 --base-heads 8 --base-embd 256 --base-steps 3000"
{ echo "\$ git rev-parse --short HEAD: $(git rev-parse --short HEAD)"; echo "\$ uptime: $(uptime)"
  echo "\$ python -m geofed_apps.finetune.base_model $SHAPE"; } > $R/base.txt
/usr/bin/time -f "%e s wall %U s user" $PY -m geofed_apps.finetune.base_model $SHAPE >> $R/base.txt 2>&1
echo "\$ uptime: $(uptime)" >> $R/base.txt
for p in pretrain lora; do
  { echo "\$ git rev-parse --short HEAD: $(git rev-parse --short HEAD)"; echo "\$ uptime: $(uptime)"
    echo "\$ python -m bench.finetune_central --paradigm $p --steps 3000 --eval-at 500,1000,1500,2000,2500 --seed 0 $BASE"
    $PY -m bench.finetune_central --paradigm $p --steps 3000 --eval-at 500,1000,1500,2000,2500 --seed 0 $BASE 2>&1
    echo "\$ uptime: $(uptime)"; } > $R/central-$p-0.txt &
done
wait
