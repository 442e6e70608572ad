"""`geofed local` with and without `--chaos`, at equal wall-clock time: one run each, the same seed and
settings (a `hetero-wan`-like federation: 3 clients, the last 2x slower, each behind a 60 ms / 1 MB/s link).

    python bench/chaos_bench.py [--duration 120] [--chaos preempt=60,kill=120,flap=60,ps-restart=1]

Each run's whole output goes to bench/results/chaos/<name>.txt; the table (markdown) to stdout and
bench/results/chaos/summary.md, with the 1-minute load average before each run (the machine may be shared).
One run per setup: a single sample, not a distribution.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent / "results" / "chaos"
GEOFED = str(Path(sys.executable).with_name("geofed"))
LINK = "60ms/20ms/1MBps/4MBps"


def _field(pattern: str, text: str) -> str:
    m = re.search(pattern, text, re.MULTILINE)
    return m.group(1) if m else "?"


def run_one(name: str, chaos: str | None, duration_s: float, seed: int) -> dict[str, str]:
    """One `geofed local` run; its figures from the summary lines."""
    cmd = [GEOFED, "local", "--clients", "3", "--slow-client", "2", "--link", LINK, "--duration", f"{duration_s:g}",
           "--seed", str(seed), *(["--chaos", chaos] if chaos else [])]
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as runs:
        t = time.monotonic()
        out = subprocess.run([*cmd, "--run-dir", runs], capture_output=True, text=True, check=False)
        wall = time.monotonic() - t
    text = f"$ {' '.join(cmd)}\n# exit code {out.returncode}, {wall:.0f} s, load average before {load:.2f}\n" \
           + out.stdout + out.stderr
    (ROOT / f"{name}.txt").write_text(text)
    return {
        "run": name, "spec": chaos or "(none)", "wall_s": f"{wall:.0f}", "load": f"{load:.2f}",
        "version": _field(r"^global version (\d+)", out.stdout),
        "loss": _field(r"^eval loss: (\S+ -> \S+)$", out.stdout),
        "goodput": _field(r"^goodput: ([0-9.]+%)", out.stdout),
        "chaos": _field(r"^chaos: (\d+ preemptions, .*)$", out.stdout) if chaos else "—",
        "exit": str(out.returncode),
    }


def table(rows: list[dict[str, str]]) -> str:
    head = ("| run | --chaos | faults done | global version | eval loss | goodput | wall s | load before | exit |\n"
            "|---|---|---|---:|---|---:|---:|---:|---:|\n")
    return head + "".join(f"| {r['run']} | `{r['spec']}` | {r['chaos']} | {r['version']} | {r['loss']} | "
                          f"{r['goodput']} | {r['wall_s']} | {r['load']} | {r['exit']} |\n" for r in rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=120.0)
    p.add_argument("--chaos", default="preempt=60,kill=120,flap=60,ps-restart=1")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    ROOT.mkdir(parents=True, exist_ok=True)
    rows = [run_one("no-chaos", None, args.duration, args.seed), run_one("chaos", args.chaos, args.duration, args.seed)]
    summary = table(rows)
    (ROOT / "summary.md").write_text(summary)
    print(summary, end="")


if __name__ == "__main__":
    main()
