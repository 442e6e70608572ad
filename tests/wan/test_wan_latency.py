"""Delay and jitter: a round trip costs 2 × one-way latency, and jitter never reorders the byte stream."""

from __future__ import annotations

import socket
import threading
import time
from concurrent import futures

import grpc
import numpy as np
import pytest
from wan_helpers import LoopbackServer, receive_all, round_trip

from geofed_apps.wan import LinkProfile

pytestmark = pytest.mark.timeout(30)
SLACK_S = 0.150  # scheduling noise a busy 2-core machine may add to a round trip


@pytest.mark.parametrize("latency_ms", [0, 100])
def test_round_trip_is_twice_the_latency(echo_server: LoopbackServer, proxy_to, latency_ms: int) -> None:
    proxy = proxy_to(echo_server.port, LinkProfile(latency_ms=latency_ms))
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        rtts = [round_trip(sock) for _ in range(3)]
    print(f"latency {latency_ms} ms: RTTs {[f'{r * 1e3:.1f}' for r in rtts]} ms")
    assert all(2 * latency_ms / 1e3 <= rtt < 2 * latency_ms / 1e3 + SLACK_S for rtt in rtts)


def test_jitter_never_reorders_bytes(echo_server: LoopbackServer, proxy_to) -> None:
    """A counter stream written in 1000 small pieces comes back intact through ±20 ms of jitter."""
    proxy = proxy_to(echo_server.port, LinkProfile(latency_ms=20, jitter_ms=20, seed=3))
    counters = np.arange(20_000, dtype=">u4")
    pieces = np.array_split(counters, 1000)

    def send(sock: socket.socket) -> None:
        for piece in pieces:
            sock.sendall(piece.tobytes())
            time.sleep(0.0005)  # separate writes, so the proxy sees many chunks with their own delays

    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sender = threading.Thread(target=send, args=(sock,))
        sender.start()
        data, arrivals = receive_all(sock, counters.nbytes)
        sender.join(10)

    received = np.frombuffer(data, dtype=">u4")
    assert np.array_equal(received, counters)
    assert len(arrivals) > 10  # it really was many chunks, not one


def test_set_profile_changes_latency_at_run_time(echo_server: LoopbackServer, proxy_to) -> None:
    proxy = proxy_to(echo_server.port, LinkProfile())
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        fast = round_trip(sock)
        proxy.set_profile(LinkProfile(latency_ms=100))
        slow = round_trip(sock)
    assert fast < SLACK_S
    assert 0.2 <= slow < 0.2 + SLACK_S
    assert proxy.profile.latency_ms == 100


def test_set_profile_changes_the_rate_cap_at_run_time(proxy_to) -> None:
    """Halving the down cap mid-transfer halves the rate of what follows."""
    payload = bytes(6_000_000)
    server = LoopbackServer(lambda conn: conn.sendall(payload))
    try:
        proxy = proxy_to(server.port, LinkProfile(down_bytes_per_s=8_000_000))
        with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
            receive_all(sock, 2_000_000)
            proxy.set_profile(LinkProfile(down_bytes_per_s=4_000_000))
            start = time.monotonic()
            receive_all(sock, 4_000_000)
            rate = 4_000_000 / (time.monotonic() - start)
    finally:
        server.close()
    assert rate == pytest.approx(4e6, rel=0.10)


def test_stats_count_bytes_each_way_and_connections(echo_server: LoopbackServer, proxy_to) -> None:
    proxy = proxy_to(echo_server.port, LinkProfile())
    for size in (10, 1000):
        with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
            round_trip(sock, bytes(size))
    deadline = time.monotonic() + 5
    while proxy.stats.active and time.monotonic() < deadline:
        time.sleep(0.01)
    stats = proxy.stats
    assert (stats.bytes_up, stats.bytes_down, stats.connections, stats.active) == (1010, 1010, 2, 0)


def test_grpc_works_through_the_link(proxy_to) -> None:
    """HTTP/2 (what the PS speaks) crosses the proxy, pays the latency, and reconnects after a reset."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.unary_unary_rpc_method_handler(lambda request, context: request[::-1])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("wan.Test", {"Reverse": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        proxy = proxy_to(port, LinkProfile(latency_ms=50, up_bytes_per_s=1_000_000))
        with grpc.insecure_channel(f"127.0.0.1:{proxy.port}") as channel:
            reverse = channel.unary_unary("/wan.Test/Reverse")
            assert reverse(b"abc", timeout=5, wait_for_ready=True) == b"cba"
            start = time.monotonic()
            assert reverse(b"hello", timeout=5) == b"olleh"
            assert 0.1 <= time.monotonic() - start < 0.1 + SLACK_S
            proxy.trigger_reset()
            assert call_after_reset(reverse, b"again") == b"niaga"
    finally:
        server.stop(None)
    assert proxy.stats.resets == 1
    assert proxy.stats.connections >= 2  # the channel dialled again after the reset


def call_after_reset(rpc: grpc.UnaryUnaryMultiCallable, request: bytes, attempts: int = 3) -> bytes:
    """An RPC racing the reset fails UNAVAILABLE (as a real cut does); the channel then reconnects."""
    for _ in range(attempts - 1):
        try:
            return rpc(request, timeout=5, wait_for_ready=True)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
    return rpc(request, timeout=5, wait_for_ready=True)
