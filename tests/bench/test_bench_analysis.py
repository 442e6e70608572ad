"""Curve arithmetic and per-client accounting (bench/federation/analysis.py, accounting.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.federation.accounting import (
    client_result,
    delta_tokens,
    idle_fraction,
    landed_in,
    within,
)
from bench.federation.analysis import (
    auto_target,
    best_loss,
    cumulative_at,
    loss_at,
    loss_at_tokens,
    speedup,
    tail_mean,
    thin_versions,
    time_to_target,
)
from bench.federation.results import CurvePoint, RunResult
from bench.federation.scenario import ClientSpec


def curve(*points):
    return [CurvePoint(t, v, loss, tokens) for v, (t, loss, tokens) in enumerate(points, start=1)]


C = curve((0.0, 5.0, 0), (10.0, 4.0, 100), (25.0, 3.0, 300), (40.0, 3.5, 500), (55.0, 2.5, 700))


@pytest.mark.parametrize(
    ("t", "expected"), [(-1.0, math.nan), (0.0, 5.0), (9.99, 5.0), (10.0, 4.0), (39.0, 3.0), (1e9, 2.5)]
)
def test_loss_at_is_the_newest_published_model(t, expected):
    got = loss_at(C, t)
    assert (math.isnan(got) and math.isnan(expected)) or got == expected


@pytest.mark.parametrize(
    ("target", "expected"), [(5.0, 0.0), (3.2, 25.0), (3.0, 25.0), (2.9, 55.0), (2.0, None)]
)
def test_time_to_target_is_the_first_version_at_or_below(target, expected):
    assert time_to_target(C, target) == expected


@pytest.mark.parametrize(("target", "expected"), [(5.0, 0.0), (3.5, 25.0), (3.2, 55.0), (2.0, None)])
def test_time_to_target_stay_waits_until_every_later_version_is_below(target, expected):
    assert time_to_target(C, target, stay=True) == expected


def test_best_loss_and_speedup():
    assert best_loss(C) == 2.5 and math.isnan(best_loss([]))
    assert speedup(60.0, 20.0) == 3.0
    assert speedup(None, 20.0) is None and speedup(60.0, None) is None


def test_loss_at_tokens_interpolates_and_refuses_to_extrapolate():
    assert loss_at_tokens(C, 200) == pytest.approx(3.5)
    assert loss_at_tokens(C, 700) == 2.5
    assert loss_at_tokens(C, 701) is None
    assert loss_at_tokens([], 5) is None


def test_auto_target_is_the_highest_best_of_the_fedavg_runs():
    runs = [
        RunResult("s", "fedavg", "federated", 60, 1, C),
        RunResult("s", "fedavg", "federated", 60, 1, curve((0, 5.0, 0), (30, 2.8, 9)), repeat=2),
        RunResult("s", "ours", "federated", 60, 1, curve((0, 5.0, 0), (30, 1.0, 9))),
    ]
    assert auto_target(runs) == 2.8
    assert auto_target(runs[2:]) is None


def test_thin_versions_keeps_first_last_and_newest_per_grid_time():
    published = [(v, 0.5 * (v - 1)) for v in range(1, 201)]  # one version every 0.5 s for 100 s
    kept = thin_versions(published, budget_s=100.0, max_n=11)
    assert kept[0] == (1, 0.0) and kept[-1] == (200, 99.5)
    assert [v for v, _ in kept] == [1, 21, 41, 61, 81, 101, 121, 141, 161, 181, 200]
    assert thin_versions(published[:5], 100.0, 11) == published[:5]


def test_cumulative_at_sums_values_with_key_at_or_below():
    keys, values = np.array([3, 1, 2, 2]), np.array([30, 10, 20, 5])
    assert cumulative_at(keys, values, np.array([0, 1, 2, 3, 9])).tolist() == [0, 10, 35, 65, 65]


def _rec(t, status, version, *, tokens=1024, train_s=2.0, push_s=0.5, idle_s=1.5, payload=100):
    return {
        "t": t,
        "status": status,
        "version": version,
        "tokens_per_s": tokens / train_s,
        "train_s": train_s,
        "push_s": push_s,
        "idle_s": idle_s,
        "payload_bytes": payload,
        "codec": "int8+huffman",
    }


def test_landed_in_and_delta_tokens():
    recs = [
        _rec(1, "APPLIED", 5),
        _rec(2, "ACCEPTED", 5),
        _rec(3, "STALE", 9, payload=0),
        _rec(4, "DUPLICATE", 7),
    ]
    assert [landed_in(r) for r in recs] == [5, 6, 9, 7]
    versions, tokens = delta_tokens(recs)
    assert versions.tolist() == [5, 6, 7] and tokens.tolist() == [1024, 1024, 1024]


def test_client_result_accounts_time_bytes_and_tokens():
    recs = [_rec(1, "APPLIED", 2), _rec(2, "ACCEPTED", 2, idle_s=6.0), _rec(3, "STALE", 4, payload=0)]
    c = client_result(
        "client-0",
        ClientSpec(slowdown=2, micro_batch=4, link="1ms"),
        within(recs, 2.5),
        bytes_up=10,
        bytes_down=20,
        exit_code=None,
    )
    assert (c.syncs, c.tokens, c.payload_bytes, c.statuses) == (2, 2048, 200, {"APPLIED": 1, "ACCEPTED": 1})
    assert idle_fraction(c) == pytest.approx(7.5 / 12.5)
    empty = client_result("c", ClientSpec(), [], bytes_up=0, bytes_down=0, exit_code=1)
    assert idle_fraction(empty) is None


def test_run_result_round_trips_through_json():
    c = client_result(
        "client-0", ClientSpec(), [_rec(1, "APPLIED", 2)], bytes_up=1, bytes_down=2, exit_code=None
    )
    run = RunResult("s", "ours", "federated", 60.0, 123, C, [c], repeat=2, load_avg_1m=1.5, notes=["x"])
    back = RunResult.from_json(run.to_json())
    assert back == run and back.tokens == 700


def test_tail_mean_is_the_time_average_of_the_step_function():
    # [40, 60]: 3.5 for 15 s (40-55), then 2.5 for 5 s
    assert tail_mean(C, 40.0, 60.0) == pytest.approx((3.5 * 15 + 2.5 * 5) / 20)
    assert tail_mean(C, 30.0, 35.0) == 3.0
    assert math.isnan(tail_mean(curve((5.0, 4.0, 0)), 0.0, 10.0))
    with pytest.raises(ValueError, match="end > start"):
        tail_mean(C, 10.0, 10.0)



def test_only_deltas_the_ps_took_count_their_tokens():
    from bench.federation.accounting import taken_tokens

    def rec(status: str, tokens: int, version: int) -> dict:
        return {"status": status, "tokens_per_s": tokens, "train_s": 1.0, "version": version}

    records = [rec("DEFERRED", 100, 4), rec("APPLIED", 10, 6), rec("STALE", 5, 7), rec("ACCEPTED", 20, 8),
               rec("DUPLICATE", 30, 9)]
    assert [(r["version"], t) for r, t in taken_tokens(records)] == [(6, 10), (8, 20), (9, 30)]
