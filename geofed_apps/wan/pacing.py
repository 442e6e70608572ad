"""Pure timing rules of an emulated link: a token bucket for the rate cap and an order-keeping delay line.

A WAN link is a bottleneck followed by a propagation delay. Keeping the two apart is what lets a
long fat pipe still reach its cap: the bucket says when a chunk has left the bottleneck, the delay
line adds latency and jitter on top, and many chunks are in flight at once (paper §I, WAN variability).
Times are plain floats (seconds on any monotonic clock), so everything here is testable without sockets.
"""

from __future__ import annotations

import random

MIN_CHUNK = 1 << 10
MAX_CHUNK = 64 << 10
CHUNK_SECONDS = 0.005  # a capped link moves data in ~5 ms slices: smooth pacing, few wake-ups
BURST_SECONDS = 0.025  # credit a late wake-up may catch up on (busy CPUs); larger bursts would show
MIN_IN_FLIGHT = 256 << 10
UNLIMITED_IN_FLIGHT = 32 << 20


class TokenBucket:
    """Bytes leave the bottleneck at `rate` per second, with bursts of at most `burst` bytes.

    `reserve` may drive the balance negative (debt) and answers when the chunk has fully left; the
    caller waits until then before reading more, which is what pushes back on the sender.
    """

    def __init__(self, rate: float, burst: float, now: float) -> None:
        if rate < 0 or burst <= 0:
            raise ValueError(f"token bucket needs rate >= 0 and burst > 0, got rate={rate}, burst={burst}")
        self._rate = float(rate)
        self._burst = float(burst)
        self._tokens = float(burst)
        self._stamp = now

    @property
    def rate(self) -> float:
        """Bytes per second; 0 means no cap."""
        return self._rate

    def reserve(self, nbytes: int, now: float) -> float:
        """Charge `nbytes` sent at `now`; return the time the last of them leaves the bottleneck."""
        if self._rate == 0:
            return now
        self._refill(now)
        self._tokens -= nbytes
        return now if self._tokens >= 0 else now + -self._tokens / self._rate

    def read_size(self, chunk: int, now: float) -> int:
        """How much to read next: one `chunk`, or the whole banked credit if a late wake-up left more."""
        if self._rate == 0:
            return chunk
        self._refill(now)
        return max(chunk, int(self._tokens))

    def set_rate(self, rate: float, burst: float, now: float) -> None:
        """Change the cap at `now`: time so far counts at the old rate, any debt is paid at the new one."""
        if rate < 0 or burst <= 0:
            raise ValueError(f"token bucket needs rate >= 0 and burst > 0, got rate={rate}, burst={burst}")
        self._refill(now)
        self._rate, self._burst = float(rate), float(burst)
        self._tokens = min(self._tokens, self._burst) if self._rate else self._burst

    def _refill(self, now: float) -> None:
        if now > self._stamp:
            self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._rate)
            self._stamp = now


class DelayLine:
    """Release times for one ordered byte stream: latency ± uniform jitter, never before the previous chunk.

    TCP is a byte stream, so jitter must stretch gaps, not reorder; a chunk whose sample would overtake
    its predecessor is released right after it instead.
    """

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._last = float("-inf")

    def release_at(self, departed: float, latency_s: float, jitter_s: float) -> float:
        """When a chunk that left the bottleneck at `departed` reaches the far end."""
        delay = latency_s + (self._rng.uniform(-jitter_s, jitter_s) if jitter_s > 0 else 0.0)
        release = max(departed + max(delay, 0.0), self._last)
        self._last = release
        return release


def chunk_size_for(rate: float) -> int:
    """Read size for a direction: ~5 ms of traffic at the cap, 1–64 KiB, the maximum when uncapped."""
    if rate <= 0:
        return MAX_CHUNK
    return int(min(MAX_CHUNK, max(MIN_CHUNK, rate * CHUNK_SECONDS)))


def burst_for(rate: float) -> int:
    """Bucket depth: 25 ms of traffic (at least one chunk); wake-ups up to 25 ms late lose no rate."""
    return max(chunk_size_for(rate), int(rate * BURST_SECONDS))


def in_flight_limit(rate: float, latency_s: float, jitter_s: float) -> int:
    """Bytes one direction may hold undelivered: twice the bandwidth-delay product, so the cap is reachable.

    Uncapped links hold at most 32 MiB, which limits them to 32 MiB per `latency_s`.
    """
    if rate <= 0:
        return UNLIMITED_IN_FLIGHT
    return max(MIN_IN_FLIGHT, int(2 * rate * (latency_s + jitter_s)) + 4 * chunk_size_for(rate))
