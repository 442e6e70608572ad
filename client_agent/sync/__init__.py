"""How the client's rounds reach the PS: the `SyncPath` seam, its paths and the route between them."""

from __future__ import annotations

from ..connection.upload import TAKEN
from .base import PushOutcome, RoundEnd, RoundResult, SyncContext, SyncedRound, SyncPath
from .overlap import OverlappedRounds, OverlapSync, Settled
from .route import Route, overlap_kept_off, sync_route
from .sliced import SliceWiseSync
from .whole import WholeVectorSync, start_restore

__all__ = [
    "TAKEN",
    "OverlapSync",
    "OverlappedRounds",
    "PushOutcome",
    "Route",
    "RoundEnd",
    "RoundResult",
    "Settled",
    "SliceWiseSync",
    "SyncContext",
    "SyncedRound",
    "SyncPath",
    "WholeVectorSync",
    "start_restore",
    "overlap_kept_off",
    "sync_route",
]
