"""The loss-over-time series the status page plots: one point per global version.

Each point is the mean of the losses the clients last reported (train loss, and the loss on each
client's own held-out split) when the version was published; a report without a loss (clients evaluate
every `eval_every` steps only) keeps that client's previous one. Bounded memory: past `MAX_POINTS` the
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
    return sum(values) / len(values) if values else None


def _loss(report: Mapping[str, Any], key: str) -> float | None:
    value = report.get(key)
    return float(value) if isinstance(value, int | float) and math.isfinite(value) and value > 0 else None


class LossHistory:
    """[(version, unix time, mean train loss | None, mean held-out loss | None)], oldest first."""

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        self.max_points = max(4, max_points)
        self.points: list[tuple[int, float, float | None, float | None]] = []
        self._last: dict[str, dict[str, float]] = {}  # client -> {"train_loss": .., "eval_loss": ..} last reported
        self._lock = threading.Lock()

    def record(self, version: int, clients: Mapping[str, Any]) -> None:
        """A version was published; `clients` maps ids to objects with a `report` dict (core.ClientState)."""
        with self._lock:
            for client_id, client in list(clients.items()):
                last = self._last.setdefault(client_id, {})
                for key in ("train_loss", "eval_loss"):
                    value = _loss(client.report or {}, key)
                    if value is not None:
                        last[key] = value
            means = [_mean([v[key] for v in self._last.values() if key in v]) for key in ("train_loss", "eval_loss")]
            self.points.append((version, time.time(), *means))
            if len(self.points) > self.max_points:
                half = len(self.points) // 2
                self.points = self.points[:half:2] + self.points[half:]

    def since(self, version: int = 0) -> list[tuple[int, float, float | None, float | None]]:
        """Points of versions after `version` (0: all)."""
        with self._lock:
            return [p for p in self.points if p[0] > version]
