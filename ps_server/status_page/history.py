"""The loss-over-time series the status page plots: one point per global version.

Each point is the mean of the losses the clients last reported (train loss, and the loss on each
client's own held-out split) when the version was published. Bounded memory: past `MAX_POINTS` the
older half is thinned to every other point, so a long run keeps its whole shape.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping
from typing import Any

MAX_POINTS = 2000


def _mean(values: list[float]) -> float | None:
    values = [v for v in values if isinstance(v, int | float) and math.isfinite(v) and v > 0]
    return sum(values) / len(values) if values else None


class LossHistory:
    """[(version, unix time, mean train loss | None, mean held-out loss | None)], oldest first."""

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        self.max_points = max(4, max_points)
        self.points: list[tuple[int, float, float | None, float | None]] = []
        self._lock = threading.Lock()

    def record(self, version: int, clients: Mapping[str, Any]) -> None:
        """A version was published; `clients` maps ids to objects with a `report` dict (core.ClientState)."""
        reports = [c.report for c in list(clients.values()) if c.report]
        point = (version, time.time(), _mean([r.get("train_loss", 0.0) for r in reports]),
                 _mean([r.get("eval_loss", 0.0) for r in reports]))
        with self._lock:
            self.points.append(point)
            if len(self.points) > self.max_points:
                half = len(self.points) // 2
                self.points = self.points[:half:2] + self.points[half:]

    def since(self, version: int = 0) -> list[tuple[int, float, float | None, float | None]]:
        """Points of versions after `version` (0: all)."""
        with self._lock:
            return [p for p in self.points if p[0] > version]
