"""The federation's progress for the run-time inner learning-rate schedule (training.lr_progress run_time).

Progress is the wall-clock seconds since the PS installed the initial model, over training.run_duration_s,
clamped to [0, 1]. The PS sends that moment with every Join (JoinResponse.run_started_at), so a client that
joins or rejoins mid-run is at the federation's progress from its first step. A client that joined before
the initial model existed (the master, or one that waited for it) starts the clock when its first global
model arrives, within one transfer of the PS's moment, and takes the PS's as soon as a Join gives it.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class RunClock:
    """Progress of the run in [0, 1]; 0 until the start is known."""

    def __init__(
        self, duration_s: float, ps_started_at: Callable[[], float], clock: Callable[[], float] = time.time
    ) -> None:
        if duration_s <= 0:
            raise ValueError(f"the run's duration must be > 0 seconds, got {duration_s}")
        self.duration_s = duration_s
        self.ps_started_at, self.clock = ps_started_at, clock
        self.local_start = 0.0  # when this client saw its first global model (before the PS's start is known)

    def first_model(self) -> None:
        """A global model arrived: the run has started, at the latest now."""
        if not self.local_start:
            self.local_start = self.clock()

    @property
    def started_at(self) -> float:
        """The PS's start when it has sent one, else this client's estimate; 0 = not started."""
        return self.ps_started_at() or self.local_start

    def __call__(self) -> float:
        start = self.started_at
        if not start:
            return 0.0
        return min(1.0, max(0.0, (self.clock() - start) / self.duration_s))
