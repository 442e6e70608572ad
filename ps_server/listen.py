"""What every gRPC server of the PS binds with: server options, the health service, TLS credentials.

Shared by the PS, the front of a sharded PS and its shards (`shards.shard_grpc`), so neither server module
imports the other.
"""

from __future__ import annotations

import errno
import socket
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2_grpc

from geofed.config import ServerConfig

# Accept client keepalives (NAT-friendly long streams) and ping idle clients to notice dead ones.
SERVER_OPTIONS = (
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.max_receive_message_length", 8 << 20),
    ("grpc.so_reuseport", 0),
)


HANDLER_THREADS = 512  # gRPC handler threads of the PS (the streams cap, max_streams, stays below it)


class ConfigError(ValueError):
    """The server cannot start with these settings; the message says which one and why."""


def listen(
    server: grpc.Server, cfg: ServerConfig, credentials: grpc.ServerCredentials | None
) -> tuple[int, health.HealthServicer]:
    """Add the health service and bind `cfg.host:cfg.port` (TLS when `credentials`): the port and the
    health servicer, to set SERVING once the server has started. Shared by the PS, the front and shards."""
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    check_bindable(cfg.host, cfg.port, "the gRPC port", "--port")  # gRPC's own bind error names neither
    address = f"{cfg.host}:{cfg.port}"
    try:
        port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    except RuntimeError as exc:  # taken between the check and the bind
        raise ConfigError(f"cannot bind the gRPC port {address}: {exc}; pick another with --port") from None
    if port == 0:
        raise ConfigError(f"cannot bind the gRPC port {address}; pick another with --port")
    return port, health_servicer


def check_bindable(host: str, port: int, what: str, flag: str) -> None:
    """ConfigError naming `what` and the `flag` that moves it when `host:port` cannot be bound (in use, or a
    privileged port); nothing to check for port 0 (any free port)."""
    if not port:
        return
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot bind {what} on {host}:{port}: {exc.strerror}") from None
    family, kind, proto, _, sockaddr = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do: TIME_WAIT is no conflict
        try:
            probe.bind(sockaddr)
        except OSError as exc:
            raise bind_error(what, host, port, flag, exc) from None


def bind_error(what: str, host: str, port: int, flag: str, exc: OSError) -> ConfigError:
    """The one-line error for a port that could not be bound: which one, why, and the flag that moves it."""
    if exc.errno == errno.EADDRINUSE:
        why = "is already in use (another geofed ps, or another server)"
    else:
        why = f"cannot be bound ({exc.strerror or exc})"
    off = "" if flag == "--port" else " (0 turns it off)"
    return ConfigError(f"{what} {host}:{port} {why}: pick another with {flag}{off}")


def server_credentials(cfg: ServerConfig) -> grpc.ServerCredentials | None:
    """TLS (mTLS when a client CA is set) or None for --insecure."""
    if cfg.insecure:
        return None
    if not (cfg.tls_cert and cfg.tls_key):
        raise ConfigError("TLS needs --tls-cert and --tls-key (or pass --insecure for local use only)")
    try:
        cert, key = Path(cfg.tls_cert).read_bytes(), Path(cfg.tls_key).read_bytes()
        ca = Path(cfg.client_ca).read_bytes() if cfg.client_ca else None
    except OSError as exc:
        raise ConfigError(f"cannot read TLS file: {exc}") from exc
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)
