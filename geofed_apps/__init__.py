"""The application layer: what a person runs, built from the layers below.

`cli` is the one `geofed` command (each subsystem plugs in its subcommands), `local` runs a whole
federation on one machine, `evaluate` scores published global models, `launch` starts PS and client
processes. Nothing below this layer imports it (the import-linter contract in pyproject.toml).
"""

from geofed.plugins import load_plugins

load_plugins()  # before anything reads the settings: plug-ins add codec, outer-optimizer and paradigm names
