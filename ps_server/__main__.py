"""`python -m ps_server ps ...` / `... token create ...` / `... status ...`: the PS's own entry point.

Same commands as `geofed ps`, `geofed token` and `geofed status`, without loading the other subsystems.
"""

import sys

from geofed.cli_flags import command_parser, run_command
from ps_server import cli

if __name__ == "__main__":
    sys.exit(run_command(command_parser("python -m ps_server", "geofed parameter server", cli)))
