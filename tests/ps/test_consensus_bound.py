"""The consensus bound against sites whose directions are known: honest sites that share part of their
direction are never scaled; a site that pushes against the others (a sign flip, padded with noise or not) has
its upper-median projection on the other sites' directions held at −allowance × the reference, recomputed here from
the exact (unsketched) windows; with one other site, or against one hostile direction among honest ones, an
honest site is left alone."""

from __future__ import annotations

import math

import numpy as np

from ps_server.aggregation.consensus import ALLOWANCE, WINDOW_ALLOWANCE, ConsensusBound
from ps_server.aggregation.displacement import WINDOW, DeltaSketch, DisplacementBudget

NUMEL = 20_000
NORM = 2.0  # every honest delta's length, so the reference (the other sites' median norm) is NORM


def sketch_of(delta: np.ndarray) -> np.ndarray:
    s = DeltaSketch()
    s.add(delta)
    return s.values


class Site:
    """Deltas of length NORM: a part `shared` along the federation's common direction, the rest its own."""

    def __init__(self, seed: int, common: np.ndarray, shared: float = 0.3) -> None:
        self.rng, self.common, self.shared = np.random.default_rng(seed), common, shared

    def delta(self) -> np.ndarray:
        own = self.rng.standard_normal(NUMEL)
        own /= np.linalg.norm(own)
        mixed = math.sqrt(self.shared) * self.common + math.sqrt(1 - self.shared) * own
        return NORM * mixed / np.linalg.norm(mixed)


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


class Federation:
    """Sites pushing round-robin through one consensus bound; exact windows (as folded) kept beside it."""

    def __init__(self) -> None:
        self.budget = DisplacementBudget(3.0, 16)
        self.bound = ConsensusBound(self.budget)
        self.windows: dict[str, list[np.ndarray]] = {}
        self.scales: dict[str, list[float]] = {}

    def push(self, site: str, delta: np.ndarray) -> np.ndarray:
        sketch = sketch_of(delta)
        c = self.bound.scale(site, sketch, NORM)
        self.budget.record(site, sketch * c)
        self.windows[site] = (self.windows.get(site, []) + [delta * c])[-WINDOW:]
        self.scales.setdefault(site, []).append(c)
        return delta * c

    def exact_median_projection(self, site: str, delta: np.ndarray) -> float:
        """The upper median over the other sites of delta · (the unit sum of that site's exact window)."""
        projections = sorted(float(delta @ unit(np.sum(w, axis=0))) for s, w in self.windows.items() if s != site)
        return projections[len(projections) // 2]


def common_direction(seed: int = 7) -> np.ndarray:
    return unit(np.random.default_rng(seed).standard_normal(NUMEL))


def test_honest_sites_sharing_a_direction_are_never_scaled():
    fed, common = Federation(), common_direction()
    sites = {f"site{i}": Site(i, common) for i in range(4)}
    for _ in range(2 * WINDOW):
        for name, site in sites.items():
            fed.push(name, site.delta())
    assert all(c == 1.0 for s in fed.scales.values() for c in s)


def test_a_sign_flip_is_held_to_the_allowance_along_the_other_sites_directions_padded_or_not():
    fed, common = Federation(), common_direction()
    sites = {f"site{i}": Site(i, common) for i in range(3)}
    evil = Site(99, common)
    noise_rng = np.random.default_rng(5)
    landed = []
    for r in range(WINDOW):
        for name, site in sites.items():
            fed.push(name, site.delta())
        flip = -3 * evil.delta()  # its own honest delta, negated, at 3 × an honest norm
        if r % 2:  # padded with noise: longer, its projection unchanged
            flip = flip + 3 * NORM * unit(noise_rng.standard_normal(NUMEL))
        before = fed.exact_median_projection("evil", flip)
        sent = fed.push("evil", flip)
        landed.append((before, fed.exact_median_projection("evil", sent)))

    floor = -ALLOWANCE * NORM
    # Teeth: unbounded, the flips point well below the floor.
    assert max(before for before, _ in landed) < 4 * floor
    # Bounded: on the floor, within the sketch's error (about 2 % of the delta's length).
    tolerance = 0.03 * 3 * NORM * math.sqrt(2)
    assert all(after >= floor - tolerance for _, after in landed), [round(a / NORM, 3) for _, a in landed]
    assert all(c < 1.0 for c in fed.scales["evil"])
    assert all(c == 1.0 for name in sites for c in fed.scales[name])


def test_with_one_other_site_the_bound_stays_off():
    fed, common = Federation(), common_direction()
    honest = Site(1, common)
    for _ in range(4):
        fed.push("clinic", honest.delta())
        fed.push("other", -honest.delta())  # opposite to the clinic: with two sites, no majority says who is right
    assert all(c == 1.0 for s in fed.scales.values() for c in s)


def test_one_hostile_direction_cannot_aim_the_bound_at_an_honest_site():
    """Three sites: two honest, one pushing at 3 × along minus their common direction every round. Each
    honest delta's upper median is the larger of its projections on the other honest site and on the attacker,
    so the honest sites are never scaled; the attacker is."""
    fed, common = Federation(), common_direction()
    sites = {f"site{i}": Site(i, common) for i in range(2)}
    for _ in range(WINDOW):
        for name, site in sites.items():
            fed.push(name, site.delta())
        fed.push("evil", -3 * NORM * common)
    assert all(c == 1.0 for name in sites for c in fed.scales[name])
    assert min(fed.scales["evil"][1:]) < 0.2


def test_a_sign_flip_lands_per_window_what_one_delta_at_the_floor_would():
    """Flips at an honest norm, each alone within a few allowances of the floor: the per-delta bound would let
    a window of them add up to WINDOW times the floor against the federation; the window bound holds what the
    site's latest WINDOW landed deltas add up to on the other sites' directions (exact, unsketched) at
    −WINDOW_ALLOWANCE × the reference, while the honest sites pass untouched."""
    fed, common = Federation(), common_direction()
    sites = {f"site{i}": Site(i, common) for i in range(3)}
    evil = Site(99, common)
    unbounded, held = [], []
    for _ in range(2 * WINDOW):
        for name, site in sites.items():
            fed.push(name, site.delta())
        flip = -evil.delta()
        unbounded.append(flip)
        fed.push("evil", flip)
        held.append(fed.exact_median_projection("evil", np.sum(fed.windows["evil"], axis=0)))
        unbounded = unbounded[-WINDOW:]

    floor = -WINDOW_ALLOWANCE * NORM
    # Teeth: the window's flips, unbounded, add up to far below the floor.
    assert fed.exact_median_projection("evil", np.sum(unbounded, axis=0)) < 10 * floor
    # Held: every window of landed flips on the floor, within the sketch's error and the drift of the other
    # sites' directions as their windows fill (a held window's projection moves with them, by a few hundredths).
    assert min(held) >= floor - 0.1 * NORM, [round(h / NORM, 3) for h in held]
    assert sum(c for c in fed.scales["evil"][WINDOW:]) < 1.0  # a window's worth lands less than one flip
    assert all(c == 1.0 for name in sites for c in fed.scales[name])
