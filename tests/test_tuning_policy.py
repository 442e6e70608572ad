"""Auto-tuning policies (issue 14, item 2): expectations worked out by hand in each test."""

from __future__ import annotations

import dataclasses
import math

import pytest

from geofed.tuning import (
    Interval,
    LinkMeasurements,
    TuningError,
    interval_choice,
    mode_advice,
    quantile,
    round_up_2,
    straggler_timeout_choice,
)

FALLBACK = Interval(6.0, 40, "")  # the configured round: 6 s or 40 steps, whichever comes first
SETTINGS = {"comm_fraction": 0.2, "min_s": 5.0, "max_s": 600.0, "fallback": FALLBACK}


@pytest.mark.parametrize(("x", "expected"), [(16.4, 17.0), (16.0, 16.0), (123.0, 130.0), (0.0123, 0.013),
                                             (99.1, 100.0), (0.0, 0.0)])
def test_round_up_2_rounds_up_to_two_significant_digits(x, expected):
    assert round_up_2(x) == expected


def test_interval_keeps_communication_under_its_share_of_the_round():
    # C = 2e6 B / 1e6 B/s + 8e6 B / 4e6 B/s + 2 x 0.05 s = 4.1 s; T >= 4.1 x 0.8 / 0.2 = 16.4 -> 17 s;
    # H = ceil(17 / 0.5) = 34.
    m = LinkMeasurements(up_bytes_per_s=1e6, down_bytes_per_s=4e6, rtt_s=0.05, step_s=0.5)
    got = interval_choice(m, push_bytes=2_000_000, model_bytes=8_000_000, **SETTINGS)
    assert (got.seconds, got.steps) == (17.0, 34)
    assert 4.1 / (17.0 + 4.1) <= 0.2  # the rounding went up: the share stays within the setting
    assert "communication ~4.1 s" in got.reason and "T >= 16.4 s" in got.reason and "34 steps of 0.5 s" in got.reason


def test_interval_slower_steps_mean_fewer_steps_for_the_same_time():
    # Same link as above, a client 4x slower per step: T stays 17 s, H = ceil(17 / 2) = 9.
    m = LinkMeasurements(1e6, 4e6, 0.05, 2.0)
    assert interval_choice(m, push_bytes=2_000_000, model_bytes=8_000_000, **SETTINGS).steps == 9


def test_interval_is_clamped_to_its_range():
    # C = 0.75 s: T >= 3 s; configured H = 4 steps of 0.5 s = 2 s is shorter, so lengthened: 3 s -> the 5 s floor.
    got = interval_choice(LinkMeasurements(1e6, 1e9, 0.0, 0.5), push_bytes=750_000, model_bytes=0,
                          **{**SETTINGS, "fallback": Interval(6.0, 4, "")})
    assert (got.seconds, got.steps) == (5.0, 10) and "clamped to [5, 600] s" in got.reason
    slow = LinkMeasurements(1e3, 1e9, 0.0, 0.5)  # C = 2000 s: T would be 8000 s -> the 600 s ceiling
    got = interval_choice(slow, push_bytes=2_000_000, model_bytes=1000, **SETTINGS)
    assert (got.seconds, got.steps) == (600.0, 1200)


def test_a_link_that_keeps_up_leaves_the_configured_round():
    # C = 0.5 + 0.02 + 0.1 = 0.62 s: T >= 2.48 s. Configured: 6 s or 40 steps of 0.1 s = 4 s of training, which
    # meets it: T and H stand (the tuner never stretches a fast client's rounds).
    m = LinkMeasurements(up_bytes_per_s=1.6e6, down_bytes_per_s=20e6, rtt_s=0.05, step_s=0.1)
    got = interval_choice(m, push_bytes=800_000, model_bytes=400_000, **SETTINGS)
    assert (got.seconds, got.steps) == (6.0, 40)
    assert "T >= 2.48 s" in got.reason and "= 4 s of training) meets it and stands" in got.reason
    # The same client 3x faster per step: 40 steps take 1.2 s < 2.48 s, so its rounds are lengthened to 2.5 s.
    got = interval_choice(dataclasses.replace(m, step_s=1 / 30), push_bytes=800_000, model_bytes=400_000,
                          **{**SETTINGS, "min_s": 1.0})
    assert (got.seconds, got.steps) == (2.5, 75)


@pytest.mark.parametrize(("m", "kwargs", "message"), [
    (LinkMeasurements(0.0, 1e6, 0.0, 1.0), {}, "upload rate must be a positive number"),
    (LinkMeasurements(1e6, math.nan, 0.0, 1.0), {}, "download rate must be a positive number"),
    (LinkMeasurements(1e6, 1e6, -0.1, 1.0), {}, "RTT must be >= 0"),
    (LinkMeasurements(1e6, 1e6, 0.0, 0.0), {}, "step time must be a positive number"),
    (LinkMeasurements(1e6, 1e6, 0.0, 1.0), {"comm_fraction": 1.0}, "comm_fraction must be below 1"),
    (LinkMeasurements(1e6, 1e6, 0.0, 1.0), {"comm_fraction": 0.0}, "comm_fraction must be a positive number"),
    (LinkMeasurements(1e6, 1e6, 0.0, 1.0), {"min_s": 10.0, "max_s": 5.0}, "range is empty"),
    (LinkMeasurements(1e6, 1e6, 0.0, 1.0), {"push_bytes": -1}, "byte counts must be >= 0"),
])
def test_interval_refuses_bad_input(m, kwargs, message):
    args = {**SETTINGS, "push_bytes": 1000, "model_bytes": 1000, **kwargs}
    with pytest.raises(TuningError, match=message):
        interval_choice(m, **args)


