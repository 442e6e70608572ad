"""The compressed model stream on `hetero-wan`: bytes down vs bytes up per client, from saved runs.

Reads bench/results/downlink/<scenario>/*.json (RunResult files written by the federation harness) and
writes the `downlink` section of docs/benchmarks.md: one row per run, the median and range of the
grid_delta runs, and the sentences under the table, all computed from the same files.

    python bench/downlink_report.py --write docs/benchmarks.md

The runs themselves (a few minutes each): `ours` (geofed's async defaults) with the default downlink,
repeats 1-3, and repeats 1-3 on `bench/results/downlink/hetero-wan-fp32down.yaml` (hetero-wan whose federation
streams every version to every client in fp32, the downlink before issue 14). `hetero-wan-grid8/` holds
`ours` runs from before `downlink.grid_steps` became 4 (8, the earlier default), for comparison. The runs of
2026-12-01 were made with `python bench/run.py federation --scenario hetero-wan --methods ours --repeat R
--no-report` (and `--scenario bench/results/downlink/hetero-wan-fp32down.yaml` for the fp32 stream) and
copied here from `bench/results/<scenario>/` (same harness, same RunResult files; dated notes with their
commits in `bench/results/downlink/NOTES.md`). Equivalently:

    python -c 'import sys; from pathlib import Path; from bench.federation.scenario import load_scenario; \\
      from bench.federation.suite import run_suite; \\
      [run_suite(load_scenario(sys.argv[1]), ["ours"], repeat=r, results_root=Path("bench/results/downlink")) \\
       for r in (1, 2, 3)]' hetero-wan
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
if str(BENCH.parent) not in sys.path:
    sys.path.insert(0, str(BENCH.parent))

from bench.codec_bench import write_section  # noqa: E402
from bench.federation.results import RunResult  # noqa: E402

ROOT = BENCH / "results" / "downlink"
BEGIN, END = "<!-- downlink:begin -->", "<!-- downlink:end -->"
GOAL = 1.5
"""Issue 14: bytes down per client per sync at most 1.5x bytes up."""


SCENARIOS = ("hetero-wan", "hetero-wan-grid8", "hetero-wan-fp32down")
"""The compressed stream with default settings, with the earlier default grid (8 steps per rms), and the same
scenario streaming every version in fp32. A run's folder, not its JSON, says which (they share the scenario)."""


def load(root: Path = ROOT) -> list[tuple[str, RunResult]]:
    """(folder, run) for every saved run, in SCENARIOS order."""
    return [(name, RunResult.from_json(p.read_text(encoding="utf-8")))
            for name in SCENARIOS for p in sorted((root / name).glob("*.json"))]


def down_up_ratio(run: RunResult) -> float:
    """Bytes down over bytes up, summed over clients (per sync alike: both count the same syncs)."""
    up = sum(c.bytes_up for c in run.clients)
    return sum(c.bytes_down for c in run.clients) / up if up else float("nan")


