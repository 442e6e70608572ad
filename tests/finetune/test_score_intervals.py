"""Sampling intervals of held-out scores: they cover the true value as often as they claim."""

from __future__ import annotations

import numpy as np
import pytest

from geofed_apps.finetune.interval import bootstrap_interval, wilson_interval


def test_the_wilson_interval_covers_the_true_accuracy_about_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    p, n = 0.3, 1200
    hits = [lo <= 100 * p <= hi for lo, hi in (wilson_interval(int(k), n) for k in rng.binomial(n, p, 4000))]
    low, high = wilson_interval(int(0.5 * n), n)

    assert 0.93 < np.mean(hits) < 0.97
    assert high - low < 6.0  # 1,200 pairs: about ±2.8 points at 50 %


def test_the_bootstrap_interval_of_a_mean_f1_covers_the_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(1)
    population = np.concatenate([np.zeros(600), np.full(200, 50.0), np.full(400, 100.0)])  # per-pair F1
    truth = population.mean()
    hits = []
    for _ in range(200):
        sample = rng.choice(population, 1000)
        lo, hi = bootstrap_interval(sample, resamples=500, seed=int(rng.integers(1 << 30)))
        hits.append(lo <= truth <= hi)

    assert 0.9 < np.mean(hits) <= 1.0
    assert bootstrap_interval(sample) == bootstrap_interval(sample)  # seeded: a report can be rebuilt


def test_an_interval_of_nothing_is_refused():
    with pytest.raises(ValueError, match="need 0 <= successes <= n"):
        wilson_interval(3, 0)
    with pytest.raises(ValueError, match="need at least one score"):
        bootstrap_interval([])
