"""Record what a client sends: a TCP relay keeping every client-to-server byte, and a corpus no one else has.

Tests that must prove something never crosses the wire (split learning's raw data) put this relay between
the client and each service it dials, then search the recording.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import numpy as np


class RecordingProxy:
    """A TCP relay that keeps every byte the client side sends (what would cross the client's WAN link) and
    counts every byte the server side sends back.

    The counts are the TCP payload: gRPC's HTTP/2 frames, headers included (TLS records too when the channel
    uses TLS). A real link also carries TCP/IP headers and retransmissions, which no relay sees; and this
    one adds no latency, so timing-dependent traffic (keepalive pings, heartbeats) may differ on a WAN.
    """

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.up = bytearray()
        self.down_bytes = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                conn.close()
                continue
            threading.Thread(target=self._pipe, args=(conn, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, conn, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        try:
            while data := src.recv(65536):
                with self.lock:
                    if record:
                        self.up += data
                    else:
                        self.down_bytes += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def bytes_both_ways(self) -> int:
        """Client-to-server plus server-to-client bytes relayed so far."""
        with self.lock:
            return len(self.up) + self.down_bytes

    def close(self) -> None:
        self.sock.close()


def private_corpus(root: Path, seed: int = 0) -> Path:
    """Text no one else has: random 'words' of 6-12 letters, so any leaked window is unmistakable."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    for i in range(3):
        words = ["".join(rng.choice(letters, rng.integers(6, 13))) for _ in range(6000)]
        (root / f"secret{i}.txt").write_text(" ".join(words) + "\n")
    return root
