"""Pretraining before and after the paradigm seam (issue 9): held-out loss at equal tokens on `hetero-wan`.

The runs after the seam were taken on a 2-core machine shared with other work (load 4-12), so wall-clock
numbers are not comparable with the quiet-machine runs from before; loss at an equal number of trained tokens
is, since every method's loss curve is a function of the tokens folded in, not of the seconds they took.

    python bench/run.py federation --scenario hetero-wan --methods ours,fedavg --repeat 7 --no-report
    python -m bench.seam_check --write docs/benchmarks.md

Each row takes an "after" run's curve, picks its last point and its middle point, and reads the "before"
runs' loss at that token count by linear interpolation along their curves.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "hetero-wan"
BEFORE = {"ours": ["ours.json"], "fedavg": ["fedavg.json", "fedavg.r2.json"]}
SEAM = RESULTS / "seam-check"  # kept apart: loaded-machine runs must not enter the time-to-target tables


def after_runs(method: str) -> list[str]:
    """Every repeat kept in seam-check/ for `method` (`<method>.r<N>.json`), by repeat number."""
    found = [p.name for p in SEAM.glob(f"{method}.r*.json") if p.name not in BEFORE[method]]
    return sorted(found, key=lambda n: int(n.split(".r")[1].split(".")[0]))


def curve(name: str) -> tuple[np.ndarray, np.ndarray, dict]:
    data = json.loads(((SEAM if (SEAM / name).exists() else RESULTS) / name).read_text())
    pts = data["curve"]
    return np.array([p["tokens"] for p in pts], float), np.array([p["loss"] for p in pts], float), data


def rows() -> list[tuple[str, str, int, float, str, float]]:
    out = []
    for method in BEFORE:
        for after in after_runs(method):
            tok, loss, _ = curve(after)
            for i in sorted({len(tok) // 2, len(tok) - 1}):
                for before in BEFORE[method]:
                    btok, bloss, _ = curve(before)
                    if tok[i] <= btok[-1]:
                        out.append((method, after, int(tok[i]), float(loss[i]), before,
                                    float(np.interp(tok[i], btok, bloss))))
    return out


def section(found: list[tuple[str, str, int, float, str, float]]) -> str:
    afters = sorted({(m, a) for m, a, *_ in found})
    loads = {a: curve(a)[2].get("load_avg_1m") for _, a in afters}
    lines = [
        "### Pretraining before and after the paradigm seam (issue 9)",
        "",
        "Command: `python bench/run.py federation --scenario hetero-wan --methods ours,fedavg --repeat N "
        "--no-report` for each after-run N (then moved to `bench/results/hetero-wan/seam-check/`, so these "
        "loaded-machine runs stay out of the time-to-target tables), then "
        "`python -m bench.seam_check --write docs/benchmarks.md`. Raw curves, after: "
        + ", ".join(f"`seam-check/{a}` (load {loads[a]:.1f})" if loads[a] is not None else f"`seam-check/{a}`"
                    for _, a in afters)
        + "; before (issue 6's runs): " + ", ".join(f"`{b}`" for bs in BEFORE.values() for b in bs) + ". "
        "The after-runs shared the 2 cores with other work (1-minute load average in brackets), so they are "
        "compared at equal tokens, not equal seconds.",
        "",
        "| method | after run | tokens | loss after | before run | loss before (interpolated) | difference |",
        "|---|---|---|---|---|---|---|",
    ]
    diffs = []
    for method, after, tok, loss, before, bloss in found:
        diffs.append(abs(loss - bloss) / bloss)
        lines.append(f"| {method} | {after} | {tok:,} | {loss:.3f} | {before} | {bloss:.3f} | "
                     f"{100 * (loss - bloss) / bloss:+.1f}% |")
    if diffs:
        lines += ["", f"Largest relative difference: {100 * max(diffs):.1f}% over {len(diffs)} comparisons."]
        for method in BEFORE:
            # one figure per after-run: its last point against the first before-run (median and range over runs)
            last = {}
            for m, after, _tok, loss, before, bloss in found:
                if m == method and before == BEFORE[method][0]:
                    last[after] = 100 * (loss - bloss) / bloss  # rows come in token order: the last one stays
            if last:
                v = list(last.values())
                lines.append(f"{method}: at each after-run's last point, {statistics.median(v):+.1f}% median "
                             f"({min(v):+.1f}% to {max(v):+.1f}%, {len(v)} runs) against `{BEFORE[method][0]}`.")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", type=Path, help="markdown file whose `seam` section is replaced")
    args = p.parse_args()
    text = section(rows())
    print(text)
    if args.write:
        from bench.bench_markers import replace_section

        replace_section(args.write, "seam", text)


if __name__ == "__main__":
    main()
