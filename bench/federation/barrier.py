"""Synchronous rounds that wait at a barrier for every site, as the harness's sync methods and the recipe
candidates run them: quorum 1 and a straggler timeout far beyond any budget, so H local steps bind."""

from __future__ import annotations

from typing import Any

BARRIER_S = 3600.0  # sync interval and straggler timeout far beyond any budget: H steps and the barrier bind


def sync_aggregation(outer: str, lr: float, **extra: Any) -> dict[str, Any]:
    """`aggregation` settings of a barrier-synchronous round with the outer optimizer `outer` at step `lr`."""
    return {
        "mode": "sync",
        "quorum": 1.0,
        "outer_optimizer": outer,
        "global_lr": lr,
        "straggler_timeout_s": BARRIER_S,
        "fednova": False,
        **extra,
    }
