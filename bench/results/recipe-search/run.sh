#!/bin/bash
# The recipe search (docs/benchmarks.md, "A pretraining recipe by measurement"): the candidates of
# bench/federation/recipes.py on local3 and hetero-wan, one after another, results under this folder
# (<scenario>/<method>[.rN].json). Repeats N > 1 draw other client batch orders (client seed i + 1000 (N - 1)).
# The references are read from bench/results/<scenario>/ (copied here by the table step below).
# From the repository root; 2 cores, ~2 min a run. Progress: stdout.txt.
set -e
OUT=$(cd "$(dirname "$0")" && pwd)
cd "$OUT/../../.."
PY=${PY:-.venv/bin/python}
R=(--results-dir "$OUT" --work-dir /tmp/geofed-recipe-search)
run() { echo "=== $* $(date -u +%FT%T) $(uptime)" | tee -a "$OUT/stdout.txt"; $PY bench/run.py federation "$@" "${R[@]}" 2>&1 | tee -a "$OUT/stdout.txt"; }
# Round 1, local3, one run each.
run --scenario local3 --methods recipe-sync-h40,recipe-sync-h10,recipe-sync-h10-lr15,recipe-sync-h40-lr15,recipe-diloco-h10,recipe-diloco-h40,recipe-sync-h20-lr2,recipe-async-lr15
run --scenario local3 --methods recipe-sync-h5,recipe-sync-h20,recipe-async-h10,recipe-auto-h10
# Finalists: three batch orders each.
for rep in 1 2 3; do run --scenario local3 --methods recipe-auto-h10 --repeat $rep; done
for rep in 2 3; do run --scenario local3 --methods recipe-sync-h10 --repeat $rep; done
run --scenario hetero-wan --methods recipe-async-h40,recipe-auto-h10,recipe-async-h10 --repeat 1
for rep in 2 3; do run --scenario hetero-wan --methods recipe-auto-h10 --repeat $rep; done
for rep in 2 3; do run --scenario local3 --methods recipe-async-h10 --repeat $rep; run --scenario hetero-wan --methods recipe-async-h10 --repeat $rep; done
run --scenario hetero-wan --methods recipe-auto-h10-interval
run --scenario local3 --methods recipe-auto-h10-interval
# Tables: candidates here against the references saved in bench/results/<scenario>/.
for s in local3 hetero-wan; do
  $PY -m bench.federation.search_table "$OUT" $s "$([ $s = local3 ] && echo 25,50,75,100 || echo 30,60,90,120)" | tee "$OUT/$s-table.md"
done
