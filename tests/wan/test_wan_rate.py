"""Bandwidth caps on loopback: within 10% of the configured rate, up and down separately."""

from __future__ import annotations

import os
import socket
import threading

import pytest
from wan_helpers import LoopbackServer, Sink, rate_of, receive_all

from geofed_apps.wan import LinkProfile

UP, DOWN = 4_000_000, 8_000_000
ASYMMETRIC = LinkProfile(up_bytes_per_s=UP, down_bytes_per_s=DOWN)
pytestmark = pytest.mark.timeout(30)


def upload(port: int, nbytes: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(os.urandom(nbytes))
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(15)
        assert sock.recv(1) == b""  # the sink closes once it has seen everything


def test_upload_is_paced_to_the_up_cap(sink: tuple[LoopbackServer, Sink], proxy_to) -> None:
    """8 MB client→PS through a 4 MB/s up / 8 MB/s down link arrives at 4 MB/s ± 10%."""
    server, recorder = sink
    proxy = proxy_to(server.port, ASYMMETRIC)

    upload(proxy.port, 8_000_000)

    (arrivals,) = recorder.wait()
    rate = rate_of(arrivals)
    print(f"up: {rate / 1e6:.3f} MB/s (cap {UP / 1e6} MB/s)")
    assert rate == pytest.approx(UP, rel=0.10)
    assert proxy.stats.bytes_up == 8_000_000


def test_download_is_paced_to_the_down_cap(proxy_to) -> None:
    """16 MB PS→client through the same asymmetric link arrives at 8 MB/s ± 10%, not at the up cap."""
    nbytes = 16_000_000
    payload = os.urandom(nbytes)
    server = LoopbackServer(lambda conn: conn.sendall(payload))
    try:
        proxy = proxy_to(server.port, ASYMMETRIC)
        with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
            data, arrivals = receive_all(sock, nbytes)
    finally:
        server.close()
    rate = rate_of(arrivals)
    print(f"down: {rate / 1e6:.3f} MB/s (cap {DOWN / 1e6} MB/s)")
    assert data == payload
    assert rate == pytest.approx(DOWN, rel=0.10)


def test_long_fat_pipe_still_reaches_the_cap(sink: tuple[LoopbackServer, Sink], proxy_to) -> None:
    """With 250 ms one-way latency the pipe keeps the bandwidth-delay product in flight: still ~4 MB/s."""
    server, recorder = sink
    proxy = proxy_to(server.port, LinkProfile(latency_ms=250, up_bytes_per_s=UP))

    upload(proxy.port, 6_000_000)

    (arrivals,) = recorder.wait()
    rate = rate_of(arrivals)
    print(f"up over 250 ms latency: {rate / 1e6:.3f} MB/s")
    assert rate == pytest.approx(UP, rel=0.10)


def test_connections_through_one_proxy_share_its_cap(sink: tuple[LoopbackServer, Sink], proxy_to) -> None:
    """One proxy is one link: two parallel uploads together get the cap, not twice it."""
    server, recorder = sink
    proxy = proxy_to(server.port, ASYMMETRIC)

    threads = [threading.Thread(target=upload, args=(proxy.port, 4_000_000)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)

    logs = recorder.wait(connections=2)
    start = min(log[0][0] for log in logs)
    end = max(log[-1][0] for log in logs)
    rate = 8_000_000 / (end - start)
    print(f"two uploads together: {rate / 1e6:.3f} MB/s")
    assert rate == pytest.approx(UP, rel=0.10)
