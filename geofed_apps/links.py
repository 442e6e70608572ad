"""`geofed local --link PROFILE`: each client dials its PS through its own WAN emulator link.

The link shapes the client's traffic as `PROFILE` says (`geofed_apps.wan`: latency, jitter, rates, outages;
`0ms` shapes nothing) and counts the bytes it carries at the socket: gRPC's framing, TLS, keep-alives and
every stream included, not only the payloads the client and PS log. The link stamps each delivery with the
wall-clock time; each client metrics record gets its link's counts as they stood when the client wrote it
(its `t`), so the bytes of a round at the socket are the difference between two of a client's records.
"""

from __future__ import annotations

import bisect
import statistics
import threading
import time
from collections import deque

from geofed_apps.wan import LinkProfile, WanProxy


class _Counts:
    """One link's running byte counts, stamped at each delivery (oldest first)."""

    def __init__(self) -> None:
        self.up = self.down = 0
        self.stamps: deque[tuple[float, int, int]] = deque([(time.time(), 0, 0)])
        self.lock = threading.Lock()

    def delivered(self, direction: str, total: int) -> None:
        with self.lock:
            if direction == "up":
                self.up = total
            else:
                self.down = total
            self.stamps.append((time.time(), self.up, self.down))


class ClientLinks:
    """One `WanProxy` per client, all with the same profile, with their deliveries' byte counts over time."""

    def __init__(self, profile: LinkProfile) -> None:
        self.profile = profile
        self._links: dict[str, WanProxy] = {}
        self._counts: dict[str, _Counts] = {}

    def address(self, client_id: str, ps_address: str) -> str:
        """Start client `client_id`'s link to `ps_address` (host:port); return the address it dials."""
        host, _, port = ps_address.rpartition(":")
        counts = _Counts()
        link = WanProxy(host, int(port), self.profile, on_delivered=counts.delivered)
        self._links[client_id], self._counts[client_id] = link, counts
        return f"127.0.0.1:{link.start()}"

    def stats(self, client_id: str) -> tuple[int, int]:
        """Client `client_id`'s link's bytes up and down so far."""
        counts = self._counts[client_id]
        with counts.lock:
            return counts.up, counts.down

    def annotate(self, record: dict) -> dict:
        """`record` (a client's metrics record) with its link's bytes up and down as they stood at its `t`
        (after the last delivery before it); older stamps are dropped (a client's records come in time order)."""
        counts = self._counts.get(record.get("client", ""))
        if counts is None:
            return record
        with counts.lock:
            stamps = counts.stamps
            at = max(0, bisect.bisect_right(stamps, record.get("t", float("inf")), key=lambda s: s[0]) - 1)
            for _ in range(at):
                stamps.popleft()
            _, record["link_up_bytes"], record["link_down_bytes"] = stamps[0]
        return record

    def summary(self, records: list[dict]) -> str:
        """`link bytes per round at the socket: up U B, down D B (...)`: the mean over clients of each client's
        bytes between its first and last record, per round in between (its Join and first whole-model
        download come before its first record, so they are left out)."""
        up, down, rounds = [], [], 0
        for client in self._links:
            mine = [r for r in records if r.get("client") == client and "link_up_bytes" in r]
            if len(mine) < 2:
                continue
            n = len(mine) - 1
            up.append((mine[-1]["link_up_bytes"] - mine[0]["link_up_bytes"]) / n)
            down.append((mine[-1]["link_down_bytes"] - mine[0]["link_down_bytes"]) / n)
            rounds += n
        totals = [self.stats(client) for client in self._links]
        total = f"{sum(u for u, _ in totals)} B up, {sum(d for _, d in totals)} B down in all"
        if not up:
            return f"link bytes at the socket ({self.profile.shorthand()}): {total}; too few rounds to give per round"
        return (f"link bytes per round at the socket ({self.profile.shorthand()}): up {statistics.mean(up):.0f} B, "
                f"down {statistics.mean(down):.0f} B (mean over {len(up)} clients, {rounds} rounds); {total}")

    def blackhole(self, client_id: str, seconds: float) -> int:
        """Cut client `client_id`'s link for `seconds` (`WanProxy.blackhole`: bytes held, then delivered); the
        blackholes its link has begun so far, this one included."""
        link = self._links[client_id]
        link.blackhole(seconds)
        return link.stats.blackholes

    def stop(self) -> None:
        for link in self._links.values():
            link.stop()
