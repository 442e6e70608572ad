"""How the client's rounds reach the PS: the `SyncPath` seam, its paths and the route between them."""

from __future__ import annotations

from ..upload import TAKEN
from .base import PushOutcome, RoundResult, SyncContext, SyncPath
from .overlap import OverlapSync, Settled
from .route import Route, overlap_kept_off, sync_route
from .sliced import SliceWiseSync
from .whole import WholeVectorSync, start_restore

__all__ = [
    "TAKEN",
    "OverlapSync",
    "PushOutcome",
    "Route",
    "RoundResult",
    "Settled",
    "SliceWiseSync",
    "SyncContext",
    "SyncPath",
    "WholeVectorSync",
    "start_restore",
    "overlap_kept_off",
    "sync_route",
]
