"""Caps on concurrent long-lived calls (StreamModel, PushDelta) per session, per site and in all.

Each such call holds one of the gRPC server's handler threads for as long as it runs; without caps one site
holding valid credentials could open enough idle streams to occupy every handler thread, and every other
site's Join, Heartbeat and PushDelta would queue behind them. With a cap per session and per site (the site's
client ids share it) and an overall cap below the handler pool, one site holds at most its cap of threads
and the pool always keeps threads for short calls. A call over a cap is refused at once, naming the cap.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass


class StreamCapExceeded(Exception):
    """A long-lived call over one of the caps; `reason` is the metric label, the message names the cap."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclass(frozen=True)
class StreamSlot:
    session: str
    site: str
    serial: int


class StreamSlots:
    """Counts open long-lived calls; `acquire` refuses one over a cap, `release` frees it."""

    def __init__(self, per_session: int, per_site: int, total: int) -> None:
        self.per_session, self.per_site, self.total = per_session, per_site, total
        self._sessions: dict[str, int] = {}
        self._sites: dict[str, int] = {}
        self._open = 0
        self._held: set[int] = set()
        self._serials = itertools.count()
        self._lock = threading.Lock()

    def acquire(self, session: str, site: str) -> StreamSlot:
        """Take a slot for a call of `session` (any key naming one session) of `site`, or raise."""
        with self._lock:
            if self._sessions.get(session, 0) >= self.per_session:
                raise StreamCapExceeded(
                    "stream_cap_session",
                    f"stream cap: this session already has {self.per_session} open streams (max_streams_per_session)",
                )
            if self._sites.get(site, 0) >= self.per_site:
                raise StreamCapExceeded(
                    "stream_cap_site",
                    f"stream cap: site {site!r} already has {self.per_site} "
                    "open streams across its client ids (max_streams_per_site)",
                )
            if self._open >= self.total:
                raise StreamCapExceeded(
                    "stream_cap_total",
                    f"stream cap: the PS already serves {self.total} open streams (max_streams); retry later",
                )
            self._sessions[session] = self._sessions.get(session, 0) + 1
            self._sites[site] = self._sites.get(site, 0) + 1
            self._open += 1
            slot = StreamSlot(session, site, next(self._serials))
            self._held.add(slot.serial)
        return slot

    def release(self, slot: StreamSlot) -> None:
        """Free `slot`; releasing it again (the call ended, then its handler returned) does nothing."""
        with self._lock:
            if slot.serial not in self._held:
                return
            self._held.discard(slot.serial)
            self._open -= 1
            for table, key in ((self._sessions, slot.session), (self._sites, slot.site)):
                left = table[key] - 1
                if left:
                    table[key] = left
                else:
                    del table[key]

    def open_count(self, site: str | None = None) -> int:
        with self._lock:
            return self._open if site is None else self._sites.get(site, 0)
