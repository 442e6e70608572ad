"""The recipe search's table: each candidate's runs against the one-machine references at equal tokens.

Pure (results in, text out). A candidate with several repeats (each with its own client data seeds) shows the
median and the range of its gaps; the references are those `references.pick_references` keeps.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from .references import HEADLINE, LABELS, pick_references
from .results import RunResult
from .tables import markdown, name_of, vs_single


def _spread(values: Sequence[float], spec: str) -> str:
    """'median (min – max)', or the one value; `spec` formats each number."""
    if not values:
        return "—"
    med = format(statistics.median(values), spec)
    if len(values) == 1:
        return med
    return f"{med} ({format(min(values), spec)} – {format(max(values), spec)})"


def search_table(runs: Sequence[RunResult], references: Sequence[RunResult]) -> str:
    """One row per federated method in `runs`: repeats, tokens, final loss and the gaps to (b), (a) and (c)."""
    refs = pick_references(references)
    shown = [k for k in (HEADLINE, "a", "c") if refs.get(k) is not None]
    by_method: dict[str, list[RunResult]] = {}
    for r in runs:
        if r.kind == "federated" and r.curve:
            by_method.setdefault(r.method, []).append(r)
    rows = []
    for method, group in sorted(by_method.items(), key=lambda kv: _median_gap(kv[1], refs.get(HEADLINE))):
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


def _median_gap(group: Sequence[RunResult], ref: RunResult | None) -> float:
    gaps = [g for g in (vs_single(r, ref) for r in group) if g is not None]
    return statistics.median(gaps) if gaps else float("inf")
