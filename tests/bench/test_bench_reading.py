"""The prose under the federation tables is computed from the runs (bench/federation/reading.py, issue 14)."""

from __future__ import annotations

from dataclasses import replace

from bench.federation.reading import reading_section
from bench.federation.results import ClientResult, CurvePoint, RunResult


def _client(i: int, *, up: int, down: int, syncs: int, idle: float) -> ClientResult:
    # train 6 s + push 0 s + idle: the idle share is idle / (6 + idle)
    return ClientResult(f"client-{i}", 1.0, 8, "link", up, down, syncs, {"APPLIED": syncs}, up, 1000, 6.0, 0.0, idle,
                        ["int8+huffman"], None)


def _run(method: str, *, repeat: int = 1, load: float = 1.0, tokens: int = 1_000_000, versions: int = 12,
         clients=(), kind: str = "federated", loss: float = 2.0) -> RunResult:
    curve = [CurvePoint(0.0, 1, 5.0, 0), CurvePoint(100.0, versions, loss, tokens)]
    return RunResult("s", method, kind, 120.0, 1000, curve, list(clients), repeat=repeat, load_avg_1m=load)


def test_every_figure_in_the_reading_is_the_runs_own():
    # Prepare: figures chosen so each sentence has one answer, worked out by hand below
    fedavg = _run("fedavg", load=0.5, tokens=1_000_000, versions=12,
                  clients=[_client(0, up=2_000_000, down=2_000_000, syncs=4, idle=18.0),   # idle 75%
                           _client(1, up=2_000_000, down=2_000_000, syncs=4, idle=2.0)])   # idle 25%
    fedavg2 = replace(fedavg, repeat=2, load_avg_1m=3.5, curve=[CurvePoint(0.0, 1, 5.0, 0),
                                                                 CurvePoint(100.0, 12, 2.1, 1_500_000)])
    ours = _run("ours", load=2.0, versions=96,
                clients=[_client(0, up=1_000_000, down=3_000_000, syncs=10, idle=0.0)])  # 0.3 / 0.1 MB per sync
    single = RunResult("s", "single", "single", 120.0, 1000,
                       [CurvePoint(0.0, 0, 5.0, 0), CurvePoint(100.0, 0, 1.0, 2_000_000)])

    # Execute
    text = reading_section([fedavg, fedavg2, ours, single])

    # Assert
    assert "load average of 0.5–3.5" in text
    assert "sync FedAvg 1.00–1.50 M" in text  # tokens of the two repeats
    assert "Single runs** (no spread measured): ours (defaults)." in text
    assert "ours (defaults) 0.80/s" in text  # 96 versions in 120 s
    assert "sync FedAvg 25–75%" in text
    assert "ours (defaults) ↓0.30 / ↑0.10 MB per sync (3.0×)" in text
    assert "sync FedAvg ↓0.50 / ↑0.50 MB per sync (1.0×)" in text


def test_no_runs_no_reading():
    assert reading_section([]) == ""
