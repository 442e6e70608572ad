"""Scripted outages: resets cut live connections (new ones work); blackholes delay but lose nothing."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
from wan_helpers import LoopbackServer, receive_all, round_trip

from geofed_apps.wan import LinkProfile, Outage, WanProxy

pytestmark = pytest.mark.timeout(30)
SLACK_S = 0.150


def wait_for_reset(sock: socket.socket, timeout: float = 5.0) -> float:
    """Block until the proxy resets `sock`; return when that happened."""
    sock.settimeout(timeout)
    with pytest.raises(ConnectionResetError):
        sock.recv(1)
    return time.monotonic()


def test_reset_cuts_live_connections_and_later_ones_work(echo_server: LoopbackServer, proxy_to) -> None:
    proxy = proxy_to(echo_server.port, LinkProfile(latency_ms=5))
    address = ("127.0.0.1", proxy.port)
    with socket.create_connection(address) as first, socket.create_connection(address) as second:
        round_trip(first)
        round_trip(second)
        proxy.trigger_reset()
        wait_for_reset(first)
        wait_for_reset(second)
    with socket.create_connection(("127.0.0.1", proxy.port)) as again:
        round_trip(again)
    assert proxy.stats.resets == 2


def test_scheduled_reset_fires_at_its_time(echo_server: LoopbackServer) -> None:
    """An `Outage(kind="reset", at_s=0.3)` in the profile resets the live connection 0.3 s after start."""
    profile = LinkProfile(outages=[Outage(kind="reset", at_s=0.3)])
    with WanProxy("127.0.0.1", echo_server.port, profile) as proxy:
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
            round_trip(sock)
            reset_after = wait_for_reset(sock) - started
        with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
            round_trip(sock)
    assert 0.3 - 0.02 <= reset_after < 0.3 + SLACK_S


def test_reset_with_a_refusal_window_resets_new_connections_until_it_ends(
    echo_server: LoopbackServer, proxy_to
) -> None:
    proxy = proxy_to(echo_server.port, LinkProfile())
    proxy.trigger_reset(refuse_s=0.4)
    refused_at = time.monotonic()
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        wait_for_reset(sock)
    time.sleep(max(0.0, refused_at + 0.45 - time.monotonic()))
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        round_trip(sock)
    assert proxy.stats.resets == 1


def test_blackhole_delays_delivery_by_its_duration(echo_server: LoopbackServer, proxy_to) -> None:
    proxy = proxy_to(echo_server.port, LinkProfile(latency_ms=10))
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        round_trip(sock)
        proxy.blackhole(0.5)
        rtt = round_trip(sock)
    assert 0.5 <= rtt < 0.5 + 0.02 + SLACK_S
    assert proxy.stats.blackholes == 1


def test_blackhole_loses_nothing(echo_server: LoopbackServer, proxy_to) -> None:
    """2 MB written during a blackhole all comes back, in order, once it lifts."""
    proxy = proxy_to(echo_server.port, LinkProfile(up_bytes_per_s=20_000_000, down_bytes_per_s=20_000_000))
    payload = os.urandom(2_000_000)
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        proxy.blackhole(0.4)
        start = time.monotonic()
        sender = threading.Thread(target=sock.sendall, args=(payload,))
        sender.start()
        data, arrivals = receive_all(sock, len(payload))
        sender.join(10)
    assert data == payload
    assert arrivals[0][0] - start >= 0.4


def test_new_connections_hang_during_a_blackhole(echo_server: LoopbackServer, proxy_to) -> None:
    proxy = proxy_to(echo_server.port, LinkProfile())
    proxy.blackhole(0.4)
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        round_trip(sock)
    assert 0.4 <= time.monotonic() - start < 0.4 + SLACK_S


def test_scheduled_blackhole_from_the_profile(echo_server: LoopbackServer) -> None:
    profile = LinkProfile.parse("0ms,blackhole@200ms+300ms")
    with WanProxy("127.0.0.1", echo_server.port, profile) as proxy:
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
            round_trip(sock)
            time.sleep(max(0.0, started + 0.25 - time.monotonic()))  # inside the blackhole
            round_trip(sock)
            lifted_after = time.monotonic() - started
    assert 0.5 <= lifted_after < 0.5 + SLACK_S


def test_set_profile_replaces_pending_outages(echo_server: LoopbackServer) -> None:
    """Outages of the new profile still ahead are scheduled; the old profile's pending ones are dropped."""
    with WanProxy("127.0.0.1", echo_server.port, LinkProfile.parse("0ms,reset@200ms")) as proxy:
        proxy.set_profile(LinkProfile.parse("0ms,reset@0s,blackhole@300ms+200ms"))  # reset@0s already past
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
            time.sleep(max(0.0, started + 0.35 - time.monotonic()))
            round_trip(sock)  # not reset at 200 ms; held by the blackhole until 500 ms
            lifted_after = time.monotonic() - started
        stats = proxy.stats
    assert (stats.resets, stats.blackholes) == (0, 1)
    assert 0.5 - 0.02 <= lifted_after < 0.5 + SLACK_S


def test_control_calls_need_a_running_proxy_and_valid_arguments(echo_server: LoopbackServer) -> None:
    proxy = WanProxy("127.0.0.1", echo_server.port, LinkProfile())
    with pytest.raises(RuntimeError, match="not running"):
        proxy.trigger_reset()
    with proxy:
        with pytest.raises(ValueError, match="seconds > 0"):
            proxy.blackhole(0)
        with pytest.raises(ValueError, match="refuse_s must be >= 0"):
            proxy.trigger_reset(refuse_s=-1)
        with pytest.raises(RuntimeError, match="already started"):
            proxy.start()
    proxy.stop()  # a second stop is harmless
    with pytest.raises(ValueError, match="target_port"):
        WanProxy("127.0.0.1", 0, LinkProfile())
    with pytest.raises(TypeError, match="LinkProfile"):
        WanProxy("127.0.0.1", 1, {"latency_ms": 5})  # type: ignore[arg-type]


def test_unreachable_target_resets_the_client(proxy_to) -> None:
    """If the PS is down the client sees its connection reset, as when a remote host refuses."""
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]
    proxy = proxy_to(dead_port, LinkProfile())
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.settimeout(5)
        with pytest.raises(ConnectionResetError):
            sock.recv(1)
