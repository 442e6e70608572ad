"""Fixtures of the reliability suite: a reaper that kills every process group and stops every proxy."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from rel_procs import Reaper  # noqa: E402


@pytest.fixture
def reaper() -> Iterator[Reaper]:
    """Cleans up whatever a test started, pass or fail."""
    with Reaper() as r:
        yield r
