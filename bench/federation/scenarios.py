"""The built-in scenarios, scaled from the paper's measurements down to a sub-million-parameter model.

Scaling (paper §III-C2): GPT-2 Medium's fp32 delta is 1.4 GB; the paper saw 40-50 MB/s peaks and
~2.7 min per sync (≈17 MB/s effective) every 10 min. Our default model's fp32 delta is 1.8 MB (~800×
smaller) and it syncs every ~6-8 s (~80× more often), so keeping transfer time / sync interval the same
divides the rate by ~10: "good" links carry 2 MB/s up (fp32 push ≈ 0.9 s, ~10% of a round) and the
bad one 200 kB/s (fp32 push ≈ 9 s, longer than a round). Downlinks are 4× faster (asymmetric edge
links); RTTs run from 40 ms to 1 s; one client's link blackholes for 15 s mid-run.
"""

from __future__ import annotations

from typing import Any

HETERO_WAN: dict[str, Any] = {
    "name": "hetero-wan",
    "description": (
        "4 clients, compute 1×/1×/2×/4× slower, micro-batches 8/4/8/2, non-IID stdlib split by module; "
        "links 2 MB/s up (RTT 40 ms), 200 kB/s up (RTT 1 s, jitter ±100 ms), 1 MB/s up (RTT 120 ms, "
        "15 s blackhole at t=50 s), 2 MB/s up (RTT 80 ms); downlinks 4× the uplink."
    ),
    "budget_s": 120,
    "report_at_s": [30, 60, 90, 120],
    "clients": [
        {"slowdown": 1, "micro_batch": 8, "link": "20ms/5ms/2MBps/8MBps"},
        {"slowdown": 1, "micro_batch": 4, "link": "500ms/100ms/200kBps/800kBps"},
        {"slowdown": 2, "micro_batch": 8, "link": "60ms/20ms/1MBps/4MBps,blackhole@50s+15s"},
        {"slowdown": 4, "micro_batch": 2, "link": "40ms/10ms/2MBps/8MBps"},
    ],
}

# Issue 3's comparison: what `geofed local` runs (3 equal clients, loopback, no WAN) against one process
# trained on the union of their data for the same number of tokens.
LOCAL3: dict[str, Any] = {
    "name": "local3",
    "description": "3 equal clients on loopback (no WAN emulation, no slowdown), non-IID stdlib split: `geofed local`.",
    "budget_s": 100,
    "report_at_s": [25, 50, 75, 100],
    "clients": [
        {"slowdown": 1, "micro_batch": 8, "link": "0ms/0ms/unlimited"},
        {"slowdown": 1, "micro_batch": 8, "link": "0ms/0ms/unlimited"},
        {"slowdown": 1, "micro_batch": 8, "link": "0ms/0ms/unlimited"},
    ],
}

# The harness's own smoke test: two clients, one slowed and on a thin link, a few syncs.
SMOKE: dict[str, Any] = {
    "name": "smoke",
    "description": "2 clients (1×, 2× slower), one thin link with a 2 s blackhole; the harness's own test.",
    "budget_s": 10,
    "clients": [
        {"slowdown": 1, "micro_batch": 8, "link": "5ms/1ms/4MBps/8MBps"},
        {"slowdown": 2, "micro_batch": 4, "link": "50ms/10ms/500kBps/2MBps,blackhole@3s+2s"},
    ],
    "federation": {"training": {"local_steps": 10, "sync_interval_s": 2.0}},
    "max_evals": 20,
}

BUILTIN: dict[str, dict[str, Any]] = {s["name"]: s for s in (HETERO_WAN, LOCAL3, SMOKE)}
