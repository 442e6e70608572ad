"""`geofed client`: one site's agent, from flags to exit code (also `python -m client_agent`, torchrun's entry)."""

from __future__ import annotations

import argparse
import sys


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register `geofed client` on the top-level CLI (see `geofed_apps.cli`)."""
    client = sub.add_parser("client", help="run one client agent", description="Train locally and sync with a PS.")
    _add_client_flags(client)
    client.set_defaults(func=run_client)


def _add_client_flags(parser: argparse.ArgumentParser) -> None:
    from geofed.cli_flags import add_model_flags
    from geofed.config import ClientConfig

    add_model_flags(parser, ClientConfig)
    parser.add_argument("--log-level", default="INFO")


def main(argv: list[str] | None = None) -> int:
    """`python -m client_agent ARGS` = `geofed client ARGS`."""
    from geofed.logs import enable_stack_dumps

    enable_stack_dumps()
    parser = argparse.ArgumentParser(prog="python -m client_agent", description="Train locally and sync with a PS.")
    _add_client_flags(parser)
    return run_client(parser.parse_args(argv))


def _leave_now(code: int) -> None:
    """Exit without the interpreter's shutdown: after a preemption signal landed mid-call, joining leftover
    threads or finalising gRPC's could wait on state the signal interrupted, and the pod must go at once; the
    last sync's checkpoint is already on disk (each write is atomic), and the logs are flushed here."""
    import logging
    import os

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_client(args: argparse.Namespace) -> int:
    """Run the agent; its expected failures become one readable line and an exit code (see `errors`)."""
    from geofed.cli_flags import SettingsError, model_from_flags
    from geofed.config import ClientConfig
    from geofed.logs import setup_logging

    from .exit_codes import exit_code_for

    setup_logging(args.log_level)
    try:
        cfg = model_from_flags(ClientConfig, args)
    except SettingsError as exc:
        print(f"geofed client: {exc}", file=sys.stderr)
        return 2
    from .agent import ClientAgent
    from .preemption import PREEMPTED_EXIT, Preempted, preempted

    try:
        code = ClientAgent(cfg).run()
        if code == PREEMPTED_EXIT:
            _leave_now(code)
        return code
    except Preempted:  # taken before the agent's run reached its own handling
        _leave_now(PREEMPTED_EXIT)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if preempted():  # raised on the way out by what the signal interrupted
            _leave_now(PREEMPTED_EXIT)
        code = exit_code_for(exc)
        if code is None:
            raise
        print(f"geofed client: {exc}", file=sys.stderr)
        return code
