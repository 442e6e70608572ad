"""Load benchmark of one PS: N concurrent clients push int8+Huffman deltas for a bounded time (issue 5, item 2).

    .venv/bin/python bench/load_bench.py --clients 64 --seconds 60 [--numel 100000] [--json out.json]

Each client has its own gRPC connection and pushes the same encoded delta over and over; the run ends
with an exact audit (final model == Σ receipts · decoded delta, version == 1 + receipts, the PS's own
per-client counts == receipts). Exit status 1 if anything was lost, double-counted or failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # geofed_testing is not installed: it runs from the checkout

from geofed_testing.procs import Reaper  # noqa: E402
from geofed_testing.reliability.load import LoadResult, run_load  # noqa: E402


def summary(r: LoadResult) -> str:
    """Human-readable lines for one run."""
    trend = r.per_second[1:-1]
    head, tail = trend[: len(trend) // 4 or 1], trend[-(len(trend) // 4 or 1) :]
    return "\n".join([
        f"clients            {r.clients} (one gRPC connection each), {r.seconds:.1f} s",
        f"delta              {r.numel} params, {r.codec}, {r.payload_bytes / 1e3:.1f} kB per push",
        f"sustained          {r.pushes_per_s:.1f} pushes/s ({r.pushes} pushes)",
        f"latency            p50 {r.p50_ms:.0f} ms, p99 {r.p99_ms:.0f} ms, max {r.max_ms:.0f} ms",
        f"PS RSS             start {r.rss_start_mb:.0f} MB, peak {r.rss_peak_mb:.0f} MB, end {r.rss_end_mb:.0f} MB",
        f"throughput trend   first quarter {sum(head) / len(head):.1f}/s, last quarter {sum(tail) / len(tail):.1f}/s"
        if trend else "throughput trend   (run too short)",
        f"audit              version {r.version} = 1 + {r.pushes} receipts: lost {r.lost}, double-counted "
        f"{r.double_counted}; model exact: {r.exact}; PS per-client counts match: {r.ledger_ok}; "
        f"errors: {len(r.errors)}",
    ])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--numel", type=int, default=100_000, help="parameters of the model (default 100000)")
    p.add_argument("--codec", choices=["int8", "int16"], default="int8")
    p.add_argument("--ps-arg", action="append", default=[], help="extra `geofed ps` flag (repeatable)")
    p.add_argument("--json", help="also write the result as JSON here")
    args = p.parse_args(argv)
    if args.clients < 1 or args.seconds <= 0 or args.numel < 2:
        p.error("--clients >= 1, --seconds > 0 and --numel >= 2 are required")
    with tempfile.TemporaryDirectory(prefix="geofed-load-") as tmp, Reaper() as reaper:
        result = run_load(Path(tmp), reaper, clients=args.clients, seconds=args.seconds, numel=args.numel,
                          codec=args.codec, extra=args.ps_arg)
    print(summary(result))
    for err in result.errors[:10]:
        print(f"error: {err}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps({**result.row(), "errors": result.errors,
                                               "per_second": result.per_second}, indent=2))
    ok = result.exact and result.ledger_ok and not (result.lost or result.double_counted or result.errors)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
