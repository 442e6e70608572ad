"""`geofed ps`, `geofed token create` and `geofed status`."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path


def add_commands(sub: argparse._SubParsersAction) -> None:
    from geofed.cli_flags import add_model_flags
    from geofed.config import ServerConfig

    ps = sub.add_parser("ps", help="run the parameter server", description="Run the geofed parameter server.")
    ps.add_argument("--federation", help="federation settings file (YAML/JSON of geofed.config.FederationConfig)")
    ps.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a federation setting, e.g. "
                    "aggregation.mode=sync (repeatable)")
    ps.add_argument("--ready-file", help="write the bound port here once listening (for scripts and tests)")
    ps.add_argument("--log-level", default="INFO")
    add_model_flags(ps, ServerConfig)
    ps.set_defaults(func=run_ps)

    token = sub.add_parser("token", help="manage one-time tokens")
    token_sub = token.add_subparsers(dest="token_command", required=True)
    create = token_sub.add_parser("create", help="mint a one-time join token through the admin surface")
    create.add_argument("--client-id", required=True)
    create.add_argument("--site", default="")
    create.add_argument("--ttl", type=float, default=0.0, help="seconds; 0 = server default")
    create.add_argument("--master", action="store_true", help="the client bootstraps the model")
    _add_admin_flags(create)
    create.set_defaults(func=run_token_create)

    status = sub.add_parser("status", help="show the PS status: summary, clients and per-site contributions")
    _add_admin_flags(status)
    status.add_argument("--json", action="store_true", help="print JSON instead of the table")
    status.add_argument("--clients", action="store_true", help="with --json: also list clients")
    status.add_argument("--watch", type=float, nargs="?", const=2.0, metavar="SECONDS",
                        help="refresh every SECONDS (default 2) until interrupted")
    status.set_defaults(func=run_status)


def _add_admin_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ps", default="127.0.0.1:7443", help="PS address host:port")
    p.add_argument("--admin-token-file", required=True, help="file holding the admin (or site) credential")
    p.add_argument("--ca", help="PEM CA of the PS certificate")
    p.add_argument("--insecure", action="store_true", help="plaintext (local use only)")


def _quiet_grpc_core() -> None:
    """Before gRPC is imported: its C core logs every failed TLS handshake (INFO) while a call retries; these
    commands print their own one-line error (a TLS/plaintext mismatch named by the admin client)."""
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


def _admin_client(args):
    from geofed.protocol.admin_client import AdminClient

    credential = Path(args.admin_token_file).read_text().strip()
    ca = Path(args.ca).read_bytes() if args.ca else None
    return AdminClient(args.ps, credential, insecure=args.insecure, ca_cert=ca)


def run_ps(args) -> int:
    from geofed.checkpoint_shape import fill_checkpoint_shape
    from geofed.cli_flags import SettingsError, apply_overrides, load_settings_file, model_from_flags, validate_settings
    from geofed.config import FederationConfig, ServerConfig
    from geofed.logs import setup_logging

    from .grpc_server import ConfigError, serve

    setup_logging(args.log_level)
    try:
        data = fill_checkpoint_shape(apply_overrides(load_settings_file(args.federation), args.set))
        fed = validate_settings(FederationConfig, data)
        cfg = model_from_flags(ServerConfig, args)
        return serve(fed, cfg, ready_file=args.ready_file)
    except (SettingsError, ConfigError) as exc:
        print(f"geofed ps: {exc}", file=sys.stderr)
        return 2


def run_token_create(args) -> int:
    _quiet_grpc_core()
    from geofed.protocol.admin_client import AdminError

    try:
        with _admin_client(args) as admin:
            token, expires = admin.create_token(args.client_id, args.site, args.ttl, args.master)
    except (AdminError, OSError) as exc:
        print(f"geofed token create: {exc}", file=sys.stderr)
        return 1
    print(token)
    return 0


def run_status(args) -> int:
    _quiet_grpc_core()
    from geofed.protocol.admin_client import AdminError

    from .status_table import format_status

    if args.watch is not None and not args.watch > 0:
        print("geofed status: --watch takes a positive number of seconds", file=sys.stderr)
        return 2
    # Ctrl-C ends --watch between refreshes: the handler only sets a flag. A KeyboardInterrupt can land anywhere
    # in gRPC's Python code (mid-call, inside a lock of its channel), and under CI load the process twice did not
    # exit within 60 s of Ctrl-C; with the flag, the call in flight finishes (bounded by the admin client's
    # timeout) and the channel closes normally.
    interrupted = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.set()) if args.watch is not None else None
    try:
        with _admin_client(args) as admin:
            while not interrupted.is_set():
                status = admin.status()
                clients = admin.list_clients() if args.clients or not args.json else None
                if interrupted.is_set():
                    break
                if args.watch is not None and sys.stdout.isatty():
                    print("\033[H\033[2J", end="")  # clear the terminal between refreshes
                if args.json:
                    json.dump({"status": status, **({"clients": clients} if args.clients else {})}, sys.stdout,
                              indent=2)
                    print()
                else:
                    print(format_status(status, clients or []))
                if args.watch is None:
                    return 0
                sys.stdout.flush()
                interrupted.wait(args.watch)
        return 0
    except (AdminError, OSError) as exc:
        print(f"geofed status: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # a one-shot status (no --watch) keeps Python's default Ctrl-C
        return 0
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
