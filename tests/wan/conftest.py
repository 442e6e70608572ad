"""Fixtures for the WAN proxy tests: loopback servers and proxies that are always cleaned up."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from wan_helpers import LoopbackServer, Sink, echo

from geofed_apps.wan import LinkProfile, WanProxy


@pytest.fixture
def echo_server() -> Iterator[LoopbackServer]:
    server = LoopbackServer(echo)
    yield server
    server.close()


@pytest.fixture
def sink() -> Iterator[tuple[LoopbackServer, Sink]]:
    recorder = Sink()
    server = LoopbackServer(recorder)
    yield server, recorder
    server.close()


@pytest.fixture
def proxy_to() -> Iterator[Callable[[int, LinkProfile], WanProxy]]:
    """Factory: a started proxy in front of 127.0.0.1:port, stopped after the test."""
    proxies: list[WanProxy] = []

    def make(port: int, profile: LinkProfile) -> WanProxy:
        proxy = WanProxy("127.0.0.1", port, profile)
        proxy.start()
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.stop()
