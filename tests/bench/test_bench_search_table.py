"""The recipe search's table (bench/federation/search_table.py): median and range of each candidate's repeats
against the references at equal tokens, candidates ordered by their median gap to (b)."""

from __future__ import annotations

from bench.federation.references import sweep_method
from bench.federation.results import CurvePoint, RunResult
from bench.federation.search_table import search_table


def run(method, points, *, kind="single", repeat=1):
    curve = [CurvePoint(t, v, loss, tok) for v, (t, loss, tok) in enumerate(points, start=1)]
    return RunResult("s", method, kind, 100.0, 1000, curve, [], repeat=repeat)


A = run("single", [(0, 5.0, 0), (10, 3.0, 10_000)])  # 3.4 at 8_000 tokens
B = run(sweep_method("single-global", 0.002), [(0, 5.0, 0), (10, 2.5, 10_000)])  # 3.0 at 8_000 tokens
REFS = [A, B]


def test_median_and_range_over_repeats_ordered_by_the_gap_to_b():
    slow = [run("recipe-slow", [(0, 5.0, 0), (90, loss, 8_000)], kind="federated", repeat=i)
            for i, loss in enumerate((3.6, 3.3, 3.9), start=1)]  # fmt: skip
    fast = [run("recipe-fast", [(0, 5.0, 0), (90, 3.06, 8_000)], kind="federated")]
    text = search_table([*slow, *fast], REFS)
    lines = text.splitlines()
    assert lines[0].startswith("| candidate | runs | tokens (M) | final loss | vs (b)")
    fast_row, slow_row = lines[2], lines[3]  # the smaller median gap to (b) first
    # fast: 3.06 / 3.0 - 1 = +2.0 % against (b); 3.06 / 3.4 - 1 = -10.0 % against (a)
    assert fast_row.split(" | ")[1:] == ["1", "0.01", "3.060", "+2.0", "-10.0 |"]
    # slow: median 3.6 (3.3 - 3.9): +20.0 % (+10.0 - +30.0) against (b)
    assert "| 3 | 0.01 (0.01 – 0.01) | 3.600 (3.300 – 3.900) | +20.0 (+10.0 – +30.0) |" in slow_row


def test_single_process_runs_are_not_candidates():
    assert search_table([A, B], REFS).count("\n") == 1  # the header and its rule only


def test_without_reference_b_the_rows_follow_the_gap_to_a():
    worse = run("recipe-a", [(0, 5.0, 0), (90, 3.74, 8_000)], kind="federated")  # +10 % against (a)'s 3.4
    better = run("recipe-z", [(0, 5.0, 0), (90, 3.57, 8_000)], kind="federated")  # +5 %
    lines = search_table([worse, better], [A]).splitlines()
    assert "vs (b)" not in lines[0]
    assert lines[2].startswith("| recipe-z |") and lines[3].startswith("| recipe-a |")


def test_losses_at_wall_clock_checkpoints_median_and_range():
    from bench.federation.search_table import checkpoints_table

    def fed(method, repeat, losses):  # versions published at 10, 20, 30 s
        return run(method, [(t, loss, 1000 * t) for t, loss in zip((0, 10, 20, 30), losses, strict=True)],
                   kind="federated", repeat=repeat)  # fmt: skip

    runs = [fed("recipe-a", 1, (5.0, 4.0, 3.0, 2.0)), fed("recipe-a", 2, (5.0, 4.2, 3.4, 2.4)),
            fed("recipe-b", 1, (5.0, 3.0, 2.5, 1.9))]  # fmt: skip
    lines = checkpoints_table(runs, [15, 30]).splitlines()
    assert lines[0] == "| candidate | runs | loss @ 15 s | loss @ 30 s |"
    assert lines[2] == "| recipe-b | 1 | 3.000 | 1.900 |"  # at 15 s: the version of 10 s
    assert lines[3] == "| recipe-a | 2 | 4.100 (4.000 – 4.200) | 2.200 (2.000 – 2.400) |"
