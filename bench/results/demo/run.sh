#!/bin/bash
# `make demo` (= `geofed local` with its defaults, 3 clients, 100 s): the code the overlap/recipe/start-up work
# started from (1fa6191, "before") against main ("after"), and main with two candidate defaults: the
# overlapped sync path ("overlap") and the run-wide cosine of the inner learning rate ("run-cosine").
# Three rounds; each round runs the four in a rotated order. Console output per run and the load average at
# each start and end go under bench/results/demo/. Before runs from a worktree of 1fa6191 with main's .venv:
#   git worktree add --detach /work/wt-demo-before 1fa6191
#   cp geofed/codec/_huffman_c.cpython-311-x86_64-linux-gnu.so /work/wt-demo-before/geofed/codec/
set -u
A=${MAIN:-/work/main}; B=${BEFORE:-/work/wt-demo-before}; R=$A/bench/results/demo; PY=$A/.venv/bin/python
log() { echo "$(date -u +%FT%TZ) $* loadavg: $(cat /proc/loadavg)" >> $R/loadavg.txt; }
one() {  # variant, round
  local v=$1 r=$2 pp=$A extra=()
  case $v in
    before) pp=$B ;;
    overlap) extra=(--set training.overlap_sync=true) ;;
    run-cosine) extra=(--set training.lr_schedule=cosine --set training.lr_progress=run_time
                       --set training.lr_min_ratio=0.1) ;;
  esac
  mkdir -p /tmp/demo-$v && cd /tmp/demo-$v
  log "$v round $r start"
  PYTHONPATH=$pp $PY -m geofed_apps local "${extra[@]}" > $R/$v-$r.txt 2>&1
  log "$v round $r end rc=$?"
}
V=(before after overlap run-cosine)
for r in 1 2 3; do
  for i in 0 1 2 3; do one "${V[$(((i + r - 1) % 4))]}" $r; done
done
for v in "${V[@]}"; do echo "$v: $(grep -h 'eval loss:' $R/$v-*.txt | tr '\n' ' ')"; done | tee $R/summary.txt
