#!/bin/bash
# make demo (geofed local, its defaults) on the code before and after the recipe, alternating, on one machine:
# OLD_TREE a worktree of 7db62a1 (H 40), NEW_TREE one of the recipe commit (H 10); both with the built Huffman module.
# Usage: run.sh OLD_TREE NEW_TREE PAIRS OUT_DIR
OLD=$1; NEW=$2; PAIRS=$3; OUT=$4
mkdir -p "$OUT"
for i in $(seq 1 "$PAIRS"); do
  for side in old new; do
    tree=$OLD; [ "$side" = new ] && tree=$NEW
    echo "=== $side pair $i $(date -u +%H:%M:%S) $(uptime)" | tee -a "$OUT/stdout.txt"
    (cd "$tree" && PYTHONPATH=$tree:$tree/operator /work/main/.venv/bin/python -m geofed_apps local \
        --run-dir "$OUT/runs-$side-$i" 2>&1) > "$OUT/$side-$i.log"
    grep -a "eval loss" "$OUT/$side-$i.log" | tail -1 | tee -a "$OUT/stdout.txt"
  done
done
echo "=== done $(date -u +%H:%M:%S) $(uptime)" | tee -a "$OUT/stdout.txt"
