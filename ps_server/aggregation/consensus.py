"""A consensus bound: a site may not push the model far against where the other sites are taking it.

The norm bound and the displacement budget limit how far a site's deltas reach, not which way they point: a
site that sends its honest delta's negation (a sign flip), at the norm bound, undoes what the other sites
train, and no length rule sees it. So each delta's component along the other sites' recent directions is
bounded from below. For each other site t, u_t is the unit direction of what t's recent accepted deltas add
up to (its displacement window, `displacement.DisplacementBudget`); the delta's projection is the upper median
over the other sites of δ·u_t (the middle one of an odd count, the larger middle one of an even count), and
when that is below

    −allowance × reference

(reference: the norm the site's norm bound is scaled from, the median of the other sites' norms) the delta is
scaled down until it is on that line. Honest training deltas lie along the other sites' directions (positive
projections, about a third of their length in the default federation, docs/reliability.md), so the bound
leaves them alone and only bites on a delta whose projection is clearly negative, whatever else it adds beside
(noise padding changes its length, not its projection).

The upper median over sites, with at least `MIN_SITES` other sites with a direction, means one hostile site
cannot aim the bound at an honest one: however its own direction points, an honest delta's upper median is at
least its projection on one honest site's direction (with three sites, the larger of its projections on the
other honest site and on the attacker), while a delta against the federation is negative on every honest
site's direction. With one other site there is no majority to tell which way the federation goes, and the
bound stays off.

A bound on each delta alone still lets a site land one delta after another at the floor: a sign flip at
−allowance × reference each round adds up over a window to WINDOW times that against the federation, and at
short rounds (ten local steps) most of a flipped delta lies where the other sites' directions do not see it.
So the site's own window counts too: the upper median over the other sites of what the site's window (but its
oldest delta, when full) plus c·δ projects on each one's direction is held at −`WINDOW_ALLOWANCE` × reference
(c found by bisection; a delta that raises that median passes whole). Honest windows project positively on
the others' directions (docs/reliability.md), so this leaves them alone; a site pushing against the
federation lands, per window, what one delta at the floor would.

One direction per site, so client ids and pushing often buy no votes. The projections come
from the deltas' count sketches (`displacement.BUCKETS` buckets: about 2% of the delta's length), so the bound
costs no pass over a delta.

Only where the outer optimizer says honest deltas agree (`OuterSpec.deltas_agree`): FedAvg (the default)
and Adam, whose momentum is normalised per coordinate. Under Nesterov with momentum the model overshoots along
what the deltas so far added up to, and honest deltas then point back against it (docs/reliability.md), so
there the bound is off. Plain numpy, no gRPC.
"""

from __future__ import annotations

import math

import numpy as np

from .displacement import DisplacementBudget

MIN_SITES = 2  # other sites with a direction before the bound applies
ALLOWANCE = 0.1  # the most negative upper-median projection a delta may have, in units of the reference norm
WINDOW_ALLOWANCE = 0.25  # the same for the site's window with the delta, in units of the reference norm
_BISECTIONS = 30


class ConsensusBound:
    """Bounds each delta's upper-median projection on the other sites' directions (from `budget`'s windows)."""

    def __init__(self, budget: DisplacementBudget, allowance: float = ALLOWANCE, *, enabled: bool = True) -> None:
        self.budget, self.allowance, self._on = budget, allowance, enabled

    @property
    def enabled(self) -> bool:
        return self._on and self.budget.enabled

    def _directions(self, site: str) -> np.ndarray | None:
        """The other sites' directions, one per row; None with fewer than MIN_SITES."""
        directions = [u for s, u in self.budget.directions().items() if s != site]
        return np.stack(directions) if len(directions) >= MIN_SITES else None

    def projection(self, site: str, sketch: np.ndarray) -> float | None:
        """The upper median over the other sites of the delta's projection on each one's recent direction;
        None with fewer than MIN_SITES other sites with a direction."""
        directions = self._directions(site)
        return None if directions is None else _upper_median(directions @ sketch)

    def scale(self, site: str, sketch: np.ndarray, reference: float) -> float:
        """Factor (≤ 1) that brings the delta's upper-median projection up to −allowance × reference, and that
        of the site's window with it up to −WINDOW_ALLOWANCE × reference."""
        if not self.enabled or not math.isfinite(reference) or reference <= 0:
            return 1.0
        directions = self._directions(site)
        if directions is None:
            return 1.0
        step = directions @ sketch
        projection, floor = _upper_median(step), -self.allowance * reference
        alone = 1.0 if projection >= floor else floor / projection
        base = directions @ self.budget.staying_sum(site)
        return min(alone, _window_scale(base, step, -WINDOW_ALLOWANCE * reference))


def _upper_median(values: np.ndarray) -> float:
    """The middle value of an odd count, the larger middle one of an even count."""
    return float(np.sort(values)[len(values) // 2])


def _window_scale(base: np.ndarray, step: np.ndarray, floor: float) -> float:
    """Largest c in [0, 1] (by bisection) with the upper median of base + c·step at least `floor` (base: the
    window's projections on the other sites' directions, step: the delta's); 1 when the delta raises it."""
    at_zero, at_one = _upper_median(base), _upper_median(base + step)
    if at_one >= floor or at_one >= at_zero:
        return 1.0
    if at_zero <= floor:
        return 0.0
    low, high = 0.0, 1.0
    for _ in range(_BISECTIONS):
        mid = (low + high) / 2
        low, high = (mid, high) if _upper_median(base + mid * step) >= floor else (low, mid)
    return low
