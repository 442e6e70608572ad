"""What an outer optimizer may take in and give out: it cannot amplify a bounded attack.

The guard bounds each site's delta, but an outer optimizer with state (Nesterov's momentum, Adam's moments)
sums a round's update into later rounds: one bounded attack keeps moving the model for ~1 / (1 − μ) rounds, and
deltas of one site that line up build momentum along their direction. Two bounds close that, each against
the median of the latest `HISTORY` rounds (once `MIN_HISTORY` rounds are known):

- **the pseudo-gradient**, the round's combined update, is scaled to at most `multiple` × the median norm of
  the recent ones before any optimizer state sees it;
- **the step**, the increment the outer optimizer makes of it (θ_new − θ), is scaled to at most `multiple` ×
  the median norm of the recent steps, and when it is, the optimizer's state is scaled by the same factor
  (`OuterOptimizer.scale_state_`): what momentum carries into the next round shrinks with the step it made.

Histories record norms after bounding, so a bounded round cannot ratchet them up. Honest rounds change their
norm slowly (real AdamW deltas of the default model: within 0.6-1.7 × of each other round to round,
docs/reliability.md), far inside the multiple. Plain numpy, in place, slice by slice.
"""

from __future__ import annotations

import math
import statistics
from collections import deque

import numpy as np

HISTORY = 16
MIN_HISTORY = 3
_SLICE = 1 << 22


def l2(a: np.ndarray) -> float:
    """‖a‖ in float64, slice by slice (temporaries O(slice))."""
    total = 0.0
    for start in range(0, a.size, _SLICE):
        s = a[start : start + _SLICE].astype(np.float64)
        total += float(np.dot(s, s))
    return math.sqrt(total)


class RunningBound:
    """`multiple` × the median of the latest HISTORY recorded norms; `multiple` = 0 turns it off."""

    def __init__(self, multiple: float) -> None:
        self.multiple = multiple
        self.norms: deque[float] = deque(maxlen=HISTORY)

    def bound_(self, a: np.ndarray) -> float:
        """Scale `a` in place to within the bound, record its norm; return the factor applied (≤ 1)."""
        norm = l2(a)
        factor = 1.0
        if self.multiple > 0 and len(self.norms) >= MIN_HISTORY:
            limit = self.multiple * statistics.median(self.norms)
            if norm > limit:
                factor = limit / norm
                a *= np.float32(factor)
        if math.isfinite(norm) and norm > 0:
            self.norms.append(norm * factor)
        return factor

    def state_dict(self) -> list[float]:
        return list(self.norms)

    def load_state_dict(self, norms: list) -> None:
        self.norms = deque((float(n) for n in norms), maxlen=HISTORY)


class OuterBound:
    """The pseudo-gradient bound and the step bound of one strategy's outer optimizer."""

    def __init__(self, multiple: float) -> None:
        self.gradient = RunningBound(multiple)
        self.step = RunningBound(multiple)

    def state_dict(self) -> dict:
        return {"gradient": self.gradient.state_dict(), "step": self.step.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.gradient.load_state_dict(state.get("gradient", []))
        self.step.load_state_dict(state.get("step", []))
