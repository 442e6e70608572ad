"""The README's "Using it" commands: each parses with the real `geofed` parser, its settings file loads, and
the manual flow mints the first client's token with --master (else no client ever builds the initial model)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from geofed.cli_flags import load_settings_file, validate_settings
from geofed.config import FederationConfig
from geofed_apps.cli import build_parser

REPO = Path(__file__).resolve().parents[1]


def _using_it_commands() -> list[list[str]]:
    """The `geofed` commands of the README's "Using it" block: continuations joined, comments and output
    redirections dropped."""
    section = (REPO / "README.md").read_text().split("## Using it", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1).replace("\\\n", " ")
    commands = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["geofed"]:
            commands.append(words[: words.index(">")] if ">" in words else words)
    return commands


def test_the_using_it_commands_parse_and_their_settings_file_loads():
    commands = _using_it_commands()
    assert any(c[1] == "ps" for c in commands) and any(c[1] == "client" for c in commands)
    for command in commands:
        args = build_parser().parse_args(command[1:])  # SystemExit on an unknown flag or a bad value
        if command[1] == "ps":
            validate_settings(FederationConfig, load_settings_file(str(REPO / args.federation)))


def test_the_manual_flow_mints_the_first_client_a_master_token():
    commands = _using_it_commands()
    parser = build_parser()
    first_client = parser.parse_args(next(c for c in commands if c[1] == "client")[1:]).client_id
    tokens = [parser.parse_args(c[1:]) for c in commands if c[1:3] == ["token", "create"]]
    assert [t.master for t in tokens if t.client_id == first_client] == [True]
