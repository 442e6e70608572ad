"""Between a round's close and its apply: combine round sums across parameter servers.

One PS needs nothing (`LocalReducer`); a multi-PS group (paper §III-B1c) plugs a ring all-reduce in here,
so that every PS applies the same combined update to the same version.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from .strategy import RoundSum


class ReduceFailed(Exception):
    """The PSs could not combine this round; nothing was applied anywhere, the round is dropped here.

    `reason` is the short label the rejection metric counts by; the message says why.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


class Reducer(Protocol):
    """Combines each PS's round sum with the other PSs' (the identity for one PS).

    `reduce` may block (it waits for the other PSs) and may raise `ReduceFailed`. `may_close` lets the
    reducer hold a round open (a cadence, or a PS still rejoining its group); `wants_close` lets it ask for
    one to close even when this PS has nothing buffered (another PS waits for this one's round sum).
    """

    def reduce(self, round_sum: RoundSum, version: int) -> RoundSum:
        """The round sum every PS of the group applies on top of `version`."""
        ...

    def may_close(self, version: int) -> bool:
        """False: keep the round open for now, whatever its own close criteria say."""
        ...

    def wants_close(self, version: int) -> bool:
        """True: close the round on `version` now, even an empty one."""
        ...


class LocalReducer:
    """A single PS: its own round sum is the federation's."""

    def reduce(self, round_sum: RoundSum, version: int) -> RoundSum:
        return round_sum

    def may_close(self, version: int) -> bool:
        return True

    def wants_close(self, version: int) -> bool:
        return False


def empty_round(numel: int) -> RoundSum:
    """A round this PS closes with nothing buffered, so that another PS's round can be combined."""
    return RoundSum(np.zeros(numel, dtype=np.float32), 0, frozenset(), 0.0)
