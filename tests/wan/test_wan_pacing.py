"""Token bucket and delay line: the link's timing rules, checked without sockets."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from geofed_apps.wan.pacing import (
    MAX_CHUNK,
    MIN_CHUNK,
    MIN_IN_FLIGHT,
    UNLIMITED_IN_FLIGHT,
    DelayLine,
    TokenBucket,
    burst_for,
    chunk_size_for,
    in_flight_limit,
)


def test_bucket_sends_a_burst_at_once_then_paces_at_the_rate() -> None:
    """The first `burst` bytes leave immediately; after that each chunk costs size/rate seconds."""
    bucket = TokenBucket(rate=1000.0, burst=100.0, now=0.0)
    assert bucket.reserve(100, now=0.0) == 0.0
    assert bucket.reserve(100, now=0.0) == pytest.approx(0.1)
    assert bucket.reserve(50, now=0.1) == pytest.approx(0.15)


def test_bucket_paced_sender_reaches_exactly_the_rate() -> None:
    """A sender that waits for each departure (as the proxy does) moves rate × time bytes."""
    bucket = TokenBucket(rate=4e6, burst=20_000, now=0.0)
    now, sent = 0.0, 0
    while now < 2.0:
        now = max(now, bucket.reserve(20_000, now)) + 0.0003  # wake-ups always run a little late
        sent += 20_000
    assert sent / now == pytest.approx(4e6, rel=0.02)


def test_bucket_idle_credit_is_capped_at_the_burst() -> None:
    """A long idle period does not bank more than `burst` bytes."""
    bucket = TokenBucket(rate=1000.0, burst=100.0, now=0.0)
    assert bucket.reserve(100, now=50.0) == 50.0
    assert bucket.reserve(100, now=50.0) == pytest.approx(50.1)


def test_bucket_with_rate_zero_never_delays() -> None:
    bucket = TokenBucket(rate=0, burst=1, now=0.0)
    assert bucket.reserve(10**9, now=3.0) == 3.0
    assert bucket.read_size(4096, now=3.0) == 4096


def test_bucket_rate_change_pays_debt_at_the_new_rate() -> None:
    """Debt run up at 1 kB/s is paid at 2 kB/s after `set_rate`."""
    bucket = TokenBucket(rate=1000.0, burst=100.0, now=0.0)
    bucket.reserve(100, now=0.0)
    bucket.reserve(1000, now=0.0)  # 1000 bytes of debt
    bucket.set_rate(2000.0, burst=100.0, now=0.5)  # 500 paid at the old rate, 500 left
    assert bucket.rate == 2000.0
    assert bucket.reserve(0, now=0.5) == pytest.approx(0.75)


@pytest.mark.parametrize(("rate", "burst"), [(-1.0, 10.0), (10.0, 0.0)])
def test_bucket_rejects_negative_rate_and_empty_burst(rate: float, burst: float) -> None:
    with pytest.raises(ValueError, match="rate >= 0 and burst > 0"):
        TokenBucket(rate=rate, burst=burst, now=0.0)


@given(
    departures=st.lists(st.floats(0, 10), min_size=1, max_size=200),
    latency=st.floats(0, 2),
    jitter=st.floats(0, 2),
    seed=st.integers(0, 2**32),
)
def test_delay_line_never_reorders_and_never_releases_early(
    departures: list[float], latency: float, jitter: float, seed: int
) -> None:
    """Release times are non-decreasing and no chunk arrives before it left (TCP stays a byte stream)."""
    line = DelayLine(random.Random(seed))
    departed = np.sort(np.asarray(departures))
    released = np.array([line.release_at(t, latency, jitter) for t in departed])
    assert np.all(np.diff(released) >= 0)
    assert np.all(released >= departed)
    assert np.all(released <= np.maximum.accumulate(departed) + latency + jitter + 1e-9)


def test_delay_line_jitter_spreads_delays_around_the_latency() -> None:
    """Sparse chunks (no ordering clamp) get delays uniformly within latency ± jitter."""
    line = DelayLine(random.Random(7))
    delays = np.array([line.release_at(t, 0.1, 0.02) - t for t in np.arange(2000) * 1.0])
    assert delays.min() >= 0.08 and delays.max() <= 0.12
    assert delays.mean() == pytest.approx(0.1, abs=0.002)
    assert delays.std() == pytest.approx(0.04 / np.sqrt(12), rel=0.1)


@pytest.mark.parametrize(
    ("rate", "expected"),
    [(0, MAX_CHUNK), (1000, MIN_CHUNK), (4_000_000, 20_000), (10**9, MAX_CHUNK)],
)
def test_chunk_size_is_about_5ms_of_traffic_within_bounds(rate: int, expected: int) -> None:
    assert chunk_size_for(rate) == expected


def test_in_flight_limit_covers_twice_the_bandwidth_delay_product() -> None:
    assert in_flight_limit(10e6, latency_s=1.0, jitter_s=0.5) >= 30e6
    assert in_flight_limit(1000, latency_s=0.0, jitter_s=0.0) == MIN_IN_FLIGHT
    assert in_flight_limit(0, latency_s=1.0, jitter_s=0.0) == UNLIMITED_IN_FLIGHT


def test_burst_absorbs_late_wake_ups() -> None:
    """A sender that wakes 10 ms late every time (a busy machine) still gets the full rate."""
    rate = 4e6
    bucket = TokenBucket(rate=rate, burst=burst_for(rate), now=0.0)
    now, sent = 0.0, 0
    while now < 2.0:
        size = bucket.read_size(chunk_size_for(rate), now)  # catches up on what the late wake-up banked
        now = max(now, bucket.reserve(size, now)) + 0.010
        sent += size
    assert sent / now == pytest.approx(rate, rel=0.02)
