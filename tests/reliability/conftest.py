"""Fixtures of the reliability suite: a reaper that kills every process group and stops every proxy."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from geofed_testing.procs import Reaper


@pytest.fixture
def reaper() -> Iterator[Reaper]:
    """Cleans up whatever a test started, pass or fail."""
    with Reaper() as r:
        yield r
