"""Loopback TCP servers and measuring helpers for the WAN proxy tests; plain threads, 127.0.0.1 only."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

Arrivals = list[tuple[float, int]]  # (monotonic time, bytes) per recv


class LoopbackServer:
    """Accept on 127.0.0.1:<free port>; each connection runs `handle(conn)` in its own thread."""

    def __init__(self, handle: Callable[[socket.socket], None]) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self._handle = handle
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                self._handle(conn)
            except OSError:
                pass  # the proxy reset us: that is what some tests do

    def close(self) -> None:
        self._sock.close()


def echo(conn: socket.socket) -> None:
    """Send back every byte until EOF."""
    while data := conn.recv(1 << 16):
        conn.sendall(data)


class Sink:
    """Records when each byte arrives, per connection, until EOF."""

    def __init__(self) -> None:
        self.arrivals: list[Arrivals] = []
        self._done = threading.Semaphore(0)

    def __call__(self, conn: socket.socket) -> None:
        arrivals: Arrivals = []
        while data := conn.recv(1 << 16):
            arrivals.append((time.monotonic(), len(data)))
        self.arrivals.append(arrivals)
        self._done.release()

    def wait(self, connections: int = 1, timeout: float = 15.0) -> list[Arrivals]:
        """Block until `connections` streams have ended; their arrival logs."""
        for _ in range(connections):
            assert self._done.acquire(timeout=timeout), "sink never saw EOF"
        return self.arrivals


def receive_all(sock: socket.socket, nbytes: int, timeout: float = 15.0) -> tuple[bytes, Arrivals]:
    """Read exactly `nbytes`, logging arrival times."""
    sock.settimeout(timeout)
    chunks, arrivals, got = [], [], 0
    while got < nbytes:
        data = sock.recv(min(1 << 16, nbytes - got))
        assert data, f"stream ended after {got} of {nbytes} bytes"
        arrivals.append((time.monotonic(), len(data)))
        chunks.append(data)
        got += len(data)
    return b"".join(chunks), arrivals


def rate_of(arrivals: Arrivals) -> float:
    """Bytes per second from the first arrival to the last (the first recv only starts the clock)."""
    (t_first, n_first), t_last = arrivals[0], arrivals[-1][0]
    return (sum(n for _, n in arrivals) - n_first) / (t_last - t_first)


def round_trip(sock: socket.socket, message: bytes = b"ping") -> float:
    """Seconds for `message` to go out through the proxy and come back from the echo server."""
    start = time.monotonic()
    sock.sendall(message)
    data, _ = receive_all(sock, len(message))
    assert data == message
    return time.monotonic() - start
