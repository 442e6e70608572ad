"""The downlink report computes its ratios and sentences from the saved runs, nothing else."""

from __future__ import annotations

from bench.downlink_report import down_up_ratio, render
from bench.federation.results import ClientResult, CurvePoint, RunResult


def _client(name: str, up: int, down: int) -> ClientResult:
    return ClientResult(client=name, slowdown=1.0, micro_batch=8, link="x", bytes_up=up, bytes_down=down, syncs=4,
                        statuses={"APPLIED": 4}, payload_bytes=up, tokens=100, train_s=1.0, push_s=0.1,
                        idle_s=0.1, codecs=["int8"], exit_code=0)


def _run(scenario: str, repeat: int, pairs: list[tuple[int, int]], loss: float) -> RunResult:
    return RunResult(scenario=scenario, method="ours", kind="federated", budget_s=120, numel=1000,
                     curve=[CurvePoint(t=120, version=9, loss=loss, tokens=1000)],
                     clients=[_client(f"c{i}", u, d) for i, (u, d) in enumerate(pairs)], repeat=repeat)


def test_ratios_median_range_and_verdicts_come_from_the_runs():
    # Prepare: three compressed runs (down/up 1.2, 1.4, 2.0) and one fp32 baseline (down/up 10)
    runs = [_run("hetero-wan", 1, [(100, 100), (100, 140)], 2.5), _run("hetero-wan", 2, [(100, 140), (100, 140)], 2.4),
            _run("hetero-wan", 3, [(100, 200), (100, 200)], 2.6), _run("hetero-wan-fp32down", 1, [(100, 1000)], 2.7)]

    # Execute: each run with the folder it was loaded from (the folder, not the JSON, names the series)
    text = render([("hetero-wan-fp32down" if r.scenario.endswith("fp32down") else "hetero-wan", r) for r in runs])

    # Assert
    assert down_up_ratio(runs[1]) == 1.4
    assert "median 1.40 (range 1.20–2.00, 3 runs) — meets the ≤ 1.5 goal" in text
    assert "down / up median 10.00 (1 run)" in text
    assert "| hetero-wan | 3 |  | 8 | 0.0 | 0.0 | 2.00 | 2.00 | 2.600 | None |" in text
