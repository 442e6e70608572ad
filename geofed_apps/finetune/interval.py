"""Sampling intervals of held-out scores: how far a score on n pairs may sit from the model's true one.

`wilson_interval` is the 95 % Wilson score interval of a proportion (exact match, accuracy: each pair right
or wrong); `bootstrap_interval` the percentile bootstrap of a mean of per-pair scores in [0, 100] (token
F1), seeded so a report can be rebuilt. Both are in the scores' percent units.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """(low, high) percent of the Wilson score interval of `successes` out of `n`."""
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n >= 1, got {successes} of {n}")
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return 100.0 * max(0.0, centre - half), 100.0 * min(1.0, centre + half)


def bootstrap_interval(scores: Sequence[float], confidence: float = 0.95, resamples: int = 2000,
                       seed: int = 0) -> tuple[float, float]:
    """(low, high) of the mean of per-pair `scores`: percentiles of `resamples` seeded resampled means."""
    values = np.asarray(scores, dtype=np.float64)
    if values.size < 1 or not 0 < confidence < 1:
        raise ValueError(f"need at least one score and 0 < confidence < 1, got {values.size}, {confidence}")
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, values.size, (resamples, values.size))].mean(axis=1)
    tail = 100.0 * (1 - confidence) / 2
    low, high = np.percentile(means, [tail, 100.0 - tail])
    return float(low), float(high)


def interval_line(predictions: Sequence[str], answers: Sequence[str]) -> str:
    """The summary line of the 95 % intervals of exact match (Wilson) and F1 (bootstrap) of these predictions."""
    from .metrics import exact_match, token_f1

    if len(predictions) != len(answers):
        raise ValueError(f"{len(predictions)} predictions for {len(answers)} answers")
    hits = sum(int(exact_match(p, a)) for p, a in zip(predictions, answers, strict=True))
    em_lo, em_hi = wilson_interval(hits, len(answers))
    f1_lo, f1_hi = bootstrap_interval([100.0 * token_f1(p, a) for p, a in zip(predictions, answers, strict=True)])
    return (f"95% interval on {len(answers)} held-out pairs: exact match {em_lo:.1f}-{em_hi:.1f}, "
            f"F1 {f1_lo:.1f}-{f1_hi:.1f}")
