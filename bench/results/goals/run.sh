#!/bin/bash
# hetero-wan: sync FedAvg, the defaults (round by round) and the overlapped path, 3 runs each interleaved run by
# run, then one single-process reference; the table with the time to sync FedAvg's lowest loss. From the
# repository root. Raw results, load.log and summary.md under bench/results/goals/hetero-wan/.
set -eu
PYTHONPATH=. .venv/bin/python bench/overlap_bench.py run --scenario hetero-wan --repeats 3 \
  --methods fedavg,ours,ours-overlap --root bench/results/goals --work-dir /tmp/goal-runs
PYTHONPATH=. .venv/bin/python bench/overlap_bench.py summary --scenario hetero-wan --root bench/results/goals
