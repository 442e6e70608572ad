"""Held-out loss at equal tokens and at the end of the budget, for series of federation result files.

    python bench/equal_tokens.py NAME=GLOB [NAME=GLOB ...] [--tokens 1.5,2.0,2.5]

Each GLOB picks `bench/run.py federation` result JSONs (one per run); a run's loss at X M tokens is read from
its global-model curve by linear interpolation ('—' once the run ended before X). Per series: each run's start,
1-minute load, final loss, tokens and the fastest client's pushes (landed / dropped as stale or put off), then
every token point and the final loss as `run1, run2, ... (median)`.
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from federation.analysis import loss_at_tokens
from federation.results import CurvePoint


def run_row(path: str, points: list[float]) -> dict:
    data = json.loads(open(path).read())
    curve = [CurvePoint(t=p["t"], version=p["version"], loss=p["loss"], tokens=p["tokens"]) for p in data["curve"]]
    fast = data["clients"][0].get("statuses", {}) if data["clients"] else {}  # the single process has none
    landed = fast.get("APPLIED", 0) + fast.get("ACCEPTED", 0)
    dropped = fast.get("DEFERRED", 0) + fast.get("STALE", 0)
    return {
        "path": path,
        "started": data["started_at"],
        "load": data["load_avg_1m"],
        "final": curve[-1].loss,
        "tokens": float(curve[-1].tokens),
        "fast": f"{landed}/{dropped}",
        "at": [loss_at_tokens(curve, int(x)) for x in points],
    }


def cells(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "—"
    shown = ", ".join("—" if v is None else f"{v:.3f}" for v in values)
    return f"{shown} ({statistics.median(known):.3f})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("series", nargs="+", help="NAME=GLOB of result JSONs")
    parser.add_argument("--tokens", default="1.5,2.0,2.5", help="token points, in millions")
    args = parser.parse_args(argv)
    points = [float(x) * 1e6 for x in args.tokens.split(",")]
    for spec in args.series:
        name, pattern = spec.split("=", 1)
        runs = [run_row(p, points) for p in sorted(glob.glob(pattern))]
        print(f"## {name}")
        for r in runs:
            print(f"   {r['path']}  {r['started']}  load {r['load']}  final {r['final']:.3f}  "
                  f"{r['tokens'] / 1e6:.2f} M tokens  fastest client landed/dropped {r['fast']}")
        for i, x in enumerate(points):
            print(f"   {x / 1e6:.1f} M tokens: {cells([r['at'][i] for r in runs])}")
        print(f"   final: {cells([r['final'] for r in runs])}   M tokens: "
              + ", ".join(f"{r['tokens'] / 1e6:.2f}" for r in runs))


if __name__ == "__main__":
    main()
