"""The overlap benchmark's time to sync FedAvg's lowest loss, and how many times sooner, from saved runs."""

from __future__ import annotations

from bench.federation.results import CurvePoint, RunResult
from bench.overlap_bench import first_at, summary


def _run(method: str, repeat: int, points: list[tuple[float, float]], kind: str = "federated") -> RunResult:
    curve = [CurvePoint(t, i + 1, loss, 1000 * (i + 1)) for i, (t, loss) in enumerate(points)]
    return RunResult("s", method, kind, 120.0, 10, curve, repeat=repeat, load_avg_1m=1.0)


def test_first_at_is_the_first_point_at_or_below_the_target():
    run = _run("ours", 1, [(0, 5.0), (10, 3.0), (20, 2.5), (30, 2.6), (40, 2.4)])
    assert first_at(run, 2.5) == 20 and first_at(run, 2.4) == 40 and first_at(run, 2.0) is None


def test_summary_times_each_method_to_the_median_lowest_fedavg_loss(tmp_path):
    runs = [
        _run("fedavg", 1, [(0, 5.0), (60, 3.0), (90, 2.50)]),  # lowest 2.50
        _run("fedavg", 2, [(0, 5.0), (60, 2.9), (80, 2.40)]),  # lowest 2.40
        _run("fedavg", 3, [(0, 5.0), (50, 2.45), (100, 2.46)]),  # lowest 2.45: the median, the target
        _run("ours", 1, [(0, 5.0), (20, 2.44)]),  # reaches it at 20 s
        _run("ours", 2, [(0, 5.0), (25, 2.5), (40, 2.3)]),  # at 40 s
    ]
    folder = tmp_path / "s"
    folder.mkdir()
    for r in runs:
        (folder / f"{r.method}.r{r.repeat}.json").write_text(r.to_json(), encoding="utf-8")
    text = summary("s", tmp_path)
    assert "s to 2.450" in text
    fedavg_row = next(line for line in text.splitlines() if line.startswith("| fedavg | 3 "))
    ours_row = next(line for line in text.splitlines() if line.startswith("| ours | 2 "))
    # fedavg reached 2.45 at 80 s (run 2) and 50 s (run 3), never in run 1 (lowest 2.50)
    assert "| 65.0 (50.0–80.0), 1 of 3 never |" in fedavg_row
    # ours: 20 and 40 s; pairs with fedavg's 80 and 50 s: 80/20 = 4, 50/20 = 2.5, 80/40 = 2, 50/40 = 1.25
    assert "| 30.0 (20.0–40.0) | 2.25 (1.25–4.00) × (4 of 6 pairs: in the others a run never reached it) |" in ours_row
