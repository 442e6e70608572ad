"""The displacement budget against deltas whose correlation is known: honest sites whose deltas share part of
their direction (as real training deltas do) are never scaled, and a drift in one direction is held to the
budget computed here from the honest windows' exact (unsketched) pairwise cosines."""

from __future__ import annotations

import math

import numpy as np

from ps_server.aggregation.displacement import WINDOW, DeltaSketch, DisplacementBudget

NUMEL = 20_000
NORM = 2.0  # every delta's length, so the reference (the other sites' median norm) is NORM
MULTIPLE = 3.0


def sketch_of(delta: np.ndarray) -> np.ndarray:
    s = DeltaSketch()
    s.add(delta)
    return s.values


class Site:
    """Deltas of length NORM at pairwise cosine `shared` around a fixed direction of their own."""

    def __init__(self, seed: int, shared: float) -> None:
        self.rng = np.random.default_rng(seed)
        self.shared = shared
        self.axis = self._unit()

    def _unit(self) -> np.ndarray:
        v = self.rng.standard_normal(NUMEL)
        return v / np.linalg.norm(v)

    def delta(self) -> np.ndarray:
        mixed = math.sqrt(self.shared) * self.axis + math.sqrt(1 - self.shared) * self._unit()
        return NORM * mixed / np.linalg.norm(mixed)


def run(budget: DisplacementBudget, sites: dict[str, Site], rounds: int, drift: np.ndarray | None = None):
    """Round-robin pushes; returns each site's scales and each site's exact window (as folded)."""
    scales: dict[str, list[float]] = {name: [] for name in [*sites, *(["evil"] if drift is not None else [])]}
    windows: dict[str, list[np.ndarray]] = {name: [] for name in scales}
    for _ in range(rounds):
        pushes = [(name, site.delta()) for name, site in sites.items()]
        if drift is not None:
            pushes.append(("evil", drift))
        for name, delta in pushes:
            sketch = sketch_of(delta)
            c = budget.scale(name, sketch, NORM)
            budget.record(name, sketch * c)
            scales[name].append(c)
            windows[name] = (windows[name] + [delta * c])[-WINDOW:]
    return scales, windows


def test_correlated_honest_sites_are_never_scaled_where_a_random_walk_budget_would_scale_them():
    sites = {f"site{i}": Site(i, shared=0.6) for i in range(3)}
    scales, windows = run(DisplacementBudget(MULTIPLE, 16), sites, rounds=3 * WINDOW)

    assert all(c == 1.0 for s in scales.values() for c in s)
    # The test has teeth: these windows add up beyond what independent deltas would (multiple × ref × √W).
    longest = max(float(np.linalg.norm(np.sum(w, axis=0))) for w in windows.values())
    assert longest > MULTIPLE * NORM * math.sqrt(WINDOW)


def test_a_drift_in_one_direction_is_held_to_multiple_times_an_honest_window():
    sites = {f"site{i}": Site(10 + i, shared=0.5) for i in range(3)}
    axis = np.random.default_rng(99).standard_normal(NUMEL)
    drift = 0.95 * MULTIPLE * NORM * axis / np.linalg.norm(axis)  # just under the norm bound, always one way
    scales, windows = run(DisplacementBudget(MULTIPLE, 16), sites, rounds=3 * WINDOW, drift=drift)

    cosines = [  # each honest window's mean pairwise cosine, pair by pair
        float(np.mean([a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) for i, a in enumerate(w) for b in w[i + 1 :]]))
        for name, w in windows.items() if name != "evil"
    ]
    allowed = MULTIPLE * NORM * math.sqrt(WINDOW * (1 + (WINDOW - 1) * float(np.median(cosines))))
    evil_sum = float(np.linalg.norm(np.sum(windows["evil"], axis=0)))
    assert evil_sum <= 1.05 * allowed, (evil_sum, allowed)
    assert evil_sum >= 0.9 * allowed  # held on the budget, not far below it
    assert min(scales["evil"]) < 0.5  # the drift was scaled, the honest sites were not
    assert all(c == 1.0 for name, s in scales.items() if name != "evil" for c in s)


def test_beside_independent_deltas_the_budget_is_the_random_walk_floor():
    sites = {f"site{i}": Site(20 + i, shared=0.0) for i in range(3)}
    axis = np.random.default_rng(7).standard_normal(NUMEL)
    drift = 0.95 * MULTIPLE * NORM * axis / np.linalg.norm(axis)
    _, windows = run(DisplacementBudget(MULTIPLE, 16), sites, rounds=2 * WINDOW, drift=drift)

    evil_sum = float(np.linalg.norm(np.sum(windows["evil"], axis=0)))
    floor = MULTIPLE * NORM * math.sqrt(WINDOW)
    assert 0.9 * floor <= evil_sum <= 1.05 * floor


def test_a_site_alone_has_the_floor_and_too_short_windows_do_not_count():
    budget = DisplacementBudget(MULTIPLE, 16)
    assert budget.budget(NORM, "a") == MULTIPLE * NORM * math.sqrt(WINDOW)
    same = sketch_of(np.full(NUMEL, NORM / math.sqrt(NUMEL)))
    for _ in range(3):  # all in one direction, but only 3 deltas: too few for their cosine to count
        budget.record("b", same)
    assert budget.budget(NORM, "a") == MULTIPLE * NORM * math.sqrt(WINDOW)
    budget.record("b", same)  # cosine 1: WINDOW deltas in one direction add up to WINDOW of them
    assert math.isclose(budget.budget(NORM, "a"), MULTIPLE * NORM * WINDOW, rel_tol=1e-9)
    assert budget.budget(NORM, "b") == MULTIPLE * NORM * math.sqrt(WINDOW)  # a site's own window never counts
