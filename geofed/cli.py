"""The one `geofed` command line; each subsystem plugs its subcommands in through `add_commands`."""

from __future__ import annotations

import argparse
import importlib
import sys

# Each module defines `add_commands(subparsers)` and keeps heavy imports (torch, kopf) inside its
# handlers, so `geofed --help` stays fast.
COMMAND_MODULES = (
    "ps_server.cli",
    "client_agent.cli",
    "geofed_operator.cli",
    "geofed.wan.cli",
)


def build_parser() -> argparse.ArgumentParser:
    """Assemble the parser from every subsystem that is installed."""
    parser = argparse.ArgumentParser(prog="geofed", description="Federated LLM training anywhere.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and name.startswith(exc.name):
                continue  # subsystem not written yet / not installed
            raise
        module.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of `geofed`; returns the process exit code."""
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
