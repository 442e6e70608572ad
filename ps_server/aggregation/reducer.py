"""Between a round's close and its apply: combine round sums across parameter servers.

One PS needs nothing (`LocalReducer`); a multi-PS group (paper §III-B1c) plugs a ring all-reduce in here,
so that every PS applies the same combined update to the same version.
"""

from __future__ import annotations

from typing import Protocol

from .strategy import RoundSum


class Reducer(Protocol):
    def reduce(self, round_sum: RoundSum, version: int) -> RoundSum:
        """The round sum every PS of the group applies on top of `version`."""
        ...


class LocalReducer:
    """A single PS: its own round sum is the federation's."""

    def reduce(self, round_sum: RoundSum, version: int) -> RoundSum:
        return round_sum
