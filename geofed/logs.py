"""Structured logs: one line per event, key=value (logfmt-ish), to stderr."""

from __future__ import annotations

import faulthandler
import io
import logging
import signal
import sys

FORMAT = "ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"
# Line breaks and other control characters, written as escapes: a value a client chose (an upload id, a name)
# cannot end the line and forge another.
_ESCAPES = {c: f"\\x{c:02x}" for c in range(32)} | {0x7F: "\\x7f", 0x85: "\\x85", 0x2028: "\\u2028",
                                                       0x2029: "\\u2029", 10: "\\n", 13: "\\r", 9: "\\t"}


class OneLineFormatter(logging.Formatter):
    """Each event's message on one line, whatever its arguments hold (a traceback still follows it)."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        record.message = record.message.translate(_ESCAPES)
        return super().formatMessage(record)


def setup_logging(level: str = "INFO") -> None:
    """Configure the root logger once for a geofed process."""
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format=FORMAT,
        stream=sys.stderr,
        force=True,
    )
    for handler in logging.getLogger().handlers:
        handler.setFormatter(OneLineFormatter(FORMAT))


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
