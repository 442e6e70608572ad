"""A displacement budget per site: what a site's deltas add up to over a window is bounded, not just each one.

The norm bound caps each delta, but a site that pushes deltas just under it in one fixed direction moves the
model linearly in the number of rounds. So each site's latest `WINDOW` accepted deltas are summed and the
sum's length, the site's cumulative contribution along its own mean direction, may not exceed

    budget = multiple × reference × √(WINDOW × (1 + (WINDOW − 1) × c)),   multiple = OVER_NORM_BOUND × the norm bound's

where `reference` is the norm the site's bound is scaled from (the median of the other sites' norms, see
norm_bound) and c is the median over the other sites (those with at least `MIN_COHERENT` deltas in their
windows) of a site's mean cosine between its deltas, weighted by their lengths (clipped to [0, 1]): WINDOW
deltas of the reference's length at that cosine add up to the square root's length. Honest training deltas
are correlated (consecutive real AdamW deltas of the default model at cosine 0.2-0.5, docs/reliability.md),
so the budget is `multiple` times what an honest site's full window moves the model; with no other site to
compare with, or beside independent deltas, c is 0 and the budget is what WINDOW independent deltas add up
to (√WINDOW of them). A delta that would take the sum beyond the budget is scaled down until the sum is on
it, so a drift of maximal deltas in one direction moves the model per window at most `multiple` times as far
as an honest site's window does.

The sums are kept as count sketches of `BUCKETS` values (each coordinate hashed to one bucket with a random
sign): the sketch of a sum is the sum of the sketches, its squared length estimates the sum's within about
√(2 / BUCKETS) (2%), and it is built while the push is validated (`DeltaSketch`, fed by the ingest decode), so
the budget costs O(sites × WINDOW × BUCKETS) memory and no extra pass over a delta. The windows live in memory
only: a checkpoint written with every version stays O(model + sites), and after a restart every site's window
starts empty. Plain numpy, no gRPC.
"""

from __future__ import annotations

import math
import statistics
from collections import OrderedDict, deque

import numpy as np

WINDOW = 16  # accepted deltas per site whose sum is bounded
# The budget's multiple over the norm bound's. A site that pushes often trains each delta on nearly the model of
# its last, so its window lines up more than the other sites' windows do; at the norm bound's own multiple (2)
# the budget zeroed a fast honest site's deltas on hetero-wan (docs/reliability.md).
OVER_NORM_BOUND = 1.5
MIN_COHERENT = 4  # deltas a site's window needs before its mean cosine counts for the other sites' budgets
BUCKETS = 4096  # count-sketch width (a power of two)
_MIX = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: position × 2⁶⁴/φ, top bits pick the bucket
_BUCKET_SHIFT = np.uint64(64 - int(math.log2(BUCKETS)))
_SIGN_SHIFT = np.uint64(_BUCKET_SHIFT - np.uint64(1))


