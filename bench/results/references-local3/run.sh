#!/bin/bash
# References (b) and (c) on local3: one process at the global batch (3 × a client's batch) and synchronous
# data-parallel fp32 at the same batch, each a sweep of learning rates (bench/federation/references.py), to the
# token budget of the local3 federated runs saved in bench/results/local3/ (× 1.05). Token-budgeted, so the
# machine's load changes how long it takes, not the losses. The result JSONs are saved beside the federated runs
# (bench/results/local3/single-global@lr=*.json, dp-global@lr=*.json); the progress log is stdout.txt here.
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../.."
export PYTHONPATH=$PWD:$PWD/operator
echo "=== start: $(uptime)" | tee -a "$HERE/stdout.txt"
nice -n 10 /work/main/.venv/bin/python bench/run.py federation --scenario local3 --methods single-global,dp-global \
  --no-report --work-dir /tmp/geofed-refs-local3 2>&1 | tee -a "$HERE/stdout.txt"
echo "=== done: $(uptime)" | tee -a "$HERE/stdout.txt"
