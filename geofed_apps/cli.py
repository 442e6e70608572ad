"""The one `geofed` command line; each subsystem plugs its subcommands in through `add_commands`."""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version

from client_agent import cli as client_cli
from geofed.cli_flags import command_parser, run_command
from geofed.logs import enable_stack_dumps
from geofed_apps.wan import cli as wan_cli
from geofed_operator import cli as operator_cli
from ps_server import cli as ps_cli

from . import export, local, tokenizer_id

# Each module defines `add_commands(subparsers)` and keeps heavy imports (torch, kopf) inside its
# handlers, so `geofed --help` stays fast. The order is the order of `geofed --help`.
SUBSYSTEMS = (ps_cli, client_cli, local, export, tokenizer_id, operator_cli, wan_cli)


def version_text() -> str:
    """The installed package's version and the wire protocol's package, e.g. `geofed 0.1.0 (protocol geofed.v1)`."""
    from geofed.protocol import geofed_pb2

    try:
        installed = version("geofed")
    except PackageNotFoundError:  # run from a source tree that was never installed
        installed = "unknown (not installed)"
    return f"geofed {installed} (protocol {geofed_pb2.DESCRIPTOR.package})"


class _VersionAction(argparse.Action):
    """`--version`: print `version_text()` and exit; computed only when asked for, so `--help` stays fast."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print the geofed version and the wire protocol's, then exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(version_text())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """Assemble the parser from every subsystem."""
    parser = command_parser("geofed", "Federated LLM training anywhere.", *SUBSYSTEMS)
    parser.add_argument("--version", action=_VersionAction)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of `geofed`; returns the process exit code."""
    enable_stack_dumps()
    return run_command(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
