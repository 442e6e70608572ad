"""The PS times client rounds and tunes the straggler timeout and the mode advice from them (issue 14)."""

from __future__ import annotations

import logging

from geofed.config import FederationConfig
from ps_server.aggregation.round_times import RoundTimes
from ps_server.aggregation.rounds import should_close
from ps_server.metrics import PSMetrics


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _fed(**autotune) -> FederationConfig:
    return FederationConfig.model_validate({"aggregation": {"mode": "sync", "straggler_timeout_s": 120.0},
                                            "autotune": {"straggler_timeout": True, **autotune}})


def test_round_time_runs_from_the_later_of_publication_and_the_previous_push():
    clock = Clock()
    times = RoundTimes(_fed(), clock)
    times.published(1)  # t = 0
    clock.t = 10.0
    times.arrived("a", 1)  # 10 - 0
    clock.t = 25.0
    times.arrived("b", 1)  # 25 - 0
    assert times.per_client() == {"a": 10.0, "b": 25.0}
    clock.t = 30.0
    times.published(2)
    clock.t = 41.0
    times.arrived("a", 2)  # 41 - max(30, 10) = 11: a's median of [10, 11] is 10.5
    clock.t = 60.0
    times.arrived("b", 1)  # late, still on version 1: 60 - max(0, 25) = 35; b's median of [25, 35] is 30
    assert times.per_client() == {"a": 10.5, "b": 30.0}
    clock.t = 60.0 + 3 * 30.0 + 1  # b silent for over 3 of its rounds: a slow round, not a departure
    assert times.per_client() == {"a": 10.5, "b": 30.0}
    clock.t = 41.0 + 180.0 + 0.5  # a without a delta for client_timeout_s (180 s by default): gone; b not yet
    assert times.per_client() == {"b": 30.0}
    clock.t = 60.0 + 180.0 + 0.5
    assert times.per_client() == {}


def test_a_client_whose_rounds_grew_keeps_the_federation_async_until_its_median_catches_up():
    # hetero-wan under autotune (2026-12-01): the 1 s-RTT client's tuned interval went from ~5 s to 30 s; its
    # median (of the short rounds) said it was as fast as the others, and sync rounds then waited for it.
    clock = Clock()
    fed = FederationConfig.model_validate({"aggregation": {"mode": "auto"}})
    times = RoundTimes(fed, clock)
    for v in range(1, 4):  # three 5 s rounds for everyone: alike, auto stays sync
        times.published(v)
        clock.t += 5.0
        for c in ("fast", "slow"):
            times.arrived(c, v)
        times.retune()
    assert times.mode == "sync" and times.per_client() == {"fast": 5.0, "slow": 5.0}
    start = clock.t
    times.published(4)  # round 4 opens at `start`; fast returns every 5 s, slow is away for 30 s now
    for k in range(1, 5):
        clock.t = start + 5.0 * k
        times.arrived("fast", 3 + k)
        times.published(4 + k)
        times.retune()
    # slow's median is still 5 s, but its current round has run 20 s: 20 / 5 = 4 > async_above 2
    assert times.current() == {"fast": 5.0, "slow": 20.0}
    assert times.mode == "async" and times.spread == 4.0
    assert "slowest slow 20 s / fastest fast 5 s" in times.mode_reason


def test_retune_sets_the_timeout_and_advice_and_logs_each_change(caplog):
    clock = Clock()
    times = RoundTimes(_fed(straggler_quantile=0.9, straggler_margin=1.5), clock)
    assert times.straggler_timeout_s == 120.0 and times.mode_advice == "sync"
    times.published(1)
    clock.t = 10.0
    times.arrived("a", 1)
    clock.t = 25.0
    times.arrived("b", 1)
    with caplog.at_level(logging.INFO, logger="geofed.ps"):
        times.retune()
        times.retune()  # nothing changed: nothing logged again
    # 0.9-quantile of {10, 25} = 25; 1.5 x 25 - 10 = 27.5 -> 28 s. Spread 25 / 10 = 2.5 > 2: advise async.
    assert times.straggler_timeout_s == 28.0
    assert times.mode_advice == "async" and times.spread == 2.5
    lines = [r.getMessage() for r in caplog.records if "event=autotune" in r.getMessage()]
    assert len(lines) == 2
    assert "knob=straggler_timeout value=28 " in lines[0]
    assert "knob=aggregation_mode value=async running=sync applied=false" in lines[1]
    # The metrics an operator graphs.
    metrics = PSMetrics()
    metrics.set_tuning(times)
    sample = metrics.registry.get_sample_value
    assert sample("geofed_straggler_timeout_seconds") == 28.0
    assert sample("geofed_client_speed_spread") == 2.5
    assert sample("geofed_client_round_seconds", {"client": "b"}) == 25.0
    assert sample("geofed_aggregation_mode_advice", {"mode": "async"}) == 1.0
    assert sample("geofed_aggregation_mode_advice", {"mode": "sync"}) == 0.0


def test_the_timeout_stays_configured_when_not_tuned():
    clock = Clock()
    times = RoundTimes(_fed(straggler_timeout=False), clock)
    times.published(1)
    clock.t = 10.0
    times.arrived("a", 1)
    clock.t = 25.0
    times.arrived("b", 1)
    times.retune()
    assert times.straggler_timeout_s == 120.0
    assert times.mode_advice == "async"  # the advice is computed either way


def test_should_close_uses_the_tuned_timeout():
    cfg = _fed().aggregation  # quorum 1: only the timeout closes a round of 1 of 2 clients
    args = {"buffered": 1, "clients_in_round": 1, "active_clients": 2, "first_at": 0.0, "now": 30.0}
    assert not should_close(cfg, **args)  # the configured 120 s
    assert should_close(cfg, **args, straggler_timeout_s=28.0)
    assert not should_close(cfg, **{**args, "now": 27.9}, straggler_timeout_s=28.0)


def test_a_delta_the_round_share_put_off_is_timed_when_it_first_arrived_and_its_wait_is_not():
    # Async, a fast site (1 s rounds) and a slow one (5 s): the fast one's third delta is put off until the slow
    # one pushes; it waits 3 s for that, then pushes the same delta again (or trains on the newer version).
    clock = Clock()
    times = RoundTimes(FederationConfig.model_validate({"aggregation": {"mode": "auto"},
                                                        "autotune": {"round_window": 4}}), clock)
    times.published(1)
    for v in (2, 3):  # t = 1, 2: the fast site lands two deltas, each its own version
        clock.t += 1.0
        times.arrived("fast", v - 1)
        times.published(v)
    clock.t = 3.0
    times.put_off("fast", 3)  # its round ran 1 s (from version 3, published at t = 2)
    clock.t = 5.0
    times.arrived("slow", 1)  # 5 s
    times.published(4)
    clock.t = 6.0
    times.arrived("fast", 3)  # the same delta again, 3 s after it was put off: not a round of 3 s (or 4 s)
    times.published(5)
    clock.t = 7.0
    times.arrived("fast", 5)  # trained on version 5, published at t = 6: 1 s
    times.published(6)
    assert times.per_client() == {"fast": 1.0, "slow": 5.0}
    clock.t = 8.0
    times.put_off("fast", 6)  # put off again, and this time it trains on the next version instead
    clock.t = 10.0
    times.arrived("slow", 4)  # 5 s
    times.published(7)
    clock.t = 11.0
    times.arrived("fast", 7)  # from version 7's publication (t = 10): 1 s, not the 3 s since it was put off
    assert times.per_client() == {"fast": 1.0, "slow": 5.0}
    times.retune()
    assert times.mode == "async" and times.spread == 5.0
