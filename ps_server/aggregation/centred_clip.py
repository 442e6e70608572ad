"""Centred clipping: each delta's deviation from the recent consensus is clipped before it enters a round.

Karimireddy, He and Jaggi, "Learning from History for Byzantine Robust Optimization" (ICML 2021), clip each
worker's update around the previous aggregate instead of around zero: v ← v + mean_i clip_τ(x_i − v), where
clip_τ(z) = z · min(1, τ / ‖z‖). Here, one iteration, one delta at a time as it is folded:

- the **centre** c is an exponential moving average (β = `BETA`, momentum's usual 0.9) of the rounds' combined
  deltas, what momentum carries forward in delta units; it starts at zero (clipping around zero, as the norm
  bound does) and is updated with every round's combined delta before the outer step;
- a delta δ enters the round as c + clip_τ(δ − c) = s·δ + (1 − s)·c with s = min(1, τ / ‖δ − c‖), so only
  the part of a delta that departs from the consensus is bounded, the part along it passes;
- the radius τ is `multiple` × the median of the latest `HISTORY` deviations ‖δ − c‖ (recorded after clipping,
  so a clipped delta cannot ratchet it up), applied once `MIN_HISTORY` deltas are known.

‖δ − c‖ needs ⟨δ, c⟩: one extra pass over the decoded delta (temporaries O(slice)); the centre costs one
fp32 vector of the exchanged size. Plain numpy, no gRPC.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Iterable

import numpy as np

from .outer_bound import l2

BETA = 0.9
HISTORY = 16
MIN_HISTORY = 3
_SLICE = 1 << 22


class CentredClip:
    """The centre, the recent deviations and the clip factor of one strategy; `multiple` = 0 turns it off."""

    def __init__(self, multiple: float, numel: int) -> None:
        self.multiple = multiple
        self.centre = np.zeros(numel if multiple > 0 else 0, dtype=np.float32)
        self.deviations: deque[float] = deque(maxlen=HISTORY)

    @property
    def enabled(self) -> bool:
        return self.multiple > 0

    def radius(self) -> float | None:
        """τ, or None while fewer than MIN_HISTORY deviations are known."""
        if len(self.deviations) < MIN_HISTORY:
            return None
        return self.multiple * statistics.median(self.deviations)

    def deviation(self, pieces: Iterable[tuple[int, np.ndarray]], norm: float) -> float:
        """‖δ − c‖ from δ's decoded (offset, values) pieces and its norm ‖δ‖."""
        dot = sum(
            float(np.dot(v.astype(np.float64), self.centre[off : off + v.size].astype(np.float64)))
            for off, v in pieces
        )
        return math.sqrt(max(0.0, norm * norm - 2.0 * dot + l2(self.centre) ** 2))

    def factor(self, pieces: Iterable[tuple[int, np.ndarray]], norm: float) -> tuple[float, float, float | None]:
        """(s, ‖δ − c‖, τ): δ enters as s·δ + (1 − s)·c; records the clipped deviation."""
        dev = self.deviation(pieces, norm)
        tau = self.radius()
        s = 1.0 if tau is None or dev <= tau or dev == 0 else tau / dev
        if math.isfinite(dev) and dev > 0:
            self.deviations.append(dev * s)
        return s, dev, tau

    def add_centre(self, add, weight: float) -> None:
        """Add weight · c to a round through its `add(offset, values, scale)`, slice by slice."""
        for start in range(0, self.centre.size, _SLICE):
            add(start, self.centre[start : start + _SLICE], weight)

    def update_(self, combined: np.ndarray) -> None:
        """c ← β·c + (1 − β)·combined, with a round's combined delta (before the outer step)."""
        for start in range(0, self.centre.size, _SLICE):
            c = self.centre[start : start + _SLICE]
            c *= np.float32(BETA)
            c += np.float32(1.0 - BETA) * combined[start : start + _SLICE]

    def state_dict(self) -> dict:
        return {"centre": self.centre, "deviations": list(self.deviations)} if self.enabled else {}

    def load_state_dict(self, state: dict) -> None:
        centre = state.get("centre")
        if self.enabled and centre is not None and np.asarray(centre).size == self.centre.size:
            self.centre = np.asarray(centre, dtype=np.float32).copy()
            self.deviations = deque((float(d) for d in state.get("deviations", [])), maxlen=HISTORY)
