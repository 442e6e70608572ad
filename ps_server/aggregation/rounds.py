"""When a round closes: synchronous quorum + straggler timeout, or asynchronous buffer of K deltas."""

from __future__ import annotations

import math
from dataclasses import dataclass

from geofed.config import AggregationConfig

from ..errors import StaleDelta
from .weighting import staleness_factor


@dataclass(frozen=True)
class Admission:
    """How an arriving delta is admitted: its staleness and the factor it is weighted by."""

    staleness: int
    factor: float


def admit(cfg: AggregationConfig, base_version: int, current_version: int) -> Admission:
    """Decide staleness weighting for a delta computed against `base_version`."""
    if base_version < 1:
        # Version 0 is "no model": a delta cannot have been trained from it (only Θ0's init push names it).
        raise ValueError("base version 0 names no global model; a delta must name the version it was trained from")
    if base_version > current_version:
        # The PS restarted from a checkpoint older than the client's model: recoverable by a resync.
        raise StaleDelta(
            "ahead", f"base version {base_version} is ahead of the global version {current_version} "
            "(the PS restarted from an older checkpoint): resync and retrain"
        )
    staleness = current_version - base_version
    if staleness > cfg.max_staleness:
        raise StaleDelta(
            "stale", f"delta is {staleness} versions behind (max_staleness={cfg.max_staleness}): resync and retrain"
        )
    if cfg.mode == "sync" and cfg.late_policy == "accept":
        return Admission(staleness, 1.0)
    return Admission(staleness, staleness_factor(staleness, cfg.staleness_exponent))


def should_close(
    cfg: AggregationConfig, *, buffered: int, clients_in_round: int, active_clients: int, first_at: float | None,
    now: float, straggler_timeout_s: float | None = None,
) -> bool:
    """True when the buffered deltas should become a new global version.

    `straggler_timeout_s`: the tuned timeout (autotune.straggler_timeout) in place of the configured one.
    """
    if buffered == 0 or first_at is None:
        return False
    if cfg.mode == "async":
        return buffered >= cfg.buffer_size or now - first_at >= cfg.buffer_timeout_s
    needed = max(1, math.ceil(cfg.quorum * max(1, active_clients)))
    timeout = cfg.straggler_timeout_s if straggler_timeout_s is None else straggler_timeout_s
    return clients_in_round >= needed or now - first_at >= timeout
