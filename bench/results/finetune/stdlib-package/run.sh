#!/bin/bash
# The fine-tuning rows on the second task (`--task stdlib-package`: which stdlib package a docstring comes
# from; 1,776 training pairs dealt to 2 clients, 1,200 held out per seed, each seed its own split).
# usage: [RUNS=N] [FIRST=K] bash bench/results/finetune/stdlib-package/run.sh CASE (seeds K..N-1, default 0..2; one
# process per seed, FIRST=K RUNS=K+1 each, runs the seeds side by side into the same folder)
# Every case writes its own folder beside this file and appends its progress to run.txt there.
set -u
max_seconds=3000  # a federated run's --duration; the bench kills it at this plus 600 s
here=$(cd "$(dirname "$0")" && pwd)
case "$1" in
  rules) args=(--rows rule) ;;
  # federated LoRA, 2 clients x 600 steps at batch 8, the docstring task's LoRA rate with a cosine decay
  lora) args=(--rows lora --steps 600 --set training.lr=5e-3 --set training.lr_schedule=cosine) ;;
  # central LoRA at the federation's global batch (2 x 8) for 600 steps: equal tokens, equal global batch
  central-lora-b16) args=(--rows central-lora-steps --steps 600 --set training.lr=5e-3
                          --set training.lr_schedule=cosine --set training.batch_size=16) ;;
  # central LoRA at one client's batch (8) for 1200 steps: equal tokens, twice the sequential steps
  central-lora) args=(--rows central-lora --steps 600 --set training.lr=5e-3 --set training.lr_schedule=cosine) ;;
  # zeroth-order on the same adapters (MeZO on LoRA), its preset's rate, 2.5 x LoRA's steps
  zo-lora) args=(--rows zo-lora --steps 1500) ;;
  # the same zeroth-order rows at twice the preset's rate and 10 x LoRA's steps (6000 = 188 rounds of 32 seeds);
  # 0.1 and 0.3 sent the loss from 2.6 to 4-5 within three rounds (zo-sweep/), 2e-2 after 20 (README.txt there);
  # a longer cap, since the whole run (its answer scoring before and after included) must fit in it plus 600 s
  zo-lora-long) args=(--rows zo-lora --steps 6000 --set paradigm.lr=2e-2); max_seconds=5400 ;;
  # RAVAN at LoRA's budget (8 heads of 32 x 32, orthonormal projections), federated in the lora case's shape, at the
  # rate its sweep picked (ravan-sweep.sh: central, seed 0: 1e-3 43.4, 3e-3 52.2, 1e-2 55.5, 3e-2 55.0 F1)
  ravan-matched-1e-2) args=(--rows ravan-matched --steps 600 --set training.lr=1e-2 --set training.lr_schedule=cosine) ;;
  # the same at 3e-3, the rate it was started at before the sweep had finished
  ravan-matched-3e-3) args=(--rows ravan-matched --steps 600 --set training.lr=3e-3 --set training.lr_schedule=cosine) ;;
  # the same central at the federation's global batch (2 x 8) for 600 steps, as central-lora-b16; its seed 0 is the
  # sweep's lr-1e-2 run (the same command)
  central-ravan-matched-b16) args=(--rows central-ravan-matched-steps --steps 600 --set training.lr=1e-2
                                   --set training.lr_schedule=cosine --set training.batch_size=16) ;;
  *) echo "usage: $0 rules|lora|central-lora-b16|central-lora|zo-lora|zo-lora-long|ravan-matched-1e-2|ravan-matched-3e-3|central-ravan-matched-b16" >&2
     exit 2 ;;
esac
cd "$here/../../../.."
export PYTHONPATH=$PWD:$PWD/operator
mkdir -p "$here/$1"
echo "=== $1: $(date -u +%FT%T) $(uptime)" >> "$here/$1/run.txt"
.venv/bin/python bench/finetune_bench.py --task stdlib-package --runs "${RUNS:-3}" --first-run "${FIRST:-0}" --clients 2 \
  --max-seconds "$max_seconds" --out "$here/$1" "${args[@]}" >> "$here/$1/run.txt" 2>&1
echo "=== $1 done: $(date -u +%FT%T) $(uptime)" >> "$here/$1/run.txt"
