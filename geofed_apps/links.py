"""`geofed local --link PROFILE`: each client dials its PS through its own WAN emulator link.

The link shapes the client's traffic as `PROFILE` says (`geofed.wan`: latency, jitter, rates, outages;
`0ms` shapes nothing) and counts the bytes it carries at the socket: gRPC's framing, TLS, keep-alives and
every stream included, not only the payloads the client and PS log. A sampler reads every link's counters
every `SAMPLE_S`; each client metrics record gets its link's counts as they stood when the client wrote
it (its `t`), so the bytes of a round at the socket are the difference between two of a client's records.
"""

from __future__ import annotations

import bisect
import statistics
import threading
import time
from collections import deque

from geofed.wan import LinkProfile, WanProxy

SAMPLE_S = 0.02


class ClientLinks:
    """One `WanProxy` per client, all with the same profile, and a sampler of their byte counters."""

    def __init__(self, profile: LinkProfile) -> None:
        self.profile = profile
        self._links: dict[str, WanProxy] = {}
        self._samples: dict[str, deque[tuple[float, int, int]]] = {}  # (time.time(), up, down), oldest first
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample_every, name="link-sampler", daemon=True)

    def address(self, client_id: str, ps_address: str) -> str:
        """Start client `client_id`'s link to `ps_address` (host:port); return the address it dials."""
        host, _, port = ps_address.rpartition(":")
        link = WanProxy(host, int(port), self.profile)
        listen = link.start()
        with self._lock:
            self._links[client_id] = link
            self._samples[client_id] = deque([(time.time(), 0, 0)])
        if not self._sampler.is_alive():
            self._sampler.start()
        return f"127.0.0.1:{listen}"

    def _sample_every(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()

    def stats(self, client_id: str) -> tuple[int, int]:
        """Client `client_id`'s link's bytes up and down now."""
        stats = self._links[client_id].stats
        return stats.bytes_up, stats.bytes_down

    def sample(self) -> None:
        """Read every link's counters now."""
        with self._lock:
            for client, link in self._links.items():
                stats = link.stats
                self._samples[client].append((time.time(), stats.bytes_up, stats.bytes_down))

    def annotate(self, record: dict) -> dict:
        """`record` (a client's metrics record) with its link's bytes up and down as they stood at its `t`
        (the last sample before it); samples before that one are dropped (records come in time order)."""
        with self._lock:
            samples = self._samples.get(record.get("client", ""))
            if samples is None:
                return record
            at = max(0, bisect.bisect_right(samples, record.get("t", float("inf")), key=lambda s: s[0]) - 1)
            for _ in range(at):
                samples.popleft()
            _, record["link_up_bytes"], record["link_down_bytes"] = samples[0]
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
        totals = [link.stats for link in self._links.values()]
        total = f"{sum(s.bytes_up for s in totals)} B up, {sum(s.bytes_down for s in totals)} B down in all"
        if not up:
            return f"link bytes at the socket ({self.profile.shorthand()}): {total}; too few rounds to give per round"
        return (f"link bytes per round at the socket ({self.profile.shorthand()}): up {statistics.mean(up):.0f} B, "
                f"down {statistics.mean(down):.0f} B (mean over {len(up)} clients, {rounds} rounds); {total}")

    def stop(self) -> None:
        self._stop.set()
        if self._sampler.is_alive():
            self._sampler.join()
        for link in self._links.values():
            link.stop()
