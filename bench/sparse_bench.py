"""Sparse pseudo-gradients (issue 16): fp32 DiLoCo vs int8+Huffman vs the sparse codec at 1/3/10 % density.

python -m bench.sparse_bench [--runs 3] [--budget-scale 0.5] [--scenarios hetero-wan,local3]
python -m bench.sparse_bench --report          # only rebuild the table from bench/results/sparse/

Rows (`bench.federation.methods.SPARSE_METHODS`): fp32 DiLoCo (sync barrier, H local steps, outer Nesterov
lr 0.7 μ 0.9), "ours" (geofed's defaults: async, η = 0.5, int8 + Huffman with error feedback) and ours with
one setting changed, `codec.name=sparse` at 1, 3 and 10 % density. Runs go through the federation harness
(`bench.federation.suite.run_suite`: real PS and client processes, emulated WAN links, the global model
evaluated afterwards). Repeats are interleaved (every method once, then again), so a
cut-short session still has every row. Raw results: bench/results/sparse/<scenario>/<method>[.rN].json;
the table goes to docs/benchmarks.md between the `sparse` markers and to bench/results/sparse/table.md.
A run whose result file exists is not run again (resume a cut session by running the same command).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_markers import replace_section  # noqa: E402
from bench.federation.analysis import time_to_target  # noqa: E402
from bench.federation.methods import METHODS, SPARSE_METHODS  # noqa: E402
from bench.federation.results import RunResult, load_all, result_path  # noqa: E402
from bench.federation.scenario import Scenario, load_scenario  # noqa: E402
from bench.federation.suite import run_suite  # noqa: E402

OUT = BENCH / "results" / "sparse"
DOCS = ROOT / "docs" / "benchmarks.md"
SCENARIOS = ("hetero-wan", "local3")
REFERENCE = "diloco"  # fp32 DiLoCo: the bytes and loss every row is read against


def scaled(scenario: Scenario, scale: float) -> Scenario:
    """`scenario` with its budget (and table checkpoints) scaled; link outages must still fit in it."""
    if scale == 1.0:
        return scenario
    budget = round(scenario.budget_s * scale)
    outages = [at + d for c in scenario.clients for at, _, d in c.outages()]
    budget = max([budget, *[math.ceil(e) + 5 for e in outages]])
    return Scenario.model_validate({**scenario.model_dump(), "budget_s": budget,
                                    "report_at_s": [round(budget * q / 4, 1) for q in (1, 2, 3, 4)]})


def _median_range(xs: Sequence[float | None], spec: str) -> str:
    got = [x for x in xs if x is not None and not math.isnan(x)]
    if not got:
        return "—"
    med = format(statistics.median(got), spec)
    rng = f" ({format(min(got), spec)}–{format(max(got), spec)})" if len(got) > 1 else ""
    miss = f", {len(xs) - len(got)} of {len(xs)} never" if len(got) < len(xs) else ""
    return f"{med}{rng}{miss}"


_RECEIVED = re.compile(r"event=model_received version=(\d+) encoding=(\S+) bytes=(\d+)")


def collect_transfers(work_dir: Path) -> None:
    """Save each run's model transfers (from its client logs) next to its result, as the raw downlink record.

    The harness's result holds the links' byte counters only; the transfers say what each model cost in its
    encoding. The newest run directory of a (method, repeat) is the one its result came from.
    """
    for scenario in SCENARIOS:
        for result in sorted((OUT / scenario).glob("*.json")):
            target = _transfers_path(scenario, result.stem)
            if target.exists():
                continue
            run = RunResult.from_json(result.read_text(encoding="utf-8"))
            dirs = sorted((work_dir / scenario).glob(f"{run.method}-r{run.repeat}-*"))
            if not dirs:
                continue
            logs = sorted((dirs[-1] / "logs").glob("client-*.log"))
            transfers = {log.stem: [[int(v), e, int(b)] for v, e, b in _RECEIVED.findall(log.read_text())]
                         for log in logs}
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps({"run_dir": dirs[-1].name, "transfers": transfers}, indent=1) + "\n")


def _transfers_path(scenario: str, stem: str) -> Path:
    """Kept apart from the results: the harness reads every *.json of a scenario folder as a result."""
    return OUT / "transfers" / scenario / f"{stem}.json"


def _per_sync(run: RunResult) -> tuple[float, float, float | None, float | None, float | None]:
    """Per client sync: (encoded delta bytes up, wire bytes up, wire bytes down, model transfer bytes down,
    versions per model transfer); None where the client logs' transfers were not collected.

    Wire counts leave out the one-off whole vectors (the master's Θ0 upload, each client's first model);
    transfers count every model after a client's first.
    """
    syncs = sum(c.syncs for c in run.clients) or 1
    payload = sum(c.payload_bytes for c in run.clients) / syncs
    up = sum(c.bytes_up - (4 * run.numel if i == 0 else 0) for i, c in enumerate(run.clients)) / syncs
    saved = _transfers_path(run.scenario, f"{run.method}{'' if run.repeat == 1 else f'.r{run.repeat}'}")
    if not saved.exists():
        return payload, up, None, None, None
    transfers = json.loads(saved.read_text(encoding="utf-8"))["transfers"]
    got = [transfers.get(f"client-{i}", []) for i in range(len(run.clients))]
    down = sum(c.bytes_down - (g[0][2] if g else 0) for c, g in zip(run.clients, got, strict=True)) / syncs
    model = sum(b for g in got for _, _, b in g[1:]) / syncs
    steps = [b[0] - a[0] for g in got for a, b in zip(g, g[1:], strict=False)]
    return payload, up, down, model, (statistics.mean(steps) if steps else None)


def _loss_at_tokens(run: RunResult, tokens: int) -> float | None:
    """Loss of the newest evaluated version with at most `tokens` training tokens behind it."""
    before = [p for p in run.curve if p.tokens <= tokens]
    return before[-1].loss if before else None


def _trained(run: RunResult) -> bool:
    return len(run.curve) > 1 and run.tokens > 0


def scenario_table(name: str) -> tuple[str, list[str]]:
    """The markdown table of one scenario and its generated summary lines."""
    runs = [r for r in load_all(name, OUT) if r.method in SPARSE_METHODS]
    if not runs:
        return "", []
    by = {m: [r for r in runs if r.method == m] for m in SPARSE_METHODS}
    numel = runs[0].numel
    # A run that published no version in its budget (a barrier round slower than the budget on the loaded
    # machine) has no loss to compare: it is counted in its row and left out of the equal-token point and
    # the target.
    trained = [r for r in runs if _trained(r)]
    equal_tokens = min((r.tokens for r in trained), default=0)
    ref_final = [r.curve[-1].loss for r in by[REFERENCE] if _trained(r)]
    target = statistics.median(ref_final) if ref_final else None
    head = ("method", "runs", "budget s", "load (1 min)", "delta bytes up / sync", "model bytes down / sync",
            "fp32 ÷ up", "fp32 ÷ down", "versions / transfer", "fp32 ÷ down per version", "wire up / sync",
            "wire down / sync",
            f"time to {target:.3f} s" if target else "time to target", f"loss at {equal_tokens / 1e6:.2f} M tokens",
            "final loss")
    rows, lines = [], []
    fp32 = 4 * numel
    for m in SPARSE_METHODS:
        rs = by[m]
        if not rs:
            continue
        per = [_per_sync(r) for r in rs]
        up_ratio = [fp32 / p[0] for p in per if p[0]]
        down_ratio = [fp32 / p[3] for p in per if p[3]]
        eq = [_loss_at_tokens(r, equal_tokens) for r in rs if _trained(r)]
        ttt = [time_to_target(r.curve, target) if target else None for r in rs]
        idle = sum(not _trained(r) for r in rs)
        rows.append([
            METHODS[m].label, f"{len(rs)}" + (f" ({idle} with no version)" if idle else ""), f"{rs[0].budget_s:g}",
            ", ".join(f"{r.load_avg_1m:.1f}" for r in rs if r.load_avg_1m is not None),
            _median_range([p[0] for p in per], ",.0f"), _median_range([p[3] for p in per], ",.0f"),
            _median_range(up_ratio, ".0f") + "×", _median_range(down_ratio, ".0f") + "×",
            _median_range([p[4] for p in per], ".1f"),
            _median_range([fp32 * p[4] / p[3] for p in per if p[3] and p[4]], ".0f") + "×",
            _median_range([p[1] for p in per], ",.0f"), _median_range([p[2] for p in per], ",.0f"),
            _median_range(ttt, ".0f"), _median_range(eq, ".3f"),
            _median_range([r.curve[-1].loss if _trained(r) else None for r in rs], ".3f"),
        ])
        if m != REFERENCE and by[REFERENCE]:
            ref = [_loss_at_tokens(r, equal_tokens) for r in by[REFERENCE] if _trained(r)]
            ref_eq = statistics.median([x for x in ref if x is not None] or [math.nan])
            med_eq = statistics.median([x for x in eq if x is not None] or [math.nan])
            med_up = statistics.median(up_ratio) if up_ratio else math.nan
            med_down = statistics.median(down_ratio) if down_ratio else math.nan
            bytes_ok = "meets" if med_up >= 100 and med_down >= 100 else "misses"
            loss_ok = "meets" if med_eq <= ref_eq else "misses"
            lines.append(f"- {name}, {METHODS[m].label}: {med_up:.0f}× fewer delta bytes up and {med_down:.0f}× "
                         f"fewer model bytes down than fp32 per sync, loss {med_eq:.3f} vs fp32 DiLoCo's "
                         f"{ref_eq:.3f} at {equal_tokens / 1e6:.2f} M tokens (medians): {bytes_ok} the bytes goal "
                         f"(≥ 100× both ways per sync), {loss_ok} the loss goal (no worse at equal tokens).")
    table = "| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n" + "\n".join(
        "| " + " | ".join(r) + " |" for r in rows)
    return table, lines


def report() -> str:
    parts = [
        "## Sparse pseudo-gradients (issue 16)",
        "",
        "Command: `python -m bench.sparse_bench --runs 3 --budget-scale 0.5` (raw results and the console log in "
        "`bench/results/sparse/`; `--report` rebuilds this section from them). Rows: fp32 DiLoCo (sync barrier, "
        "outer Nesterov lr 0.7 μ 0.9, fp32 deltas), *ours* (geofed's defaults: async, η = 0.5, int8 + Huffman with "
        "error feedback) and ours with `codec.name=sparse` at 1 %, 3 % and 10 % density (2-bit values, 4096-value "
        "chunks, Rice-coded indices, client error feedback β = 1, sparse sum and server-side re-sparsification). "
        "Model: the bench's 2×128 GPT-2 (446k parameters), data: the Python standard library split by module "
        "(real text, not synthetic). Budgets are half the scenarios' usual ones (stated per row), on a shared "
        "2-core machine (load column: 1-minute load average when each run started). hetero-wan's DiLoCo row "
        "has two more runs, `python -m bench.sparse_bench --runs 5 --first-run 4 --scenarios hetero-wan --methods "
        "diloco`, made once the machine was quieter: at load 11–12 its barrier round did not finish within the "
        "70-s budget (runs 2 and 3, kept in the row).",
        "",
        "Columns: bytes per client sync, median (range) over the runs. *Delta bytes up*: the encoded delta (the "
        "codec's output). *Model bytes down*: the model transfers a client received after its first (whole fp32) "
        "model, in their encodings (fp32 DiLoCo and ours: `grid_delta`, the default stream; sparse: "
        "`sparse_delta`), from the client logs. *fp32 ÷* divides the fp32 vector (4 bytes × parameters) by those "
        "two. *Versions / transfer*: how many published versions one model transfer spans (asynchronous rounds "
        "publish a version per push, so a client fetches several at each sync; `sparse_delta` sends one "
        "increment per version); *fp32 ÷ down per version* divides by the bytes per version instead, what one "
        "synchronous round's transfer would carry (derived from these asynchronous runs, not measured in a "
        "synchronous one). *Wire*: the emulated links' byte counters, everything a client's link carried "
        "(gRPC framing, heartbeats, retries), less the one-off whole vectors (the master's Θ0 upload, each "
        "client's first model). "
        "Time to target: seconds until the global model first reaches the median final loss of fp32 DiLoCo. Loss "
        "at equal tokens: the newest evaluated version with at most the smallest final token count of all runs "
        "(the tokens behind the model, in pushed deltas); final loss: the last version within the budget.",
        "",
    ]
    for name in SCENARIOS:
        table, lines = scenario_table(name)
        if table:
            parts += [f"### {name}", "", table, "", *lines, ""]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--budget-scale", type=float, default=0.5, help="fraction of each scenario's budget (default 0.5)")
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--methods", default=",".join(SPARSE_METHODS))
    p.add_argument("--first-run", type=int, default=1, help="repeat number to start at (resume a cut session)")
    p.add_argument("--work-dir", type=Path, default=Path("runs/bench-sparse"))
    p.add_argument("--report", action="store_true", help="only rebuild the table from saved results")
    args = p.parse_args(argv)
    if not args.report:
        scenarios = [scaled(load_scenario(s), args.budget_scale) for s in args.scenarios.split(",")]
        for repeat in range(args.first_run, args.runs + 1):
            for scenario in scenarios:
                todo = [m for m in args.methods.split(",") if not result_path(scenario.name, m, repeat, OUT).exists()]
                if todo:
                    run_suite(scenario, todo, repeat=repeat, work_root=args.work_dir, results_root=OUT)
                collect_transfers(args.work_dir)
                body = report()  # after every batch: a cut-short session still leaves a current table
                (OUT / "table.md").write_text(body + "\n", encoding="utf-8")
                replace_section(DOCS, "sparse", body)
    collect_transfers(args.work_dir)
    body = report()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "table.md").write_text(body + "\n", encoding="utf-8")
    replace_section(DOCS, "sparse", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
