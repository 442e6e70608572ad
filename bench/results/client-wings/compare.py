"""Before/after `hetero-wan` runs of `ours` (bench/results/client-wings/): held-out loss at equal tokens
(interpolated along each run's curve), and at 120 s the final loss, tokens, versions and each client's push
outcomes and idle seconds. Usage: python compare.py before after"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def runs_of(label: str) -> list[dict]:
    d = HERE / label / "results" / "hetero-wan"
    return [json.loads((d / n).read_text()) for n in ("ours.json", "ours.r2.json", "ours.r3.json") if (d / n).exists()]


def loss_at(run: dict, tokens: float) -> float:
    x = np.array([p["tokens"] for p in run["curve"]], float)
    y = np.array([p["loss"] for p in run["curve"]], float)
    return float(np.interp(tokens, x, y)) if tokens <= x[-1] else float("nan")


def cell(values: list[float]) -> str:
    return ", ".join(f"{v:.3f}" for v in values) + f" ({statistics.median(values):.3f})"


def client_cell(run: dict, i: int) -> str:
    c = run["clients"][i]
    outcomes = ",".join(f"{k[:3]} {v}" for k, v in sorted(c["statuses"].items()))
    return f"{outcomes}, idle {c['idle_s']:.0f} s"


def main(labels: list[str]) -> None:
    runs = {label: runs_of(label) for label in labels}
    rule = "|---|" + "---|" * len(labels)
    print("| tokens | " + " | ".join(labels) + " |\n" + rule)
    for tokens in (1.0e6, 1.5e6, 2.0e6):
        cells = [cell([loss_at(r, tokens) for r in runs[label]]) for label in labels]
        print(f"| {tokens / 1e6:.1f} M | " + " | ".join(cells) + " |")
    print("\n| at 120 s | " + " | ".join(labels) + " |\n" + rule)
    print("| final loss | " + " | ".join(cell([r["curve"][-1]["loss"] for r in runs[x]]) for x in labels) + " |")
    tokens = [", ".join(f"{r['curve'][-1]['tokens'] / 1e6:.2f}" for r in runs[x]) + " M" for x in labels]
    print("| tokens | " + " | ".join(tokens) + " |")
    print("| versions | " + " | ".join(", ".join(str(r["curve"][-1]["version"]) for r in runs[x]) for x in labels)
          + " |")
    for i in range(len(runs[labels[0]][0]["clients"])):
        print(f"| client-{i} | " + " | ".join("; ".join(client_cell(r, i) for r in runs[x]) for x in labels) + " |")
    print("| load at start | " + " | ".join(", ".join(str(r["load_avg_1m"]) for r in runs[x]) for x in labels) + " |")


if __name__ == "__main__":
    main(sys.argv[1:] or ["before", "after"])
