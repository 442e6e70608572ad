#!/bin/bash
# The fine-tuning rows with 32 renamed copies of each training pair and a cosine decay of the inner rate.
# usage: [RUNS=N] bash bench/results/finetune/renamings/run.sh CASE (the cases below; RUNS seeds, default 3)
# Every case writes its own folder beside this file (rules: the few-line rules, learning their known names
# from the renamed pairs), except others (RAVAN and zeroth-order at their presets' rates), steps (central
# LoRA for one client's 3000 steps: equal sequential steps) and zo-wallclock, which write into lora/ as
# run-CASE.txt.
set -u
here=$(dirname "$0")
case "$1" in
  full) args=(--rows central-full --steps 6000 --set training.lr=2e-3) ;;  # 12000 central steps
  lora) args=(--rows central-lora,lora --steps 3000 --set training.lr=5e-3) ;;  # 6000 central, 2 x 3000 federated
  hybrid) args=(--rows hybrid-lora --steps 3000 --set training.lr=2e-3) ;;  # it trains the whole base: full's rate
  others) args=(--rows ravan,zo --steps 3000) ;;
  steps) args=(--rows central-lora-steps --steps 3000 --set training.lr=5e-3) ;;
  rules) args=(--rows rule) ;;
  lora-h10) args=(--rows lora --steps 3000 --set training.lr=5e-3 --set training.local_steps=10) ;;  # rounds of 10
  ravan-3e-2) args=(--rows ravan --steps 3000 --set training.lr=3e-2) ;;  # 3 x the preset's rate
  ravan-3e-3) args=(--rows ravan --steps 3000 --set training.lr=3e-3) ;;  # 0.3 x the preset's rate
  # zeroth-order for the lora row's median training seconds (lora/lora-*.json): equal wall-clock. Its rate is
  # its own paradigm.lr, constant; the cosine needs a step count, which a wall-clock run does not have.
  zo-wallclock) args=(--rows zo-wallclock --set training.lr_schedule=constant) ;;
  zo-2e-2) args=(--rows zo --steps 3000 --set paradigm.lr=2e-2) ;;  # 4 x its preset's rate
  zo-15000) args=(--rows zo --steps 15000) ;;  # 5 x the steps
  # first-order training of the parameters zeroth-order trains (biases and norms), one process, 6000 steps
  central-bitfit) args=(--rows central-bitfit --steps 3000) ;;
  central-ravan) args=(--rows central-ravan --steps 3000) ;;  # RAVAN's model in one process, 6000 steps
  lora-h2) args=(--rows lora --steps 3000 --set training.lr=5e-3 --set training.local_steps=2) ;;  # rounds of 2
  lora-h5) args=(--rows lora --steps 3000 --set training.lr=5e-3 --set training.local_steps=5) ;;  # rounds of 5
  lora-h10-1e-2) args=(--rows lora --steps 3000 --set training.lr=1e-2 --set training.local_steps=10) ;;
  # central LoRA on the federation's batch (2 clients x 8) and sequential steps: equal tokens, equal steps
  central-lora-b16) args=(--rows central-lora-steps --steps 3000 --set training.lr=5e-3
                          --set training.batch_size=16) ;;
  # RAVAN at LoRA's budget with its paper's orthonormal projections (8 heads of rank 32, alpha = r), the rate that
  # learnt stdlib-package best (1e-2): federated 2 x 3000 steps, and in one process for 6000 (equal tokens)
  ravan-matched) args=(--rows ravan-matched --steps 3000 --set training.lr=1e-2) ;;
  central-ravan-matched) args=(--rows central-ravan-matched --steps 3000 --set training.lr=1e-2) ;;
  *) echo "usage: $0 CASE (see the case list in this file)" >&2; exit 2 ;;
esac
dir=$1 log=run.txt
case "$1" in others|steps|zo-wallclock) dir=lora log=run-$1.txt ;; esac
cmd=(.venv/bin/python bench/finetune_bench.py --runs "${RUNS:-3}" --clients 2 --renamings 32 --set training.lr_schedule=cosine
     --max-seconds 3000 --out "$here/$dir" "${args[@]}")
mkdir -p "$here/$dir"
{ echo "\$ ${cmd[*]}"; echo "# commit $(git rev-parse --short HEAD)$(git diff --quiet || echo +uncommitted); $(date -u +%FT%TZ); uptime:$(uptime)"
  "${cmd[@]}" 2>&1; echo "# exit $?; $(date -u +%FT%TZ); uptime:$(uptime)"; } > "$here/$dir/$log"
