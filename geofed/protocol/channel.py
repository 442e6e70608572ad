"""Client-side gRPC channels: TLS by default, mTLS optional, plaintext only when asked for."""

from __future__ import annotations

import grpc

# Keepalives keep NAT/firewall state alive on long-lived outbound streams (paper §III-B2).
CHANNEL_OPTIONS = (
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.max_receive_message_length", 8 << 20),
    ("grpc.enable_retries", 0),
    # gRPC's default reconnect backoff grows to 120 s; after a PS outage clients should be back in seconds.
    ("grpc.initial_reconnect_backoff_ms", 500),
    ("grpc.max_reconnect_backoff_ms", 2000),
)


def open_channel(
    address: str,
    *,
    insecure: bool = False,
    ca_cert: bytes | None = None,
    client_cert: bytes | None = None,
    client_key: bytes | None = None,
    server_name: str | None = None,
) -> grpc.Channel:
    """A channel to the PS; TLS unless `insecure` (system roots when no CA is given)."""
    options = list(CHANNEL_OPTIONS)
    if server_name:
        options.append(("grpc.ssl_target_name_override", server_name))
    if insecure:
        return grpc.insecure_channel(address, options=options)
    creds = grpc.ssl_channel_credentials(
        root_certificates=ca_cert, private_key=client_key, certificate_chain=client_cert
    )
    return grpc.secure_channel(address, creds, options=options)

