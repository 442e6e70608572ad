"""Build, bind and run the PS: one gRPC port (TLS by default), a metrics port, signal handling."""

from __future__ import annotations

import logging
import os
import secrets
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2

from geofed.config import FederationConfig, ServerConfig
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.stop_signals import wait_for_stop_signal

from .core import ParameterServerCore
from .grpc_api import AdminServicer, ParameterServerServicer
from .listen import HANDLER_THREADS, SERVER_OPTIONS, ConfigError, bind_error, listen, server_credentials
from .memory import tune_allocator
from .peers import PeerServicer, PeerTransport, load_peer_secret
from .status_page import start_status_page

log = logging.getLogger("geofed.ps")

def load_admin_credential(path: str | None) -> str:
    """Read the admin credential, creating it (mode 0600) when the file does not exist."""
    if path is None:
        raise ConfigError("--admin-token-file is required")
    p = Path(path)
    if p.exists():
        credential = p.read_text().strip()
        if len(credential) < 16:
            raise ConfigError(f"admin credential in {p} is shorter than 16 characters")
        return credential
    p.parent.mkdir(parents=True, exist_ok=True)
    credential = "admin-" + secrets.token_urlsafe(32)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(credential + "\n")
    log.info("event=admin_credential_created path=%s", p)
    return credential


class RunningServer:
    """A started PS; `port` is the bound port (useful with port 0 in tests)."""

    def __init__(self, core: ParameterServerCore, server: grpc.Server, port: int, health: health.HealthServicer):
        self.core, self.server, self.port, self.health = core, server, port, health
        self.status_page = None  # the built-in status page, when status_port is set

    def stop(self, grace: float = 5.0) -> None:
        """Graceful stop: refuse new RPCs, checkpoint, then close streams."""
        self.health.enter_graceful_shutdown()
        if self.status_page is not None:
            self.status_page.stop()
        self.core.stop()
        self.server.stop(grace).wait()


def start_server(fed: FederationConfig, cfg: ServerConfig, *, serve_metrics: bool = True) -> RunningServer:
    """Resume from the newest checkpoint, then listen on the one fixed port."""
    credentials = server_credentials(cfg)
    tune_allocator()  # before any worker thread exists
    peers, secret = None, ""
    front = cfg.shard_role == "front"
    if fed.groups or cfg.peer_token_file or front:  # ring peers, shards, or services of the federation
        try:
            secret = load_peer_secret(cfg.peer_token_file)
            peers = PeerTransport(fed, cfg, secret) if fed.groups else None
        except (OSError, ValueError) as exc:
            raise ConfigError(str(exc)) from exc
    try:
        engine = None
        if front:  # a sharded PS: this process admits and routes, the shards hold the model
            from .shards.engine import ShardedEngine
            from .shards.shard_grpc import GrpcLink

            engine = ShardedEngine(fed, GrpcLink(fed, cfg, secret), cfg.checkpoint_dir)
        core = ParameterServerCore(fed, cfg, load_admin_credential(cfg.admin_token_file), peers=peers, engine=engine)
    except ValueError as exc:  # e.g. --group names no group of the federation
        raise ConfigError(str(exc)) from exc
    core.resume()
    # Long-lived calls are capped below the pool (ServerConfig.max_streams): short calls always find a thread.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=HANDLER_THREADS), options=SERVER_OPTIONS,
                         maximum_concurrent_rpcs=2 * HANDLER_THREADS)
    if front:
        from .shards.front_grpc import FrontServicer

        pb_grpc.add_ParameterServerServicer_to_server(FrontServicer(core), server)
    else:
        pb_grpc.add_ParameterServerServicer_to_server(ParameterServerServicer(core), server)
    pb_grpc.add_AdminServicer_to_server(AdminServicer(core), server)
    if peers is not None:
        peers.bind(core.model)
    if secret:
        pb_grpc.add_PeerServicer_to_server(PeerServicer(core, secret), server)
    port, health_servicer = listen(server, cfg, credentials)
    try:
        page = start_status_page(core, cfg)
    except OSError as exc:
        raise bind_error("the status page", cfg.status_host, cfg.status_port, "--status-port", exc) from None
    if serve_metrics and cfg.metrics_port:  # before the server starts: a taken port stops nothing that runs
        try:
            core.metrics.serve(cfg.metrics_port, cfg.metrics_host)
        except OSError as exc:
            raise bind_error("the metrics port", cfg.metrics_host, cfg.metrics_port, "--metrics-port", exc) from None
    server.start()
    core.start_timer()
    health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_servicer.set("geofed.v1.ParameterServer", health_pb2.HealthCheckResponse.SERVING)
    log.info(
        "event=listening port=%d tls=%s mtls=%s metrics=%s:%d version=%d", port, credentials is not None,
        bool(cfg.client_ca), cfg.metrics_host, cfg.metrics_port, core.model.version,
    )
    running = RunningServer(core, server, port, health_servicer)
    running.status_page = page
    return running


def serve(fed: FederationConfig, cfg: ServerConfig, ready_file: str | None = None) -> int:
    """Run until SIGTERM/SIGINT; checkpoint on the way out (paper §III-B4)."""
    if (fed.ps_shards > 1) != (cfg.shard_role != "single"):
        raise ConfigError(f"the federation has ps_shards={fed.ps_shards}: run its PS with --shard-role front and "
                          "--shard-role shard processes" if fed.ps_shards > 1 else
                          "--shard-role front/shard needs a federation with ps_shards > 1")
    if cfg.shard_role != "single" and not cfg.peer_token_file:
        raise ConfigError("a sharded PS needs --peer-token-file (the secret its front and shards share)")
    if cfg.shard_role == "shard":  # one slice of a sharded PS: the internal PsShard service only
        from .shards.shard_grpc import serve_shard

        if cfg.shard_index >= fed.ps_shards:
            raise ConfigError(f"--shard-index {cfg.shard_index} is not below ps_shards={fed.ps_shards}")
        try:
            secret = load_peer_secret(cfg.peer_token_file)
        except (OSError, ValueError) as exc:
            raise ConfigError(str(exc)) from exc
        return serve_shard(fed, cfg, secret, server_credentials(cfg), ready_file)
    running = start_server(fed, cfg)
    if ready_file:
        Path(ready_file).write_text(str(running.port))
    log.info("event=signal signal=%s", wait_for_stop_signal().name)
    running.stop()
    log.info("event=stopped version=%d", running.core.model.version)
    return 0
