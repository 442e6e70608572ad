"""How the client's rounds reach the PS: the `SyncPath` seam, its two paths and the route between them."""

from __future__ import annotations

from .base import TAKEN, PushOutcome, RoundResult, SyncContext, SyncPath
from .route import Route, sync_route
from .sliced import SliceWiseSync
from .whole import WholeVectorSync, start_restore

__all__ = [
    "TAKEN",
    "PushOutcome",
    "Route",
    "RoundResult",
    "SliceWiseSync",
    "SyncContext",
    "SyncPath",
    "WholeVectorSync",
    "start_restore",
    "sync_route",
]
