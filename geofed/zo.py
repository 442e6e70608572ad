"""Seeded directions of zeroth-order fine-tuning, bit-identical in the PS (numpy, no torch) and every client.

The direction of seed k in the round on top of global version v is a float32 standard normal vector
drawn by numpy's counter-based Philox generator keyed by (federation seed, v·2²⁴ + k): no state to keep
or ship, any process regenerates it, and a rejoining client gets the same draws. `step_` applies one
round's averaged scalars ḡ: θ ← θ − (lr / K)·Σₖ ḡₖ zₖ, k in order, in float32, the same code on both
sides, so the PS and a client that applies the scalars itself end with the same bytes (the PS's sha256
of the vector checks it on every transfer).
"""

from __future__ import annotations

import numpy as np

MAX_SEEDS = 1 << 16  # k < 2**24 keeps (version, k) one key word; settings bound seeds far below


def direction(seed: int, version: int, k: int, numel: int) -> np.ndarray:
    """zₖ of the round on top of `version`: `numel` float32 standard normals."""
    if not 0 <= k < 1 << 24 or version < 0:
        raise ValueError(f"direction index out of range: version {version}, k {k}")
    key = np.array([seed, (version << 24) | k], dtype=np.uint64)
    return np.random.Generator(np.random.Philox(key=key)).standard_normal(numel, dtype=np.float32)


def step_(flat: np.ndarray, gbar: np.ndarray, *, seed: int, version: int, lr: float) -> np.ndarray:
    """θ_{version+1} from θ_version (`flat`, float32, updated in place) and the round's scalars `gbar`."""
    if flat.dtype != np.float32:
        raise ValueError(f"the exchanged vector must be float32, got {flat.dtype}")
    seeds = gbar.size
    for k in range(seeds):
        coef = np.float32(-lr * float(gbar[k]) / seeds)
        flat += coef * direction(seed, version, k, flat.size)
    return flat


def replay(flat: np.ndarray, scalars: np.ndarray, *, seeds: int, seed: int, base_version: int, lr: float) -> np.ndarray:
    """A copy of `flat` (global `base_version`) brought forward by consecutive rounds' scalars (n × seeds)."""
    if scalars.size % seeds:
        raise ValueError(f"{scalars.size} scalars are not whole rounds of {seeds} seeds")
    out = np.array(flat, dtype=np.float32)
    for i, gbar in enumerate(scalars.reshape(-1, seeds)):
        step_(out, gbar, seed=seed, version=base_version + i, lr=lr)
    return out