def test_quantile_is_the_nearest_rank():
    assert quantile([4, 1, 3, 2], 0.5) == 2  # ceil(0.5 x 4) = 2nd smallest
    assert quantile([4, 1, 3, 2], 0.75) == 3
    assert quantile([4, 1, 3, 2], 0.9) == 4  # ceil(3.6) = 4th
    assert quantile([7], 0.01) == 7
    with pytest.raises(TuningError, match="quantile must be in"):
        quantile([1], 0.0)
    with pytest.raises(TuningError, match="no values"):
        quantile([], 0.5)


ROUNDS = {"a": 10.0, "b": 12.0, "c": 30.0, "d": 40.0}
LIMITS = {"min_s": 5.0, "max_s": 600.0, "fallback_s": 120.0}


def test_straggler_timeout_from_the_round_times():
    # 0.75-quantile = 3rd smallest = 30 s; x 1.5 = 45 s, less the fastest's 10 s = 35 s.
    value, reason = straggler_timeout_choice(ROUNDS, q=0.75, margin=1.5, **LIMITS)
    assert value == 35.0 and "0.75-quantile of 4 clients' round times 30 s" in reason
    # 0.9-quantile = 4th = 40 s: 60 - 10 = 50 s.
    assert straggler_timeout_choice(ROUNDS, q=0.9, margin=1.5, **LIMITS)[0] == 50.0
    # Alike clients: 1.5 x 20 - 20 = 10 s of headroom after the first delta.
    assert straggler_timeout_choice({"a": 20.0, "b": 20.0}, q=0.9, margin=1.5, **LIMITS)[0] == 10.0
    # 1.5 x 1 - 1 = 0.5 s -> the 5 s floor; 1.5 x 1000 - 1 -> the 600 s ceiling.
    value, reason = straggler_timeout_choice({"a": 1.0, "b": 1.0}, q=0.9, margin=1.5, **LIMITS)
    assert value == 5.0 and "clamped to [5, 600] s" in reason
    assert straggler_timeout_choice({"a": 1.0, "b": 1000.0}, q=0.9, margin=1.5, **LIMITS)[0] == 600.0


def test_straggler_timeout_before_any_round_is_the_configured_one():
    assert straggler_timeout_choice({}, q=0.9, margin=1.5, **LIMITS) == (
        120.0, "no client round timed yet: the configured 120 s")


@pytest.mark.parametrize(("rounds", "kwargs", "message"), [
    (ROUNDS, {"margin": 0.5}, "margin must be >= 1"),
    (ROUNDS, {"q": 1.5}, "quantile must be in"),
    ({"a": -1.0}, {}, "round time of a must be >= 0"),
    (ROUNDS, {"min_s": 0.0}, "straggler timeout lower bound must be a positive number"),
])
def test_straggler_timeout_refuses_bad_input(rounds, kwargs, message):
    args = {"q": 0.9, "margin": 1.5, **LIMITS, **kwargs}
    with pytest.raises(TuningError, match=message):
        straggler_timeout_choice(rounds, **args)


THRESHOLDS = {"async_above": 2.0, "sync_below": 1.5}


def test_mode_advice_has_hysteresis():
    # 25 / 10 = 2.5 > 2: async, whatever the mode now.
    mode, reason = mode_advice({"a": 10.0, "b": 25.0}, "sync", **THRESHOLDS)
    assert mode == "async" and "slowest b 25 s / fastest a 10 s = 2.5 > async_above 2" in reason
    # 18 / 10 = 1.8, between 1.5 and 2: the mode stands, either way.
    assert mode_advice({"a": 10.0, "b": 18.0}, "async", **THRESHOLDS)[0] == "async"
    assert mode_advice({"a": 10.0, "b": 18.0}, "sync", **THRESHOLDS)[0] == "sync"
    # 14 / 10 = 1.4 < 1.5: back to sync.
    assert mode_advice({"a": 10.0, "b": 14.0}, "async", **THRESHOLDS)[0] == "sync"


def test_mode_advice_needs_two_clients():
    assert mode_advice({"a": 10.0}, "async", **THRESHOLDS) == (
        "async", "1 client(s) timed, need 2 to measure a spread: async stands")


@pytest.mark.parametrize(("args", "message"), [
    (({"a": 1.0, "b": 2.0}, "sync", 2.0, 2.0), "need 1 <= sync_below < async_above"),
    (({"a": 1.0, "b": 2.0}, "sync", 2.0, 0.5), "need 1 <= sync_below < async_above"),
    (({"a": 1.0, "b": 2.0}, "fast", 2.0, 1.5), "mode must be 'sync' or 'async'"),
    (({"a": 0.0, "b": 2.0}, "sync", 2.0, 1.5), "round time of a must be a positive number"),
])
def test_mode_advice_refuses_bad_input(args, message):
    rounds, current, hi, lo = args
    with pytest.raises(TuningError, match=message):
        mode_advice(rounds, current, async_above=hi, sync_below=lo)
