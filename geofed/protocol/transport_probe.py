"""Tell a TLS/plaintext mismatch between a client and the PS apart from an unreachable PS, in one short probe.

gRPC reports either mismatch as a PS that is unavailable: a TLS client dialling a plaintext PS retries its
handshake (and its C core logs each failure) until the call's deadline, and a plaintext client dialling a TLS
PS sees its connection closed. One plain TCP connection says which side speaks what: a plaintext gRPC server
answers the HTTP/2 preface with a SETTINGS frame, and a TLS server answers a TLS ClientHello. Anything else
(refused, silent, a proxy that answers neither) is no finding: the caller goes on as before.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading

import grpc

# The HTTP/2 client preface and an empty SETTINGS frame: what a plaintext gRPC client sends first.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_SETTINGS = 0x04  # HTTP/2 frame type, the 4th byte of a frame header
PROBE_TIMEOUT_S = 3.0


def transport_mismatch(address: str, *, insecure: bool, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """One line naming the mismatch and its fix when the PS at `address` speaks the other transport than the
    client (`insecure`: plaintext), else None (the same transport, or nothing could be told)."""
    where = _host_port(address)
    if where is None:
        return None
    try:
        if insecure and _speaks_tls(*where, timeout_s):
            return (f"the PS at {address} serves TLS and this client dialled it in plaintext (--insecure): drop "
                    "--insecure and pass --ca with the PEM CA of the PS certificate (not needed for a certificate "
                    "from a public CA)")
        if not insecure and _speaks_plaintext(*where, timeout_s):
            return (f"the PS at {address} serves plaintext (it runs with --insecure) and this client dialled it "
                    "with TLS: pass --insecure as well (local use only), or run the PS with --tls-cert and --tls-key")
    except OSError:  # refused, reset, timed out: gRPC's own error says it better
        return None
    return None


def first_connect_failed(channel: grpc.Channel, timeout_s: float) -> bool:
    """Connect `channel` and tell whether its first attempt failed (TRANSIENT_FAILURE) within `timeout_s`;
    False when it became ready, or neither happened in time. No call is made, so nothing is sent twice."""
    settled = threading.Event()
    failed: list[bool] = []

    def watch(state: grpc.ChannelConnectivity) -> None:
        if state in (grpc.ChannelConnectivity.READY, grpc.ChannelConnectivity.TRANSIENT_FAILURE) and not failed:
            failed.append(state is grpc.ChannelConnectivity.TRANSIENT_FAILURE)
            settled.set()

    channel.subscribe(watch, try_to_connect=True)
    try:
        settled.wait(timeout_s)
    finally:
        channel.unsubscribe(watch)
    return bool(failed) and failed[0]


def _host_port(address: str) -> tuple[str, int] | None:
    """`host:port` or `[v6]:port` split; None for anything else (a gRPC target URI, no port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host or "/" in host:
        return None
    return host.strip("[]"), int(port)


def _speaks_plaintext(host: str, port: int, timeout_s: float) -> bool:
    """Whether the server answers the HTTP/2 preface with a SETTINGS frame (a plaintext gRPC server)."""
    with socket.create_connection((host, port), timeout=timeout_s) as conn:
        conn.sendall(_H2_PREFACE)
        header = _read(conn, 9)
    return len(header) == 9 and header[3] == _SETTINGS


def _speaks_tls(host: str, port: int, timeout_s: float) -> bool:
    """Whether the server completes (or answers with a TLS alert) a handshake that checks no certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    with socket.create_connection((host, port), timeout=timeout_s) as conn:
        try:
            with context.wrap_socket(conn, server_hostname=None if _is_ip(host) else host):
                return True
        except ssl.SSLError as exc:  # an alert is TLS too (e.g. an mTLS server wanting a client certificate)
            return "ALERT" in (exc.reason or "")


def _read(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
