"""Overlapped synchronisation against the round-by-round defaults: `ours` and `ours-overlap` (and any other
methods asked for, such as sync `fedavg`) interleaved, run after run, then one single-process run on the union
of the data (deterministic: seeded model and data order) as the equal-token reference.

    python bench/overlap_bench.py run --scenario hetero-wan --repeats 3
    python bench/overlap_bench.py summary --scenario hetero-wan

Results go to bench/results/overlap/<scenario>/ (the main tables' results are left alone; `--root` names
another folder), with the 1-minute load average before each run in load.log. The machine is shared: compare
at equal tokens. With sync FedAvg among the runs, the summary adds each method's time to the lowest loss sync
FedAvg reached (the median over its runs) and how many times sooner than sync FedAvg that is.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from bench.federation.accounting import idle_fraction
from bench.federation.analysis import loss_at_tokens
from bench.federation.results import RunResult, load_all
from bench.federation.scenario import load_scenario
from bench.federation.suite import run_suite
from bench.federation.tables import single_run, vs_single

ROOT = Path(__file__).resolve().parent / "results" / "overlap"
METHODS = ("ours", "ours-overlap")
# The summary's rows first, then any other method, then single.
ORDER = ("fedavg", "ours", "ours-round-by-round", "ours-overlap")


def run(
    scenario_name: str,
    repeats: int,
    work_root: Path,
    methods: Sequence[str] = METHODS,
    first: int = 1,
    single: bool = True,
    root: Path = ROOT,
) -> None:
    """Runs `first` .. `first + repeats - 1` of every method in `methods`, interleaved, then (`single`) the
    single-process reference; results under `root`/<scenario>/."""
    scenario = load_scenario(scenario_name)
    load_log = root / scenario_name / "load.log"
    load_log.parent.mkdir(parents=True, exist_ok=True)
    plan = [(r, m) for r in range(first, first + repeats) for m in methods] + ([(1, "single")] if single else [])
    for repeat, method in plan:
        with load_log.open("a") as f:
            f.write(
                f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {method} r{repeat} start "
                f"load1={os.getloadavg()[0]:.2f}\n"
            )
        run_suite(scenario, [method], repeat=repeat, work_root=work_root, results_root=root)
        with load_log.open("a") as f:
            f.write(
                f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {method} r{repeat} end "
                f"load1={os.getloadavg()[0]:.2f}\n"
            )


def _spread(values: Sequence[float], spec: str) -> str:
    if not values:
        return "—"
    return f"{statistics.median(values):{spec}} ({min(values):{spec}}–{max(values):{spec}})"


def first_at(run: RunResult, target: float) -> float | None:
    """Seconds until the run's global model first reached `target` or lower; None if it never did."""
    return next((p.t for p in run.curve if p.loss <= target), None)


def _sooner(times: Sequence[float | None], reference: Sequence[float | None]) -> str:
    """Median (range over every pair of runs) of how many times sooner than the reference runs."""
    ratios = [ref / t for t in times for ref in reference if t and ref]
    pairs = len(times) * len(reference)
    if not ratios:
        return "—"
    if len(ratios) < pairs:
        return _spread(ratios, ".2f") + f" × ({len(ratios)} of {pairs} pairs: in the others a run never reached it)"
    return _spread(ratios, ".2f") + " ×"


