"""Per-key token buckets: a misbehaving client cannot monopolise the PS."""

from __future__ import annotations

import threading
import time


class RateLimiter:
    """Allows `rate` requests per second per key with bursts up to `burst`."""

    def __init__(self, rate: float, burst: float | None = None, clock=time.monotonic) -> None:
        self.rate = rate
        self.burst = burst if burst is not None else 2 * rate
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def allow(self, key: str) -> bool:
        """Take one token for `key` if available."""
        now = self.clock()
        with self._lock:
            tokens, last = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            ok = tokens >= 1.0
            self._buckets[key] = (tokens - 1.0 if ok else tokens, now)
            if len(self._buckets) > 100_000:  # bound memory under a flood of distinct keys
                self._buckets.clear()
        return ok
