#!/usr/bin/env bash
# The GPU check: the client's CUDA path through a local federation (bf16 autocast, auto micro-batch, a
# checkpoint, a preemption and a rejoin), then tokens/s and MFU of GPT-2 124M, GPT-2 Medium and a
# Llama-3-1B-shaped model from random weights. Steps: bench/gpu_check.py. Under 8 minutes on one H100
# (the per-step timeouts below add up to 470 s).
#
# Usage: bash bench/gpu_check.sh [--dry-run]
#   --dry-run   the same steps on the CPU at toy size (tiny models, a few steps; about a minute)
# Outputs: $OUT if set (the device machine collects it), else bench/results/gpu/ (bench/results/gpu-dry-run/
# with --dry-run): nvidia-smi.txt, one <step>.log and <step>.json per step, summary.txt (one PASS/FAIL line
# per step, then a total). A failing or hung step is recorded and the next one runs; the exit code is the
# number of failed steps.
# Environment: PYTHON (default: the repository's .venv/bin/python, else python3), GPU_CHECK_PEAK_TFLOPS
# (the peak to compute MFU against, for a GPU the built-in table does not list).
set -u

here=$(cd "$(dirname "$0")/.." && pwd)
dry_run=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry_run=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument $arg" >&2; exit 2 ;;
  esac
done

if [ -n "${OUT:-}" ]; then
  out="$OUT"
elif [ "$dry_run" = 1 ]; then
  out="$here/bench/results/gpu-dry-run"
else
  out="$here/bench/results/gpu"
fi
mkdir -p "$out"
: > "$out/summary.txt"

if [ -z "${PYTHON:-}" ]; then
  if [ -x "$here/.venv/bin/python" ]; then PYTHON="$here/.venv/bin/python"; else PYTHON=python3; fi
fi
export PYTHONPATH="$here:$here/operator${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

step_args=()
if [ "$dry_run" = 1 ]; then
  step_args+=(--dry-run)
  export CUDA_VISIBLE_DEVICES=""  # the CPU, even where a GPU is visible
fi

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "python: $PYTHON"
  echo "dry_run: $dry_run"
} > "$out/run.txt"
if command -v nvidia-smi > /dev/null 2>&1; then
  timeout 30 nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || echo "nvidia-smi exited $?" >> "$out/nvidia-smi.txt"
else
  echo "nvidia-smi not found" > "$out/nvidia-smi.txt"
fi

failed=0
total=0

# run_step NAME TIMEOUT_S ARGS...: one step under a timeout; its output in NAME.log, one line in summary.txt.
run_step() {
  local name=$1 limit=$2
  shift 2
  local start rc line
  start=$(date +%s)
  timeout --kill-after=15 "$limit" "$PYTHON" "$here/bench/gpu_check.py" "$@" --out "$out" ${step_args[@]+"${step_args[@]}"} \
    > "$out/$name.log" 2>&1
  rc=$?
  total=$((total + 1))
  line=$(grep '^SUMMARY ' "$out/$name.log" | tail -n 1 | cut -c 9-)
  if [ "$rc" = 0 ]; then
    echo "PASS $name ($(($(date +%s) - start)) s) $line" | tee -a "$out/summary.txt"
  else
    failed=$((failed + 1))
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      line="timed out after ${limit} s; $line"
    elif [ -z "$line" ]; then
      line=$(grep -v '^[[:space:]]*$' "$out/$name.log" | tail -n 1)
    fi
    echo "FAIL $name ($(($(date +%s) - start)) s, exit $rc) $line" | tee -a "$out/summary.txt"
  fi
}

run_step env 45 env
run_step federation 180 federation --timeout 165
run_step throughput-gpt2-124m 60 throughput --model gpt2-124m
run_step throughput-gpt2-medium 75 throughput --model gpt2-medium
run_step throughput-llama-1b 110 throughput --model llama-1b

echo "gpu_check: $((total - failed))/$total steps passed; outputs in $out" | tee -a "$out/summary.txt"
exit "$failed"
