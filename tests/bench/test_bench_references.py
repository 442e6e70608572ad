"""The one-machine references, the learning-rate sweep and the quality tables (bench/federation/references.py)."""

from __future__ import annotations

import pytest

from bench.federation.references import (
    best_of_sweep,
    pick_references,
    quality_lines,
    references_table,
    split_method,
    sweep,
    sweep_method,
    sweep_table,
)
from bench.federation.report import quality_headline
from bench.federation.results import CurvePoint, RunResult


def run(method, points, *, kind="single", repeat=1):
    curve = [CurvePoint(t, v, loss, tok) for v, (t, loss, tok) in enumerate(points, start=1)]
    return RunResult("s", method, kind, 100.0, 1000, curve, [], repeat=repeat)


# Token-indexed curves; every reference reaches 10_000 tokens, the federated runs stop at 8_000.
A = run("single", [(0, 5.0, 0), (10, 2.6, 10_000)])  # at 8_000 tokens: 5.0 - 0.8 * 2.4 = 3.08
B = [
    run(sweep_method("single-global", 0.001), [(0, 5.0, 0), (10, 3.4, 10_000)]),
    run(sweep_method("single-global", 0.004), [(0, 5.0, 0), (10, 3.0, 10_000)]),  # best: 3.0 final; 3.4 at 8k
    run(sweep_method("single-global", 0.008), [(0, 5.0, 0), (10, 3.2, 10_000)]),
]
C = [
    run(sweep_method("dp-global", 0.002), [(0, 5.0, 0), (10, 2.5, 10_000)]),  # at 8_000: 3.0
    run(sweep_method("dp-global", 0.004), [(0, 5.0, 0), (10, 2.5, 10_000)]),  # a tie: the lower rate is kept
]
OURS = run("ours", [(0, 5.0, 0), (50, 3.57, 8_000)], kind="federated")
FEDAVG = run("fedavg", [(0, 5.0, 0), (90, 3.74, 8_000)], kind="federated")
ALL = [OURS, FEDAVG, A, *B, *C]


def test_sweep_names_round_trip_and_other_names_are_not_sweep_points():
    assert sweep_method("single-global", 0.004) == "single-global@lr=0.004"
    assert split_method("single-global@lr=0.004") == ("single-global", 0.004)
    assert split_method("single") == ("single", None)
    assert split_method("dp-global@lr=fast") == ("dp-global@lr=fast", None)


def test_the_sweep_keeps_the_lowest_final_loss_and_the_lower_rate_on_a_tie():
    assert [split_method(r.method)[1] for r in sweep(ALL, "single-global")] == [0.001, 0.004, 0.008]
    assert best_of_sweep(sweep(ALL, "single-global")).method == "single-global@lr=0.004"
    assert best_of_sweep(sweep(ALL, "dp-global")).method == "dp-global@lr=0.002"
    assert best_of_sweep([]) is None


def test_pick_references_names_each_reference_and_leaves_missing_ones_out():
    refs = pick_references(ALL)
    assert (refs["a"], refs["b"].method, refs["c"].method) == (A, "single-global@lr=0.004", "dp-global@lr=0.002")
    assert pick_references([OURS, A]) == {"a": A, "b": None, "c": None}


def test_references_table_gives_each_gap_at_equal_tokens_with_b_the_headline():
    lines = references_table(ALL).splitlines()
    assert lines[0] == (
        "| method | final loss | tokens (M) | vs (a) one process, one client's batch "
        "| vs (b) one process, global batch (headline) | vs (c) data-parallel fp32, global batch |"
    )
    # ours 3.57 at 8_000 tokens: (a) 3.08 -> +15.9%, (b) 3.4 -> +5.0%, (c) 3.0 -> +19.0%
    assert lines[2] == "| sync FedAvg | 3.740 | 0.01 | +21.4% | +10.0% | +24.7% |"
    assert lines[3] == "| ours (defaults) | 3.570 | 0.01 | +15.9% | +5.0% | +19.0% |"
    assert len(lines) == 4  # references are columns, not rows


def test_references_table_drops_the_columns_of_references_not_run():
    head = references_table([OURS, A]).splitlines()[0]
    assert "vs (a)" in head and "vs (b)" not in head and "vs (c)" not in head


def test_sweep_table_records_every_point_and_marks_the_kept_one():
    rows = sweep_table(ALL).splitlines()[2:]
    assert rows == [
        "| (b) one process, global batch | 0.001 | 3.400 | 0.01 |  |",
        "| (b) one process, global batch | 0.004 | 3.000 | 0.01 | kept |",
        "| (b) one process, global batch | 0.008 | 3.200 | 0.01 |  |",
        "| (c) data-parallel fp32, global batch | 0.002 | 2.500 | 0.01 | kept |",
        "| (c) data-parallel fp32, global batch | 0.004 | 2.500 | 0.01 |  |",
    ]


def test_quality_headline_leads_with_b_and_states_both_goals():
    (line,) = quality_headline(ALL)
    assert line == (
        "- ours (defaults), 0.01 M tokens: +5.0% vs (b) one process, global batch (goal ≤ +3%: **not met**); "
        "+15.9% vs (a) one process, one client's batch (goal ≤ +8%: **not met**); "
        "+19.0% vs (c) data-parallel fp32, global batch."
    )


@pytest.mark.parametrize(
    ("ref_loss", "verdict"), [(3.47, "goal ≤ +3%: **met**"), (3.40, "goal ≤ +3%: **not met**")]
)
def test_quality_goal_against_b_is_three_percent(ref_loss, verdict):
    b = run(sweep_method("single-global", 0.002), [(0, 3.0, 0), (10, ref_loss, 8_000)])
    (line,) = quality_lines([OURS, b], ("ours",))
    assert verdict in line and "vs (a)" not in line


def test_quality_lines_say_when_a_reference_stopped_short_or_none_ran():
    short = run(sweep_method("single-global", 0.002), [(0, 5.0, 0), (10, 3.0, 4_000)])
    (line,) = quality_lines([OURS, short], ("ours",))
    assert "(b) one process, global batch did not reach 0.01 M tokens" in line
    assert quality_lines([OURS], ("ours",))[0].startswith("- Quality: no reference run yet")
