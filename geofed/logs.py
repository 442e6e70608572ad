"""Structured logs: one line per event, key=value (logfmt-ish), to stderr."""

from __future__ import annotations

import faulthandler
import io
import logging
import signal
import sys


def setup_logging(level: str = "INFO") -> None:
    """Configure the root logger once for a geofed process."""
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
        stream=sys.stderr,
        force=True,
    )


def enable_stack_dumps() -> None:
    """`kill -USR1 PID` prints every thread's Python stack to stderr (the process goes on).

    For a process that does not exit or make progress: what each thread is blocked in, without a debugger in
    the pod. Tests send it to a child that missed its deadline before killing it.
    """
    if not hasattr(signal, "SIGUSR1"):  # POSIX only
        return
    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
    except (io.UnsupportedOperation, AttributeError, ValueError):
        pass  # stderr is no file (an in-process caller captured it): nothing to write the stacks to
