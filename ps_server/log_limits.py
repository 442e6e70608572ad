"""Log lines an unauthenticated caller can trigger, at a bounded rate.

Anyone who reaches the port can send refused credentials as fast as the rate limits allow; one log line per
refusal would let them fill the disk and drown the lines that matter. `BoundedLog` writes the first refusal of
each kind at once, then at most one line per `interval_s` saying how many were refused since; the metrics
(`geofed_auth_failures`) count every one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable


class BoundedLog:
    """One line per key at first, then at most one per `interval_s` with the count of those held back."""

    def __init__(
        self, logger: logging.Logger, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.logger, self.interval_s, self.clock = logger, interval_s, clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def warning(self, key: str, fmt: str, *args: object) -> None:
        """Log `fmt % args` for `key` now, or count it towards the next line of `key`."""
        now = self.clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.interval_s:
                self._held[key] = self._held.get(key, 0) + 1
                return
            held = self._held.pop(key, 0)
            self._last[key] = now
            if len(self._last) > 1024:  # keys are few (one per RPC); never let them grow without bound
                self._last = {key: now}
        self.logger.warning(fmt + " held_back=%d", *args, held)
