"""Structured logs: one line per event, key=value (logfmt-ish), to stderr."""

from __future__ import annotations

import logging
import sys


def setup_logging(level: str = "INFO") -> None:
    """Configure the root logger once for a geofed process."""
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
        stream=sys.stderr,
        force=True,
    )
