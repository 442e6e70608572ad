"""Kubernetes exec probe: a real gRPC health check over the PS's own TLS (exit 0 = serving)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from geofed.protocol.channel import open_channel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ps_server.probe")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=7443)
    parser.add_argument("--ca", help="PEM CA that signed the server certificate")
    parser.add_argument("--server-name", help="TLS name to verify (default: the certificate's)")
    parser.add_argument("--insecure", action="store_true")
    parser.add_argument("--timeout", type=float, default=3.0)
    args = parser.parse_args(argv)
    ca = Path(args.ca).read_bytes() if args.ca else None
    channel = open_channel(f"{args.host}:{args.port}", insecure=args.insecure, ca_cert=ca, server_name=args.server_name)
    try:
        response = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="geofed.v1.ParameterServer"), timeout=args.timeout
        )
    except grpc.RpcError as exc:
        print(f"unhealthy: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    finally:
        channel.close()
    serving = response.status == health_pb2.HealthCheckResponse.SERVING
    print("serving" if serving else f"not serving: {response.status}")
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main())
