"""The one `geofed` command line; each subsystem plugs its subcommands in through `add_commands`."""

from __future__ import annotations

import argparse
import sys

from client_agent import cli as client_cli
from geofed.cli_flags import command_parser, run_command
from geofed.logs import enable_stack_dumps
from geofed.wan import cli as wan_cli
from geofed_operator import cli as operator_cli
from ps_server import cli as ps_cli

from . import export, local

# Each module defines `add_commands(subparsers)` and keeps heavy imports (torch, kopf) inside its
# handlers, so `geofed --help` stays fast. The order is the order of `geofed --help`.
SUBSYSTEMS = (ps_cli, client_cli, local, export, operator_cli, wan_cli)


def build_parser() -> argparse.ArgumentParser:
    """Assemble the parser from every subsystem."""
    return command_parser("geofed", "Federated LLM training anywhere.", *SUBSYSTEMS)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `geofed`; returns the process exit code."""
    enable_stack_dumps()
    return run_command(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