def _hash(positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mixed = positions.astype(np.uint64) * _MIX
    buckets = (mixed >> _BUCKET_SHIFT).astype(np.intp)
    signs = ((mixed >> _SIGN_SHIFT) & np.uint64(1)).astype(np.float64) * 2.0 - 1.0
    return buckets, signs


class DeltaSketch:
    """The count sketch of one delta, fed piece by piece (dense at an offset, or sparse at positions)."""

    def __init__(self) -> None:
        self.values = np.zeros(BUCKETS, dtype=np.float64)

    def add(self, values: np.ndarray, offset: int = 0, positions: np.ndarray | None = None) -> None:
        if values.size == 0:
            return
        if positions is None:
            positions = np.arange(offset, offset + values.size, dtype=np.uint64)
        buckets, signs = _hash(positions)
        self.values += np.bincount(buckets, weights=signs * values.astype(np.float64), minlength=BUCKETS)


class DisplacementBudget:
    """The last WINDOW sketched deltas of up to `sites` sites; `multiple` = 0 turns it off."""

    def __init__(self, multiple: float, sites: int) -> None:
        self.multiple, self.sites = multiple, sites
        self.windows: OrderedDict[str, deque[np.ndarray]] = OrderedDict()
        self._cosines: dict[str, float | None] = {}  # site -> mean_cosine of its window, kept as it changes
        self._directions: dict[str, np.ndarray] = {}  # site -> unit sketch of its window's sum (none if zero)

    @property
    def enabled(self) -> bool:
        return self.multiple > 0

    def mean_cosine(self, site: str) -> float | None:
        """The mean cosine between the deltas in `site`'s window, weighted by their lengths, in [0, 1]:
        (‖Σ δ‖² − Σ ‖δ‖²) / ((Σ ‖δ‖)² − Σ ‖δ‖²); None below MIN_COHERENT deltas."""
        return self._cosines.get(site)

    def _window_cosine(self, window: deque[np.ndarray], total: np.ndarray) -> float | None:
        """The mean cosine between the window's sketches, from their sum `total`."""
        if len(window) < MIN_COHERENT:
            return None
        lengths = np.array([float(np.linalg.norm(s)) for s in window])
        squares, pairs = float(lengths @ lengths), float(lengths.sum()) ** 2 - float(lengths @ lengths)
        if pairs <= 0:
            return None
        return min(1.0, max(0.0, (float(total @ total) - squares) / pairs))

    def directions(self) -> dict[str, np.ndarray]:
        """Each site's recent direction: the unit count sketch of what its window adds up to."""
        return self._directions

    def budget(self, reference: float, site: str | None = None) -> float:
        """The most `site`'s window may add up to, for a delta bounded from `reference`."""
        others = [c for s in self.windows if s != site and (c := self.mean_cosine(s)) is not None]
        cosine = statistics.median(others) if others else 0.0
        return self.multiple * reference * math.sqrt(WINDOW * (1 + (WINDOW - 1) * cosine))

    def scale(self, site: str, sketch: np.ndarray, reference: float) -> float:
        """Largest c in [0, 1] with ‖sum of the site's window (but its oldest, when full) + c·delta‖ ≤ budget."""
        if not self.enabled or not math.isfinite(reference) or reference <= 0:
            return 1.0
        if not self.windows.get(site):
            return 1.0
        total = self.staying_sum(site)
        limit = self.budget(reference, site)
        a, b, c0 = float(sketch @ sketch), float(total @ sketch), float(total @ total) - limit * limit
        if a <= 0 or a + 2 * b + c0 <= 1e-9 * limit * limit:  # the whole delta fits (within rounding)
            return 1.0
        disc = b * b - a * c0
        if disc < 0:  # the sum is beyond the budget along every c: nothing of this delta may add to it
            return 0.0
        return min(1.0, max(0.0, (-b + math.sqrt(disc)) / a))

    def staying_sum(self, site: str) -> np.ndarray:
        """The sketch of what `site`'s window adds up to without its oldest delta when full (the one a new
        delta pushes out): what the window will hold beside that delta."""
        window = self.windows.get(site) or ()
        kept = list(window)[1:] if len(window) == WINDOW else list(window)
        return np.sum(kept, axis=0) if kept else np.zeros(BUCKETS)

    def record(self, site: str, sketch: np.ndarray) -> None:
        """An accepted delta (its sketch as folded, i.e. after every scaling) joins its site's window."""
        if not self.enabled:
            return
        window = self.windows.pop(site, None) or deque(maxlen=WINDOW)
        window.append(sketch)
        self.windows[site] = window
        total = np.sum(window, axis=0)
        self._cosines[site] = self._window_cosine(window, total)
        length = float(np.linalg.norm(total))
        if length > 0 and math.isfinite(length):
            self._directions[site] = total / length
        else:
            self._directions.pop(site, None)
        while len(self.windows) > self.sites:
            gone, _ = self.windows.popitem(last=False)
            self._cosines.pop(gone, None)
            self._directions.pop(gone, None)