def rows(runs: list[tuple[str, RunResult]]) -> list[str]:
    out = [
        "| runs | run | started | syncs | MB up | MB down | down / up | worst client down / up | final loss "
        "| load avg |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in runs:
        up = sum(c.bytes_up for c in r.clients) / 1e6
        down = sum(c.bytes_down for c in r.clients) / 1e6
        worst = _worst(r)
        loss = f"{r.curve[-1].loss:.3f}" if r.curve else "—"
        started = r.started_at.replace("T", " ")[:16]
        out.append(f"| {name} | {r.repeat} | {started} | {sum(c.syncs for c in r.clients)} | {up:.1f} | {down:.1f} | "
                   f"{down_up_ratio(r):.2f} | {worst:.2f} | {loss} | {r.load_avg_1m} |")
    return out


def _worst(run: RunResult) -> float:
    return max((c.bytes_down / c.bytes_up for c in run.clients if c.bytes_up), default=float("nan"))


def summary(named_runs: list[tuple[str, RunResult]]) -> list[str]:
    runs = [r for _, r in named_runs]
    ours = [r for name, r in named_runs if name == "hetero-wan"]
    grid8 = [r for name, r in named_runs if name == "hetero-wan-grid8"]
    base = [r for name, r in named_runs if name == "hetero-wan-fp32down"]
    if not ours:
        return ["No grid_delta runs saved yet."]
    ratios = [down_up_ratio(r) for r in ours]
    final_losses = [r.curve[-1].loss for r in ours if r.curve]
    loss_ours = statistics.median(final_losses) if final_losses else float("nan")
    med = statistics.median(ratios)
    verdict = "meets" if med <= GOAL else "misses"
    lines = [f"- Bytes down / bytes up, all clients, compressed stream (default settings): median {med:.2f} "
             f"(range {min(ratios):.2f}–{max(ratios):.2f}, {len(ours)} runs) — {verdict} the ≤ {GOAL} goal."]
    worst = [max(r.clients, key=lambda c: c.bytes_down / max(1, c.bytes_up)) for r in ours]
    w = [c.bytes_down / c.bytes_up for c in worst]
    fewest = sum(c.syncs == min(x.syncs for x in r.clients) for c, r in zip(worst, ours, strict=True))
    named = "; ".join(f"{c.client}: {c.syncs} syncs, ↓{c.bytes_down / c.syncs / 1e6:.2f} / "
                      f"↑{c.bytes_up / c.syncs / 1e6:.2f} MB per sync" for c in worst if c.syncs)
    lines.append(f"- Per client, the worst client of each run: down / up median {statistics.median(w):.2f} (range "
                 f"{min(w):.2f}–{max(w):.2f}) — {'meets' if max(w) <= GOAL else 'misses'} the goal per client; "
                 f"it is the client with the fewest syncs in {fewest} of {len(ours)} runs ({named}).")
    if grid8:
        g = [down_up_ratio(r) for r in grid8]
        gw = [_worst(r) for r in grid8]
        loss_g8 = statistics.median(r.curve[-1].loss for r in grid8 if r.curve)
        lines.append(f"- The earlier default grid, `downlink.grid_steps` 8 ({len(grid8)} runs): all clients "
                     f"{statistics.median(g):.2f} (range {min(g):.2f}–{max(g):.2f}), worst client "
                     f"{statistics.median(gw):.2f} (range {min(gw):.2f}–{max(gw):.2f}); final eval loss median "
                     f"{loss_g8:.3f} against {loss_ours:.3f} with today's 4 steps per rms.")
    if base:
        b = statistics.median(down_up_ratio(r) for r in base)
        down_ours = statistics.median(sum(c.bytes_down for c in r.clients) for r in ours)
        down_base = statistics.median(sum(c.bytes_down for c in r.clients) for r in base)
        started, plural = ", ".join(sorted({r.started_at[:10] for r in base})), "s" if len(base) > 1 else ""
        bs = [down_up_ratio(r) for r in base]
        spread = f", range {min(bs):.2f}–{max(bs):.2f}" if len(bs) > 1 else ""
        lines.append(f"- The fp32 stream of every version (the downlink before issue 14; run{plural} of {started}, "
                     f"commits in `bench/results/downlink/NOTES.md`): down / up median {b:.2f} ({len(base)} "
                     f"run{plural}{spread}); the compressed stream moves {down_base / down_ours:.1f}× fewer bytes "
                     "down (medians of the runs' totals).")
        loss_base = statistics.median(r.curve[-1].loss for r in base if r.curve)
        loads = [r.load_avg_1m for r in runs if r.load_avg_1m is not None]
        load = f"{min(loads):.0f}–{max(loads):.0f}" if loads else "unrecorded"
        lines.append(f"- Final eval loss: {loss_ours:.3f} (median, compressed) vs {loss_base:.3f} (fp32 stream), with "
                     f"the machine's load average at {load} on 2 cores during these runs: "
                     "tokens trained differ run to run, so these losses cannot show a penalty or its absence.")
    return lines


def render(runs: list[RunResult]) -> str:
    return "\n".join([
        "Command: `python bench/downlink_report.py --write docs/benchmarks.md` over the raw runs in "
        "`bench/results/downlink/` (RunResult JSON; their command in the module docstring). Bytes are the WAN "
        "proxy's counters: gRPC framing and heartbeats included. Every figure below comes from those files.",
        "",
        *rows(runs),
        "",
        *summary(runs),
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", type=Path, help="update the downlink section of this markdown file")
    args = ap.parse_args(argv)
    body = render(load())
    print(body)
    if args.write:
        write_section(args.write, body, BEGIN, END)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
