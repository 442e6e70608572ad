"""`geofed client` (one site's agent) and `geofed local` (a whole federation on this machine)."""

from __future__ import annotations

import argparse
import sys


def add_commands(sub: argparse._SubParsersAction) -> None:
    from geofed.cli_flags import add_model_flags
    from geofed.config import ClientConfig

    client = sub.add_parser("client", help="run one client agent", description="Train locally and sync with a PS.")
    add_model_flags(client, ClientConfig)
    client.add_argument("--log-level", default="INFO")
    client.set_defaults(func=run_client)

    local = sub.add_parser("local", help="run a whole federation on this machine (the embedded default)",
                           description="Start a PS and N clients on 127.0.0.1 and train a small GPT-2-style model "
                                       "on the Python standard library's sources, split by module across clients.")
    local.add_argument("--clients", type=int, default=3, help="number of client processes (default 3)")
    local.add_argument("--data", help="train on this directory of .txt/.jsonl files instead (split across clients)")
    local.add_argument("--duration", type=float, default=100.0, help="seconds of training (default 100)")
    local.add_argument("--run-dir", default="runs", help="parent folder of the run directory (default ./runs)")
    local.add_argument("--slow-client", type=float, default=1.0, metavar="FACTOR",
                       help="slow the last client down by FACTOR to show heterogeneity (default 1 = off)")
    local.add_argument("--federation", help="federation settings file overriding the local defaults")
    local.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a federation setting")
    local.add_argument("--quiet", action="store_true", help="only the summary lines")
    local.set_defaults(func=run_local)


def run_client(args) -> int:
    from geofed.cli_flags import SettingsError, model_from_flags
    from geofed.config import ClientConfig
    from geofed.logs import setup_logging

    setup_logging(args.log_level)
    try:
        cfg = model_from_flags(ClientConfig, args)
    except SettingsError as exc:
        print(f"geofed client: {exc}", file=sys.stderr)
        return 2
    from .errors import run_with_readable_errors

    return run_with_readable_errors("geofed client", cfg)


def run_local(args) -> int:
    from .local import LocalOptions, run_local_federation

    if args.clients < 1 or args.clients > 16:
        print("geofed local: --clients must be between 1 and 16", file=sys.stderr)
        return 2
    opts = LocalOptions(clients=args.clients, data=args.data, duration_s=args.duration, run_dir=args.run_dir,
                        slow_client=args.slow_client, federation_file=args.federation, overrides=args.set or [],
                        quiet=args.quiet)
    return run_local_federation(opts)
