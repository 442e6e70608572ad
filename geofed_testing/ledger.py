"""The independent ledger check of a global model.

The global model must always be a state the aggregation rule can produce. With FedAvg, η = 1, uniform
weights, no staleness discount and K = 1 (`EXACT_ASYNC`) every applied delta adds itself once:
θ_v = θ_0 + Σ_applied δ. Each test delta is a distinct random vector, so least squares over every
delta a test ever *tried* to send recovers how often each one landed: 1 (applied), 0 (never arrived),
anything else is corruption or a double application. This needs nothing from the PS but its model.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

# Every applied delta is added as-is: θ ← θ + δ (Algorithm 1 with η = 1, one delta per outer step).
EXACT_ASYNC = {
    "aggregation": {"mode": "async", "buffer_size": 1, "outer_optimizer": "fedavg", "global_lr": 1.0,
                    "weighting": "uniform", "staleness_exponent": 0.0, "max_staleness": 1_000_000},
    # The ledger reads the model the PS serves: the default grid-rounded stream serves it within half a grid
    # step of the true sum (exact between versions, tested in tests/ps/test_model_stream_e2e.py), so ledger
    # scenarios ask for the fp32 stream, which serves the true sum itself.
    "downlink": {"encoding": "fp32"},
}
DELTA_SCALE = 0.01


def delta_for(tag: str, numel: int) -> np.ndarray:
    """A reproducible random delta named by `tag` (client/round/base), so any process can rebuild it."""
    seed = int.from_bytes(hashlib.sha256(tag.encode()).digest()[:8], "little")
    return (np.random.default_rng(seed).standard_normal(numel) * DELTA_SCALE).astype(np.float32)


@dataclass
class Accounting:
    """How often each attempted delta is in the model, by least squares against θ_0."""

    coefficients: dict[str, float]
    residual: float  # ||model - θ0 - Σ c·δ|| / ||model - θ0||
    applied: set[str] = field(default_factory=set)
    twice: set[str] = field(default_factory=set)  # coefficient near 2 or more: applied more than once
    stray: set[str] = field(default_factory=set)  # neither 0 nor 1: not a state the rule can produce

    def lost(self, receipted: set[str]) -> set[str]:
        """Deltas the PS acknowledged that are not in the model."""
        return receipted - self.applied


def account(model: np.ndarray, base: np.ndarray, candidates: dict[str, np.ndarray], tol: float = 1e-3) -> Accounting:
    """Decompose `model - base` over `candidates` (an independent recomputation of the aggregation)."""
    diff = model.astype(np.float64) - base.astype(np.float64)
    keys = sorted(candidates)
    if not keys:
        return Accounting({}, float(np.linalg.norm(diff)))
    basis = np.stack([candidates[k].astype(np.float64) for k in keys], axis=1)
    coef, *_ = np.linalg.lstsq(basis, diff, rcond=None)
    rest = diff - basis @ coef
    scale = max(float(np.linalg.norm(diff)), 1e-12)
    acc = Accounting(dict(zip(keys, coef.tolist(), strict=True)), float(np.linalg.norm(rest)) / scale)
    for k, c in acc.coefficients.items():
        if abs(c - 1) <= tol:
            acc.applied.add(k)
        elif c >= 2 - tol:
            acc.twice.add(k)
        elif abs(c) > tol:
            acc.stray.add(k)
    return acc
