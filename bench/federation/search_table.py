"""The recipe search's table: each candidate's runs against the one-machine references at equal tokens.

Pure (results in, text out). A candidate with several repeats (each with its own client data seeds) shows the
median and the range of its gaps; the references are those `references.pick_references` keeps.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from .analysis import loss_at
from .references import HEADLINE, LABELS, pick_references
from .results import RESULTS_DIR, RunResult, load_all
from .tables import markdown, name_of, vs_single


def _spread(values: Sequence[float], spec: str) -> str:
    """'median (min – max)', or the one value; `spec` formats each number."""
    if not values:
        return "—"
    med = format(statistics.median(values), spec)
    if len(values) == 1:
        return med
    return f"{med} ({format(min(values), spec)} – {format(max(values), spec)})"


def _by_method(runs: Sequence[RunResult]) -> dict[str, list[RunResult]]:
    """The federated runs with a curve, grouped by method (their repeats)."""
    groups: dict[str, list[RunResult]] = {}
    for r in runs:
        if r.kind == "federated" and r.curve:
            groups.setdefault(r.method, []).append(r)
    return groups


def search_table(runs: Sequence[RunResult], references: Sequence[RunResult]) -> str:
    """One row per federated method in `runs`: repeats, tokens, final loss and the gaps to (b), (a) and (c)
    (those saved), the smallest median gap to the headline reference (or to the first saved) first."""
    refs = pick_references(references)
    shown = [k for k in (HEADLINE, "a", "c") if refs.get(k) is not None]
    by_method = _by_method(runs)
    rows = []
    first = refs[shown[0]] if shown else None  # order by the headline gap, or the first reference there is
    for method, group in sorted(by_method.items(), key=lambda kv: _median_gap(kv[1], first)):
        gaps = {k: [g for g in (vs_single(r, refs[k]) for r in group) if g is not None] for k in shown}
        rows.append([
            name_of(method),
            str(len(group)),
            _spread([r.tokens / 1e6 for r in group], ".2f"),
            _spread([r.curve[-1].loss for r in group], ".3f"),
            *(_spread([100 * g for g in gaps[k]], "+.1f") for k in shown),
        ])  # fmt: skip
    head = ["candidate", "runs", "tokens (M)", "final loss", *(f"vs {LABELS[k]}, %" for k in shown)]
    return markdown(head, rows)


def checkpoints_table(runs: Sequence[RunResult], checkpoints: Sequence[float]) -> str:
    """One row per federated method: the loss of the newest version published by each wall-clock checkpoint,
    median and range over its repeats; the lowest median at the last checkpoint first."""
    by_method = _by_method(runs)
    table = {m: [[loss_at(r.curve, c) for r in group] for c in checkpoints] for m, group in by_method.items()}
    rows = [
        [name_of(m), str(len(by_method[m])), *(_spread(col, ".3f") for col in cols)]
        for m, cols in sorted(table.items(), key=lambda kv: statistics.median(kv[1][-1]))
    ]
    return markdown(["candidate", "runs", *(f"loss @ {c:g} s" for c in checkpoints)], rows)


def _median_gap(group: Sequence[RunResult], ref: RunResult | None) -> float:
    gaps = [g for g in (vs_single(r, ref) for r in group) if g is not None]
    return statistics.median(gaps) if gaps else float("inf")


def main(argv: Sequence[str]) -> int:
    """`python -m bench.federation.search_table DIR SCENARIO [SECONDS,...]`: the candidates saved under
    DIR/SCENARIO/ against the references saved in bench/results/SCENARIO/, then (with SECONDS) their losses at
    those wall-clock checkpoints."""
    if len(argv) not in (2, 3):
        print("usage: python -m bench.federation.search_table DIR SCENARIO [SECONDS,...]", file=sys.stderr)
        return 2
    folder, scenario = Path(argv[0]), argv[1]
    candidates = [r for r in load_all(scenario, folder) if r.kind == "federated"]
    if not candidates:
        print(f"no federated run saved under {folder / scenario}", file=sys.stderr)
        return 1
    print(search_table(candidates, load_all(scenario, RESULTS_DIR)))
    if len(argv) == 3:
        print()
        print(checkpoints_table(candidates, [float(x) for x in argv[2].split(",")]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
