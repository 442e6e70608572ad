"""The prose under a scenario's tables, computed from the same saved runs as the tables (issue 14).

Hand-written notes described older runs and drifted from the tables they sat under (tokens, idle shares,
bytes, versions per second). Every sentence here is a sentence template filled from `RunResult`s, so a
re-run or a new repeat changes the prose with the tables.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from .accounting import idle_fraction
from .results import RunResult
from .tables import label, name_of, order, single_run, vs_single

MB = 1e6


def _range(values: Sequence[float], spec: str, unit: str = "") -> str:
    lo, hi = min(values), max(values)
    return f"{lo:{spec}}{unit}" if f"{lo:{spec}}" == f"{hi:{spec}}" else f"{lo:{spec}}–{hi:{spec}}{unit}"


def _by_method(runs: Sequence[RunResult]) -> dict[str, list[RunResult]]:
    out: dict[str, list[RunResult]] = {}
    for r in order(runs):
        out.setdefault(r.method, []).append(r)
    return out


def noise_reading(runs: Sequence[RunResult]) -> list[str]:
    loads = [r.load_avg_1m for r in runs if r.load_avg_1m is not None]
    groups = _by_method([r for r in runs if r.kind == "federated"])
    single = [name_of(m) for m, rs in groups.items() if len(rs) == 1]
    repeated = [f"{name_of(m)} {_range([r.tokens / MB for r in rs], '.2f')} M" for m, rs in groups.items()
                if len(rs) > 1]
    out = []
    if loads:
        out.append(f"- **Load.** The runs started at a 1-minute load average of {_range(loads, '.1f')} on 2 "
                   "shared cores; absolute times carry that noise.")
    if repeated:
        out.append("- **Tokens trained in the same budget** by repeated methods: " + "; ".join(repeated) + ".")
    if single:
        out.append(f"- **Single runs** (no spread measured): {', '.join(single)}.")
    return out


def idle_reading(runs: Sequence[RunResult]) -> list[str]:
    parts = []
    for r in order(runs):
        shares = [100 * f for c in r.clients if (f := idle_fraction(c)) is not None]
        if shares:
            parts.append(f"{label(r)} {_range(shares, '.0f', '%')}")
    return ["- **Idle share per client** (min–max over clients): " + "; ".join(parts) + "."] if parts else []


def wire_reading(runs: Sequence[RunResult]) -> list[str]:
    parts = []
    for r in order(runs):
        syncing = [c for c in r.clients if c.syncs]
        if not syncing:
            continue
        down = statistics.median(c.bytes_down / c.syncs / MB for c in syncing)
        up = statistics.median(c.bytes_up / c.syncs / MB for c in syncing)
        parts.append(f"{label(r)} ↓{down:.2f} / ↑{up:.2f} MB per sync ({down / up:.1f}×)" if up else
                     f"{label(r)} ↓{down:.2f} MB per sync")
    return ["- **Bytes per sync**, median over clients, down / up on the client's link: " + "; ".join(parts) + "."
            ] if parts else []


def version_reading(runs: Sequence[RunResult]) -> list[str]:
    parts = [f"{label(r)} {r.curve[-1].version / r.budget_s:.2f}/s" for r in order(runs)
             if r.kind == "federated" and r.curve and r.budget_s]
    return ["- **Global versions published per second**: " + "; ".join(parts) + "."] if parts else []


def quality_reading(runs: Sequence[RunResult]) -> list[str]:
    single = single_run(runs)
    if single is None:
        return []
    gaps = [(g, r) for r in order(runs) if r.kind == "federated" and (g := vs_single(r, single)) is not None]
    if not gaps:
        return []
    (best_gap, best), (worst_gap, worst) = min(gaps, key=lambda x: x[0]), max(gaps, key=lambda x: x[0])
    text = (f"- **At equal tokens** the final loss of {label(best)} is the closest to one process on the union of "
            f"the data ({100 * best_gap:+.1f}%)")
    if len(gaps) > 1:
        text += f"; the farthest is {label(worst)} ({100 * worst_gap:+.1f}%)"
    return [text + "."]


def reading_section(runs: Sequence[RunResult]) -> str:
    """'Reading these numbers', generated: every figure below comes from the runs in the tables above."""
    lines = noise_reading(runs) + version_reading(runs) + idle_reading(runs) + wire_reading(runs) \
        + quality_reading(runs)
    if not lines:
        return ""
    return "### Reading these numbers (generated from the runs above)\n\n" + "\n".join(lines)