def summary(scenario_name: str, root: Path = ROOT) -> str:
    """Per method: final loss, tokens, loss over single process at equal tokens, every client's idle share
    (waiting for a model) and not-training share (pushing or waiting: the round loop's time outside local
    steps), encoded bytes per push; median (range) over the runs, then each run. With sync FedAvg runs, the
    time to the lowest loss sync FedAvg reached (median over its runs) and how many times sooner."""
    runs = load_all(scenario_name, root)
    single = single_run(runs)
    common = min((r.curve[-1].tokens for r in runs if r.kind != "single" and r.curve), default=0)
    fedavg = [r for r in runs if r.method == "fedavg" and r.curve]
    target = statistics.median(min(p.loss for p in r.curve) for r in fedavg) if fedavg else None
    rank = {m: i for i, m in enumerate(ORDER)}
    methods = sorted({r.method for r in runs if r.kind != "single"}, key=lambda m: (rank.get(m, len(ORDER)), m))
    to_target = "" if target is None else f"| s to {target:.3f} | × sooner than sync FedAvg "
    lines = [
        f"### {scenario_name}: " + ", ".join(f"`{m}`" for m in methods),
        "",
        f"| method | runs | final loss | M tokens | loss at {common / 1e6:.2f} M tokens | vs single at equal tokens "
        f"{to_target}| idle share per client (%) "
        "| not training per client (%) | kB per push per client | load (1 min) |",
        "|---|---|---|---|---|---|" + ("---|---|" if target is not None else "") + "---|---|---|---|",
    ]
    per_run = []
    reference = [first_at(r, target) for r in fedavg] if target is not None else []
    for method in (*methods, "single"):
        mine = sorted((r for r in runs if r.method == method), key=lambda r: r.repeat)
        if not mine:
            continue
        finals = [r.curve[-1].loss for r in mine if r.curve]
        tokens = [r.curve[-1].tokens / 1e6 for r in mine if r.curve]
        at_common = [x for r in mine if (x := loss_at_tokens(r.curve, common)) is not None]
        gaps = [100 * g for r in mine if (g := vs_single(r, single)) is not None]
        idle = [[100 * f for c in r.clients if (f := idle_fraction(c)) is not None] for r in mine]
        busy = [[100 * (c.push_s + c.idle_s) / c.accounted_s for c in r.clients if c.accounted_s > 0] for r in mine]
        kb = [[c.payload_bytes / c.syncs / 1e3 for c in r.clients if c.syncs] for r in mine]
        n_clients = max((len(x) for x in idle), default=0)
        idle_cols = " / ".join(_spread([x[i] for x in idle if len(x) > i], ".0f") for i in range(n_clients))
        busy_cols = " / ".join(_spread([x[i] for x in busy if len(x) > i], ".0f") for i in range(n_clients))
        kb_cols = " / ".join(_spread([x[i] for x in kb if len(x) > i], ".0f") for i in range(n_clients))
        loads = [r.load_avg_1m for r in mine if r.load_avg_1m is not None]
        timing = ""
        if target is not None and method == "single":
            timing = "— | — | "
        elif target is not None:
            times = [first_at(r, target) for r in mine]
            reached = [t for t in times if t is not None]
            never = f", {len(times) - len(reached)} of {len(times)} never" if len(reached) < len(times) else ""
            timing = f"{_spread(reached, '.1f')}{never} | {_sooner(times, reference)} | "
        lines.append(
            f"| {method} | {len(mine)} | {_spread(finals, '.3f')} | {_spread(tokens, '.2f')} | "
            f"{_spread(at_common, '.3f')} | "
            f"{_spread(gaps, '+.1f') + ' %' if gaps else '—'} | {timing}{idle_cols or '—'} | {busy_cols or '—'} | "
            f"{kb_cols or '—'} | "
            f"{_spread(loads, '.1f')} |"
        )
        for r, idle_r, busy_r, kb_r in zip(mine, idle, busy, kb, strict=True):
            gap = vs_single(r, single)
            per_run.append(
                f"| {method} r{r.repeat} | {r.curve[-1].loss:.3f} | {r.curve[-1].tokens / 1e6:.2f} | "
                f"{'—' if gap is None else f'{100 * gap:+.1f} %'} | {' / '.join(f'{x:.0f}' for x in idle_r)} | "
                f"{' / '.join(f'{x:.0f}' for x in busy_r)} | "
                f"{' / '.join(f'{x:.0f}' for x in kb_r)} | {r.load_avg_1m} |"
            )
    lines += [
        "",
        "| run | final loss | M tokens | vs single | idle % per client | not training % per client "
        "| kB per push per client | load |",
        "|---|---|---|---|---|---|---|---|",
        *per_run,
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--scenario", default="hetero-wan")
    r.add_argument("--repeats", type=int, default=3)
    r.add_argument("--work-dir", type=Path, default=Path("/tmp/ovl-runs"))
    r.add_argument("--methods", default=",".join(METHODS))
    r.add_argument("--first", type=int, default=1, help="number of the first run")
    r.add_argument("--no-single", action="store_true", help="skip the single-process reference")
    s = sub.add_parser("summary")
    s.add_argument("--scenario", default="hetero-wan")
    for p in (r, s):
        p.add_argument("--root", type=Path, default=ROOT, help="results folder (default bench/results/overlap)")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        run(args.scenario, args.repeats, args.work_dir, args.methods.split(","), args.first, not args.no_single,
            args.root)
    else:
        text = summary(args.scenario, args.root)
        (args.root / args.scenario / "summary.md").write_text(text, encoding="utf-8")
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
