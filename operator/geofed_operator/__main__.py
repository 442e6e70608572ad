"""`python -m geofed_operator operator ...` / `... site enroll ...`: the operator image's entry point.

Same commands as `geofed operator` and `geofed site`, without loading the PS and client subsystems
(the operator image ships neither torch nor transformers).
"""

from __future__ import annotations

import argparse
import sys

from geofed_operator.cli import add_commands


def main(argv: list[str] | None = None) -> int:
    """Parse and run one command; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m geofed_operator", description="geofed Kubernetes operator")
    add_commands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
