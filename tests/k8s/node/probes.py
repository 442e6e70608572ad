"""Exec, HTTP GET and TCP probes with the kubelet's timing: initial delay, period, timeout, thresholds."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from .runtime import Container


def _port(value: Any, ports: dict[str, int]) -> int:
    return int(value) if str(value).isdigit() else ports[str(value)]


async def run_probe(spec: dict[str, Any], container: Container, ports: dict[str, int]) -> bool:
    """One probe attempt, as the kubelet makes it (HTTP and TCP from the node, exec inside the container)."""
    timeout = float(spec.get("timeoutSeconds", 1))
    if "exec" in spec:
        code = await asyncio.to_thread(container.exec, spec["exec"]["command"], timeout)
        return code == 0
    if "httpGet" in spec:
        get = spec["httpGet"]
        host, port = container.endpoint(_port(get["port"], ports))
        url = f"{get.get('scheme', 'HTTP').lower()}://{get.get('host') or host}:{port}{get.get('path', '/')}"

        def fetch() -> bool:
            try:
                with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - a probe URL
                    return 200 <= resp.status < 400
            except (urllib.error.URLError, OSError):
                return False

        return await asyncio.to_thread(fetch)
    if "tcpSocket" in spec:
        host, port = container.endpoint(_port(spec["tcpSocket"]["port"], ports))
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        except (OSError, TimeoutError):
            return False
        writer.close()
        return True
    raise ValueError(f"unsupported probe: {sorted(spec)}")


@dataclass
class Prober:
    """One probe's state: the last result counts only after `successThreshold`/`failureThreshold` in a row."""

    spec: dict[str, Any]
    started: float = field(default_factory=time.monotonic)
    result: bool | None = None  # None: not decided yet
    _next: float = 0.0
    _ok: int = 0
    _bad: int = 0

    def due(self, now: float) -> bool:
        return now >= max(self._next, self.started + float(self.spec.get("initialDelaySeconds", 0)))

    def record(self, ok: bool, now: float) -> bool | None:
        self._next = now + float(self.spec.get("periodSeconds", 10))
        self._ok, self._bad = (self._ok + 1, 0) if ok else (0, self._bad + 1)
        if ok and self._ok >= int(self.spec.get("successThreshold", 1)):
            self.result = True
        elif not ok and self._bad >= int(self.spec.get("failureThreshold", 3)):
            self.result = False
        return self.result
